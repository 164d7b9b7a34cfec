"""The docker runtime's reconcile table, as data: (what the store says, what docker says) → result.

It is applied to every docker sandbox when the daemon starts and whenever the
docker event stream (re)connects, and to one sandbox when an event about its
containers arrives. A sandbox's containers are summarised as ``running`` (the
primary and every required companion run), ``exited`` (created but one of them
is not running) or ``missing`` (one of them is gone).
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.model.states import SandboxState
from tether.runtime.docker.views import ContainerView


@dataclass(frozen=True)
class Outcome:
    to: SandboxState | None  # the state to record; None keeps the current one
    code: str | None = None  # why, for FAILED (a stable reason code)
    cleanup: bool = False  # remove the sandbox's containers and network
    stop: bool = False  # stop containers that run although the store says STOPPED


KEEP = Outcome(None)

#: (store state, docker summary) → outcome. Missing keys fall back to ``ANY``.
TABLE: dict[tuple[SandboxState, str], Outcome] = {
    (SandboxState.READY, "running"): KEEP,
    (SandboxState.READY, "exited"): Outcome(SandboxState.FAILED, "CONTAINER_EXITED"),
    (SandboxState.READY, "missing"): Outcome(SandboxState.FAILED, "CONTAINER_MISSING"),
    (SandboxState.STOPPED, "exited"): KEEP,
    (SandboxState.STOPPED, "running"): Outcome(None, stop=True),
    (SandboxState.STOPPED, "missing"): Outcome(SandboxState.FAILED, "CONTAINER_MISSING"),
}
ANY: dict[SandboxState, Outcome] = {
    SandboxState.PENDING: Outcome(SandboxState.FAILED, "INTERRUPTED_PENDING", cleanup=True),
    SandboxState.DELETING: Outcome(SandboxState.DELETED, cleanup=True),
    SandboxState.FAILED: KEEP,
    SandboxState.DELETED: KEEP,
}


def summarize(views: list[ContainerView], required: set[str]) -> str:
    """``running`` | ``exited`` | ``missing`` for the primary plus required companions."""
    counted = [v for v in views if v.role == "primary" or v.companion in required]
    if any(v.status == "missing" for v in counted):
        return "missing"
    if all(v.status in ("running", "restarting", "paused") for v in counted):
        return "running"
    return "exited"


def decide(state: str, summary: str) -> Outcome:
    st = SandboxState(state)
    return TABLE.get((st, summary)) or ANY.get(st, KEEP)


def describe(views: list[ContainerView], required: set[str], code: str | None) -> str:
    """A reason for people: which container is not running, and how it ended."""
    for v in views:
        if v.role != "primary" and v.companion not in required:
            continue
        what = "the primary container" if v.role == "primary" else \
            f"required companion {v.companion!r}"
        if v.status == "missing":
            return f"{code}: {what} ({v.name}) is missing"
        if v.status not in ("running", "restarting", "paused"):
            how = "was killed for lack of memory (OOM)" if v.oom else \
                f"is {v.status} (exit code {v.exit_code})"
            return f"{code}: {what} ({v.name}) {how}"
    return f"{code}"
