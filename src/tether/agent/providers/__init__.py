"""Agent providers: how to launch, resume and listen to a kind of agent.

Adding a provider is one module that defines a :class:`~tether.agent.providers.base.Provider`
subclass and registers it in :data:`REGISTRY` below.
"""

from __future__ import annotations

import os

from tether.agent.providers.base import Provider
from tether.agent.providers.claude import ClaudeProvider
from tether.agent.providers.codex import CodexProvider
from tether.agent.providers.generic import GenericProvider

REGISTRY: dict[str, Provider] = {
    p.name: p for p in (GenericProvider(), ClaudeProvider(), CodexProvider())
}


def get(name: str) -> Provider:
    """The provider called ``name``; ``KeyError`` names the known ones."""
    try:
        return REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise KeyError(f"unknown agent provider {name!r} (known: {known})") from None


def for_command(argv0: str) -> Provider | None:
    """The provider whose ``commands`` holds the basename of ``argv0``, if any."""
    base = os.path.basename(argv0)
    for provider in REGISTRY.values():
        if base in provider.commands:
            return provider
    return None


__all__ = ["REGISTRY", "ClaudeProvider", "CodexProvider", "GenericProvider", "Provider",
           "for_command", "get"]
