"""The errors of :mod:`tether.agent.worktree`, all under :class:`WorktreeError`
(:class:`~.codec.IdentifierMismatch`, which carries a state, is beside that state)."""

from __future__ import annotations

__all__ = ["LockTimeout", "Malformed", "NotFound", "WorktreeError"]


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
