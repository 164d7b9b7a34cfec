"""The errors of :mod:`tether.agent.worktree`, all under :class:`WorktreeError`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tether.agent.worktree.codec import WorktreeState

__all__ = ["IdentifierMismatch", "LockTimeout", "Malformed", "NotFound", "WorktreeError"]


class WorktreeError(Exception):
    """Base of this module's errors, so a caller can handle "worktree state unusable" once."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


class NotFound(WorktreeError):
    """The file does not exist (a fresh worktree, or one nobody claimed yet)."""


class Malformed(WorktreeError):
    """The file exists but is not a valid document; ``reason`` says why.

    Never produced by this module's own writes (they are atomic), so it means
    another tool wrote garbage or the disk lost data: it is reported, not
    silently overwritten, unless the caller asks for that.
    """

    def __init__(self, message: str, path: str, reason: str) -> None:
        super().__init__(message, path)
        self.reason = reason


class LockTimeout(WorktreeError):
    """Another process held ``state.json.lock`` for longer than the caller would wait."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__(f"{path} is locked by another process (waited {timeout:g}s)", path)


class IdentifierMismatch(WorktreeError):
    """The worktree's state belongs to another issue; reusing it would mix two issues' work.

    Carries the loaded :attr:`state` so the caller can log or show whose it is.
    """

    def __init__(self, message: str, path: str, state: WorktreeState, expected: str) -> None:
        super().__init__(message, path)
        self.state = state
        self.expected = expected
        self.actual = state.issue_identifier
