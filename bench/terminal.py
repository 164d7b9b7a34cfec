"""Interactive terminals: keystroke round trip, output throughput and memory,
tether beside tmux and a bare PTY, all in the same run.

Four ways to sit in front of the same program (``sh``/``cat`` on a PTY):

* tether, SDK: ``Client.attach`` (the ``Attachment``) in this process, raw bytes
  over the monitor's socket — what a program driving an agent's terminal uses;
* tether, CLI: a real ``tether attach`` client whose terminal is a PTY we own —
  the fair comparison with tmux, since both then relay through a client terminal;
* tmux: a private server (``-L``) running the program in a session and a real
  ``tmux attach`` client whose terminal is a PTY we own;
* direct PTY: the program on the slave of ``os.openpty()``, we hold the master.

Keystroke round trip: write one byte, time until its echo comes back. The
program is ``stty raw -echo; cat``, so the echo is the program's own (like a
shell's line editor or a full-screen agent), not the line discipline's. The
four methods take turns, one keystroke each per round (the order rotating), so
they see the same machine; the first rounds are warm-up. Two series: "paced",
10 ms of quiet before every keystroke (typing: each keystroke finds idle CPUs
and sleeping processes to wake), and "back-to-back" (a paste, or a program
driving the terminal: the path's own cost). tmux repaints rather than forwards,
so for the PTY clients the echo is looked for in the text left after removing
escape sequences.

Throughput: ``cat`` of a text file inside the session, timed from the keystroke
that starts it until the client has seen an end marker printed after it (each
method in its own session; repetitions interleaved, median reported). tether
and the direct PTY deliver every byte; tmux renders into its screen and may drop
output a slow terminal cannot take, then repaint.

Memory: the monitor's VmRSS/RssAnon (from ``/proc``) idle, with a ``tether
attach`` client, and after 10,000 lines of output; beside it the same readings of
a tmux server (its own server, ``history-limit`` large enough to keep all lines)
with one session and a ``tmux attach`` client.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import signal
import statistics
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.harness import (
    BenchResult,
    Options,
    Row,
    cpu_seconds,
    finish,
    fresh_home,
    memory_of,
    popen,
    summarize_ms,
)
from tether.client.attach import Attachment
from tether.client.blocking import Client

ROWS, COLS = 24, 80
TERM = "xterm-256color"
READY = b"READY"
MARKER = b"TB_END_MARK"  # printed as "TB""_END""_MARK": the shell's source never shows it
KEY_PROG = 'stty raw -echo; printf "READY\\n"; exec cat'
THRU_PROG = 'printf "READY\\n"; while read -r x; do cat "$1"; echo "TB""_END""_MARK"; done'
SCROLLBACK = 10_000
MEM_PROG = ('printf "READY\\n"; read -r x; '
            f'seq -f "scrollback line %05.0f: the quick brown fox jumps over the lazy dog" '
            f'1 {SCROLLBACK}; echo "TB""_END""_MARK"; read -r y')
KEY_CHARS = b"abcdefghijklmnopqrstuvwxyz"
WARMUP = 50
# Keystroke series: seconds of pause before each keystroke (typing pace; a paste or a
# program driving the terminal).
SERIES = {"paced": 0.01, "back_to_back": 0.0}
LINE = 64  # bytes per line of the throughput file (63 printable + newline)


# ---------------------------------------------------------------------- text
class TextFilter:
    """Incremental removal of escape sequences and control bytes from terminal output
    (ESC x, CSI, OSC/DCS/APC/PM strings), so that what a repainting terminal
    multiplexer shows can be compared with what the program wrote."""

    GROUND, ESC, ESC_INT, CSI, STR, STR_ESC = range(6)

    def __init__(self) -> None:
        self.state = self.GROUND

    def feed(self, data: bytes) -> bytes:
        out = bytearray()
        st = self.state
        for b in data:
            if st == self.GROUND:
                if b == 0x1B:
                    st = self.ESC
                elif 0x20 <= b < 0x7F or b >= 0x80:
                    out.append(b)
            elif st == self.ESC:
                if b == 0x5B:  # [
                    st = self.CSI
                elif b in (0x5D, 0x50, 0x5F, 0x5E):  # ] P _ ^
                    st = self.STR
                elif 0x20 <= b <= 0x2F:
                    st = self.ESC_INT
                else:
                    st = self.GROUND
            elif st == self.ESC_INT:
                if 0x30 <= b <= 0x7E:
                    st = self.GROUND
            elif st == self.CSI:
                if 0x40 <= b <= 0x7E:
                    st = self.GROUND
            elif st == self.STR:
                if b == 0x07:
                    st = self.GROUND
                elif b == 0x1B:
                    st = self.STR_ESC
            else:  # STR_ESC
                st = self.GROUND if b == 0x5C else self.STR
        self.state = st
        return bytes(out)


# ---------------------------------------------------------------------- endpoints
class Endpoint:
    """Something we type into and read a terminal's output from."""

    name = ""

    def write(self, data: bytes) -> None:
        raise NotImplementedError

    def read(self, timeout: float) -> bytes:
        """Output bytes; b"" if none came within ``timeout``; ConnectionError at the end."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    # -- shared logic
    def discard(self, quiet: float = 0.0, limit: float = 10.0) -> int:
        """Throw away output until none arrives for ``quiet`` seconds."""
        n = 0
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            data = self.read(quiet)
            if not data:
                break
            n += len(data)
        return n

    def wait_text(self, needle: bytes, timeout: float) -> None:
        """Read until ``needle`` shows up in the text (escape sequences removed)."""
        text = TextFilter()
        seen = b""
        deadline = time.monotonic() + timeout
        while needle not in seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{self.name}: {needle!r} not seen; got {seen[-300:]!r}")
            seen = (seen + text.feed(self.read(left)))[-4096:]

    def keystroke(self, ch: bytes, timeout: float = 10.0) -> float:
        """Seconds from writing ``ch`` to seeing it echoed."""
        self.discard()
        text = TextFilter()
        t0 = time.perf_counter()
        self.write(ch)
        deadline = t0 + timeout
        while True:
            data = self.read(max(0.0, deadline - time.perf_counter()))
            if ch in text.feed(data):
                return time.perf_counter() - t0
            if not data and time.perf_counter() > deadline:
                raise TimeoutError(f"{self.name}: no echo of {ch!r} within {timeout}s")

    def until_marker(self, timeout: float) -> tuple[float, int]:
        """Type Enter; seconds until MARKER is seen, and the bytes received meanwhile.
        Raises ClientLost if the connection ends first."""
        self.discard(0.3)
        keep = len(MARKER) - 1
        tail = b""
        last = b""
        got = 0
        t0 = time.perf_counter()
        self.write(b"\r")
        deadline = t0 + timeout
        while True:
            try:
                data = self.read(max(0.0, deadline - time.perf_counter()))
            except ConnectionError as e:
                raise ClientLost(str(e), time.perf_counter() - t0, got, last) from None
            if not data:
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"{self.name}: end marker not seen within {timeout}s "
                                       f"({got} bytes received)")
                continue
            got += len(data)
            if MARKER in data or MARKER in tail + data[:keep]:
                return time.perf_counter() - t0, got
            tail = (tail + data[-keep:])[-keep:]
            last = (last + data[-400:])[-400:]


class ClientLost(ConnectionError):
    """The client's connection ended before the end marker arrived."""

    def __init__(self, message: str, seconds: float, got: int, last: bytes) -> None:
        super().__init__(message)
        self.seconds = seconds
        self.got = got
        self.last = last


def _ctty() -> None:
    """In the child, after setsid: make stdin (the PTY slave) the controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class PtyEndpoint(Endpoint):
    """A process whose terminal is a PTY we own: a client (``tether attach``,
    ``tmux attach``) or, for the direct baseline, the program itself."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.name = name
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
        try:
            self.proc = popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                              start_new_session=True, preexec_fn=_ctty, close_fds=True,
                              cwd="/")
        finally:
            os.close(slave)
        os.set_blocking(self.master, False)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.master, view):]
            except BlockingIOError:
                select.select([], [self.master], [], 1.0)

    def read(self, timeout: float) -> bytes:
        try:
            return os.read(self.master, 1 << 20)
        except BlockingIOError:
            pass
        except OSError as e:  # EIO: the process on the slave is gone
            raise ConnectionError(f"{self.name}: the terminal closed ({e})") from None
        if not select.select([self.master], [], [], timeout)[0]:
            return b""
        try:
            data = os.read(self.master, 1 << 20)
        except BlockingIOError:
            return b""
        except OSError as e:
            raise ConnectionError(f"{self.name}: the terminal closed ({e})") from None
        if not data:
            raise ConnectionError(f"{self.name}: the terminal closed")
        return data

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        finish(self.proc)
        with contextlib.suppress(OSError):
            os.close(self.master)


class SdkEndpoint(Endpoint):
    """tether's SDK attachment, raw bytes, in this process."""

    def __init__(self, name: str, att: Attachment) -> None:
        self.name = name
        self.att = att

    def write(self, data: bytes) -> None:
        self.att.write(data)

    def read(self, timeout: float) -> bytes:
        data = self.att.read(timeout)
        if not data and self.att.closed:
            raise ConnectionError(f"{self.name}: the attachment ended ({self.att.exit})")
        return data

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.att.detach()


# ---------------------------------------------------------------------- tmux
class Tmux:
    """A private tmux server (``-L``) with a config that turns the status line off and
    keeps enough history; killed by :meth:`kill`."""

    def __init__(self, label: str, conf_dir: Path) -> None:
        self.label = f"{label}{os.getpid()}"
        conf = conf_dir / f"{label}.tmux.conf"
        conf.write_text(f"set -g status off\nset -g history-limit {SCROLLBACK * 2}\n")
        self.env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
        self.env["TERM"] = TERM
        self.base = ["tmux", "-L", self.label, "-f", str(conf)]

    def cmd(self, *args: str) -> str:
        out = subprocess.run([*self.base, *args], env=self.env, check=True, capture_output=True,
                             stdin=subprocess.DEVNULL, timeout=30)
        return out.stdout.decode().strip()

    def new_session(self, name: str, argv: list[str]) -> None:
        self.cmd("new-session", "-d", "-s", name, "-x", str(COLS), "-y", str(ROWS), "--", *argv)

    def client(self, session: str) -> PtyEndpoint:
        return PtyEndpoint(f"tmux attach ({session})", [*self.base, "attach-session", "-t",
                                                         session], self.env)

    def server_pid(self) -> int:
        return int(self.cmd("display-message", "-p", "#{pid}"))

    def history(self, session: str) -> int:
        return int(self.cmd("display-message", "-p", "-t", session, "#{history_size}"))

    def kill(self) -> None:
        """kill-server, then remove the socket file it leaves behind."""
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([*self.base, "kill-server"], env=self.env, capture_output=True,
                           stdin=subprocess.DEVNULL, timeout=30)
        tmpdir = self.env.get("TMUX_TMPDIR") or "/tmp"
        with contextlib.suppress(OSError):
            (Path(tmpdir) / f"tmux-{os.getuid()}" / self.label).unlink()


# ---------------------------------------------------------------------- tether
class Tether:
    """The SDK client of one bench daemon, plus the ``tether attach`` CLI clients."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.client = Client(home, autostart=False)
        self.env = {k: v for k, v in os.environ.items() if k != "TETHER_FAULT"}
        self.env["TERM"] = TERM

    def start(self, argv: list[str]) -> str:
        x = self.client.exec_start(argv, tty=True, rows=ROWS, cols=COLS)
        if x.state != "RUNNING":
            raise RuntimeError(f"exec did not start: {x}")
        exec_id: str = x.id
        return exec_id

    def sdk(self, exec_id: str) -> SdkEndpoint:
        return SdkEndpoint("tether SDK", self.client.attach(exec_id, rows=ROWS, cols=COLS))

    def cli(self, exec_id: str) -> PtyEndpoint:
        # The console script's entry (``tether`` runs tether.cli.entry:main), as a user
        # starts it: ``tether attach`` there skips the click CLI.
        return PtyEndpoint("tether attach", [sys.executable, "-m", "tether.cli.entry",
                                             "--home", str(self.home), "attach", exec_id],
                           self.env)

    def monitor_pid(self, exec_id: str) -> int:
        data = json.loads((self.home / "run" / f"{exec_id}.handles.json").read_text())
        pid: int = data["monitor"]["pid"]
        return pid

    def close(self) -> None:
        self.client.close()


# ---------------------------------------------------------------------- parts
def keystrokes(eps: dict[str, Endpoint], n: int, gap: float) -> dict[str, list[float]]:
    """``n`` keystrokes per endpoint, taking turns (the order rotating each round), each
    after a pause of ``gap`` seconds; WARMUP rounds first, not counted."""
    names = list(eps)
    out: dict[str, list[float]] = {k: [] for k in names}
    for i in range(WARMUP + n):
        ch = KEY_CHARS[i % len(KEY_CHARS):][:1]
        k = i % len(names)
        for name in names[k:] + names[:k]:
            if gap:
                time.sleep(gap)
            dt = eps[name].keystroke(ch)
            if i >= WARMUP:
                out[name].append(dt)
    return out


def cpu_of(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += cpu_seconds(pid)
    return total


def _reattach(make: Callable[[], Endpoint], timeout: float = 600.0) -> Endpoint:
    """A new client for a session whose client was dropped mid-``cat``: attach until one
    sees the end marker (in the replay or live), so the next run starts clean."""
    deadline = time.monotonic() + timeout
    while True:
        ep = make()
        try:
            ep.wait_text(MARKER, max(1.0, deadline - time.monotonic()))
            ep.discard(0.3)
            return ep
        except ConnectionError:
            ep.close()
            if time.monotonic() > deadline:
                raise


def _detach_events(tether: Tether, execs: dict[str, str]) -> list[dict[str, Any]]:
    """The daemon's exec.detach events for ``execs``: why the monitor let a client go."""
    out: list[dict[str, Any]] = []
    with contextlib.suppress(Exception):
        for ev in tether.client.events_list(limit=10_000).events:
            if ev.type == "exec.detach" and ev.exec in execs:
                out.append({"method": execs[ev.exec], "reason": ev.reason})
    return out


def make_file(path: Path, size: int) -> int:
    """A text file of ``size`` bytes (rounded down to whole lines): LINE-byte lines."""
    alphabet = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    lines = [(alphabet[i % len(alphabet):] + alphabet)[:LINE - 1] + b"\n" for i in range(256)]
    block = b"".join(lines)
    count = size // LINE
    with open(path, "wb") as f:
        whole, rest = divmod(count, 256)
        for _ in range(whole):
            f.write(block)
        f.write(b"".join(lines[:rest]))
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)  # page cache
    return count * LINE


def _close_all(eps: dict[str, Endpoint]) -> None:
    for ep in eps.values():
        with contextlib.suppress(Exception):
            ep.close()


@contextlib.contextmanager
def _tmux(label: str, conf_dir: Path) -> Iterator[Tmux]:
    t = Tmux(label, conf_dir)
    try:
        yield t
    finally:
        t.kill()


def _mem(pid: int) -> dict[str, float]:
    return memory_of(pid) or {}


def memory_run(tether: Tether, tmux: Tmux) -> dict[str, Any]:
    """Monitor RSS (tether) and server RSS (tmux): idle, client attached, after SCROLLBACK
    lines of output."""
    out: dict[str, Any] = {}
    x = tether.start(["sh", "-c", MEM_PROG])
    tmux.new_session("mem", ["sh", "-c", MEM_PROG])
    mon, srv = tether.monitor_pid(x), tmux.server_pid()
    time.sleep(0.5)
    out["tether_monitor"] = {"idle": _mem(mon)}
    out["tmux_server"] = {"idle": _mem(srv)}
    cli: PtyEndpoint | None = None
    tmc: PtyEndpoint | None = None
    try:
        cli, tmc = tether.cli(x), tmux.client("mem")
        for ep in (cli, tmc):
            ep.wait_text(READY, 30)
            ep.discard(0.3)
        time.sleep(0.3)
        out["tether_monitor"]["attached"] = _mem(mon)
        out["tmux_server"]["attached"] = _mem(srv)
        out["tether_client"] = _mem(cli.proc.pid)
        out["tmux_client"] = _mem(tmc.proc.pid)
        for ep in (cli, tmc):
            ep.until_marker(60)
            ep.discard(0.3)
        time.sleep(0.5)
        out["tether_monitor"]["scrollback"] = _mem(mon)
        out["tmux_server"]["scrollback"] = _mem(srv)
        out["tmux_history_lines"] = tmux.history("mem")
        out["tether_pty_log_bytes"] = sum(q.stat().st_size
                                          for q in tether.home.glob(f"logs/*/{x}.pty.log"))
    finally:
        for client in (cli, tmc):
            if client is not None:
                client.close()
    return out


def _median(v: list[float]) -> float:
    return statistics.median(v) if v else float("nan")


def _us(ms: float) -> str:
    return "n/a" if ms != ms else f"{ms * 1000:.0f} µs"


def _mib(d: dict[str, Any], key: str) -> str:
    return f"{float(d[key]):.1f}" if key in d else "n/a"


# ---------------------------------------------------------------------- run
def run(opts: Options) -> BenchResult:
    n_keys = 200 if opts.quick else 1000
    size_req = (25 if opts.quick else 100) * 2**20
    reps = 1 if opts.quick else 3
    lat: dict[str, dict[str, list[float]]] = {}
    thr: dict[str, list[float]] = {}
    got_bytes: dict[str, list[int]] = {}
    cpu: dict[str, float] = {}
    lost: dict[str, list[dict[str, Any]]] = {}
    detaches: list[dict[str, Any]] = []
    after_thr: dict[str, Any] = {}

    with fresh_home() as d:
        d.start()
        tether = Tether(d.home)
        try:
            with _tmux("tbk", d.home) as tmux:
                # ---- keystrokes: one session per method
                keys: dict[str, Endpoint] = {}
                try:
                    x_cli = tether.start(["sh", "-c", KEY_PROG])
                    x_sdk = tether.start(["sh", "-c", KEY_PROG])
                    tmux.new_session("keys", ["sh", "-c", KEY_PROG])
                    keys["tether_cli"] = tether.cli(x_cli)
                    keys["tether_sdk"] = tether.sdk(x_sdk)
                    keys["tmux"] = tmux.client("keys")
                    keys["direct"] = PtyEndpoint("direct PTY", ["sh", "-c", KEY_PROG])
                    for ep in keys.values():
                        ep.wait_text(READY, 30)
                        ep.discard(0.3)
                    for series, gap in SERIES.items():
                        lat[series] = keystrokes(keys, n_keys, gap)
                finally:
                    _close_all(keys)

                # ---- throughput: one session per method, repetitions interleaved
                data_file = d.home / "cat.txt"
                size = make_file(data_file, size_req)
                argv = ["sh", "-c", THRU_PROG, "sh", str(data_file)]
                thru: dict[str, Endpoint] = {}
                try:
                    x_tcli, x_tsdk = tether.start(argv), tether.start(argv)
                    tmux.new_session("thru", argv)
                    thru["tether_cli"] = cli = tether.cli(x_tcli)
                    thru["tether_sdk"] = tether.sdk(x_tsdk)
                    thru["tmux"] = tmc = tmux.client("thru")
                    thru["direct"] = PtyEndpoint("direct PTY", argv)
                    for ep in thru.values():
                        ep.wait_text(READY, 30)
                        ep.discard(0.3)
                    makers: dict[str, Callable[[], Endpoint]] = {
                        "tether_cli": lambda: tether.cli(x_tcli),
                        "tether_sdk": lambda: tether.sdk(x_tsdk)}
                    relays = {"tether_cli": [tether.monitor_pid(x_tcli), cli.proc.pid],
                              "tether_sdk": [tether.monitor_pid(x_tsdk)],
                              "tmux": [tmux.server_pid(), tmc.proc.pid], "direct": []}
                    thr = {k: [] for k in thru}
                    got_bytes = {k: [] for k in thru}
                    cpu = dict.fromkeys(thru, 0.0)
                    lost = {k: [] for k in makers}
                    for rep in range(reps):
                        for name in list(thru):
                            c0 = cpu_of(relays[name])
                            try:
                                secs, got = thru[name].until_marker(600)
                            except ClientLost as e:
                                if name not in makers:
                                    raise
                                lost[name].append({
                                    "rep": rep, "error": str(e), "seconds": round(e.seconds, 3),
                                    "bytes_received": e.got,
                                    "last_output": e.last.decode(errors="replace")})
                                thru[name].close()
                                thru[name] = ep = _reattach(makers[name])
                                if isinstance(ep, PtyEndpoint):
                                    relays[name] = [relays[name][0], ep.proc.pid]
                                continue
                            cpu[name] += cpu_of(relays[name]) - c0
                            thr[name].append(secs)
                            got_bytes[name].append(got)
                    detaches = _detach_events(tether, {x_tcli: "tether_cli",
                                                       x_tsdk: "tether_sdk"})
                    for name, x in (("tether_cli", x_tcli), ("tether_sdk", x_tsdk)):
                        after_thr[f"{name}_monitor"] = _mem(tether.monitor_pid(x))
                    after_thr["tmux_server"] = _mem(tmux.server_pid())
                finally:
                    _close_all(thru)
                    data_file.unlink(missing_ok=True)
            # ---- memory: a tmux server of its own, so that it holds one session only
            with _tmux("tbm", d.home) as tmux_mem:
                mem = memory_run(tether, tmux_mem)
        finally:
            tether.close()

    # ------------------------------------------------------------------ report
    ks = {series: {k: summarize_ms(v) for k, v in by.items()} for series, by in lat.items()}
    rows: list[Row] = []
    for series, gap in SERIES.items():
        how = f"{gap * 1000:g} ms apart" if gap else "back-to-back"

        def q(name: str, which: str, series: str = series) -> float:
            return float(ks[series][name].get(which, float("nan")))

        for which in ("p50", "p99"):
            base = f"tmux attach {_us(q('tmux', which))} · direct PTY {_us(q('direct', which))}"
            for name, label in (("tether_cli", "tether attach"), ("tether_sdk", "SDK")):
                rows.append(Row("keystroke", f"echo {which}, {how}, {label} (n={n_keys})",
                                _us(q(name, which)), base, f"≤ tmux {which}",
                                q(name, which) <= q("tmux", which)))

    med = {k: _median(v) for k, v in thr.items()}
    mbs = {k: size / 1e6 / v for k, v in med.items()}
    label = f"{size / 2**20:g} MiB"

    def speed(k: str) -> str:
        if not thr.get(k):
            return "n/a"
        return f"{mbs[k]:,.0f} MB/s ({med[k]:.2f} s)"

    base = f"tmux attach {speed('tmux')} · direct PTY {speed('direct')}"
    for name, what in (("tether_cli", "tether attach"), ("tether_sdk", "SDK")):
        dropped = len(lost.get(name, []))
        shown = speed(name)
        if dropped:
            best = max(lost[name], key=lambda e: e["bytes_received"])
            shown = (f"client dropped in {dropped} of {reps} (at most "
                     f"{best['bytes_received'] / 2**20:.1f} MiB first, "
                     f"{best['bytes_received'] / 1e6 / max(best['seconds'], 1e-9):,.0f} MB/s)")
            if thr.get(name):
                shown += f"; completed runs {speed(name)}"
        rows.append(Row("throughput", f"cat {label} to the client, {what} (median of {reps})",
                        shown, base, "≥ tmux, no drop",
                        not dropped and mbs[name] >= mbs["tmux"]))

    tm, ts = mem["tether_monitor"], mem["tmux_server"]
    for key in ("VmRSS", "RssAnon"):
        rows.append(Row(
            "terminal memory", f"{key} MiB: idle / client attached / +{SCROLLBACK:,} lines",
            f"monitor {_mib(tm['idle'], key)} / {_mib(tm['attached'], key)} / "
            f"{_mib(tm['scrollback'], key)}",
            f"tmux server {_mib(ts['idle'], key)} / {_mib(ts['attached'], key)} / "
            f"{_mib(ts['scrollback'], key)}"))
    at = after_thr

    def rss_hwm(m: dict[str, Any]) -> str:
        return f"{_mib(m, 'VmRSS')} (peak {_mib(m, 'VmHWM')})"

    rows.append(Row("terminal memory", f"VmRSS MiB after the {reps} cat runs",
                    f"monitor: SDK {rss_hwm(at.get('tether_sdk_monitor', {}))} · "
                    f"attach {rss_hwm(at.get('tether_cli_monitor', {}))}",
                    f"tmux server {rss_hwm(at.get('tmux_server', {}))}"))
    rows.append(Row("terminal memory", "attach client process VmRSS MiB",
                    f"tether attach {_mib(mem['tether_client'], 'VmRSS')}",
                    f"tmux attach {_mib(mem['tmux_client'], 'VmRSS')}"))

    def per_100mib(k: str) -> str:
        runs = len(thr.get(k, []))
        return f"{cpu[k] / (size * runs / 2**20) * 100:.2f} s" if runs else "n/a"

    recv = {k: f"{_median([float(b) for b in v]) / 2**20:.1f} MiB" if v else "n/a"
            for k, v in got_bytes.items()}
    notes = [
        "keystroke: the p99 of every method, the direct PTY included, is set by scheduling "
        "noise on this machine; the paced series includes waking idle CPUs and processes",
        "throughput: bytes the client received per run (median): " + ", ".join(
            f"{k} {v}" for k, v in recv.items())
        + f" for a {label} file (a PTY turns each \\n into \\r\\n; tmux repaints its "
        "screen instead of forwarding every byte)",
        "throughput: CPU seconds per 100 MiB of the relaying processes: " + ", ".join(
            f"{k} {per_100mib(k)}" for k in ("tether_cli", "tether_sdk", "tmux"))
        + " (tether attach: monitor + client; SDK: monitor; tmux: server + client)",
        f"memory: tmux kept {mem['tmux_history_lines']:,} lines of history (the rest is on "
        "its screen); the tether monitor keeps no screen model and its scrollback in "
        f"{{exec}}.pty.log ({mem['tether_pty_log_bytes']:,} bytes), not in memory",
    ]
    for name, drops in lost.items():
        for drop in drops:
            notes.append(
                f"throughput: the monitor dropped the {name} client in run {drop['rep'] + 1} "
                f"after {drop['seconds']:.2f} s and {drop['bytes_received'] / 2**20:.1f} MiB")
    reasons = sorted({f"{e['method']}: {e['reason']}" for e in detaches
                      if e.get("reason") not in (None, "detached", "client went away")})
    if reasons:
        notes.append("throughput: exec.detach reasons journalled: " + "; ".join(reasons))
    return BenchResult(
        name="terminal", title="interactive terminals", rows=rows, notes=notes,
        params={"keystrokes": n_keys, "warmup_rounds": WARMUP,
                "series_gap_s": SERIES, "keystroke_program": ["sh", "-c", KEY_PROG],
                "throughput_bytes": size, "throughput_reps": reps,
                "throughput_program": ["sh", "-c", THRU_PROG, "sh", "FILE"],
                "scrollback_lines": SCROLLBACK, "memory_program": ["sh", "-c", MEM_PROG],
                "window": [ROWS, COLS], "TERM": TERM,
                "tmux_options": {"status": "off", "history-limit": SCROLLBACK * 2}},
        data={"keystroke_ms": ks,
              "throughput_seconds": {k: [round(x, 4) for x in v] for k, v in thr.items()},
              "throughput_mb_per_s": {k: round(v, 1) for k, v in mbs.items()},
              "throughput_bytes_received": got_bytes,
              "throughput_relay_cpu_seconds": {k: round(v, 3) for k, v in cpu.items()},
              "throughput_clients_dropped": lost,
              "throughput_detach_events": detaches,
              "memory_after_throughput_mib": after_thr,
              "memory_mib": mem},
    )
