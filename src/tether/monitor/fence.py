"""The fleet fence of a monitor: kill the command once its host's lease runs out.

In fleet mode a lineage placed on this host is revived on another one once this host's
lease expires in PostgreSQL. The daemon stops its agents itself when it sees its lease
run out, but a dead daemon cannot, while its monitors (and agents) live on. So the
monitor of a fleet agent's attempt reads the lease file the daemon keeps
(``<home>/fleet/lease``, see ``tether.daemon.fleet.lease``): ``{"epoch", "deadline",
"boot_id"}``, the deadline on ``CLOCK_MONOTONIC`` (shared by every process of this
boot) and never later than PostgreSQL's expiry. Once that deadline has passed, or the
file names another epoch (a lease taken anew: the old work was not carried over) or
another boot, or cannot be read, the command is killed (fail safe).

Standard library only, and lean: the file is read at most every :data:`CHECK_EVERY`
seconds and at the deadline itself, never in between.
"""

from __future__ import annotations

from tether.hostio.proc import boot_id
from tether.monitor import tinyjson

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see tether/__init__.py
if TYPE_CHECKING:
    from typing import Any

CHECK_EVERY = 0.5  # seconds between two reads of the lease file (a fence written early)


class Fence:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.path: str = spec["path"]
        self.epoch: int = spec["epoch"]
        self.reason: str = spec["reason"]
        self.boot = boot_id()
        self.next_check = 0.0  # monotonic: when the file is read again

    def _deadline(self) -> float | None:
        """The file's deadline if it is this lease epoch's and this boot's, else None."""
        try:
            with open(self.path, "rb") as f:
                lease = tinyjson.loads(f.read())
            if lease.get("epoch") != self.epoch or lease.get("boot_id") != self.boot:
                return None
            return float(lease["deadline"])
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None  # replaced atomically, so never half-written: unreadable is lost

    def due(self, now: float) -> bool:
        """True once the command must die (read the file if a check is due)."""
        if now < self.next_check:
            return False
        deadline = self._deadline()
        if deadline is None or now >= deadline:
            return True
        self.next_check = min(deadline, now + CHECK_EVERY)
        return False
