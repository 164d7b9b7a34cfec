"""What docker says (category B), and how a failed engine call is reported."""

from __future__ import annotations

from dataclasses import dataclass


class DockerError(Exception):
    """A docker operation failed; ``str()`` says what and what to do."""

    def __init__(self, message: str, code: str = "DOCKER_FAILED") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Probe:
    available: bool
    version: str | None
    reason: str  # why not, or "ok"


@dataclass(frozen=True)
class ContainerView:
    """What docker says about one of a sandbox's containers (category B)."""

    name: str
    role: str  # primary | companion
    companion: str | None
    status: str  # created | running | exited | paused | restarting | dead | missing
    exit_code: int | None = None
    oom: bool = False
    health: str | None = None  # starting | healthy | unhealthy (with a health check)
    error: str | None = None


def short(e: BaseException) -> str:
    text = str(getattr(e, "explanation", None) or e)
    return text if len(text) < 400 else text[:400] + "…"
