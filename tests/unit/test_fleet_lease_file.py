"""The lease file (daemon/fleet/lease.py) and the monitor's fence (monitor/fence.py):
the epoch chain across daemon restarts and the fail-safe reads, on real files."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tether.daemon.fleet.lease import LeaseFile
from tether.monitor.fence import Fence


def _fence(lease: LeaseFile) -> Fence:
    f = lease.fence_for_monitor()
    return Fence({"path": f.path, "epoch": f.epoch, "reason": f.reason})


def test_a_monitor_lives_until_the_deadline_then_dies(tmp_path: Path) -> None:
    lease = LeaseFile(tmp_path, "h1")
    now = time.monotonic()
    lease.acquired(7, now, now + 10, carried=0)
    fence = _fence(lease)
    assert not fence.due(now)
    assert fence.next_check <= now + 0.5  # re-read soon: a fence may be written early
    assert fence.due(now + 10)  # at the deadline itself
    assert fence.reason.startswith("fenced: host h1 lost its fleet lease")


def test_a_fence_written_early_kills_at_the_next_look(tmp_path: Path) -> None:
    lease = LeaseFile(tmp_path, "h1")
    now = time.monotonic()
    lease.acquired(7, now, now + 10, carried=0)
    fence = _fence(lease)
    assert not fence.due(now)
    lease.fenced()
    assert fence.due(fence.next_check)


def test_missing_unreadable_or_foreign_files_are_fenced(tmp_path: Path) -> None:
    lease = LeaseFile(tmp_path, "h1")
    now = time.monotonic()
    lease.acquired(7, now, now + 10, carried=0)
    fence = _fence(lease)
    lease.path.write_bytes(b"{not json")
    assert fence.due(now)
    data = {"epoch": 7, "deadline": now + 10, "boot_id": "another-boot", "host": "h1"}
    lease.path.write_text(json.dumps(data))
    assert _fence_at(lease.path, 7).due(now)
    lease.path.unlink()
    assert _fence_at(lease.path, 7).due(now)
    assert _fence_at(tmp_path / "nope", 7).due(now)


def _fence_at(path: Path, epoch: int) -> Fence:
    return Fence({"path": str(path), "epoch": epoch, "reason": "fenced: test"})


def test_a_restart_within_the_lease_keeps_the_epoch_with_work_carried(tmp_path: Path) -> None:
    first = LeaseFile(tmp_path, "h1")
    now = time.monotonic()
    first.acquired(7, now, now + 10, carried=0)
    fence = _fence(first)
    again = LeaseFile(tmp_path, "h1")  # the daemon was SIGKILLed and started again
    assert again.epoch == 7
    again.acquired(9, now + 1, now + 11, carried=2)
    assert again.epoch == 7 and not fence.due(now + 10.5)  # the fresh deadline holds


def test_a_restart_after_the_deadline_or_without_work_starts_a_new_epoch(
        tmp_path: Path) -> None:
    now = time.monotonic()
    first = LeaseFile(tmp_path, "h1")
    first.acquired(7, now, now + 10, carried=0)
    fence = _fence(first)
    late = LeaseFile(tmp_path, "h1")
    late.acquired(9, now + 11, now + 21, carried=2)  # asked after the old deadline
    assert late.epoch == 9 and fence.due(now + 12)
    empty = LeaseFile(tmp_path, "h1")
    empty.acquired(11, now + 12, now + 22, carried=0)  # nothing carried over
    assert empty.epoch == 11


def test_no_lease_yet_means_a_monitor_dies_at_its_first_look(tmp_path: Path) -> None:
    lease = LeaseFile(tmp_path, "h1")
    assert lease.fence_for_monitor().epoch == -1
    assert _fence(lease).due(time.monotonic())
