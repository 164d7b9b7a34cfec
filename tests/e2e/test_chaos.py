"""Seeded chaos: execs, agent lineages and a sandbox deletion under random SIGKILLs of
the daemon, of monitors and of agents; then the recovery contract's invariants.

Each seed plays one schedule (``random.Random(seed)``); every assertion names the seed,
so ``pytest -k 'chaos and SEED'`` replays a failure exactly (modulo the kernel's timing).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from random import Random
from typing import Any

import pytest

from tests.harness import SCRIPTED_AGENT, DaemonProc, read_handles, wait_for
from tether.client.blocking import Client
from tether.client.errors import DaemonUnavailable, TetherError
from tether.hostio.proc import is_same_process

FAST = {"TETHER_AGENT_TICK": "0.2"}
TERMINAL = {"FINISHED", "FAILED", "CANCELLED"}
LINEAGE_ENDS = {"revive": {"FINISHED", "FAILED"}, "reap": {"FINISHED", "REAPED"}}
SEEDS = [101, 108, 112]  # each also crashes the daemon while the sandbox is DELETING
STEPS = 9


def fmt(text: str) -> str:
    """``text`` as a printf format: newlines escaped (the alphabets hold no quote or %)."""
    return text.replace("\n", "\\n")


@dataclass
class Planned:
    """An exec whose output and exit code are chosen before it starts."""

    id: str
    out: bytes
    err: bytes
    code: int
    sandbox: str = "default"
    monitor_killed: bool = False


@dataclass
class Chaos:
    seed: int
    rng: Random
    d: DaemonProc
    tmp: Path
    c: Client
    execs: list[Planned] = field(default_factory=list)
    lineages: dict[str, tuple[str, Path]] = field(default_factory=dict)  # id → policy, log
    doomed: list[str] = field(default_factory=list)
    doomed_ids: dict[str, str] = field(default_factory=dict)  # name → sandbox id
    deleters: list[threading.Thread] = field(default_factory=list)
    log: list[str] = field(default_factory=list)

    def msg(self, what: str) -> str:
        return f"seed {self.seed}: {what}\nschedule: {self.log}"

    # ------------------------------------------------------------------ actions
    def start_exec(self, sandbox: str = "default", linger: float | None = None,
                   trap: bool = False) -> None:
        rng = self.rng
        out = "".join(rng.choice("abcdefxyz019\n") for _ in range(rng.randint(1, 300)))
        tail = "".join(rng.choice("klmnop\n") for _ in range(rng.randint(0, 200)))
        err = "".join(rng.choice("ERR\n") for _ in range(rng.randint(0, 50)))
        code = rng.choice([0, 1, 3, 7, 42, 255])
        nap = linger if linger is not None else round(rng.uniform(0.1, 3.0), 2)
        ignore = "trap '' TERM; " if trap else ""
        script = (f": chaos-{self.seed}; {ignore}printf '{fmt(out)}'; printf '{fmt(err)}' >&2; "
                  f"sleep {nap}; printf '{fmt(tail)}'; exit {code}")
        x = self.c.exec_start(["sh", "-c", script], sandbox=sandbox)
        self.execs.append(Planned(x.id, (out + tail).encode(), err.encode(), code, sandbox))
        self.log.append(f"exec {x.id} in {sandbox} code {code} nap {nap}")

    def start_agent(self) -> None:
        policy = self.rng.choice(["revive", "reap"])
        log = self.tmp / f"agent-{len(self.lineages)}.log"
        linger = round(self.rng.uniform(1.0, 4.0), 2)
        lin = self.c.agent_start(
            [sys.executable, str(SCRIPTED_AGENT), "--log", str(log), "--pcts", "10,20",
             "--linger", str(linger)],
            provider="generic", env={"PATH": os.environ["PATH"]}, revival=policy,
            request_key=uuid.uuid4().hex)
        self.lineages[lin.id] = (policy, log)
        self.log.append(f"agent {lin.id} {policy} linger {linger}")

    def create_sandbox(self) -> None:
        name = f"chaos{len(self.doomed)}"
        self.doomed_ids[name] = self.c.sandbox_create(name, runtime="process").id
        self.doomed.append(name)
        # Half the time its exec ignores SIGTERM, so the deletion lasts its grace and a
        # daemon SIGKILL may land while the sandbox is DELETING.
        trap = self.rng.random() < 0.5
        self.start_exec(name, linger=30, trap=trap)
        self.log.append(f"sandbox {name} trap {trap}")

    def delete_sandbox(self) -> None:
        """In a thread, so that a daemon SIGKILL can land in the middle of it."""
        name = self.doomed[-1]
        c = self.d.client(reconnect=0)

        def run() -> None:
            with contextlib.suppress(DaemonUnavailable, TetherError):
                c.sandbox_delete(name, grace=1)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        self.deleters.append(t)
        self.log.append(f"delete {name}")
        if self.rng.random() < 0.5:  # crash mid-deletion, once the intent is committed
            sid = self.doomed_ids[name]
            with contextlib.suppress(AssertionError):
                wait_for(lambda: any(s.id == sid and s.state in ("DELETING", "DELETED")
                                     for s in self.c.sandbox_list(all=True)), timeout=5)
            self.kill_daemon()

    def kill_daemon(self) -> None:
        self.d.kill9()
        self.log.append(f"daemon SIGKILL {self._doomed_states()}")
        if self.rng.random() < 0.4:
            self.kill_monitor()  # while no daemon watches
        time.sleep(self.rng.uniform(0, 0.3))
        self.d.start(env=FAST)
        self.c = self.d.client()

    def kill_monitor(self) -> None:
        """A random live monitor, an agent attempt's included (its lineage then orphaned)."""
        planned = {p.id: p for p in self.execs}
        ids = [*planned, *self._agent_execs()]
        live = [(i, h) for i in ids for h in [self._handles(i)]
                if h and is_same_process(h["monitor"]["pid"], h["monitor"]["start_time"])]
        if not live:
            return
        i, h = self.rng.choice(sorted(live, key=lambda x: x[0]))
        os.kill(h["monitor"]["pid"], signal.SIGKILL)
        if i in planned:
            planned[i].monitor_killed = True
        self.log.append(f"monitor of {i} SIGKILL")

    def kill_agent(self) -> None:
        live = []
        for lid in self.lineages:
            view = self.c.lineage_get(lid)
            h = self._handles(view.exec) if view.exec else None
            child = (h or {}).get("child") or {}
            if child and is_same_process(child["pid"], child["start_time"]):
                live.append((lid, child["pid"]))
        if not live:
            return
        lid, pid = self.rng.choice(live)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        self.log.append(f"agent {lid} SIGKILL")

    def _doomed_states(self) -> list[tuple[str, str]]:
        """The doomed sandboxes' states as the store has them (no daemon to ask now)."""
        db = sqlite3.connect(self.d.home / "tether.db")
        try:
            ids = list(self.doomed_ids.values())
            rows = db.execute(f"SELECT name, state FROM sandboxes WHERE id IN "
                              f"({','.join('?' * len(ids))})", ids).fetchall()
            return [(str(n), str(st)) for n, st in rows]
        finally:
            db.close()

    def _agent_execs(self) -> list[str]:
        """Each lineage's current exec, from the store (the daemon may be down)."""
        db = sqlite3.connect(self.d.home / "tether.db")
        try:
            rows = db.execute("SELECT json_extract(record, '$.exec_id') FROM lineages").fetchall()
            return [str(r[0]) for r in rows if r[0]]
        finally:
            db.close()

    def _handles(self, exec_id: str) -> dict[str, Any] | None:
        try:
            return self.d.handles(exec_id)
        except (OSError, ValueError):
            return None


def _alive_strangers(home: Path, markers: list[str], daemon_pid: int) -> list[str]:
    """Processes (not the daemon) whose command line names the home or a marker."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in (daemon_pid, os.getpid()):
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            continue
        if str(home) in cmd or any(m in cmd for m in markers):
            found.append(f"{entry.name}: {cmd}")
    return found


@pytest.mark.parametrize("seed", SEEDS)
def test_chaos(stopped_daemon: DaemonProc, tmp_path: Path, seed: int) -> None:
    d = stopped_daemon
    d.start(env=FAST)
    ch = Chaos(seed, Random(seed), d, tmp_path, d.client())
    rng = ch.rng
    for _ in range(rng.randint(2, 4)):
        ch.start_exec()
    for _ in range(rng.randint(1, 2)):
        ch.start_agent()
    ch.create_sandbox()
    # Every kind of kill at least once, in a random order, among random others.
    kinds = [ch.kill_daemon, ch.kill_monitor, ch.kill_agent, ch.start_exec]
    actions = kinds[:3] + [rng.choice(kinds) for _ in range(STEPS - 3)]
    rng.shuffle(actions)
    delete_at = rng.randrange(STEPS)
    for step, action in enumerate(actions):
        time.sleep(rng.uniform(0.05, 0.4))
        if step == delete_at:
            ch.delete_sandbox()
            time.sleep(rng.uniform(0, 0.3))
        action()
    if rng.random() < 0.5:
        ch.kill_daemon()  # often one more, right at the end
    for t in ch.deleters:
        t.join(15)
    c = ch.c

    # -- the sandbox deletion is finished (asked again if the crash ate the request)
    def state_of(name: str) -> str:
        return next(s.state for s in c.sandbox_list(all=True) if s.id == ch.doomed_ids[name])

    for name in ch.doomed:
        def deleted(name: str = name) -> bool:
            if state_of(name) == "DELETED":
                return True
            with contextlib.suppress(TetherError):
                c.sandbox_delete(name, grace=1)
            return False
        with contextlib.suppress(TetherError):
            wait_for(deleted, timeout=20, interval=0.3, what=ch.msg(f"{name} DELETED"))
        assert state_of(name) == "DELETED", ch.msg(f"{name} not DELETED")

    # -- every exec ends, with the code its command chose or a true reason
    for p in ch.execs:
        x = c.exec_wait(p.id, timeout=20)
        assert x.state in TERMINAL, ch.msg(f"{p.id} still {x.state}")
        got = b"".join(c.read_logs(p.id))
        if x.state == "FINISHED":
            assert x.exit_code == p.code, ch.msg(f"{p.id} exit {x.exit_code} != {p.code}")
            assert p.sandbox == "default", ch.msg(f"{p.id} outlived its sandbox's deletion")
        else:
            assert x.reason, ch.msg(f"{p.id} {x.state} without a reason")
            assert p.monitor_killed or p.sandbox != "default", ch.msg(
                f"{p.id} {x.state} ({x.reason}) though nothing killed its monitor")
        if x.state == "FINISHED" and not p.monitor_killed:
            assert got == p.out, ch.msg(f"{p.id} stdout {got!r} != {p.out!r}")
            err = b"".join(c.read_logs(p.id, stream="stderr"))
            assert err == p.err, ch.msg(f"{p.id} stderr {err!r} != {p.err!r}")
        else:
            assert p.out.startswith(got), ch.msg(f"{p.id} stdout {got!r} not a prefix")

    # -- each lineage ends as its policy allows, no attempt run twice
    for lid, (policy, log) in ch.lineages.items():
        wait_for(lambda lid=lid, ends=LINEAGE_ENDS[policy]: c.lineage_get(lid).status in ends,
                 timeout=30, interval=0.2, what=ch.msg(f"lineage {lid} ({policy}) ends"))
        ran = [x for x in c.exec_list(all=True) if x.lineage == lid]
        assert all(x.state in TERMINAL for x in ran), ch.msg(f"{lid}: {ran}")
        # The request key is lineage-<id>-<attempt>[-r<try>]; a retry only if never started.
        started = [(x.request_key or "").split("-")[2] for x in ran if not x.never_started]
        assert len(started) == len(set(started)), ch.msg(f"{lid} attempts {started}")
        lines = [json.loads(s) for s in log.read_text().splitlines()] if log.exists() else []
        runs = [s["attempt"] for s in lines if s["event"] == "start"]
        assert len(runs) == len(set(runs)), ch.msg(f"{lid} ran attempts {runs}")

    # -- every deleted sandbox's execs are terminal
    for name in ch.doomed:
        left = [x.id for x in c.exec_list(all=True)
                if x.sandbox == ch.doomed_ids[name] and x.state not in TERMINAL]
        assert not left, ch.msg(f"{name} DELETED with live execs {left}")

    # -- the journal: per stream, seq 1..n with no gap or duplicate
    evs = c.events_list(limit=10000).events
    gseqs = [e.gseq for e in evs]
    assert gseqs == sorted(set(gseqs)), ch.msg("gseq not strictly increasing")
    streams: dict[Any, list[int]] = {}
    for e in evs:
        streams.setdefault(e.sandbox, []).append(e.seq)
    for stream, seqs in streams.items():
        assert seqs == list(range(1, len(seqs) + 1)), ch.msg(f"stream {stream}: {seqs}")

    # -- nothing of the home runs untracked: every handles file names dead processes
    def quiet() -> bool:
        for h in read_handles(d.home):
            for who in ("monitor", "child"):
                ent = h.get(who) or {}
                if ent.get("pid") and is_same_process(ent["pid"], ent["start_time"]):
                    return False
        return not _alive_strangers(d.home, [f"chaos-{seed}", str(tmp_path)], d.pid)
    with contextlib.suppress(AssertionError):
        wait_for(quiet, timeout=10, interval=0.1)
    assert quiet(), ch.msg(f"left running: {_alive_strangers(d.home, [f'chaos-{seed}'], d.pid)}"
                           f" handles {[h for h in read_handles(d.home)]}")
    assert c.health().status == "SERVING", ch.msg("health")
