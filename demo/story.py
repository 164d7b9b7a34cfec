"""`make demo`: tether's promise, told in under a minute with the real CLI.

Start a daemon, run four commands under it, ``kill -9`` the daemon, show that the
commands never noticed, start a new daemon, and show that it re-adopts every
command, records real exit codes, keeps every byte of output and continues the
event numbers with no gap.

Then an agent session: a scripted agent takes two turns, is killed with ``kill -9``,
and comes back as a new attempt of the same lineage, restored from the drain
snapshot of its last turn, and finishes its work.

Every step runs the real ``tether`` CLI (``python -m tether.cli.main``) as a
subprocess and prints the command and its output. Every claim the story makes is
also checked, so the demo doubles as an end-to-end smoke test: it exits 1 when a
check fails, and it always cleans up after itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

try:
    from rich.console import Console
    from rich.text import Text
except ImportError:  # pragma: no cover - only without the venv
    sys.exit("demo/story.py needs the project's venv: run `make demo`")

TETHER = [sys.executable, "-m", "tether.cli.main"]
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the harness shared with the tests and benchmarks
from tests.harness import SCRIPTED_AGENT  # noqa: E402
from tests.homes import kill_strays  # noqa: E402
from tests.receiver import Receiver  # noqa: E402
from tether.agent import snapshot  # noqa: E402

CMD_TIMEOUT = 30.0
TERMINAL = ("FINISHED", "FAILED", "CANCELLED")

# name -> (lines to print, exit code); a line every 0.5 s.
COUNTERS: dict[str, tuple[int, int]] = {
    "alpha": (30, 0),     # ends normally, well after the new daemon is up
    "bravo": (34, 3),     # ends with exit code 3
    "charlie": (120, 0),  # would run a minute: we `tether kill` it
    "delta": (10, 7),     # ends with exit code 7 while *no* daemon is running
}

COUNT_SH = """\
# count.sh NAME LINES CODE: print a numbered line every 0.5 s, then exit with CODE
i=1
while [ "$i" -le "$2" ]; do
  echo "$1 line $i of $2"
  i=$((i + 1))
  sleep 0.5
done
exit "$3"
"""

console = Console(highlight=False)


class Abort(Exception):
    """A step the rest of the story depends on went wrong."""


def expected_log(name: str, lines: int | None = None) -> bytes:
    total, _ = COUNTERS[name]
    n = total if lines is None else lines
    return "".join(f"{name} line {i} of {total}\n" for i in range(1, n + 1)).encode()


# ---------------------------------------------------------------- processes
def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, kernel start time) of ``pid``, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    rest = stat[stat.rfind(b")") + 2:].split()
    try:
        return rest[0].decode(), int(rest[19])
    except (IndexError, ValueError):
        return None


def alive(pid: int, start_time: int | None = None) -> bool:
    st = proc_stat(pid)
    if st is None or st[0] in ("Z", "X"):
        return False
    return start_time is None or st[1] == start_time


# ---------------------------------------------------------------- the story
class Story:
    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.root = Path(tempfile.mkdtemp(prefix="tt", dir="/tmp"))  # short: socket path limit
        self.home = self.root / "home"  # tether's state
        self.work = self.root / "work"  # where we run things (a sandbox may not see the home)
        self.work.mkdir()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
        self.env["TETHER_HOME"] = str(self.home)
        # Room for `tether ps` tables; colour when we are on a terminal.
        self.env["COLUMNS"] = str(max(console.width, 120))
        if console.is_terminal:
            self.env["FORCE_COLOR"] = "1"
        else:
            self.env.pop("FORCE_COLOR", None)
            self.env["NO_COLOR"] = "1"
        self.passed = 0
        self.failures: list[str] = []
        self.ids: dict[str, str] = {}
        self.chapter_no = 0

    # ------------------------------------------------------------ narration
    def chapter(self, title: str, text: str) -> None:
        self.chapter_no += 1
        elapsed = time.monotonic() - self.t0
        console.print()
        console.rule(Text(f"{self.chapter_no}. {title}", style="bold magenta"),
                     align="left")
        console.print(Text.assemble((f"[{elapsed:4.1f}s] ", "dim"), (text, "italic")))

    def say(self, text: str) -> None:
        console.print(Text(text, style="italic"))

    def show_cmd(self, line: str) -> None:
        console.print(Text.assemble(("$ ", "bold green"), (line, "bold")))

    def show_out(self, data: bytes, head: int = 0, tail: int = 0) -> None:
        text = data.decode(errors="replace").rstrip("\n")
        if not text:
            return
        lines = text.split("\n")
        if head and len(lines) > head + tail + 1:
            console.print(Text.from_ansi("\n".join(lines[:head])), crop=False, soft_wrap=True)
            console.print(Text(f"  ⋮  ({len(lines) - head - tail} more lines, not shown here, "
                               "all checked below)", style="dim"))
            lines = lines[-tail:]
        console.print(Text.from_ansi("\n".join(lines)), crop=False, soft_wrap=True)

    def check(self, ok: bool, good: str, bad: str | None = None) -> bool:
        if ok:
            self.passed += 1
            console.print(Text.assemble(("  ✔ ", "bold green"), (good, "green")))
        else:
            msg = bad or f"NOT TRUE: {good}"
            self.failures.append(msg)
            console.print(Text.assemble(("  ✘ ", "bold red"), (msg, "bold red")))
        return ok

    def require(self, ok: bool, good: str, bad: str | None = None) -> None:
        if not self.check(ok, good, bad):
            raise Abort(bad or good)

    # ------------------------------------------------------------ commands
    def run(self, argv: list[str], display: str, *, show: bool = True, show_output: bool = True,
            ok: tuple[int, ...] = (0,), in_home: bool = False,
            ) -> subprocess.CompletedProcess[bytes]:
        if in_home:
            display = f"(cd $TETHER_HOME && {display})"
        if show:
            self.show_cmd(display)
        try:
            p = subprocess.run(argv, cwd=self.home if in_home else self.work, env=self.env,
                               capture_output=True,
                               timeout=CMD_TIMEOUT, check=False)
        except subprocess.TimeoutExpired as e:
            raise Abort(f"`{display}` did not finish within {CMD_TIMEOUT:.0f}s") from e
        if show and show_output:
            self.show_out(p.stdout)
        if p.stderr:
            self.show_out(p.stderr)
        if p.returncode not in ok:
            raise Abort(f"`{display}` exited {p.returncode}, expected {' or '.join(map(str, ok))}")
        return p

    def tether(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[bytes]:
        return self.run([*TETHER, *args], "tether " + shlex.join(args), **kw)

    def tether_json(self, *args: str) -> Any:
        p = self.tether(*args, "--json", show=False)
        return json.loads(p.stdout)

    def events(self) -> list[dict[str, Any]]:
        p = self.tether("events", "--json", show=False)
        return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]

    def execs(self) -> dict[str, dict[str, Any]]:
        return {x["name"]: x for x in self.tether_json("ps", "-a") if x["name"]}

    def daemon_pid(self) -> int | None:
        try:
            return int((self.home / "daemon.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def handles(self, name: str) -> dict[str, Any]:
        path = self.home / "run" / f"{self.ids[name]}.handles.json"
        data: dict[str, Any] = json.loads(path.read_text())
        return data

    def log_path(self, name: str) -> str:
        return f"logs/default/{self.ids[name]}.stdout.log"

    def wait_until(self, pred: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > deadline:
                raise Abort(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(0.05)

    # ------------------------------------------------------------ chapters
    def tell(self) -> None:
        self.start()
        self.sandboxed()
        self.launch()
        pre_crash, old_pid = self.crash()
        self.orphans()
        self.recover(pre_crash, old_pid)
        self.finish()
        self.record(pre_crash)
        self.agent()
        self.webhook()
        self.scheduled()
        self.digest()
        self.dashboard()
        self.stop()

    def start(self) -> None:
        self.chapter(
            "A fresh tether home",
            "tether keeps everything under one home directory: the SQLite store, the socket, "
            "the logs. We use a throw-away one with a short path under /tmp (a Unix socket "
            "path must fit in 108 bytes). `tether` below is `python -m tether.cli.main`.")
        self.show_cmd(f"export TETHER_HOME={self.home}; cd {self.work}")
        (self.work / "count.sh").write_text(COUNT_SH)
        self.say("Our stand-in for a long-running agent: a script that counts slowly.")
        self.run(["cat", "count.sh"], "cat count.sh")
        self.say("No daemon is running yet. Any CLI command starts one in the background.")
        self.tether("status")
        pid = self.tether_json("status")["pid"]
        self.require(alive(pid), f"daemon running as pid {pid}",
                     f"`tether status` reports daemon pid {pid}, which is not running")

    def sandboxed(self) -> None:
        self.chapter(
            "Sandboxed by default",
            "`tether run` puts a command in the default sandbox: bubblewrap where it works "
            "(`tether status` says), so the command sees the system directories read-only, "
            "its working directory read-write, and nothing of yours or of tether's.")
        bwrap = self.tether_json("status")["runtimes"]["bwrap"]
        if not bwrap["available"]:
            self.say(f"Not here: {bwrap['reason']}. The default sandbox is a plain process.")
            return
        marker = Path.home() / "tether-was-here"
        script = ("echo ok > inside.txt && echo wrote inside.txt; "
                  "touch ~/tether-was-here 2>/dev/null || echo cannot write to HOME; "
                  "test -e $TETHER_HOME && echo tether home visible || "
                  "echo tether home not visible")
        p = self.tether("run", "--", "sh", "-c", script)
        self.check((self.work / "inside.txt").read_text() == "ok\n",
                   "the command wrote its working directory")
        self.check(not marker.exists() and b"cannot write to HOME" in p.stdout,
                   "it could not write to the home directory",
                   f"{marker} was written from inside the sandbox")
        self.check(b"tether home not visible" in p.stdout,
                   "tether's own state was invisible to it")

    def launch(self) -> None:
        self.chapter(
            "Four commands under the daemon",
            "Each command runs under its own small monitor process, in its own session, with "
            "stdout going straight to a log file on disk. The daemon only keeps the books.")
        for name, (lines, code) in COUNTERS.items():
            p = self.tether("run", "-d", "--name", name, "--", "sh", "count.sh", name,
                            str(lines), str(code))
            self.ids[name] = p.stdout.decode().strip()
        self.tether("ps")
        states = {n: x["state"] for n, x in self.execs().items()}
        self.require(states == dict.fromkeys(COUNTERS, "RUNNING"), "all four are RUNNING",
                     f"expected all four RUNNING, got {states}")

    def crash(self) -> tuple[list[dict[str, Any]], int]:
        self.chapter(
            "kill -9 the daemon",
            "No shutdown, no cleanup, no warning: SIGKILL. First we save the event journal "
            "as it stands, to compare later.")
        for name in COUNTERS:  # the monitors write these before reporting the exec RUNNING
            self.wait_until(lambda n=name: (self.home / "run" / f"{self.ids[n]}.handles.json")
                            .exists(), 5, f"the handles file of {name}")
        pre_crash = self.events()
        self.say(f"(journal saved: {len(pre_crash)} events, the last one numbered "
                 f"{pre_crash[-1]['gseq']})")
        old_pid = self.daemon_pid()
        if old_pid is None:
            raise Abort("no daemon.pid")
        delta = self.handles("delta")["child"]
        self.require(alive(delta["pid"], delta["start_time"]),
                     "delta is still running as the daemon dies")
        self.run(["cat", "daemon.pid"], "cat daemon.pid", in_home=True)
        self.show_cmd(f"kill -9 {old_pid}")
        os.kill(old_pid, signal.SIGKILL)
        self.wait_until(lambda: not alive(old_pid), 5, f"daemon {old_pid} to die")
        self.check(True, f"daemon {old_pid} is gone")
        return pre_crash, old_pid

    def orphans(self) -> None:
        self.chapter(
            "Nobody is watching, and nothing noticed",
            "Each monitor wrote the pid and kernel start time of its command to "
            "run/<exec>.handles.json. Those pids are still alive:")
        self.run(["cat", f"run/{self.ids['alpha']}.handles.json"],
                 f"cat run/{self.ids['alpha']}.handles.json", in_home=True)
        children = {n: self.handles(n)["child"] for n in COUNTERS}
        pids = ",".join(str(c["pid"]) for c in children.values())
        self.run(["ps", "-o", "pid,stat,etime,args", "-p", pids],
                 f"ps -o pid,stat,etime,args -p {pids}")
        for name, c in children.items():
            self.check(alive(c["pid"], c["start_time"]), f"{name} (pid {c['pid']}) is running")

        self.say("...and their output keeps landing on disk (files named by exec id, as in "
                 "`tether ps` above). Log sizes, one second apart:")
        paths = [self.log_path(n) for n in COUNTERS]
        wc = "wc -c logs/default/*.stdout.log"
        before = self.run(["sh", "-c", wc], wc, in_home=True)
        time.sleep(1.0)
        after = self.run(["sh", "-c", wc], wc, in_home=True)
        sizes0 = self._wc(before.stdout)
        sizes1 = self._wc(after.stdout)
        for name, path in zip(COUNTERS, paths, strict=True):
            if name == "delta":
                continue  # may legitimately be finishing right now
            self.check(sizes1.get(path, 0) > sizes0.get(path, 0),
                       f"{name}'s log grew from {sizes0.get(path)} to {sizes1.get(path)} bytes")

        self.say("delta prints 10 lines and exits 7. It ends now, while no daemon exists; its "
                 "monitor writes the exit code to an exit file, durably, and leaves.")
        exit_file = f"logs/default/{self.ids['delta']}.exit"
        self.wait_until(lambda: (self.home / exit_file).exists(), 15, "delta's exit file")
        self.run(["cat", exit_file], f"cat {exit_file}", in_home=True)

    @staticmethod
    def _wc(out: bytes) -> dict[str, int]:
        sizes: dict[str, int] = {}
        for line in out.decode().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit():
                sizes[parts[1]] = int(parts[0])
        return sizes

    def recover(self, pre_crash: list[dict[str, Any]], old_pid: int) -> None:
        self.chapter(
            "A new daemon re-adopts everything",
            "Any command finds no daemon and starts a new one. On start-up it reads the "
            "handles and exit files, checks every pid against its kernel start time, and "
            "takes the commands back.")
        self.tether("status")
        new_pid = self.tether_json("status")["pid"]
        self.require(new_pid != old_pid and alive(new_pid), f"a new daemon runs as pid {new_pid}",
                     f"`tether status` reports daemon pid {new_pid}, the one we killed was "
                     f"{old_pid}")
        self.tether("ps", "-a")
        execs = self.execs()
        for name in ("alpha", "bravo", "charlie"):
            x = execs[name]
            child = self.handles(name)["child"]
            self.check(x["state"] == "RUNNING" and x["pid"] == child["pid"]
                       and alive(child["pid"], child["start_time"]),
                       f"{name} re-adopted: RUNNING, same process (pid {child['pid']})",
                       f"{name} after recovery: {x['state']} pid {x['pid']}, "
                       f"expected RUNNING pid {child['pid']}")
        d = execs["delta"]
        self.check(d["state"] == "FINISHED" and d["exit_code"] == 7,
                   "delta, which ended during the outage, is FINISHED with exit code 7",
                   f"delta after recovery: {d['state']} exit {d['exit_code']}, expected "
                   "FINISHED exit 7")
        last = pre_crash[-1]["gseq"]
        self.say(f"The journal held {last} events before the crash. Everything since:")
        self.tether("events", "--since", str(last))
        recovered = [e for e in self.events()
                     if e["type"] == "daemon.recovered" and e["gseq"] > last]
        data = (recovered[0].get("data") or {}) if recovered else {}
        self.check(len(recovered) == 1 and data.get("adopted") == 3
                   and data.get("finished") == 1,
                   f"daemon.recovered: {data.get('adopted')} adopted, {data.get('finished')} "
                   "finished while we were down",
                   f"expected one daemon.recovered with adopted=3 finished=1, got {recovered}")

    def finish(self) -> None:
        self.chapter(
            "Business as usual",
            "The new daemon controls the adopted commands as if it had started them: "
            "cancel one, wait for the others.")
        self.tether("kill", "charlie")
        self.tether("wait", "charlie", ok=(143,))
        self.say("(143 = 128 + SIGTERM.) alpha and bravo count to the end:")
        for name in ("alpha", "bravo"):
            code = COUNTERS[name][1]
            p = self.tether("wait", name, ok=(code,))
            self.check(p.stdout.strip() == str(code).encode(),
                       f"`tether wait {name}` printed and exited with {code}")

    def record(self, pre_crash: list[dict[str, Any]]) -> None:
        self.chapter(
            "The record",
            "Real exit codes, for commands that outlived the daemon that started them:")
        self.tether("ps", "-a")
        execs = self.execs()
        want = {"alpha": ("FINISHED", 0, None), "bravo": ("FINISHED", 3, None),
                "charlie": ("CANCELLED", None, 15), "delta": ("FINISHED", 7, None)}
        for name, (state, code, sig) in want.items():
            x = execs[name]
            got = (x["state"], x["exit_code"], x.get("signal"))
            how = f"exit code {code}" if sig is None else f"signal {sig}"
            self.check(got == (state, code, sig), f"{name}: {state}, {how}",
                       f"{name}: got state/exit/signal {got}, expected {(state, code, sig)}")

        self.say("Every byte the commands wrote, across the crash:")
        p = self.tether("logs", "bravo", show_output=False)
        self.show_out(p.stdout, head=4, tail=3)
        self.check(p.stdout == expected_log("bravo"),
                   f"bravo's log is byte-identical to what it printed ({len(p.stdout)} bytes)",
                   "bravo's log differs from what it printed")
        for name in ("alpha", "delta"):
            out = self.tether("logs", name, show=False).stdout
            self.check(out == expected_log(name),
                       f"{name}'s log is byte-identical too ({len(out)} bytes)",
                       f"{name}'s log differs from what it printed")
        out = self.tether("logs", "charlie", show=False).stdout
        n = out.count(b"\n")
        self.check(n > 0 and out == expected_log("charlie", n),
                   f"charlie's log is exactly its first {n} lines, up to the kill",
                   "charlie's log is not a clean prefix of what it printed")

        self.say("The whole journal. `gseq` counts every event; each sandbox (and the daemon) "
                 "has its own `#seq`:")
        self.tether("events")
        self.verify_journal(pre_crash, self.events())

    def verify_journal(self, pre: list[dict[str, Any]], post: list[dict[str, Any]]) -> None:
        problems: list[str] = []
        gseqs = [e["gseq"] for e in post]
        if gseqs != list(range(1, len(post) + 1)):
            problems.append(f"gseq is not 1..{len(post)}: {gseqs}")
        scopes: dict[str, list[int]] = {}
        for e in post:
            scopes.setdefault(e.get("sandbox") or "(daemon)", []).append(e["seq"])
        for scope, seqs in scopes.items():
            if seqs != list(range(1, len(seqs) + 1)):
                problems.append(f"{scope} seq is not 1..{len(seqs)}: {seqs}")
        if post[:len(pre)] != pre:
            problems.append("events written before the crash changed after it")
        spans = ", ".join(f"{s}#1..{len(v)}" for s, v in scopes.items())
        self.check(not problems,
                   f"journal: gseq 1..{len(post)} and {spans}, no gap, no duplicate; the "
                   f"{len(pre)} events from before the kill -9 are unchanged and numbering "
                   f"continued at {len(pre) + 1}",
                   "journal broken: " + "; ".join(problems))

    # ------------------------------------------------------------ the agent chapter
    def agent_log(self) -> list[dict[str, Any]]:
        path = self.work / "scribe.log"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def agent_events(self, kind: str) -> list[dict[str, Any]]:
        return [x for x in self.agent_log() if x["event"] == kind]

    def lineage(self, ident: str) -> dict[str, Any]:
        rows: dict[str, dict[str, Any]] = {
            r["id"]: r for r in self.tether_json("lineage", "ls", "--all")}
        return rows.get(ident, {})

    def go(self, *turns: int) -> None:
        names = [f"go.{n}" for n in turns]
        self.show_cmd("touch " + " ".join(names))
        for name in names:
            (self.work / name).touch()

    def agent(self) -> None:
        self.chapter(
            "An agent dies and comes back from its last turn",
            "An agent session is a command plus a lineage: a stable id that outlives any one "
            "process. At the end of every turn the agent reports its context %, usage and "
            "messages, and tether makes a drain snapshot of the conversation durable before "
            "it answers. Our agent is the repository's tests/agents/scripted_agent.py (no "
            "model), copied here: it runs sandboxed, and sees its working directory, not "
            "the checkout. It waits for a file go.<n> before turn n, and logs what it does.")
        shutil.copy(SCRIPTED_AGENT, self.work / "scripted_agent.py")
        self.show_cmd(f"cp {SCRIPTED_AGENT.relative_to(REPO)} .")
        argv = ["run", "--agent", "generic", "--name", "scribe", "-d", "--", "python",
                "scripted_agent.py", "--pcts", "10,20,30,40", "--wait-file", "go", "--log",
                "scribe.log"]
        self.show_cmd("tether " + shlex.join(argv))
        real = [*argv[:argv.index("python")], sys.executable,
                *argv[argv.index("python") + 1:]]
        # stdout is the exec's id alone (a script's `x=$(tether run -d …)`); the lineage
        # is named on stderr, and in the exec's record.
        out = self.tether(*real, show=False).stdout.decode().split()
        self.show_out(" ".join(out).encode())
        if len(out) != 1:
            raise Abort(f"unexpected output from `tether run --agent`: {out}")
        first_exec = out[0]
        row = next((x for x in self.tether_json("ps") if x["id"] == first_exec), None)
        lin = str(((row or {}).get("agent") or {}).get("lineage") or "")
        if not lin:
            raise Abort(f"`tether ps` does not show exec {first_exec} as an agent's: {row}")
        self.ids["scribe"] = first_exec
        self.go(1, 2)
        self.wait_until(lambda: len(self.agent_events("turn")) >= 2, 15,
                        "the agent's first two turns")
        self.say("Two turns done. `tether ps` shows the agent columns: lineage, lifecycle, "
                 "heartbeat, context %, turns, revivals.")
        self.tether("ps")
        row = next((x for x in self.tether_json("ps") if x["id"] == first_exec), None)
        a = (row or {}).get("agent") or {}
        self.check(a.get("lineage") == lin and a.get("lifecycle") == "HEALTHY"
                   and a.get("turns") == 2 and a.get("context_pct") == 20,
                   f"scribe is lineage {lin}: HEALTHY, 2 turns, 20% context",
                   f"`tether ps` shows scribe as {a}")
        self.tether("lineage", "ls")
        snap = snapshot.read(self.home / "drain" / f"{lin}.json")  # base + appended turns
        self.check(snap["turn"] == 2 and len(snap["messages"]) == 4,
                   f"drain/{lin}.json (and the turns appended to it) holds turn 2 and its "
                   "4 messages",
                   f"the drain snapshot holds turn {snap['turn']}, "
                   f"{len(snap['messages'])} messages")

        child = self.handles("scribe")["child"]
        self.say(f"Now kill -9 the agent (pid {child['pid']}, from "
                 f"run/{first_exec}.handles.json), in the middle of its work.")
        self.show_cmd(f"kill -9 {child['pid']}")
        t_kill = time.monotonic()
        os.kill(child["pid"], signal.SIGKILL)
        self.wait_until(lambda: not alive(child["pid"], child["start_time"]), 5,
                        "the agent to die")

        def revived() -> bool:
            rec = self.lineage(lin)
            return rec.get("attempt") == 2 and rec.get("status") == "ACTIVE" and \
                any(x["attempt"] == "2" for x in self.agent_events("start"))

        self.wait_until(revived, 20, "the agent's revival")
        self.say(f"{time.monotonic() - t_kill:.1f}s later, attempt 2 of the same lineage "
                 "runs: a new process, given the snapshot's path in TETHER_DRAIN_SNAPSHOT.")
        self.tether("lineage", "ls")
        rec = self.lineage(lin)
        self.ids["scribe#2"] = rec["exec"]
        self.check(rec["exec"] != first_exec and rec["revivals"] == 1,
                   f"same lineage {lin}, attempt 2, now exec {rec['exec']}",
                   f"after the kill: {rec}")
        self.run(["cat", "scribe.log"], "cat scribe.log")
        starts = self.agent_events("start")
        self.check([x["restored"] for x in starts] == [0, 4],
                   "attempt 2 started with the 4 messages of turns 1-2 restored",
                   f"restored messages per start: {[x['restored'] for x in starts]}")

        self.say("It picks up at turn 3, not from scratch:")
        self.go(3, 4)
        self.wait_until(lambda: bool(self.agent_events("done")), 15, "the agent to finish")
        self.wait_until(lambda: self.lineage(lin).get("status") == "FINISHED", 15,
                        "the lineage to finish")
        self.tether("logs", first_exec)
        self.tether("logs", rec["exec"])
        self.tether("lineage", "ls", "-a")
        final = self.lineage(lin)
        turns = [x["turn"] for x in self.agent_events("turn")]
        self.check(turns == [1, 2, 3, 4], "turns 1, 2 by attempt 1 and 3, 4 by attempt 2",
                   f"turns taken: {turns}")
        self.check(final.get("status") == "FINISHED" and final.get("turns") == 4
                   and final.get("revivals") == 1,
                   f"lineage {lin}: FINISHED after 4 turns and 1 revival",
                   f"final lineage: {final}")
        snap = snapshot.read(self.home / "drain" / f"{lin}.json")
        self.check(snap["lineage_id"] == lin and len(snap["messages"]) == 8
                   and snap["messages"][-1] == {"role": "assistant", "content": "did 4"},
                   "the last snapshot holds the whole conversation: 8 messages, across both "
                   "attempts",
                   f"last snapshot: turn {snap.get('turn')}, {len(snap.get('messages', []))} "
                   "messages")
        x = self.execs_by_id().get(first_exec, {})
        self.check(x.get("signal") == 9, f"exec {first_exec} is on record as killed by signal 9",
                   f"exec {first_exec}: {x.get('state')} exit {x.get('exit_code')} "
                   f"signal {x.get('signal')}")

    def webhook(self) -> None:
        self.chapter(
            "A webhook received",
            "A hook sends matching events to a URL, written in the same transaction as the "
            "event, so a delivery survives a kill -9; the body is signed with a secret. "
            "Here the receiver is a small http.server on 127.0.0.1.")
        secret = self.work / "hook.secret"
        secret.write_text("demo-secret\n")
        with Receiver() as rx:
            self.tether("hook", "add", "ci", "--on", "exec.failed", "--on", "exec.finished",
                        "--nonzero", "--url", rx.url, "--secret-file", str(secret))
            self.tether("run", "--name", "flaky-test", "--", "sh", "-c", "exit 1", ok=(1,))
            self.wait_until(lambda: bool(rx.received), 15, "the webhook")
            got = rx.received[0]
            body = got.json()
            self.say(f"received: {got.headers['tether-event']} {body['event']['state']} "
                     f"of {body['exec']['name']} (exit {body['exec']['exit_code']}), "
                     f"Idempotency-Key {got.key}")
            self.check(got.signed_with(b"demo-secret"),
                       "X-Tether-Signature-256 is t=<time>,v1=<HMAC-SHA256 of time, key and body>")
            self.wait_until(lambda: self.tether_json("hook", "show", "ci")["counts"]
                            == {"COMPLETED": 1}, 10, "the delivery to be COMPLETED")
            self.tether("hook", "ls")
            self.check(True, "one delivery, COMPLETED")

    def digest(self) -> None:
        self.chapter(
            "What did my agents do?",
            "The daemon rolls finished execs up into hours, days, weeks and months. Today is "
            "not over, so its node is a DRAFT with the figures so far; it is built (COMPLETE) "
            "an hour after midnight, and a late exec would make a version 2.")
        self.tether("digest", "--build")
        today = self.tether_json("digest", "--day")
        node = today.get("node") or {}
        runs = (node.get("summary") or {}).get("runs", 0)
        self.tether("digest", "--day")
        self.check(node.get("state") == "DRAFT" and runs >= 1,
                   f"today's digest counts the {runs} runs that ended (a DRAFT: the day is open)")

    def dashboard(self) -> None:
        self.chapter(
            "A dashboard in the browser",
            "`tether web` serves the same state live on 127.0.0.1, behind a token kept 0600 "
            "in the home (traded for a session key, never a cookie): what needs you, agents "
            "and their attempts, execs with filters and paging, stdout beside stderr, a "
            "terminal — each view at its own URL.")
        proc = subprocess.Popen([*TETHER, "web", "--port", "0"], cwd=self.work, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().decode().strip()
            self.show_cmd("tether web --port 0")
            self.say(line)
            url = line.split(" ", 2)[-1]
            base, token = url.split("/?token=")
            req = urllib.request.Request(base + "/api/execs?limit=500",
                                         headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(req, timeout=10) as r:
                page = json.loads(r.read())
            self.check({x["id"] for x in page["execs"]} >= set(self.ids.values()),
                       f"the dashboard's execs view lists every exec of this story "
                       f"({page['total']} in all)")
            if os.environ.get("TETHER_DEMO_SERVE") == "1":
                self.say(f"Open {url} — serving until Ctrl-C (TETHER_DEMO_SERVE=1).")
                with contextlib.suppress(KeyboardInterrupt):
                    proc.wait()
            else:
                self.say("Run `TETHER_DEMO_SERVE=1 make demo` to keep it serving until Ctrl-C.")
        finally:
            proc.kill()
            proc.wait()
    def scheduled(self) -> None:
        self.chapter(
            "A scheduled job",
            "`tether schedule add` makes a job whose runs are ordinary execs: at cron times in a "
            "time zone (--cron '0 2 * * *' --tz Europe/Paris), or every period, as here. Each "
            "fire time is committed before its exec starts, so a daemon killed at any moment "
            "starts no run twice and loses none.")
        beats = self.work / "beats"
        self.tether("schedule", "add", "beat", "--every", "2s", "--", "sh", "-c",
                    f"date +%s >> {beats}")
        self.wait_until(lambda: sum(r["state"] == "SUCCESS" for r in self.tether_json(
            "schedule", "show", "beat")["recent"]) >= 2, 20, "two runs of the job")
        self.tether("schedule", "pause", "beat")
        self.wait_until(lambda: self.tether_json("schedule", "show", "beat")["live"] == 0, 20,
                        "the job's last run to end")  # one may have started just before
        self.tether("scheduler", "status")
        self.tether("schedule", "show", "beat")
        runs = self.tether_json("schedule", "show", "beat")["recent"]
        ok = [r for r in runs if r["state"] == "SUCCESS"]
        self.check(len(ok) >= 2 and all(r["exit_code"] == 0 for r in ok),
                   f"{len(ok)} runs, each an exec that exited 0 "
                   f"({', '.join(r['exec_id'] for r in ok)})")
        fired = [r["fire_at"] for r in runs]
        self.check(len(fired) == len(set(fired)), "one run per fire time")
        self.check(len(beats.read_text().splitlines()) == len(ok),
                   f"the command ran {len(ok)} times, once per run")
        self.tether("schedule", "rm", "beat")

    def execs_by_id(self) -> dict[str, dict[str, Any]]:
        return {x["id"]: x for x in self.tether_json("ps", "-a")}

    def stop(self) -> None:
        self.chapter(
            "Clean up",
            "Stopping the daemon never stops commands (they belong to their monitors); "
            "ours have all ended anyway.")
        pid = self.tether_json("status")["pid"]
        self.tether("daemon", "stop")
        self.wait_until(lambda: not alive(pid), 10, f"daemon {pid} to exit")
        self.check(True, f"daemon {pid} exited")
        ours = [(n, who, self.handles(n)[who]) for n in self.ids for who in ("monitor", "child")]
        self.wait_until(lambda: not any(alive(p["pid"], p["start_time"]) for _, _, p in ours),
                        10, "every monitor and command to exit")
        self.check(True, f"none of the {len(ours)} monitors and commands is left running")
        self.show_cmd(f"rm -rf {self.root}")
        shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------ safety net
    def cleanup(self) -> None:
        """Whatever happened: stop the daemon, kill what we started, remove the home."""
        if not self.root.exists():
            return
        pid = self.daemon_pid()
        if pid is not None and alive(pid):
            with contextlib.suppress(subprocess.TimeoutExpired):
                subprocess.run([*TETHER, "daemon", "stop", "--timeout", "10"], env=self.env,
                               cwd=self.root, capture_output=True, timeout=15, check=False)
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        kill_strays(self.home)
        shutil.rmtree(self.root, ignore_errors=True)

    def dump_daemon_log(self) -> None:
        log = self.home / "daemon.log"
        if log.exists():
            tail = log.read_text(errors="replace").splitlines()[-30:]
            console.print(Text("daemon.log (last lines):", style="bold"))
            console.print(Text("\n".join(tail), style="dim"), crop=False, soft_wrap=True)


def _interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main() -> int:
    signal.signal(signal.SIGTERM, _interrupted)  # e.g. a CI timeout: still clean up
    story = Story()
    console.rule(Text("tether: kill -9 the daemon, lose nothing", style="bold"))
    aborted: str | None = None
    try:
        story.tell()
    except Abort as e:
        aborted = str(e)
    except KeyboardInterrupt:
        aborted = "interrupted"
    except Exception as e:  # a bug in the story or an unexpected answer: still clean up
        console.print_exception()
        aborted = f"{type(e).__name__}: {e}"
    finally:
        if aborted or story.failures:
            story.dump_daemon_log()
        story.cleanup()
    elapsed = time.monotonic() - story.t0
    console.print()
    if aborted:
        console.print(Text(f"✘ demo aborted after {elapsed:.1f}s: {aborted}", style="bold red"))
        return 1
    if story.failures:
        console.print(Text(f"✘ {len(story.failures)} of {story.passed + len(story.failures)} "
                           f"checks failed ({elapsed:.1f}s):", style="bold red"))
        for f in story.failures:
            console.print(Text(f"  - {f}", style="red"))
        return 1
    console.print(Text(f"✔ all {story.passed} checks passed in {elapsed:.1f}s: the daemon died, "
                       "the work did not.", style="bold green"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
