"""Webhooks: the hooks' intent and the delivery worker (docs/ARCHITECTURE.md, "Outbox")."""

from tether.daemon.outbox.service import HookService

__all__ = ["HookService"]
