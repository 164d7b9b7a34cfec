"""Shared machinery: daemons as real subprocesses, a bare socket client, process
bookkeeping, /proc readings, statistics and the result records.

Nothing here is mocked: every figure comes from a real daemon on a real Unix
socket, real monitors and real children.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.homes import kill_strays as _kill_strays
from tests.homes import new_home as _new_home
from tests.homes import read_handles as read_handles
from tests.rawrpc import RawConn as RawConn
from tests.rawrpc import RpcFailed as RpcFailed
from tests.rawrpc import health as health
from tether import __version__ as tether_version

REPO = Path(__file__).resolve().parent.parent
TETHER = [sys.executable, "-m", "tether.cli.main"]
PR_SET_CHILD_SUBREAPER = 36

# Pids of the subprocesses we wait() on ourselves; the orphan reaper leaves them alone.
_owned: set[int] = set()


# ---------------------------------------------------------------------- results
@dataclass
class Row:
    """One line of the printed table: a tether figure beside its baseline."""

    bench: str
    metric: str
    tether: str
    baseline: str
    target: str = ""
    met: bool | None = None  # None: no target for this row


@dataclass
class BenchResult:
    name: str
    title: str
    params: dict[str, Any]
    data: dict[str, Any]
    rows: list[Row]
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    load: dict[str, list[float]] = field(default_factory=dict)

    def to_json(self, machine: dict[str, Any]) -> dict[str, Any]:
        return {
            "benchmark": self.name, "title": self.title, "machine": machine,
            "params": self.params, "results": self.data,
            "rows": [asdict(r) for r in self.rows], "notes": self.notes,
            "seconds": round(self.seconds, 3), "load_average": self.load,
        }


@dataclass
class Options:
    quick: bool
    samples: int
    gap: float
    sizes: list[int]
    threads: int
    log_bytes: int
    log_reps: int
    rpc_seconds: float
    results: Path
    sandbox_samples: int | None = None  # None: the sandboxes module's default
    soak_seconds: float | None = None  # None: the soak's default (600)


# ---------------------------------------------------------------------- statistics
def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty sequence."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-p * len(ordered) // 100))))
    return ordered[rank - 1]


def summarize_ms(seconds: Sequence[float]) -> dict[str, float | int]:
    """p50/p90/p99/min/max/mean of durations given in seconds, reported in ms."""
    if not seconds:
        return {"n": 0}
    ms = [s * 1000.0 for s in seconds]
    return {"n": len(ms), "p50": round(percentile(ms, 50), 4), "p90": round(percentile(ms, 90), 4),
            "p99": round(percentile(ms, 99), 4), "min": round(min(ms), 4),
            "max": round(max(ms), 4), "mean": round(statistics.fmean(ms), 4)}


def fmt_ms(value: float) -> str:
    if value != value:  # NaN
        return "n/a"
    return f"{value:.3f} ms" if value < 10 else f"{value:.1f} ms"


def fmt_us(value_ms: float) -> str:
    return f"{value_ms * 1000:.1f} µs"


# ---------------------------------------------------------------------- machine
def machine_info() -> dict[str, Any]:
    mem_kib = read_kv_kib("/proc/meminfo").get("MemTotal", 0)
    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu,
        "mem_total_mib": mem_kib // 1024,
        "python": platform.python_version(),
        "python_impl": platform.python_implementation(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "os": platform.system(),
        "tether_version": tether_version,
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain", "--", "src")),
        "tmux": _tmux_version(),
        "uvloop": _has_module("uvloop"),
        "time_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "argv": sys.argv[1:],
    }


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.decode(errors="replace").strip() if out.returncode == 0 else ""


def _tmux_version() -> str | None:
    try:
        out = subprocess.run(["tmux", "-V"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.decode().strip() or None


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


# ---------------------------------------------------------------------- /proc
def read_kv_kib(path: str) -> dict[str, int]:
    """``Key: 123 kB`` lines of a /proc file as {Key: KiB}; {} if unreadable."""
    out: dict[str, int] = {}
    try:
        text = Path(path).read_text()
    except OSError:
        return out
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            out[key] = int(parts[0])
    return out


def memory_of(pid: int) -> dict[str, float] | None:
    """VmRSS, RssAnon, RssFile and Pss of ``pid`` in MiB, or None if it is gone."""
    st = read_kv_kib(f"/proc/{pid}/status")
    if "VmRSS" not in st:
        return None
    rollup = read_kv_kib(f"/proc/{pid}/smaps_rollup")
    mib: dict[str, float] = {}
    for key in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM"):
        if key in st:
            mib[key] = round(st[key] / 1024, 3)
    if "Pss" in rollup:
        mib["Pss"] = round(rollup["Pss"] / 1024, 3)
    return mib


def cpu_seconds(pid: int) -> float:
    """User + system CPU time ``pid`` has used so far (clock-tick resolution)."""
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    rest = stat[stat.rfind(b")") + 2:].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------- processes
def become_subreaper() -> bool:
    """Make orphans (monitors of a killed daemon, their children, tmux servers)
    our children so that we reap them at once instead of leaving zombies for init."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def reap_orphans() -> int:
    """Reap every zombie child that is not a subprocess we wait() on ourselves."""
    me = os.getpid()
    reaped = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid in _owned:
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            continue
        rest = stat[stat.rfind(b")") + 2:].split()
        if len(rest) < 2 or int(rest[1]) != me or rest[0] not in (b"Z", b"X"):
            continue
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
            reaped += 1
    return reaped


def popen(args: list[str], **kw: Any) -> subprocess.Popen[bytes]:
    proc: subprocess.Popen[bytes] = subprocess.Popen(args, **kw)
    _owned.add(proc.pid)
    return proc


def finish(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> int | None:
    """Kill ``proc`` if it still runs and wait for it."""
    try:
        if proc.poll() is None:
            proc.kill()
        return proc.wait(timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        _owned.discard(proc.pid)


def kill_strays(home: Path, timeout: float = 30.0) -> int:
    """SIGKILL what a home's handles name and wait (up to ``timeout``) until it is gone,
    reaping as the subreaper we are."""
    return _kill_strays(home, wait=timeout, reap=reap_orphans)


def new_home() -> Path:
    return _new_home("tb")


class Daemon:
    """One tether home and the daemon processes started on it."""

    def __init__(self, home: Path, pool: int | None = None) -> None:
        self.home = home
        self.pool = pool
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def socket(self) -> Path:
        return self.home / "tether.sock"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def spawn(self) -> subprocess.Popen[bytes]:
        self.starts += 1
        args = [*TETHER, "--home", str(self.home), "daemon"]
        if self.pool is not None:
            args += ["--pool", str(self.pool)]
        env = {k: v for k, v in os.environ.items() if k != "TETHER_FAULT"}
        env.setdefault("TETHER_LOG_LEVEL", "WARNING")
        # These figures are the process runtime's; bench/sandboxes.py measures the others.
        env.setdefault("TETHER_DEFAULT_RUNTIME", "process")
        with open(self.home / f"daemon-{self.starts}.log", "wb") as log:
            self.proc = popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              env=env, start_new_session=True, cwd="/")
        return self.proc

    def wait_serving(self, timeout: float = 60.0, interval: float = 0.002) -> float:
        """Poll daemon.health until SERVING; returns the monotonic time it answered."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"the daemon exited with {self.proc.returncode}:\n"
                                   f"{self.log_text()[-4000:]}")
            if health(self.socket) == "SERVING":
                return time.perf_counter()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the daemon was not SERVING after {timeout}s")
            time.sleep(interval)

    def start(self) -> float:
        """Spawn a daemon and wait until SERVING; returns seconds from spawn to SERVING."""
        t0 = time.perf_counter()
        self.spawn()
        return self.wait_serving() - t0

    def kill9(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        finish(self.proc)
        reap_orphans()

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (drain), then SIGKILL if it does not exit in time."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout)
        finish(self.proc)
        reap_orphans()

    def log_text(self) -> str:
        return "".join(p.read_text(errors="replace")
                       for p in sorted(self.home.glob("daemon-*.log")))


@contextlib.contextmanager
def fresh_home(pool: int | None = None) -> Iterator[Daemon]:
    """A new home with a (not yet started) daemon; afterwards everything it ran is
    killed and the home removed, whatever happened."""
    d = Daemon(new_home(), pool)
    try:
        yield d
    finally:
        d.kill9()
        kill_strays(d.home)
        shutil.rmtree(d.home, ignore_errors=True)
