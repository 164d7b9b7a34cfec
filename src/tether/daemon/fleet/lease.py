"""The lease file: how long the monitors of this host's fleet agents may run them.

``<home>/fleet/lease`` holds ``{"epoch", "deadline", "boot_id", "host"}``: the deadline
is on ``CLOCK_MONOTONIC`` (the same clock for every process of one boot) and is the
daemon's own fence point, never later than the lease's expiry in PostgreSQL. A fleet
agent's monitor (``tether.monitor.fence``) kills its command once the deadline passes
or the epoch or boot differ, so a lineage never runs here after another host may have
revived it, even when this daemon is dead.

The epoch is the fencing token of the lease that began an unbroken chain of renewals.
A restarted daemon that takes its lease again before the old deadline passed (its work
carried over in PostgreSQL) keeps the epoch, and its monitors live on; one that comes
back later starts a new epoch, so a monitor that has not yet looked cannot be revived
by the fresh deadline. Written atomically (rename), not fsynced: after a power cut the
boot id differs and no monitor survived anyway.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from tether.hostio.atomic import atomic_write
from tether.hostio.proc import boot_id
from tether.runtime.base import FENCED, MonitorFence

log = logging.getLogger("tether.fleet")


class LeaseFile:
    def __init__(self, home: Path, host: str) -> None:
        self.path = home / "fleet" / "lease"
        self.host = host
        self.boot = boot_id()
        self.epoch: int | None = None
        self.deadline = 0.0
        self._read_previous()

    def _read_previous(self) -> None:
        """A previous daemon's epoch and deadline, if of this boot: a lease taken again
        before that deadline continues its epoch (its monitors still run)."""
        try:
            old = json.loads(self.path.read_bytes())
            if old.get("boot_id") == self.boot:
                self.epoch, self.deadline = int(old["epoch"]), float(old["deadline"])
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
            log.warning("fleet: ignoring the unreadable lease file %s (%s)", self.path, e)

    def acquired(self, token: int, t0: float, deadline: float, carried: int) -> None:
        """A lease was taken (``t0``: before it was asked for). Work was carried over
        and the previous deadline had not passed: the same epoch goes on; else this
        lease's token begins a new one (every monitor of the old one dies)."""
        if not (carried and self.epoch is not None and t0 < self.deadline):
            self.epoch = token
        self._write(deadline)

    def renewed(self, deadline: float) -> None:
        self._write(deadline)

    def fenced(self) -> None:
        """The lease is lost: a deadline long passed, at once."""
        if self.epoch is not None:
            self._write(0.0)

    def fence_for_monitor(self) -> MonitorFence:
        """What a fleet agent's monitor watches. Without a lease (an epoch no file
        names) it is killed at its first look: fail safe."""
        return MonitorFence(str(self.path), self.epoch if self.epoch is not None else -1,
                            f"{FENCED}host {self.host} lost its fleet lease: the lineage "
                            "runs elsewhere")

    def _write(self, deadline: float) -> None:
        self.deadline = deadline
        data = {"epoch": self.epoch, "deadline": deadline, "boot_id": self.boot,
                "host": self.host}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(str(self.path), json.dumps(data).encode(), durable=False)
        except OSError as e:  # fail safe: the monitors fence themselves at the old deadline
            log.error("fleet: cannot write the lease file %s (%s): this host's agents "
                      "stop at the previous deadline; free the disk", self.path, e)
