"""How the real CLIs reach their fake model APIs: by a host name of their own, through
tether's egress proxy — never directly.

An agent in the default sandbox has a network namespace of its own whose only way out is
the home's egress proxy (issue 21), and the host's loopback, where the fakes listen, is
not in it. So each fake has a name (``fake-openai.test``, …) that the CLI is given in its
base URL; the daemon under test resolves that name to the fake's address
(``TETHER_TEST_RESOLVE``, a test-only setting of the daemon's environment); and the
lineage's policy allows exactly that name and port (``--allow-domain NAME:PORT``). The
fake is reached only because the policy allows it: without the entry, the proxy denies the
CLI's requests (``agent.egress_denied``), as each CLI's test shows once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: Where every fake listens: the host's loopback, out of every sandbox's own reach.
ADDRESS = "127.0.0.1"


@dataclass(frozen=True)
class Api:
    """A fake model API as a sandboxed CLI reaches it: its name and port."""

    host: str
    port: int

    @property
    def entry(self) -> str:
        """The allow-list entry that lets a lineage reach it, and only it."""
        return f"{self.host}:{self.port}"

    def flags(self) -> tuple[str, ...]:
        """``tether run`` options allowing it."""
        return ("--allow-domain", self.entry)


def resolve_env(apis: Iterable[Api]) -> dict[str, str]:
    """The daemon's environment that makes its egress proxy resolve the fakes' names."""
    names = sorted({a.host for a in apis})
    return {"TETHER_TEST_RESOLVE": ";".join(f"{n}={ADDRESS}" for n in names)} if names else {}


def allow_flags(apis: Iterable[Api]) -> tuple[str, ...]:
    return tuple(f for a in apis for f in a.flags())
