"""Agent providers: how to launch, resume and listen to a kind of agent.

Adding a provider is one module that defines a :class:`~tether.agent.providers.base.Provider`
subclass and names it in :data:`PROVIDERS` below. A user adds one without code: a
``<home>/providers/NAME.toml`` file (:mod:`.user`), loaded by :func:`load_user`.

A provider's module is imported when that provider is first looked up: the daemon needs
one or two, and a command line only the one it runs.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator, Mapping

TYPE_CHECKING = False  # not ``typing``'s: the hook program imports this package
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from tether.agent.providers.base import Provider
    from tether.agent.providers.claude import ClaudeProvider
    from tether.agent.providers.codex import CodexProvider
    from tether.agent.providers.generic import GenericProvider

#: Every provider by name: ``module:class`` under ``tether.agent.providers``.
PROVIDERS = {
    "generic": "generic:GenericProvider",
    "claude": "claude:ClaudeProvider",
    "codex": "codex:CodexProvider",
    "gemini": "gemini:GeminiProvider",
    "opencode": "opencode:OpenCodeProvider",
    "aider": "aider:AiderProvider",
    "amp": "amp:AmpProvider",
}


class _Registry(Mapping[str, "Provider"]):
    """The providers by name, each made the first time it is looked up."""

    def __init__(self) -> None:
        self._made: dict[str, Provider] = {}
        self.user: dict[str, Provider] = {}  # from <home>/providers/*.toml

    def __getitem__(self, name: str) -> Provider:
        provider = self._made.get(name)
        if provider is None:
            if name not in PROVIDERS:
                return self.user[name]
            module, cls = PROVIDERS[name].split(":")
            made = getattr(importlib.import_module(f"{__name__}.{module}"), cls)()
            provider = self._made[name] = made
        return provider

    def __iter__(self) -> Iterator[str]:
        return iter([*PROVIDERS, *self.user])

    def __len__(self) -> int:
        return len(PROVIDERS) + len(self.user)


_REGISTRY = _Registry()
REGISTRY: Mapping[str, Provider] = _REGISTRY


def load_user(directory: Path) -> list[str]:
    """(Re)load the user-defined providers of ``directory`` (``<home>/providers``);
    returns why any file was refused (a built-in's name is refused too)."""
    from tether.agent.providers.user import load_dir

    found, errors = load_dir(directory)
    for name in [n for n in found if n in PROVIDERS]:
        errors.append(f"{directory / (name + '.toml')}: {name!r} is a built-in provider; "
                      "rename the file")
        del found[name]
    _REGISTRY.user = dict(found)
    return errors


def user_warnings() -> list[str]:
    """What is doubtful in the user's provider files as loaded (``NAME.toml: …``)."""
    return [f"{name}.toml: {w}" for name, p in _REGISTRY.user.items()
            for w in getattr(p, "warnings", ())]


def get(name: str) -> Provider:
    """The provider called ``name``; ``KeyError`` names the known ones."""
    try:
        return REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise KeyError(f"unknown agent provider {name!r} (known: {known})") from None


def for_command(argv0: str, cwd: str | None = None) -> Provider | None:
    """The provider whose ``commands`` names ``argv0``, if any: a name there is matched
    against ``argv0``'s basename (``./myagent``, ``/opt/x/myagent``), a path (a user's
    profile may give one) against the file ``argv0`` is, relative to ``cwd``."""
    base = os.path.basename(argv0)
    for provider in REGISTRY.values():
        if base in provider.commands:
            return provider
    if "/" not in argv0:
        return None
    here = os.path.realpath(os.path.join(cwd or os.getcwd(), os.path.expanduser(argv0)))
    for provider in REGISTRY.values():
        for command in provider.commands:
            if "/" in command and os.path.realpath(os.path.join(
                    cwd or os.getcwd(), os.path.expanduser(command))) == here:
                return provider
    return None


def __getattr__(name: str) -> Any:
    """The provider classes, imported on first use like the providers themselves."""
    for module, cls in (v.split(":") for v in PROVIDERS.values()):
        if name == cls:
            return getattr(importlib.import_module(f"{__name__}.{module}"), cls)
    if name == "Provider":
        from tether.agent.providers.base import Provider

        return Provider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["PAYLOAD_IN_ARGV", "PROVIDERS", "REGISTRY", "ClaudeProvider", "CodexProvider",
           "GenericProvider", "Provider", "for_command", "get", "load_user", "user_warnings"]
