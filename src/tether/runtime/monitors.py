"""The pool of monitors that runs every exec, whatever its runtime.

The daemon never sits in the data path: it starts a monitor (or hands the spec
to an idle, pre-started one), waits for the monitor's one-line start report,
and from then on only watches the monitor's pidfd and reads its files. A
runtime decides only *what* the monitor launches (:class:`~tether.runtime.base.Launch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tether.monitor.main as _monitor_main
from tether.hostio.atomic import tmp_name
from tether.hostio.pidfd import open_verified_pidfd, signal_verified_group
from tether.hostio.proc import boot_id, is_same_process
from tether.model.layout import MAX_SOCKET_PATH, ExecPaths
from tether.model.records import ExecRecord
from tether.monitor.ahead import socket_tmp
from tether.monitor.child import START_GATE
from tether.monitor.files import (
    FileCorrupt,
    claim,
    claim_is_held,
    claim_owner,
    claim_tmp,
    read_exit,
    read_handles,
)
from tether.runtime.base import Launch, MonitorFence, Warm
from tether.runtime.forkserver import ForkServer

#: A handles file's name after its exec's id (``HomeLayout.exec_paths``).
HANDLES_SUFFIX = ".handles.json"
MONITOR_SCRIPT = str(Path(_monitor_main.__file__).resolve().with_name("run.py"))
_BOOT_ID = boot_id()
START_REPORT_TIMEOUT = 10.0
#: Zygotes (pre-started sandboxes, :mod:`tether.monitor.zygote`) kept per sandbox, and
#: for how many sandboxes at most (the most recently used), when the pool is on.
ZYGOTES_PER_SANDBOX = 1
ZYGOTE_SANDBOXES = 4
#: While starts come faster than they are made, a sandbox's zygotes (and the pool of
#: idle monitors) grow: doubled at each start that found none ready, up to these; they
#: are back to their idle sizes once no start has asked for one for ``BURST_IDLE`` s.
BURST_ZYGOTES = 8
BURST_POOL = 8
BURST_IDLE = 5.0
#: How long a start waits for a zygote still setting up before it starts cold.
ZYGOTE_WAIT = 1.0


class StartError(Exception):
    def __init__(self, message: str, code: str = "START_FAILED") -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Started:
    pid: int
    start_time: int
    started_at: float
    monitor_pid: int
    monitor_start_time: int


@dataclass
class Inspection:
    """What the files and the OS say about an exec right now (category B + D)."""

    kind: str  # "exited" | "alive" | "lost" | "unstarted" | "starting"
    exit: dict[str, Any] | None = None
    handles: dict[str, Any] | None = None
    reason: str | None = None
    # For "alive": a pidfd pinned to the verified monitor; the caller owns (closes) it.
    pidfd: int | None = None


async def _read_report(fd: int) -> bytes:
    """Read the monitor's one-line start report without blocking the event loop."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    buf = b""
    while not buf.endswith(b"\n"):
        ready: asyncio.Future[None] = loop.create_future()

        def wake(ready: asyncio.Future[None] = ready) -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_reader(fd, wake)
        try:
            await ready
        finally:
            loop.remove_reader(fd)
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            continue
        if not chunk:
            break
        buf += chunk
    return buf


class _IdleMonitor:
    """A monitor waiting for its exec: our ends of its stdin and stdout, and how to tell
    it ended — a pidfd when the fork server made it (its child, not ours), else the
    ``Popen`` that started it."""

    def __init__(self, pid: int, stdin: int, stdout: int, *, pidfd: int | None = None,
                 proc: subprocess.Popen[bytes] | None = None) -> None:
        self.pid = pid
        self.stdin = os.fdopen(stdin, "wb")
        self.stdout = os.fdopen(stdout, "rb", buffering=0)
        self.pidfd = pidfd
        self.proc = proc
        #: A zygote's first line: None until it comes, True for ``{"zygote": "ready"}``,
        #: False for anything else (``failed``, EOF: it died).
        self.said: bool | None = None
        self.watched = False  # the loop reads that line (MonitorPool._watch_zygote)
        self.kept = False  # the loop watches its pidfd while it waits in the pool

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        if self.pidfd is None:
            return False
        return not select.select([self.pidfd], [], [], 0)[0]  # readable once it exited

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc is not None:
                self.proc.kill()
            elif self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def wait(self, timeout: float) -> None:
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout)
        elif self.pidfd is not None:
            select.select([self.pidfd], [], [], timeout)

    def release(self) -> None:
        """Done with it (it runs an exec now, or it was ended): close what we hold."""
        for f in (self.stdin, self.stdout):
            with contextlib.suppress(OSError):
                f.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


@dataclass
class _Zygotes:
    """A sandbox's zygotes: idle monitors that each set up ``argv`` (one bind set, the
    last one an exec of this sandbox asked for, its sources ``ident``) with their logs
    in ``logs``."""

    argv: tuple[str, ...]
    ident: tuple[tuple[int, int], ...]
    logs: str
    idle: deque[_IdleMonitor]
    want: int = 0  # how many to keep: ZYGOTES_PER_SANDBOX, more during a burst
    used: float = 0.0  # when a start last asked for one (monotonic)

    def fits(self, warm: Warm, logs: str) -> bool:
        return self.argv == warm.argv and self.ident == warm.ident and self.logs == logs


def at_gate(pid: int, start_time: int) -> bool:
    """Whether the child ``(pid, start_time)`` still waits at its start gate
    (``START_GATE``), i.e. its command has not started."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return (argv[:len(START_GATE)] == [os.fsencode(a) for a in START_GATE]
            and is_same_process(pid, start_time))


class MonitorPool:
    """Starts, inspects and signals execs' monitors. Keeps a few idle ones ready."""

    def __init__(self, pool_size: int = 2, *, run: str | None = None,
                 logs: str | None = None, umask: int = 0o022, fork_server: bool = True,
                 ) -> None:
        """``run`` and ``logs``: the home's directories, where idle monitors make an exec's
        files ahead (:mod:`tether.monitor.ahead`); without them, none are. ``umask``: the
        commands' (the user's; monitors and the daemon keep their own, 077).
        ``fork_server``: fork monitors from :mod:`tether.monitor.forkserver` (else each
        is started from scratch)."""
        self.pool_size = pool_size
        self.umask = umask
        self._ahead = {"run": run, "logs": logs} if run and logs else None
        self._pool: deque[_IdleMonitor] = deque()
        self._children: set[int] = set()
        self._zygotes: dict[str, _Zygotes] = {}  # by sandbox id, least recently used first
        self._runs: dict[int, str] = {}  # pid -> run directory of a monitor made ahead
        #: Set when more idle monitors or zygotes are wanted: the daemon's monitor-pool
        #: task then calls :meth:`refill_pool`. After a start (``ExecService``); during a
        #: burst as soon as one is taken — not while starts are paced, when a refill
        #: beside the start would take a CPU from its monitor.
        self.wanted = asyncio.Event()
        self._zygote_news: set[asyncio.Future[None]] = set()  # starts waiting for a zygote
        self._pool_want = pool_size  # how many idle ones to keep: more during a burst
        self._pool_used = 0.0  # when a start last took one (monotonic)
        self._argv = [sys.executable, "-I", "-S", MONITOR_SCRIPT]
        self._forks = ForkServer(self._argv) if fork_server else None

    # ------------------------------------------------------------------ pool
    async def _new_monitor(self, zygote: _Zygotes | None = None) -> _IdleMonitor:
        """An idle monitor, told to make an exec's files ahead, or to be ``zygote``'s:
        forked by the fork server, else (it cannot answer) started from scratch in a
        thread (fork/exec would stall the loop)."""
        run = self._ahead["run"] if self._ahead else None
        mon: _IdleMonitor | None = None
        if self._forks is not None:
            with contextlib.suppress(OSError):
                f = await self._forks.fork(run)
                mon = _IdleMonitor(f.pid, f.stdin, f.stdout, pidfd=f.pidfd)
        if mon is None:
            mon = await asyncio.get_running_loop().run_in_executor(None, self._start_monitor)
            if run is not None:
                self._runs[mon.pid] = run
        line: dict[str, Any] | None = {"ahead": self._ahead} if self._ahead else None
        if zygote is not None:
            line = {"zygote": {"argv": zygote.argv, "dir": zygote.logs,
                               **({"run": run} if run else {})}}
        if line is not None:  # a few hundred bytes into an empty pipe: it never blocks
            try:
                mon.stdin.write(json.dumps(line).encode() + b"\n")
                mon.stdin.flush()
            except OSError:
                self._end(mon)
                raise
        return mon

    def _start_monitor(self) -> _IdleMonitor:
        """A monitor started from scratch (``python -I -S run.py``), our child."""
        in_r, in_w = os.pipe2(os.O_CLOEXEC)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        try:
            proc = subprocess.Popen(
                self._argv, stdin=in_r, stdout=out_w, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True, cwd="/")
        except BaseException:
            os.close(in_w)
            os.close(out_r)
            raise
        finally:
            os.close(in_r)
            os.close(out_w)
        self._children.add(proc.pid)
        try:  # before reap_children may reap it: the pid is surely this child still
            pidfd: int | None = os.pidfd_open(proc.pid)
        except OSError:  # no descriptor left: found dead when taken (Popen.poll)
            pidfd = None
        return _IdleMonitor(proc.pid, in_w, out_r, pidfd=pidfd, proc=proc)

    def status(self) -> dict[str, Any]:
        """The idle monitors and zygotes now, and how many are wanted (``daemon.status``)."""
        return {"idle": len(self._pool), "idle_wanted": self._pool_want,
                "zygotes": [{"sandbox": sb, "idle": len(z.idle),
                             "ready": sum(1 for m in z.idle if m.said), "wanted": z.want}
                            for sb, z in self._zygotes.items()],
                "fork_server": self._forks.pid if self._forks is not None else None,
                "forked": self._forks.forks if self._forks is not None else 0}

    def pool_deficit(self) -> int:
        return self._pool_want - len(self._pool) + sum(
            z.want - len(z.idle) for z in self._zygotes.values())

    async def refill_pool(self) -> None:
        """Top the pool and each sandbox's zygotes up (after a burst, back to their idle
        sizes first), asking for all the monitors missing at once. Raises the first
        OSError of those (the others are kept)."""
        self._trim(time.monotonic())
        new = [self._add_idle() for _ in range(self._pool_want - len(self._pool))]
        for sandbox, z in list(self._zygotes.items()):
            new += [self._add_zygote(sandbox, z) for _ in range(z.want - len(z.idle))]
        for result in await asyncio.gather(*new, return_exceptions=True):
            if isinstance(result, BaseException):
                raise result

    async def _add_idle(self) -> None:
        self._keep(await self._new_monitor())

    def _keep(self, mon: _IdleMonitor) -> None:
        """Put a new monitor in the pool and watch it there: one that dies idle (the OOM
        killer, an admin, a kill while it was being made) leaves the pool and is replaced
        at once, instead of holding a place as if it were ready while the pool is short."""
        self._pool.append(mon)
        if mon.pidfd is not None:
            asyncio.get_running_loop().add_reader(mon.pidfd, self._died_idle, mon)
            mon.kept = True

    def _died_idle(self, mon: _IdleMonitor) -> None:
        if mon in self._pool:
            self._pool.remove(mon)
            self._end(mon)
            self.reap_children()
            self.wanted.set()
        else:
            self._unkeep(mon)

    @staticmethod
    def _unkeep(mon: _IdleMonitor) -> None:
        """Stop watching a monitor that leaves the pool (taken for an exec, or ended)."""
        if mon.kept and mon.pidfd is not None:
            mon.kept = False
            with contextlib.suppress(Exception):  # no running loop (close at shutdown)
                asyncio.get_running_loop().remove_reader(mon.pidfd)

    async def _add_zygote(self, sandbox: str, z: _Zygotes) -> None:
        mon = await self._new_monitor(z)
        if self._zygotes.get(sandbox) is not z:  # dropped meanwhile
            self._end(mon)
        else:
            z.idle.append(mon)
            self._watch_zygote(mon)

    def trim_in(self) -> float | None:
        """Seconds until the pool or a sandbox's zygotes are due back at their idle
        size (:meth:`refill_pool` does it), or None when none is above it."""
        due = [used + BURST_IDLE for want, used in (
            (self._pool_want - self.pool_size, self._pool_used),
            *((z.want - ZYGOTES_PER_SANDBOX, z.used) for z in self._zygotes.values()))
            if want > 0]
        return max(0.0, min(due) - time.monotonic()) if due else None

    def _trim(self, now: float) -> None:
        """After a burst (no start for BURST_IDLE): back to the idle sizes, ending the
        extra monitors and zygotes, the newest first."""
        if self._pool_want > self.pool_size and now - self._pool_used >= BURST_IDLE:
            self._pool_want = self.pool_size
            while len(self._pool) > self._pool_want:
                self._end(self._pool.pop())
        for z in self._zygotes.values():
            if z.want > ZYGOTES_PER_SANDBOX and now - z.used >= BURST_IDLE:
                z.want = ZYGOTES_PER_SANDBOX
                while len(z.idle) > z.want:
                    self._end(z.idle.pop())

    @staticmethod
    def _grow(want: int, base: int, most: int) -> int:
        """A start found none ready: keep twice as many (at most ``most``)."""
        return min(max(most, base), max(want * 2, base + 1))

    async def _take_zygote(self, warm: Warm, logs: str) -> _IdleMonitor | None:
        """An idle zygote set up for ``warm``, if there is one — waiting up to
        ``ZYGOTE_WAIT`` for one still setting up, which is sooner than a cold start
        that would set up the same sandbox from the beginning; either way, one is wanted
        next time (for this bind set: a sandbox's other ones are dropped), and more than
        one while starts come faster than they are made."""
        if self.pool_size <= 0:
            return None
        z = self._zygotes.pop(warm.sandbox, None)
        if z is None or not z.fits(warm, logs):
            if z is not None:
                self._drop(z)
            z = _Zygotes(warm.argv, warm.ident, logs, deque(), ZYGOTES_PER_SANDBOX)
        self._zygotes[warm.sandbox] = z  # the most recently used, last
        while len(self._zygotes) > ZYGOTE_SANDBOXES:
            self._drop(self._zygotes.pop(next(iter(self._zygotes))))
        asked, z.used = z.used, time.monotonic()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ZYGOTE_WAIT
        while True:
            pending = False
            for mon in list(z.idle):
                if mon.said is None and mon.alive():
                    pending = True  # still setting its sandbox up
                    continue
                z.idle.remove(mon)
                if z.want > ZYGOTES_PER_SANDBOX:
                    self.wanted.set()  # a burst: refill now, beside this start
                if mon.said and mon.alive():
                    return mon
                self._end(mon)  # failed, or died
            if asked:  # a start that found none ready: they come too slowly
                z.want, asked = self._grow(z.want, ZYGOTES_PER_SANDBOX, BURST_ZYGOTES), 0.0
                self.wanted.set()
            if not pending or loop.time() >= deadline:
                return None
            news: asyncio.Future[None] = loop.create_future()
            self._zygote_news.add(news)
            try:
                async with asyncio.timeout_at(deadline):
                    await news
            except TimeoutError:
                pass
            finally:
                self._zygote_news.discard(news)
            if self._zygotes.get(warm.sandbox) is not z:  # dropped meanwhile
                return None

    def _watch_zygote(self, mon: _IdleMonitor) -> None:
        """Read a zygote's first line when it comes, and tell the starts waiting for one."""
        fd = mon.stdout.fileno()

        def said() -> None:
            try:
                line = os.read(fd, 4096)
            except BlockingIOError:
                return
            except OSError:
                line = b""
            mon.said = line == b'{"zygote": "ready"}\n'
            self._unwatch_zygote(mon)
            for news in self._zygote_news:
                if not news.done():
                    news.set_result(None)

        os.set_blocking(fd, False)
        asyncio.get_running_loop().add_reader(fd, said)
        mon.watched = True

    @staticmethod
    def _unwatch_zygote(mon: _IdleMonitor) -> None:
        if mon.watched:
            mon.watched = False
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(mon.stdout.fileno())

    def drop_zygotes(self, sandbox: str) -> None:
        """End a sandbox's zygotes (it is stopped or deleted) and want none for it."""
        z = self._zygotes.pop(sandbox, None)
        if z is not None:
            self._drop(z)

    def _drop(self, z: _Zygotes) -> None:
        while z.idle:
            self._end(z.idle.popleft())

    def _end(self, mon: _IdleMonitor) -> None:
        """An idle monitor ends on EOF of its spec pipe, a zygote's sandbox with it
        (reaped by the fork server, or later by :meth:`reap_children`)."""
        self._unwatch_zygote(mon)
        self._unkeep(mon)
        mon.release()

    async def _take_monitor(self) -> _IdleMonitor:
        self._pool_used = time.monotonic()
        while self._pool:
            mon = self._pool.popleft()
            self._unkeep(mon)
            if not mon.alive():
                self._end(mon)
                continue
            if self._pool_want > self.pool_size or not self._pool:
                self.wanted.set()  # a burst: refill now, beside this start
            return mon
        if self.pool_size > 0:  # none left: starts come faster than the pool refills
            self._pool_want = self._grow(self._pool_want, self.pool_size, BURST_POOL)
            self.wanted.set()
        return await self._new_monitor()

    def close(self) -> None:
        """Idle monitors exit on EOF of their spec pipe; the fork server on its socket's."""
        for sandbox in list(self._zygotes):
            self.drop_zygotes(sandbox)
        while self._pool:
            mon = self._pool.popleft()
            self._unkeep(mon)
            with contextlib.suppress(OSError):
                mon.stdin.close()
            with contextlib.suppress(Exception):
                mon.wait(timeout=2)
            mon.release()
        if self._forks is not None:
            self._forks.close()

    def reap_children(self) -> None:
        """Collect exited monitors we started (they are our children until we die), and
        fork servers we left (the monitors they forked are theirs to reap)."""
        if self._forks is not None:
            self._forks.reap()
        for pid in list(self._children):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self._children.discard(pid)
                run = self._runs.pop(pid, None)
                if run is not None:  # a killed monitor's socket, never renamed as an exec's
                    with contextlib.suppress(OSError):
                        os.unlink(socket_tmp(run, pid))

    # ------------------------------------------------------------------ start
    @staticmethod
    def check_paths(paths: ExecPaths) -> None:
        if len(os.fsencode(paths.socket)) > MAX_SOCKET_PATH:
            raise StartError(
                f"the monitor socket path {paths.socket} is longer than {MAX_SOCKET_PATH} "
                "bytes; use a shorter tether home (--home or $TETHER_HOME)", "HOME_TOO_LONG")

    async def start(self, rec: ExecRecord, paths: ExecPaths, launch: Launch,
                    fence: MonitorFence | None = None) -> Started:
        """Hand ``rec`` to a monitor, which runs what its runtime planned (``launch``),
        and wait until its child runs. ``fence``: the monitor kills it when the host's
        fleet lease runs out (:class:`~tether.runtime.base.MonitorFence`)."""
        self.check_paths(paths)
        try:
            paths.stdout.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StartError(f"cannot create {paths.stdout.parent}: {e}",
                             "MONITOR_FAILED") from None
        spec: dict[str, Any] = {
            "exec_id": rec.id,
            "argv": launch.argv,
            "env": launch.env,
            "cwd": launch.cwd,
            "timeout": rec.spec.timeout,
            "kill_grace": rec.spec.kill_grace,
            "name": rec.name,
            "lineage": rec.lineage,
            "tty": rec.spec.tty,
            "stdin": rec.spec.stdin,
            "rows": rec.spec.rows,
            "cols": rec.spec.cols,
            "signal_argv": launch.signal_argv,
            "engine": launch.engine,
            "gated": launch.gated,
            "umask": self.umask,
            "paths": {k: str(getattr(paths, k)) for k in ("stdout", "stderr", "exit", "pty",
                                                            "handles", "socket", "claim",
                                                            "monitor_log", "events",
                                                            "order")},
        }
        if fence is not None:
            spec["fence"] = {"path": fence.path, "epoch": fence.epoch, "reason": fence.reason}
        zygote = (await self._take_zygote(launch.warm, str(paths.stdout.parent))
                  if launch.warm is not None else None)
        if zygote is not None and launch.warm is not None:
            spec["warm"] = {"argv": list(launch.warm.argv), "cwd": launch.warm.cwd,
                            "command": list(launch.warm.command)}
        try:
            mon = zygote or await self._take_monitor()
        except OSError as e:
            raise StartError(f"cannot start a monitor process: {e}", "MONITOR_FAILED") from None
        try:
            mon.stdin.write(json.dumps(spec).encode() + b"\n")
            mon.stdin.flush()
            mon.stdin.close()
        except OSError as e:
            mon.release()
            raise StartError(f"could not hand the exec to its monitor: {e}",
                             "MONITOR_FAILED") from e
        try:
            line = await asyncio.wait_for(_read_report(mon.stdout.fileno()),
                                          START_REPORT_TIMEOUT)
            report = json.loads(line) if line else None
        except (TimeoutError, ValueError) as e:
            self._abandon(mon, paths)
            raise StartError(f"the monitor did not report a start ({e!r}); it was killed "
                             f"(see {paths.monitor_log})", "MONITOR_FAILED") from None
        finally:
            mon.release()
        if report is None:
            self._died_unreported(paths)
            raise StartError("the monitor exited before starting the command "
                             f"(see {paths.monitor_log})", "MONITOR_FAILED")
        if "error" in report:
            raise StartError(report["error"], report.get("code", "START_FAILED"))
        return Started(pid=report["pid"], start_time=report["start_time"],
                       started_at=report["started_at"], monitor_pid=report["monitor"]["pid"],
                       monitor_start_time=report["monitor"]["start_time"])

    @staticmethod
    def _died_unreported(paths: ExecPaths) -> None:
        """The monitor died before its start report, so before it opened the command's
        gate: the command never ran. A handles file it wrote names a gate that ends on
        its own (EOF); end it now and remove the file, so the exec is recorded as never
        started (``never_started``: an agent's attempt is run again, not revived)."""
        try:
            handles = read_handles(str(paths.handles))
        except FileCorrupt:
            handles = None
        if handles is not None:
            child = handles["child"]
            signal_verified_group(child["pid"], child["start_time"], 9)
        with contextlib.suppress(OSError):
            os.unlink(paths.handles)

    def _abandon(self, mon: _IdleMonitor, paths: ExecPaths) -> None:
        """Kill a monitor that failed to report: it never opened its command's gate."""
        mon.kill()
        self._died_unreported(paths)

    # ------------------------------------------------------------------ inspect
    def inspect(self, paths: ExecPaths) -> Inspection:
        """Classify an exec from its files and the live process table."""
        try:
            status = read_exit(str(paths.exit))
        except FileCorrupt as e:
            return Inspection("lost", reason=str(e))
        if status is not None:
            return Inspection("exited", exit=status)
        try:
            handles = read_handles(str(paths.handles))
        except FileCorrupt as e:
            return self._lost_with_corrupt_handles(paths, str(e))
        if handles is None:
            if claim_is_held(str(paths.claim)):
                return Inspection("starting")
            owner = claim_owner(str(paths.claim))
            if owner is None:
                return Inspection("unstarted")
            if owner.startswith("daemon"):
                return Inspection("lost", reason=(
                    "INTERRUPTED: the daemon stopped after accepting this exec and before "
                    "starting it; it was never started"))
            return Inspection("lost", reason=(
                f"its monitor ({owner}) died before starting the command; it never ran"))
        mon, child = handles["monitor"], handles["child"]
        if handles.get("boot_id") and handles["boot_id"] != _BOOT_ID:
            return Inspection("lost", handles=handles, reason=(
                "the machine rebooted since this exec started (boot id changed); its "
                "processes are gone and no exit status was written"))
        try:
            fd = open_verified_pidfd(mon["pid"], mon["start_time"])
        except OSError:  # out of descriptors: fall back to /proc; the sweep polls it
            if is_same_process(mon["pid"], mon["start_time"]):
                return Inspection("alive", handles=handles)
            fd = None
        if fd is not None:
            return Inspection("alive", handles=handles, pidfd=fd)
        # The monitor is gone. It may have written the exit file just before dying.
        try:
            status = read_exit(str(paths.exit))
        except FileCorrupt as e:
            return Inspection("lost", handles=handles, reason=str(e))
        if status is not None:
            return Inspection("exited", exit=status, handles=handles)
        gated = at_gate(child["pid"], child["start_time"])
        if signal_verified_group(child["pid"], child["start_time"], 9):
            if gated:
                return Inspection("lost", handles=handles, reason=(
                    f"monitor pid {mon['pid']} died before letting its command start; it "
                    "never ran"))
            return Inspection("lost", handles=handles, reason=(
                f"monitor pid {mon['pid']} died while its command (pid {child['pid']}) still "
                "ran; the command was killed because nobody could record its exit status"))
        return Inspection("lost", handles=handles, reason=(
            f"monitor pid {mon['pid']} and command pid {child['pid']} are both gone and no "
            "exit status was written: killed together (e.g. by the OOM killer or a reboot), "
            "or the command never started (its monitor died just before letting it)"))

    def _lost_with_corrupt_handles(self, paths: ExecPaths, why: str) -> Inspection:
        if claim_is_held(str(paths.claim)):
            # A live monitor still owns it: it will write the exit file. Keep watching.
            return Inspection("alive", reason=why)
        return Inspection("lost", reason=why)

    @staticmethod
    def recorded(run: Path) -> list[tuple[str, dict[str, Any] | None]]:
        """Every exec a handles file in ``run`` names, in id order, with what its monitor
        recorded there (None: the file is corrupt or gone): what ``--recover-store``
        puts back into a new store."""
        found: list[tuple[str, dict[str, Any] | None]] = []
        for entry in sorted(os.scandir(run), key=lambda e: e.name):
            if not entry.name.endswith(HANDLES_SUFFIX):
                continue
            try:
                handles = read_handles(entry.path)
            except FileCorrupt:
                handles = None
            found.append((entry.name[:-len(HANDLES_SUFFIX)], handles))
        return found

    @staticmethod
    def never_started(paths: ExecPaths) -> bool:
        """No exit file and no handles file: no monitor ever spawned the command, or it
        could not (a command that cannot be spawned gets an exit file saying so)."""
        return not paths.exit.exists() and not paths.handles.exists()

    @staticmethod
    def claim_for_failure(paths: ExecPaths) -> bool:
        """Claim an unstarted exec so that no late monitor can start it."""
        paths.claim.parent.mkdir(parents=True, exist_ok=True)
        fd = claim(str(paths.claim), f"daemon {os.getpid()} failed it\n")
        if fd is None:
            return False
        os.close(fd)
        return True

    @staticmethod
    def remove_scratch(paths: ExecPaths) -> None:
        """Remove what a dead monitor left besides history (logs, exit file, claim): its
        socket and the temporaries it was writing when killed (handles, exit, its
        claim's private name, named by its pid from the claim). Nothing while a live
        monitor holds the claim: the files are still its own."""
        if claim_is_held(str(paths.claim)):
            return
        kind, _, pid = (claim_owner(str(paths.claim)) or "").partition(" ")
        # The socket, and the exit file's space reserved at start (never its status).
        files = [str(paths.socket), str(paths.exit) + ".reserve"]
        if kind == "monitor" and pid.isdigit():
            files += [tmp_name(str(paths.handles), int(pid)),
                      tmp_name(str(paths.exit), int(pid)), claim_tmp(str(paths.claim), int(pid))]
        for f in files:
            with contextlib.suppress(OSError):  # gone already, or not ours to remove
                os.unlink(f)

    @staticmethod
    def watch_fd(handles: dict[str, Any]) -> int | None:
        """A pidfd of the exec's live monitor, to learn when it ends (None if it has)."""
        mon = handles["monitor"]
        try:
            return open_verified_pidfd(mon["pid"], mon["start_time"])
        except OSError:
            return None

    # ------------------------------------------------------------------ control
    @staticmethod
    def control(paths: ExecPaths, command: dict[str, Any], timeout: float = 2.0,
                ) -> dict[str, Any]:
        """Send one command to the monitor's control socket (blocking, short)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(paths.socket))
            s.sendall(json.dumps(command).encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                buf += chunk
        line = buf.split(b"\n", 1)[0]
        reply: dict[str, Any] = json.loads(line) if line else {"ok": False, "error": "no reply"}
        return reply
