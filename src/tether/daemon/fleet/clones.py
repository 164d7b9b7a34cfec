"""Fleet mode's worktree clones, removed once nothing needs them.

Each placement generation of an agent placed with ``--worktree`` works in a clone
``<home>/fleet/worktrees/<id>-<generation>`` (``FleetService._tree``). A clone is
removed once its generation is no longer one this host's lease owns, no local lineage
or exec of it is live, and everything in it is on the remote (its host pushed the
branch at the end); a clone with work the remote lacks is kept and journaled
``fleet.clone_kept`` once per daemon run, saying why. Each work pass scans the whole
directory, so clones an earlier run of the daemon left (it died, its work moved) go too.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from pathlib import Path

from tether.daemon.journal import Journal
from tether.model.states import EXEC_TERMINAL, LINEAGE_LIVE
from tether.store import Store

log = logging.getLogger("tether.fleet")
#: Seconds before a kept clone is checked again (someone may have pushed it by hand).
RECHECK = 60.0


class Clones:
    def __init__(self, root: Path, store: Store, journal: Journal, prefix: str) -> None:
        self.root = root
        self.store = store
        self.journal = journal
        self.prefix = prefix  # ``prefix + <id>-<generation>``: the generation's request key
        self._kept: dict[str, float] = {}  # clone name → monotonic time last kept

    def in_use(self, name: str) -> bool:
        """Whether a local lineage (or its exec) of the generation ``name`` still runs."""
        rec = self.store.lineage_by_request_key(self.prefix + name)
        if rec is None:
            return False
        if rec.status in LINEAGE_LIVE:
            return True
        x = self.store.get_exec(rec.exec_id) if rec.exec_id else None
        return x is not None and x.state not in EXEC_TERMINAL

    async def sweep(self, owned: frozenset[str]) -> None:
        """Remove every clone no longer needed; ``owned``: the request keys this host's
        lease owns now (their clones stay whatever their state)."""
        from tether.daemon.fleet import git as fleet_git

        if not self.root.is_dir():
            return
        now = time.monotonic()
        for path in sorted(self.root.iterdir()):
            name = path.name.removesuffix(".tmp")
            if self.prefix + name in owned or now - self._kept.get(path.name, -RECHECK) \
                    < RECHECK or self.in_use(name):
                continue
            if not path.name.endswith(".tmp"):  # a half clone (a crash mid-clone) just goes
                why = await fleet_git.unpushed(path)
                if why is not None:
                    if path.name not in self._kept:
                        log.warning("fleet: keeping clone %s: %s", path, why)
                        self.journal.record(None, "fleet.clone_kept", reason=(
                            f"clone {path} kept: {why}; push or copy what you need from "
                            "it, then remove it"), data={"path": str(path), "why": why})
                    self._kept[path.name] = now
                    continue
            await asyncio.to_thread(shutil.rmtree, path, ignore_errors=True)
            self._kept.pop(path.name, None)
            self.journal.record(None, "fleet.clone_removed", reason=(
                f"clone {path} removed: its generation ended here and its branch is on "
                "the remote"), data={"path": str(path)})
