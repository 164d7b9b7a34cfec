"""``tether``: run commands under a daemon that can crash without losing them.

Exit codes: a command's own exit code for ``run``/``wait`` (128+N when killed by
signal N); 1 for a tether error (message on stderr); 2 for a usage error;
125 when the daemon cannot be reached; 126/127 when a command cannot start;
``tether daemon``: 75 when another daemon holds the home, 1 for any other startup error.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, NoReturn

import click

from tether import __version__
from tether.cli import output as out
from tether.cli.sandboxflags import create_params, sandbox_flags, wants_sandbox
from tether.client.daemonctl import resolve_home
from tether.client.errors import DaemonUnavailable, TetherError
from tether.client.sync import Client


class Ctx:
    def __init__(self, home: Path) -> None:
        self.home = home
        self._client: Client | None = None

    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self.home)
        return self._client


def _die(message: str, code: int = 1, hint: str | None = None) -> NoReturn:
    out.fail(message, hint)
    sys.exit(code)


def _kv(pairs: tuple[str, ...], what: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for p in pairs:
        if "=" not in p:
            if what == "env" and p in os.environ:
                result[p] = os.environ[p]
                continue
            raise click.BadParameter(f"{p!r} is not KEY=VALUE", param_hint=what)
        k, v = p.split("=", 1)
        result[k] = v
    return result


class TetherGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except DaemonUnavailable as e:
            _die(str(e), 125)
        except TetherError as e:
            _die(e.message, 1)


@click.group(cls=TetherGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--home", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="tether home (default: $TETHER_HOME or ~/.local/state/tether)")
@click.version_option(__version__, prog_name="tether")
@click.pass_context
def cli(ctx: click.Context, home: Path | None) -> None:
    """tether — a durable supervisor for AI coding agents and long-running commands."""
    ctx.obj = Ctx(resolve_home(home))


def _client(ctx: click.Context) -> Client:
    obj: Ctx = ctx.obj
    return obj.client()


# ---------------------------------------------------------------------- run
@cli.command(context_settings={"ignore_unknown_options": True})
@click.option("-d", "--detach", is_flag=True, help="print the exec id and return")
@click.option("--name", help="a name to address the exec by")
@click.option("--sandbox", default="default", show_default=True)
@click.option("-e", "--env", "envs", multiple=True, help="KEY=VALUE (or KEY to copy)")
@click.option("--cwd", type=click.Path(file_okay=False), help="working directory")
@click.option("--timeout", type=float, help="cancel after SEC seconds")
@click.option("--clean-env", is_flag=True, help="do not pass this shell's environment")
@click.option("-t", "--tty", "use_tty", is_flag=True, help="give the command a terminal (PTY)")
@click.option("-i", "--interactive", is_flag=True, help="keep the command's stdin open")
@click.option("--detach-keys", default=None,
              help="key sequence that detaches (default ctrl-\\; e.g. ctrl-p,ctrl-q)")
@click.option("--agent", "agent_provider", default=None,
              help="run as an agent session with this provider (generic, claude, codex); "
                   "`tether run claude ...` and `tether run codex ...` imply it")
@click.option("--no-agent", is_flag=True, help="run claude/codex as a plain command")
@click.option("--revival", type=click.Choice(["revive", "reap", "ask"]), default="revive",
              show_default=True, help="agents: what happens when the agent dies")
@click.option("--max-revivals", type=click.IntRange(0, 1000), default=3, show_default=True)
@click.option("--aging-pct", type=click.FloatRange(0, 100), default=70.0, show_default=True)
@click.option("--dying-pct", type=click.FloatRange(0, 100), default=90.0, show_default=True)
@click.option("--stale-after", type=float, default=30.0, show_default=True,
              help="agents: seconds of silence before STALE")
@click.option("--crashed-after", type=float, default=90.0, show_default=True,
              help="agents: seconds of silence before CRASHED (then killed and revived)")
@click.option("--successor", type=click.Choice(["none", "auto"]), default="none",
              show_default=True, help="agents: start a fresh session from the handoff at DEAD")
@click.option("--worktree", default=None,
              help="agents: run in git worktree BRANCH (created beside the repo) or '.'")
@click.option("--issue", default=None, help="agents: the issue this session works on")
@click.option("--force", is_flag=True, help="agents: reuse a worktree of another issue")
@sandbox_flags(for_run=True)
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def run(ctx: click.Context, /, detach: bool, name: str | None, sandbox: str, envs: tuple[str, ...],
        cwd: str | None, timeout: float | None, clean_env: bool, use_tty: bool,
        interactive: bool, detach_keys: str | None, agent_provider: str | None,
        no_agent: bool, revival: str, max_revivals: int, aging_pct: float, dying_pct: float,
        stale_after: float, crashed_after: float, successor: str, worktree: str | None,
        issue: str | None, force: bool, argv: tuple[str, ...], **flags: Any) -> None:
    """Run a command under the daemon: tether run [-d] [-it] -- CMD ARGS...

    `tether run claude ...`, `tether run codex ...` and `--agent NAME` start an agent
    session: a lineage that is revived from its last turn if the agent dies.

    Sandbox flags (--runtime, --image, --workspace, --mount, --network, --memory,
    --cpus, --pids, --spec FILE, --set) run it in a new sandbox of its own, deleted
    when the command ends unless --keep-sandbox (an agent's is always kept: it is
    revived there).
    """
    from tether.agent.providers import for_command
    from tether.cli.terminal import terminal_size

    keys = _detach_keys(detach_keys)
    c = _client(ctx)
    env = {} if clean_env else dict(os.environ)
    env.update(_kv(envs, "env"))
    workdir = os.path.abspath(cwd) if cwd else os.getcwd()
    size = terminal_size(sys.stdin.fileno()) if use_tty else None
    interrupts = _Interrupts() if not detach and not use_tty else None
    auto = for_command(argv[0]) if not no_agent else None
    provider = agent_provider or (auto.name if auto is not None else None)
    made: str | None = None
    if wants_sandbox(flags):
        ephemeral = provider is None and not flags.get("keep_sandbox")
        params = create_params(sandbox if sandbox != "default"
                               else f"run-{uuid.uuid4().hex[:8]}", flags)
        params["ephemeral"] = ephemeral
        try:
            made = sandbox = c._call("sandbox.create", params)["id"]
        except TetherError as e:
            _die(e.message, 2 if e.code in ("INVALID_SPEC", "INVALID_PARAMS") else 1)
        if not ephemeral:
            out.note(f"sandbox {sandbox} created for this run (kept; `tether sandbox rm "
                     f"{sandbox}` removes it)")
    try:
        if provider is not None:
            wt_path = _prepare_worktree(worktree, workdir) if worktree else None
            lin = c._call("agent.start", {k: v for k, v in {
                "argv": list(argv), "provider": provider, "name": name, "sandbox": sandbox,
                "env": env, "cwd": wt_path or workdir, "tty": use_tty, "revival": revival,
                "max_revivals": max_revivals, "aging_pct": aging_pct, "dying_pct": dying_pct,
                "stale_after": stale_after, "crashed_after": crashed_after,
                "successor": successor, "worktree": wt_path, "issue": issue, "force": force,
                "request_key": uuid.uuid4().hex,
            }.items() if v is not None})
            if lin["exec_view"] is None:
                _die(f"agent lineage {lin['id']} did not start: {lin['reason']}", 1)
            x = lin["exec_view"]
            if detach:
                click.echo(f"{x['id']}  (lineage {lin['id']})")
                return
        else:
            x = c.exec_start(list(argv), sandbox=sandbox, env=env, cwd=workdir,
                             timeout=timeout, name=name, tty=use_tty, stdin=interactive,
                             rows=size[0] if size else None,
                             cols=size[1] if size else None)
    except TetherError as e:
        if made is not None:
            with contextlib.suppress(TetherError):
                c._call("sandbox.delete", {"sandbox": made, "grace": 1.0})
        if e.code == "START_FAILED":
            _die(e.message, 127 if "not found" in e.message else 126)
        raise
    if detach:
        click.echo(x["id"])
        return
    if use_tty:
        sys.exit(_attach_terminal(c, x["id"], keys, read_only=not interactive,
                                  replay=16 * 1024 * 1024))
    assert interrupts is not None
    if interactive:
        threading.Thread(target=_forward_stdin, args=(c.home, x["id"]), daemon=True).start()
    sys.exit(_attach_output(c, x["id"], interrupts))


def _prepare_worktree(branch: str, cwd: str) -> str:
    """``--worktree .`` uses the current directory; ``--worktree B`` creates (or reuses)
    a git worktree for branch B next to the repository: ``<repo>.worktrees/<B>``."""
    import subprocess

    if branch == ".":
        return cwd
    ok = not branch.startswith("-") and subprocess.run(
        ["git", "check-ref-format", "--branch", branch], capture_output=True).returncode == 0
    if not ok:
        _die(f"--worktree {branch!r} is not a valid git branch name", 2)
    try:
        top = subprocess.run(["git", "-C", cwd, "rev-parse", "--show-toplevel"], check=True,
                             capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        _die(f"--worktree {branch}: {cwd} is not inside a git repository", 2)
    path = os.path.join(f"{top}.worktrees", branch.replace("/", "-"))
    if os.path.isdir(path):
        return path
    exists = subprocess.run(["git", "-C", top, "rev-parse", "--verify", "--quiet",
                             f"refs/heads/{branch}"], capture_output=True).returncode == 0
    args = ["git", "-C", top, "worktree", "add", path] + ([branch] if exists
                                                         else ["-b", branch])
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        _die(f"git worktree add failed: {r.stderr.strip()}", 1)
    return path


def _detach_keys(spec: str | None) -> bytes:
    from tether.cli.terminal import DEFAULT_DETACH_KEYS, BadDetachKeys, parse_detach_keys

    try:
        return parse_detach_keys(spec or os.environ.get("TETHER_DETACH_KEYS")
                                 or DEFAULT_DETACH_KEYS)
    except BadDetachKeys as e:
        raise click.BadParameter(str(e), param_hint="--detach-keys") from None


def _forward_stdin(home: Path, exec_id: str) -> None:
    """``run -i`` without a terminal: copy our stdin to the command's, then close it."""
    with contextlib.suppress(TetherError, OSError), Client(home) as c:
        att = c.attach(exec_id, replay=0)
        while data := os.read(sys.stdin.fileno(), 65536):
            att.write(data)
        att.close_stdin()


def _attach_terminal(c: Client, ref: str, keys: bytes, *, read_only: bool = False,
                     replay: int = 64 * 1024) -> int:
    """Attach this terminal to an exec's PTY; returns the exit code for the CLI."""
    from tether.cli.terminal import copy_loop, raw_terminal, terminal_size

    in_fd, out_fd = sys.stdin.fileno(), sys.stdout.fileno()
    size = terminal_size(in_fd)
    try:
        att = c.attach(ref, read_only=read_only, rows=size[0] if size else None,
                       cols=size[1] if size else None, replay=replay)
    except TetherError as e:
        if e.code != "NOT_RUNNING":
            raise
        return _print_ended(c, ref)  # it ended before we could attach
    exec_id = att.info["exec"]
    with raw_terminal(in_fd):
        result = copy_loop(att, stdin_fd=in_fd, stdout_fd=out_fd, detach_keys=keys,
                           forward_input=not read_only)
    if result.how == "detached":
        sys.stderr.write(f"\r\ndetached from {exec_id}; re-attach with "
                         f"`tether attach {exec_id}`\n")
        return 0
    if result.how == "lost" or result.exit is None:
        sys.stderr.write(f"\r\ntether: lost the connection to {exec_id}'s monitor; "
                         f"see `tether ps -a` for what happened\n")
        return 1
    code = _exit_code({"state": "FINISHED", **result.exit})
    what = (f"killed by signal {result.exit['signal']}" if result.exit.get("signal")
            else f"exited with code {result.exit.get('exit_code')}")
    sys.stderr.write(f"\r\n[{exec_id} {what}]\n")
    return code


class _Interrupted(Exception):
    pass


class _Interrupts:
    """Counts Ctrl-C from before the exec starts, so none is lost to a race.

    While ``armed`` (blocked waiting on the daemon) a Ctrl-C also raises, so the
    wait is interrupted at once; otherwise it is only counted and acted on next.
    """

    def __init__(self) -> None:
        self.count = 0
        self.handled = 0
        self.armed = False
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.armed:
            self.armed = False
            raise _Interrupted


def _pump(home: Path, exec_id: str, stream: str, sink: Any) -> None:
    with Client(home) as c:
        for data in c.read_logs(exec_id, stream=stream, follow=True):
            sink.write(data)
            sink.flush()


def _print_ended(c: Client, ref: str) -> int:
    """An exec that ended before the attach: show its terminal output and its status."""
    x = c.exec_wait(ref, timeout=30.0)
    stream = "pty" if x["spec"].get("tty") else "stdout"
    for data in c.read_logs(x["id"], stream=stream):
        sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    code = _exit_code(x)
    what = (f"killed by signal {x['signal']}" if x.get("signal")
            else f"exited with code {x.get('exit_code')}")
    sys.stderr.write(f"\r\n[{x['id']} {what}]\n")
    return code


def _exit_code(x: dict[str, Any]) -> int:
    if x.get("exit_code") is not None:
        return int(x["exit_code"])
    if x.get("signal"):
        return 128 + int(x["signal"])
    return 1 if x["state"] == "FAILED" else 0


def _attach_output(c: Client, exec_id: str, interrupts: _Interrupts) -> int:
    """Stream both logs until the exec ends; Ctrl-C cancels it (twice: kill)."""
    threads = [threading.Thread(target=_pump, args=(c.home, exec_id, s, sink), daemon=True)
               for s, sink in (("stdout", sys.stdout.buffer), ("stderr", sys.stderr.buffer))]
    for t in threads:
        t.start()
    while True:
        if interrupts.count > interrupts.handled:
            interrupts.handled = interrupts.count
            sig = "TERM" if interrupts.handled == 1 else "KILL"
            c.close()  # an interrupted call may have left a half-read reply behind
            c.exec_cancel(exec_id, signal=sig, grace=5.0, reason="interrupted (Ctrl-C)")
        try:
            interrupts.armed = True
            x = c.exec_wait(exec_id, timeout=5.0)
            interrupts.armed = False
        except _Interrupted:
            continue
        if x["state"] in ("FINISHED", "FAILED", "CANCELLED"):
            break
    for t in threads:
        t.join(timeout=10)
    if x["state"] == "FAILED" and x.get("reason"):
        out.fail(f"exec {exec_id} failed: {x['reason']}")
    return _exit_code(x)


@cli.command()
@click.option("--detach-keys", default=None,
              help="key sequence that detaches (default ctrl-\\; e.g. ctrl-p,ctrl-q)")
@click.option("--read-only", is_flag=True, help="watch only; typed input is dropped")
@click.option("--replay", type=click.IntRange(min=0), default=64 * 1024, show_default=True,
              help="bytes of recent output to show first")
@click.argument("exec_ref")
@click.pass_context
def attach(ctx: click.Context, detach_keys: str | None, read_only: bool, replay: int,
           exec_ref: str) -> None:
    """Attach this terminal to a running exec (works while the daemon is down)."""
    keys = _detach_keys(detach_keys)
    sys.exit(_attach_terminal(_client(ctx), exec_ref, keys, read_only=read_only,
                              replay=replay))


# ---------------------------------------------------------------------- inspect
@cli.command()
@click.option("-a", "--all", "all_", is_flag=True, help="include ended execs")
@click.option("--sandbox", default=None)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def ps(ctx: click.Context, all_: bool, sandbox: str | None, as_json: bool) -> None:
    """List execs (running ones; -a for all)."""
    execs = _client(ctx).exec_list(sandbox=sandbox, all=all_)["execs"]
    if as_json:
        out.emit_json([out.exec_row(x) for x in execs])
    else:
        out.exec_table(execs)


@cli.command()
@click.option("-f", "--follow", is_flag=True, help="keep printing until the exec ends")
@click.option("--stderr", "use_stderr", is_flag=True, help="the stderr log instead of stdout")
@click.option("--offset", type=click.IntRange(min=0), default=0, help="start at this byte")
@click.option("--plain", is_flag=True, help="terminal execs: strip escape sequences")
@click.argument("exec_ref")
@click.pass_context
def logs(ctx: click.Context, follow: bool, use_stderr: bool, offset: int, plain: bool,
         exec_ref: str) -> None:
    """Print an exec's output, byte for byte (a terminal exec's raw terminal log)."""
    c = _client(ctx)
    x = c.exec_get(exec_ref)
    stream = "stderr" if use_stderr else ("pty" if x["spec"].get("tty") else "stdout")
    sink = sys.stdout.buffer
    strip = _EscapeStripper() if plain else None
    try:
        for data in c.read_logs(x["id"], stream=stream, offset=offset, follow=follow):
            sink.write(strip.feed(data) if strip else data)
            sink.flush()
        if strip:
            sink.write(strip.flush())
            sink.flush()
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


class _EscapeStripper:
    """Removes terminal escape sequences (ECMA-48: CSI, OSC, DCS/SOS/PM/APC strings, and
    the short ESC forms) and the CR of CRLF, across chunk boundaries: an incomplete
    sequence at the end of a chunk is held back until the next one (or ``flush``)."""

    _SEQ = re.compile(
        rb"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
        rb"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC, ended by BEL or ST
        rb"|\x1b[PX^_][^\x1b]*\x1b\\"  # DCS, SOS, PM, APC strings, ended by ST
        rb"|\x1b[ -/]*[0-OQ-WYZ\\`-~]"  # short forms: ESC 7, ESC c, ESC ( B, ...
        rb"|\r(?=\n)")
    # What an unfinished sequence looks like at the very end of a chunk.
    _PARTIAL = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*\x1b?|[PX^_][^\x1b]*\x1b?"
                          rb"|[ -/]*)\Z")
    _HOLD = 64 * 1024  # longest incomplete sequence held back

    def __init__(self) -> None:
        self.tail = b""

    def feed(self, data: bytes) -> bytes:
        data = self.tail + data
        self.tail = b""
        i = 0
        while (pos := data.find(b"\x1b", i)) >= 0:
            m = self._SEQ.match(data, pos)
            if m is not None:
                i = m.end()
            elif len(data) - pos < self._HOLD and self._PARTIAL.match(data, pos):
                data, self.tail = data[:pos], data[pos:]  # finish it with the next chunk
                break
            else:
                i = pos + 1  # a stray ESC: leave it
        if not self.tail and data.endswith(b"\r"):
            data, self.tail = data[:-1], b"\r"  # maybe the CR of a CRLF
        return self._SEQ.sub(b"", data)

    def flush(self) -> bytes:
        rest, self.tail = self.tail, b""
        return self._SEQ.sub(b"", rest)


@cli.command()
@click.argument("exec_ref")
@click.pass_context
def wait(ctx: click.Context, exec_ref: str) -> None:
    """Wait for an exec to end; print its exit code and exit with it."""
    c = _client(ctx)
    while True:
        x = c.exec_wait(exec_ref, timeout=30.0)
        if x["state"] in ("FINISHED", "FAILED", "CANCELLED"):
            break
    code = _exit_code(x)
    click.echo(code)
    sys.exit(code)


@cli.command()
@click.option("-s", "--signal", "sig", default="TERM", show_default=True,
              help="first signal (name or number)")
@click.option("--grace", type=float, default=5.0, show_default=True,
              help="seconds before SIGKILL")
@click.argument("exec_refs", nargs=-1, required=True)
@click.pass_context
def kill(ctx: click.Context, sig: str, grace: float, exec_refs: tuple[str, ...]) -> None:
    """Cancel execs: SIGNAL to the process group, then SIGKILL after GRACE."""
    c = _client(ctx)
    status = 0
    for ref in exec_refs:
        try:
            x = c.exec_cancel(ref, signal=sig, grace=grace, reason="tether kill")
            click.echo(x["id"])
        except TetherError as e:
            out.fail(e.message)
            status = 1
    sys.exit(status)


@cli.command()
@click.option("-f", "--follow", is_flag=True)
@click.option("--since", type=click.IntRange(min=0), default=0,
              help="cursor: global seq, or the sandbox's seq with --sandbox")
@click.option("--sandbox", default=None)
@click.option("--json", "as_json", is_flag=True, help="one JSON object per line")
@click.pass_context
def events(ctx: click.Context, follow: bool, since: int, sandbox: str | None,
           as_json: bool) -> None:
    """Print the event journal (resumable with --since)."""
    c = _client(ctx)

    def show(ev: dict[str, Any]) -> None:
        if as_json:
            out.emit_json(ev)
        else:
            click.echo(out.event_line(ev))
        sys.stdout.flush()

    try:
        if follow:
            for ev in c.subscribe(since=since, sandbox=sandbox):
                show(ev)
        else:
            cursor = since
            while True:
                page = c.events_list(since=cursor, sandbox=sandbox, limit=1000)
                for ev in page["events"]:
                    show(ev)
                if len(page["events"]) < 1000:
                    break
                cursor = page["next"]
    except KeyboardInterrupt:
        pass


# ---------------------------------------------------------------------- sandboxes
@cli.group()
def sandbox() -> None:
    """Create and manage sandboxes."""


@sandbox.command("create")
@sandbox_flags(for_run=False)
@click.option("-e", "--env", "envs", multiple=True, help="KEY=VALUE (or KEY to copy)")
@click.argument("name")
@click.pass_context
def sandbox_create(ctx: click.Context, /, envs: tuple[str, ...], name: str,
                   **flags: Any) -> None:
    """Create a sandbox, from flags or from a spec file (-f spec.yaml --set k=v)."""
    c = _client(ctx)
    try:
        sb = c._call("sandbox.create", create_params(name, flags, _kv(envs, "env")))
    except TetherError as e:
        _die(e.message, 2 if e.code in ("INVALID_SPEC", "INVALID_PARAMS") else 1)
    click.echo(sb["id"])
    reason = sb.get("reason") or ""
    if "fell back" in reason:
        out.fail(reason)


@sandbox.command("ls")
@click.option("-a", "--all", "all_", is_flag=True, help="include deleted sandboxes")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def sandbox_ls(ctx: click.Context, all_: bool, as_json: bool) -> None:
    """List sandboxes."""
    sbs = _client(ctx).sandbox_list(all=all_)["sandboxes"]
    if as_json:
        out.emit_json(sbs)
    else:
        out.sandbox_table(sbs)


@sandbox.command("inspect")
@click.argument("ref")
@click.pass_context
def sandbox_inspect(ctx: click.Context, ref: str) -> None:
    """Show a sandbox as JSON."""
    out.emit_json(_client(ctx).sandbox_get(ref))


@sandbox.command("stop")
@click.option("--grace", type=float, default=5.0, show_default=True)
@click.argument("ref")
@click.pass_context
def sandbox_stop(ctx: click.Context, grace: float, ref: str) -> None:
    """Stop a sandbox (cancels its execs)."""
    click.echo(_client(ctx).sandbox_stop(ref, grace=grace)["state"])


@sandbox.command("start")
@click.argument("ref")
@click.pass_context
def sandbox_start(ctx: click.Context, ref: str) -> None:
    """Start a stopped sandbox again."""
    click.echo(_client(ctx).sandbox_start(ref)["state"])


@sandbox.command("rm")
@click.option("--grace", type=float, default=5.0, show_default=True)
@click.option("--force", is_flag=True,
              help="docker: record it deleted even if dockerd cannot remove its containers "
                   "now (they are removed when it answers again)")
@click.argument("ref")
@click.pass_context
def sandbox_rm(ctx: click.Context, grace: float, force: bool, ref: str) -> None:
    """Delete a sandbox (cancels its execs; keeps their logs)."""
    click.echo(_client(ctx)._call("sandbox.delete", {"sandbox": ref, "grace": grace,
                                                     "force": force})["state"])


# ---------------------------------------------------------------------- agents
@cli.group()
def lineage() -> None:
    """Agent lineages: stable identities across revivals."""


@lineage.command("ls")
@click.option("-a", "--all", "all_", is_flag=True, help="include finished lineages")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def lineage_ls(ctx: click.Context, all_: bool, as_json: bool) -> None:
    """List lineages with their state."""
    rows = _client(ctx)._call("lineage.list", {"all": all_})["lineages"]
    if as_json:
        out.emit_json(rows)
    else:
        out.lineage_table(rows)


@lineage.command("inspect")
@click.argument("ref")
@click.pass_context
def lineage_inspect(ctx: click.Context, ref: str) -> None:
    """Show one lineage as JSON."""
    out.emit_json(_client(ctx)._call("lineage.get", {"lineage": ref}))


@lineage.command("resolve")
@click.option("--revive", "action", flag_value="revive", help="revive it from its snapshot")
@click.option("--reap", "action", flag_value="reap", help="discard it")
@click.argument("ref")
@click.pass_context
def lineage_resolve(ctx: click.Context, action: str | None, ref: str) -> None:
    """Decide what happens to a lineage waiting under the `ask` revival policy."""
    if action is None:
        raise click.UsageError("say --revive or --reap")
    rec = _client(ctx)._call("lineage.resolve", {"lineage": ref, "action": action})
    click.echo(f"{rec['id']} {rec['status']}" + (f" (exec {rec['exec']})"
                                                  if rec["status"] == "ACTIVE" else ""))


@cli.command()
@click.pass_context
def reap(ctx: click.Context) -> None:
    """Sweep agent sessions without signalling: settle the dead, drop stale heartbeats."""
    r = _client(ctx)._call("agent.reap", {})
    click.echo(f"swept {r['swept']} dead sessions, removed {r['heartbeat_files_removed']} "
               "stale heartbeat files")


@cli.group()
def agent() -> None:
    """Speak the agent protocol from a shell agent (uses TETHER_SESSION/TETHER_TOKEN)."""


def _session() -> Any:
    from tether.agent.session import NotAnAgent, Session

    try:
        return Session.from_env()
    except NotAnAgent as e:
        _die(str(e), 2)


@agent.command("turn")
@click.option("--context-pct", type=click.FloatRange(0, 100), default=None)
@click.option("--model", default=None)
@click.option("--input-tokens", type=click.IntRange(min=0), default=None)
@click.option("--output-tokens", type=click.IntRange(min=0), default=None)
@click.option("-m", "--message", "messages", multiple=True, help="ROLE:TEXT (repeatable)")
@click.option("--json", "as_json", is_flag=True)
def agent_turn(context_pct: float | None, model: str | None, input_tokens: int | None,
               output_tokens: int | None, messages: tuple[str, ...], as_json: bool) -> None:
    """Report a completed turn; prints the lifecycle state (and what to do)."""
    usage = {k: v for k, v in (("input_tokens", input_tokens),
                               ("output_tokens", output_tokens)) if v is not None}
    msgs = [{"role": m.split(":", 1)[0], "content": m.split(":", 1)[1] if ":" in m else ""}
            for m in messages]
    r = _session().turn(context_pct=context_pct, usage=usage or None, model=model,
                        messages=msgs)
    if as_json:
        out.emit_json(r)
    else:
        click.echo(r["lifecycle"] + (f": {r['instructions']}" if r.get("instructions") else ""))


@agent.command("heartbeat")
def agent_heartbeat() -> None:
    """Refresh this session's heartbeat."""
    click.echo(_session().heartbeat()["heartbeat"])


@agent.command("authorize")
@click.argument("tool")
def agent_authorize(tool: str) -> None:
    """Ask whether a tool call is allowed: exit 0 and 'allowed', or exit 1 and why not."""
    r = _session().authorize_tool(tool)
    click.echo(r["reason"] if r["allowed"] else f"fenced: {r['reason']}")
    sys.exit(0 if r["allowed"] else 1)


@agent.command("handoff")
@click.argument("text", required=False)
def agent_handoff(text: str | None) -> None:
    """Record a handoff for a successor (TEXT, or stdin)."""
    body = text if text is not None else sys.stdin.read()
    click.echo(_session().handoff(body)["path"])


@agent.command("hook", hidden=True)
@click.argument("provider")
@click.argument("event")
@click.argument("payload_arg", required=False)
def agent_hook(provider: str, event: str, payload_arg: str | None) -> None:
    """Called by an agent's own hooks: read the payload (stdin, or the last argument for
    agents that pass it so), answer in the agent's format."""
    import base64
    import json

    from tether.agent.providers import REGISTRY
    from tether.agent.session import NotAnAgent, Session

    try:
        s = Session.from_env()
    except NotAnAgent as e:  # never block the agent (exit 2 would deny a tool call)
        print(f"tether: hook {event} ignored: {e}", file=sys.stderr)
        sys.exit(0)
    prov = REGISTRY.get(provider)
    in_argv = prov is not None and prov.payload_in_argv
    raw = (payload_arg or "") if in_argv else sys.stdin.read()
    try:
        payload = json.loads(raw) if raw.strip() else {}
    except ValueError:
        payload = {"raw": raw}
    if not isinstance(payload, dict):
        payload = {"value": payload}
    try:
        r = s.client._call("agent.hook", {"session": s.session, "token": s.token,
                                          "provider": provider, "event": event,
                                          "payload": payload})
    except TetherError as e:
        # Never block the agent because tether is unreachable: allow, and say so.
        print(f"tether: hook {event} not delivered: {e.message}", file=sys.stderr)
        sys.exit(0)
    sys.stdout.buffer.write(base64.b64decode(r["stdout"]))
    sys.stdout.flush()
    sys.exit(int(r["exit_code"]))


# ---------------------------------------------------------------------- daemon
@cli.command()
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Show the daemon's status."""
    st = _client(ctx).status()
    if as_json:
        out.emit_json(st)
        return
    counts = st["counts"]
    execs = ", ".join(f"{k.lower()} {v}" for k, v in sorted(counts["execs"].items())) or "none"
    click.echo(f"daemon   pid {st['pid']}, {st['state']}, up {st['uptime']:.0f}s, "
               f"version {st['version']}")
    click.echo(f"home     {st['home']}")
    for name, rt in st.get("runtimes", {}).items():
        ok = rt.get("available")
        detail = rt.get("version") or ""
        if not ok and rt.get("reason"):
            detail = rt["reason"]
        mark = {True: "available", False: "unavailable", None: "not probed"}[ok]
        click.echo(f"{name:<8} {mark}" + (f" ({detail})" if detail else ""))
    click.echo(f"execs    {execs} (watched {counts['watched']})")
    click.echo(f"sandboxes {counts['sandboxes']}, clients {counts['connections']}")


@cli.command("cp")
@click.argument("src")
@click.argument("dst")
@click.pass_context
def cp(ctx: click.Context, src: str, dst: str) -> None:
    """Copy between the host and a sandbox: tether cp SANDBOX:PATH HOSTPATH, or the
    other way round. Into DST if it is a directory, else as DST (like docker cp)."""
    s_sb, s_path = _sandbox_path(src)
    d_sb, d_path = _sandbox_path(dst)
    if (s_sb is None) == (d_sb is None):
        raise click.UsageError("exactly one of SRC and DST must be SANDBOX:PATH")
    if d_sb is not None:
        params = {"sandbox": d_sb, "direction": "in", "src": os.path.abspath(src),
                  "dst": d_path}
    else:
        assert s_sb is not None
        params = {"sandbox": s_sb, "direction": "out", "src": s_path,
                  "dst": os.path.abspath(dst)}
    try:
        r = _client(ctx)._call("sandbox.copy", params)
    except TetherError as e:
        # A path that cannot be used is a bad invocation (2); the copy failing is 1.
        _die(e.message, 1 if e.code in ("COPY_FAILED", "SANDBOX_NOT_READY", "SANDBOX_NOT_FOUND",
                                         "DOCKER_UNAVAILABLE", "RUNTIME_UNAVAILABLE") else 2)
    click.echo(f"copied {r['bytes']} bytes")


def _sandbox_path(arg: str) -> tuple[str | None, str]:
    """``NAME:PATH`` names a path in a sandbox; a host path with a colon can be
    written ``./a:b`` (docker cp's rule)."""
    head, sep, tail = arg.partition(":")
    if not sep or not head or "/" in head or arg.startswith("."):
        return None, arg
    return head, tail


@cli.group(invoke_without_command=True)
@click.option("--pool", type=click.IntRange(0, 64), default=2, show_default=True,
              help="idle monitors kept ready to start execs")
@click.option("--default-runtime", type=click.Choice(["auto", "bwrap", "process"]),
              default=None, help="runtime of the default sandbox (default: "
              "$TETHER_DEFAULT_RUNTIME, else auto: bwrap when it works here)")
@click.pass_context
def daemon(ctx: click.Context, pool: int, default_runtime: str | None) -> None:
    """Run the daemon in the foreground (systemd Type=notify friendly)."""
    if ctx.invoked_subcommand is not None:
        return
    from tether.daemon.daemon import serve

    sys.exit(serve(ctx.obj.home, pool_size=pool, default_runtime=default_runtime))


@daemon.command("stop")
@click.option("--timeout", type=float, default=30.0, show_default=True)
@click.pass_context
def daemon_stop(ctx: click.Context, timeout: float) -> None:
    """Stop the daemon gracefully (SIGTERM). Running execs keep running."""
    from tether.model.layout import HomeLayout

    layout = HomeLayout(ctx.obj.home)
    pid = layout.lock_holder()
    if pid is None:
        click.echo("no daemon is running")
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        click.echo("no daemon is running")
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if layout.lock_holder() != pid:
            click.echo(f"daemon {pid} stopped")
            return
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            click.echo(f"daemon {pid} stopped")
            return
        time.sleep(0.05)
    _die(f"daemon {pid} did not stop within {timeout}s", 1)


def main() -> None:
    cli(prog_name="tether")


if __name__ == "__main__":
    main()
