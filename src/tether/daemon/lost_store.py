"""A lost or corrupt store: refused unless ``--recover-store``, then rebuilt from files.

The store (category A) is the only record of intent, but the execs' own files
(category D: ``run/<exec>.handles.json``, ``logs/<sandbox>/<exec>.*``) outlive it.
A daemon that silently made a new store next to them would orphan running execs and
restart ``gseq`` at 1 under subscribers holding old cursors, so it refuses; told
``--recover-store``, it moves the old files aside (never deletes them), makes a new
store (a new journal epoch), and puts back one record per exec its monitors' files
name. The ordinary recovery then adopts the live ones and records the exit codes of
those that ended.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.daemon.journal import Journal
from tether.hostio.proc import is_same_process
from tether.model.layout import HomeLayout
from tether.model.records import DEFAULT_SANDBOX, ExecRecord, ExecSpec, SandboxRecord, SandboxSpec
from tether.model.states import ExecState, SandboxState
from tether.store import Store, StoreCorrupt

if TYPE_CHECKING:
    from tether.runtime.monitors import MonitorPool


class StoreRefused(Exception):
    """The store cannot be used as it is; the message says what to do."""


@dataclass
class Lost:
    """Why the previous store is gone, and where its remains were moved."""

    why: str
    moved: list[str] = field(default_factory=list)


def open_store(layout: HomeLayout, recover: bool) -> tuple[Store, Lost | None]:
    """The store, or :class:`StoreRefused` with one line saying what to do."""
    db = layout.db
    gone = _gone(db)
    if gone is None:
        try:
            return Store(db), None
        except StoreCorrupt as e:
            if not recover:
                raise StoreRefused(
                    f"the store {db} is corrupt ({e}); move it aside (`mv {db} "
                    f"{db}.corrupt`) and start the daemon with --recover-store (`tether "
                    "daemon --recover-store`) to rebuild it from the execs' files") from None
            lost = Lost(f"the store was corrupt ({e})")
    else:
        earlier = _earlier_data(layout)
        if earlier is None:
            _move_aside(db, Lost(gone), main=False)  # a stale -wal must not be replayed
            return Store(db), None
        if not recover:
            raise StoreRefused(
                f"the store {db} is {gone} but {earlier} holds data from an earlier store; "
                "restore the file, or start the daemon with --recover-store (`tether daemon "
                "--recover-store`) to build a new one and re-adopt the running execs")
        lost = Lost(f"the store was {gone}")
    _move_aside(db, lost)
    return Store(db), lost


def _gone(db: Path) -> str | None:
    """How the store file is missing, or None if there is one to open."""
    try:
        size = db.stat().st_size
    except FileNotFoundError:
        return "missing"
    return "empty (0 bytes)" if size == 0 else None


def _earlier_data(layout: HomeLayout) -> str | None:
    """A file under ``logs/`` or ``run/`` (only a store's execs make them), if any."""
    for top in (layout.run, layout.logs):
        for dirpath, _dirs, files in os.walk(top):
            if files:
                return os.path.join(dirpath, files[0])
    return None


def _move_aside(db: Path, lost: Lost, main: bool = True) -> None:
    """Rename the store (unless not ``main``) and its WAL files to ``*.lost-<time>``:
    kept for forensics, never deleted."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for suffix in ("", "-wal", "-shm", "-journal")[0 if main else 1:]:
        src = Path(f"{db}{suffix}")
        dst = Path(f"{db}.lost-{stamp}{suffix}")
        with contextlib.suppress(FileNotFoundError):
            os.rename(src, dst)
            lost.moved.append(str(dst))


def rebuild(store: Store, layout: HomeLayout, journal: Journal, lost: Lost,
            monitors: MonitorPool) -> dict[str, Any]:
    """One RUNNING record per exec a handles file names (and a FAILED stand-in for
    each lost sandbox they ran in), journaled as ``store.recovered``. The handles
    files are read through the monitors' runtime (:meth:`MonitorPool.recorded`)."""
    execs: list[ExecRecord] = []
    unreadable: list[str] = []
    sandboxes: dict[str, SandboxRecord] = {}
    now = time.time()
    for exec_id, handles in monitors.recorded(layout.run):
        sandbox = _sandbox_of(layout, exec_id)
        if handles is None or sandbox is None:
            unreadable.append(exec_id)
            continue
        if sandbox != DEFAULT_SANDBOX and store.get_sandbox(sandbox) is None:
            sandboxes.setdefault(sandbox, SandboxRecord(
                id=sandbox, name=f"recovered-{sandbox}", state=SandboxState.FAILED,
                spec=SandboxSpec(runtime="process"), created_at=now, updated_at=now,
                reason=("recreated by --recover-store: its spec was lost with the store; "
                        f"remove it with `tether sandbox rm recovered-{sandbox}` once its "
                        "execs are done")))
        execs.append(_exec_from(exec_id, sandbox, handles, now))
    data: dict[str, Any] = {
        "reason": (f"{lost.why}; a new store was made by --recover-store with "
                   f"{len(execs)} execs put back from their monitors' files; every other "
                   "record and the old journal were lost"),
        "moved": lost.moved, "execs": [x.id for x in execs],
        "sandboxes": sorted(sandboxes), "unreadable": unreadable,
        "lost": ["the journal (cursors of the old epoch mean nothing here)",
                 "sandboxes' specs", "agent lineages", "execs' env, cwd and timeouts",
                 "execs whose handles file is gone"],
    }
    journal.commit_all(store.restore(list(sandboxes.values()), execs, data))
    return {"execs": len(execs), "sandboxes": len(sandboxes), "unreadable": len(unreadable)}


def _sandbox_of(layout: HomeLayout, exec_id: str) -> str | None:
    """The sandbox an exec's logs live under (``logs/<sandbox>/<exec>.*``)."""
    with contextlib.suppress(FileNotFoundError):
        for d in os.scandir(layout.logs):
            paths = layout.exec_paths(d.name, exec_id)
            if any(p.exists() for p in (paths.stdout, paths.pty, paths.exit)):
                return d.name
    return None


def _exec_from(exec_id: str, sandbox: str, handles: dict[str, Any], now: float) -> ExecRecord:
    child = handles["child"]
    argv: list[str] = []
    if is_same_process(child["pid"], child["start_time"]):  # its argv, while it runs
        with contextlib.suppress(OSError):
            raw = Path(f"/proc/{child['pid']}/cmdline").read_bytes()
            argv = [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]
    tty = bool(handles.get("tty"))
    spec = ExecSpec(argv=argv or ["(argv lost with the store)"], name=handles.get("name"),
                    tty=tty, stdin=bool(handles.get("stdin")) and not tty)
    started = handles.get("started_at")
    return ExecRecord(
        id=exec_id, sandbox=sandbox, state=ExecState.RUNNING, spec=spec,
        name=handles.get("name"), created_at=started if started else now,
        started_at=started,
        reason="put back by --recover-store from its monitor's handles file")
