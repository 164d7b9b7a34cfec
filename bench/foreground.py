"""The foreground commands as whole processes — what a user, a script or an agent's tool
call waits for — beside the tools they replace, alternated sample by sample in one run.

* ``tether run -- true`` in the foreground, default sandbox (bubblewrap where it works),
  from a project directory, the daemon up: the installed ``tether`` script (its lean
  path, ``tether.cli.runfast``) and the click command (``python -m tether.cli.main``,
  what every ``tether run`` ran before the lean path: the "before" of the same run),
  beside ``python -c pass`` (the interpreter's own start: the target is ≤ 3x it) and bare
  ``bwrap --ro-bind / / --dev /dev --proc /proc --unshare-all true``.
* ``tether attach`` to a running terminal exec and detach (ctrl-\\), the client on a PTY
  we own, timed from its spawn until it shows the program's screen plus from the detach
  keys (sent 0.1 s later: a tmux client drops keys that come while it attaches) until it
  has exited:
  the installed script (``tether.cli.attachfast``) and the click command, beside ``tmux
  attach`` and detach (C-b d) to a session of a private tmux server running the same
  program (target ≤ 2x).

The installed script is pip's (this venv's), whose ``import re`` costs a few ms before
tether runs; each tether row also runs through the script ``uv tool install`` writes
(README's install), which imports only ``sys``. Each sample's wall clock, medians
reported; CPU is the children's rusage per run.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from bench.harness import (
    BenchResult,
    Options,
    RawConn,
    Row,
    fmt_ms,
    fresh_home,
    summarize_ms,
)
from bench.terminal import PtyEndpoint, Tmux

TARGET_RUN_X = 3.0  # times python -c pass
TARGET_ATTACH_X = 2.0  # times tmux attach + detach
BWRAP = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all",
         "true"]
PROGRAM = ["sh", "-c", "echo READY; exec sleep 3600"]
TETHER_DETACH = b"\x1c"  # ctrl-\, the default detach keys
TMUX_DETACH = b"\x02d"  # C-b d


def _script() -> list[str]:
    """The installed ``tether`` script beside this interpreter, as people run it."""
    script = Path(sys.executable).with_name("tether")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tether.cli.entry"]


#: The script ``uv tool install`` writes (README's install), beside pip's, whose
#: ``import re`` (and ``enum`` with it) costs every command a few ms before tether runs.
UV_SCRIPT = """#!{python}
import sys
from tether.cli.entry import main
if __name__ == "__main__":
    if sys.argv[0].endswith("-script.pyw"):
        sys.argv[0] = sys.argv[0][:-11]
    elif sys.argv[0].endswith(".exe"):
        sys.argv[0] = sys.argv[0][:-4]
    sys.exit(main())
"""


def _uv_script(directory: str) -> list[str]:
    path = Path(directory) / "tether"
    path.write_text(UV_SCRIPT.format(python=sys.executable))
    path.chmod(0o755)
    return [str(path)]


def _timed(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system) and exit code of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, env=env, cwd=cwd)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, p.returncode


#: Between the program's screen showing and the detach keys, unmeasured: a tmux client
#: drops keys that reach it while it is still being attached.
SETTLE = 0.1


def _attach_once(name: str, argv: list[str], env: dict[str, str] | None, keys: bytes
                 ) -> tuple[float, int]:
    """Spawn an attach client on a PTY, detach once the program's screen shows; the
    seconds from spawn to screen plus from the detach keys to the client's exit (the
    settling between is not counted), and how many times the keys had to be sent."""
    t0 = time.perf_counter()
    ep = PtyEndpoint(name, argv, env)
    try:
        seen = b""
        deadline = t0 + 60
        while b"READY" not in seen:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{name}: no screen within 60 s: {seen[-200:]!r}")
            with contextlib.suppress(ConnectionError):
                seen += ep.read(1.0)
        attached = time.perf_counter() - t0
        settle = time.perf_counter() + SETTLE
        while time.perf_counter() < settle:
            with contextlib.suppress(ConnectionError):
                ep.read(0.01)
        t1 = time.perf_counter()
        ep.write(keys)
        sent, resend = 1, t1 + 1.0
        while ep.proc.poll() is None:  # drained: a client blocked on a full PTY never ends
            now = time.perf_counter()
            if now > t1 + 30:
                raise RuntimeError(f"{name}: still attached 30 s after the detach keys")
            if now > resend:
                ep.write(keys)
                sent, resend = sent + 1, now + 1.0
            try:
                ep.read(0.005)
            except ConnectionError:
                break
        code = ep.proc.wait(30)
        detached = time.perf_counter() - t1
        if code != 0:
            raise RuntimeError(f"{name}: exited {code} on detach: {seen[-300:]!r}")
        return attached + detached, sent
    finally:
        ep.close()


@contextlib.contextmanager
def _project() -> Iterator[str]:
    """A project directory outside the home: the default sandbox's workspace."""
    path = tempfile.mkdtemp(prefix="tether-bench-proj-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run(opts: Options) -> BenchResult:
    n = 15 if opts.quick else 40
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    wall: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    notes: list[str] = []
    resent: dict[str, int] = {}
    with fresh_home() as d, _project() as proj, tempfile.TemporaryDirectory() as conf:
        d.start()
        home = str(d.home)
        lean = [*_script(), "--home", home]
        uv = [*_uv_script(conf), "--home", home]
        click = [sys.executable, "-m", "tether.cli.main", "--home", home]
        cases: dict[str, list[str]] = {
            "tether run -- true": [*lean, "run", "--", "true"],
            "tether run -- true, uv's script": [*uv, "run", "--", "true"],
            "tether run -- true, click path (before)": [*click, "run", "--", "true"],
            "python -c pass": [sys.executable, "-c", "pass"],
        }
        if shutil.which("bwrap") and _timed(BWRAP, env, proj)[2] == 0:
            cases["bwrap … true"] = BWRAP
        else:
            notes.append("bwrap: not usable here; no row")
        for argv in cases.values():  # warm the page cache, unmeasured
            _timed(argv, env, proj)
        for _ in range(n):
            for name, argv in cases.items():
                w, c, code = _timed(argv, env, proj)
                if code != 0:
                    raise RuntimeError(f"{name} exited {code}")
                wall.setdefault(name, []).append(w)
                cpu.setdefault(name, []).append(c)
        # attach + detach, as whole processes
        with RawConn(d.socket, timeout=30) as c:
            x = c.result("exec.start", {"argv": PROGRAM, "tty": True, "rows": 24,
                                        "cols": 80, "cwd": proj})
        attach: dict[str, Callable[[], tuple[float, int]]] = {
            "tether attach + detach": lambda: _attach_once(
                "tether attach", [*lean, "attach", x["id"]], env, TETHER_DETACH),
            "tether attach + detach, uv's script": lambda: _attach_once(
                "tether attach (uv)", [*uv, "attach", x["id"]], env, TETHER_DETACH),
            "tether attach + detach, click path (before)": lambda: _attach_once(
                "tether attach (click)", [*click, "attach", x["id"]], env, TETHER_DETACH),
        }
        tmux = Tmux("fg", Path(conf)) if shutil.which("tmux") else None
        try:
            if tmux is not None:
                tmux.new_session("fg", PROGRAM)
                attach["tmux attach + detach"] = lambda: _attach_once(
                    "tmux attach", [*tmux.base, "attach-session", "-t", "fg"], tmux.env,
                    TMUX_DETACH)
            else:
                notes.append("tmux: not installed here; no attach baseline")
            for fn in attach.values():
                fn()  # warm, unmeasured
            for _ in range(n):
                for name, fn in attach.items():
                    seconds, sent = fn()
                    wall.setdefault(name, []).append(seconds)
                    resent[name] = resent.get(name, 0) + (sent > 1)
        finally:
            if tmux is not None:
                tmux.kill()
    notes += [f"{k}: the detach keys were sent again (a second later) in {v} of {n} "
              "samples" for k, v in resent.items() if v]
    stats = {k: summarize_ms(v) for k, v in wall.items()}
    cpu_ms = {k: round(sorted(v)[len(v) // 2] * 1000, 1) for k, v in cpu.items()}

    def med(name: str) -> float:
        return float(stats[name]["p50"]) if name in stats else float("nan")

    def cell(name: str) -> str:
        extra = f", CPU {cpu_ms[name]:.0f} ms" if name in cpu_ms else ""
        return f"{fmt_ms(med(name))} (p90 {fmt_ms(float(stats[name]['p90']))}{extra})"

    py = med("python -c pass")
    base = f"python -c pass {fmt_ms(py)}" + (f", bwrap … true {fmt_ms(med('bwrap … true'))}"
                                            if "bwrap … true" in stats else "")
    rows = []
    for name in ("tether run -- true", "tether run -- true, uv's script",
                 "tether run -- true, click path (before)"):
        ratio = med(name) / py
        rows.append(Row("foreground", f"{name}, median wall of {n}",
                        f"{cell(name)} = {ratio:.1f}x python", base,
                        f"≤ {TARGET_RUN_X:.0f}x python -c pass",
                        ratio <= TARGET_RUN_X))
    rows += [Row("foreground", f"{k}, median wall of {n} (baseline)", cell(k), "")
             for k in ("python -c pass", "bwrap … true") if k in stats]
    tm = med("tmux attach + detach")
    for name in ("tether attach + detach", "tether attach + detach, uv's script",
                 "tether attach + detach, click path (before)"):
        ratio = med(name) / tm
        rows.append(Row("foreground", f"{name}, median wall of {n}",
                        f"{cell(name)} = {ratio:.1f}x tmux",
                        f"tmux attach + detach {fmt_ms(tm)}",
                        f"≤ {TARGET_ATTACH_X:.0f}x tmux", ratio <= TARGET_ATTACH_X))
    return BenchResult(
        name="foreground", title="foreground commands, whole processes", rows=rows,
        notes=notes, params={"runs": n, "commands": cases},
        data={"ms": stats, "cpu_ms_median": cpu_ms,
              "seconds": {k: [round(s, 5) for s in v] for k, v in wall.items()}})
