"""Exec commands: ``run`` (a command, or an agent session, maybe in a sandbox of its own),
``attach``, ``ps``, ``logs``, ``wait`` and ``kill``. What only ``run`` and ``attach`` use
(the foreground, the terminal, the providers) is imported inside them: ``ps`` and
``logs`` load this module too."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import uuid
from dataclasses import replace
from typing import Any

import click

from tether.cli import output as out
from tether.cli.argvcommand import ArgvCommand
from tether.cli.context import client, die, kv
from tether.cli.runoptions import (
    AgentOptions,
    ExecOptions,
    FleetOptions,
    WorktreeOptions,
    take,
)
from tether.cli.sandboxflags import create_params, sandbox_flags, wants_sandbox
from tether.client.errors import TetherError
from tether.client.replies import ExecView
from tether.model.records import (
    AGING_PCT,
    CRASHED_AFTER,
    DYING_PCT,
    KILL_GRACE,
    MAX_REVIVALS,
    STALE_AFTER,
)


@click.command(cls=ArgvCommand)
@click.option("-d", "--detach", is_flag=True, help="print the exec id and return")
@click.option("--name", help="a name to address the exec by")
@click.option("--sandbox", default="default", show_default=True,
              help="the sandbox to run in (name or id)")
@click.option("-e", "--env", "envs", multiple=True, help="KEY=VALUE (or KEY to copy)")
@click.option("--cwd", type=click.Path(file_okay=False), help="working directory")
@click.option("--timeout", type=float, help="cancel after SEC seconds")
@click.option("--clean-env", is_flag=True, help="do not pass this shell's environment")
@click.option("-t", "--tty", "use_tty", is_flag=True, help="give the command a terminal (PTY)")
@click.option("-i", "--interactive", is_flag=True, help="keep the command's stdin open")
@click.option("--detach-keys", default=None,
              help="key sequence that detaches (default ctrl-\\; e.g. ctrl-p,ctrl-q)")
@click.option("--agent", "agent_provider", default=None,
              help="run as an agent session with this provider (claude, codex, gemini, "
                   "aider, opencode, amp, generic, or <home>/providers/NAME.toml); a "
                   "command named like one (`tether run claude ...`) implies it")
@click.option("--no-agent", is_flag=True,
              help="run an agent CLI (claude, codex, ...) as a plain command")
@click.option("--revival", type=click.Choice(["revive", "reap", "ask"]), default="revive",
              show_default=True, help="agents: what happens when the agent dies")
@click.option("--max-revivals", type=click.IntRange(0, 1000), default=MAX_REVIVALS,
              show_default=True, help="agents: revivals before the lineage is FAILED")
@click.option("--aging-pct", type=click.FloatRange(0, 100), default=AGING_PCT,
              show_default=True, help="agents: context percent at which it is AGING")
@click.option("--dying-pct", type=click.FloatRange(0, 100), default=DYING_PCT,
              show_default=True, help="agents: context percent at which it is DYING")
@click.option("--stale-after", type=float, default=STALE_AFTER, show_default=True,
              help="agents: seconds of silence before STALE")
@click.option("--crashed-after", type=float, default=CRASHED_AFTER, show_default=True,
              help="agents: seconds of silence in a turn before CRASHED (then killed and "
                   "revived; an interactive agent waiting for its user is never)")
@click.option("--successor", type=click.Choice(["none", "auto"]), default="none",
              show_default=True, help="agents: start a fresh session from the handoff at DEAD")
@click.option("--worktree", default=None,
              help="agents: run in git worktree BRANCH (created beside the repo, or the "
                   "repository's existing worktree of BRANCH or at that path) or '.'")
@click.option("--workdir", "workdir_opt", default=None,
              type=click.Path(file_okay=False, exists=True),
              help="agents: run in this existing directory or checkout as it is (no "
                   "worktree is created)")
@click.option("--commit-on-finish", is_flag=True,
              help="agents: when it finishes, commit what it left, push and run the "
                   "repository's handoff command")
@click.option("--issue", default=None, help="agents: the issue this session works on")
@click.option("--issue-id", default=None,
              help="agents: the tracker's own id of --issue (default: derived from it)")
@click.option("--force", is_flag=True, help="agents: reuse a worktree of another issue")
@click.option("--host", "fleet_host", default=None,
              help="fleet (--fleet URL): the host to run on, or auto (the freest)")
@click.option("--host-label", "fleet_labels", multiple=True,
              help="fleet: KEY=VALUE the host must carry (e.g. gpu=1; --label is the "
                   "sandbox's)")
@click.option("--budget", "budget_usd", type=click.FloatRange(min=0, min_open=True),
              default=None, help="agents: dollars this lineage may spend (see tether cost)")
@click.option("--budget-policy", type=click.Choice(["pause", "stop"]), default="pause",
              show_default=True, help="agents: at the budget, deny tool calls or stop")
@click.option("--allow-domain", "allow_domains", multiple=True, metavar="HOST",
              help="agents: a host its egress proxy lets it reach besides its provider's "
                   "API (api.example.com, *.example.com, HOST:PORT; repeatable)")
@sandbox_flags(for_run=True)
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def run(ctx: click.Context, /, argv: tuple[str, ...], **params: Any) -> None:
    """Run a command under the daemon: tether run [-d] [-it] -- CMD ARGS...

    `tether run claude ...`, `tether run codex ...` and `--agent NAME` start an agent
    session: a lineage that is revived from its last turn if the agent dies.

    Sandbox flags (--runtime, --image, --workspace, --mount, --network, --memory,
    --cpus, --pids, --spec FILE, --set) run it in a new sandbox of its own, deleted
    when the command ends unless --keep-sandbox (an agent's is always kept: it is
    revived there).
    """
    ex = take(ExecOptions, params)
    ag = take(AgentOptions, params)
    wt = take(WorktreeOptions, params)
    fleet = take(FleetOptions, params)
    flags = params  # what is left: the sandbox flags
    if wt.worktree and wt.workdir_opt:
        die("--worktree and --workdir exclude each other: --workdir runs in a directory "
            "as it is, --worktree in a git worktree of a branch", 2)
    if ex.use_tty and ex.interactive and not ex.detach and not ctx.obj.fleet \
            and not os.isatty(sys.stdin.fileno()):
        # Docker's check (`docker run -it` from a pipe), its words and exit code: the same
        # command works from a terminal, so it is not a usage error (2). Checked before
        # anything starts: the program would wait on a terminal nobody can type into.
        from tether.cli.runfast import NOT_A_TTY, NOT_A_TTY_HINT

        die(NOT_A_TTY, 1, hint=NOT_A_TTY_HINT)
    if wt.workdir_opt:  # used as it is: never created
        wt = replace(wt, worktree=os.path.abspath(wt.workdir_opt))
    if wt.issue_id is not None and not (wt.issue and wt.worktree):
        die("--issue-id needs --issue and --worktree", 2)
    auto = _auto_provider(ctx, argv[0], ex.cwd) if not ag.no_agent else None
    provider = ag.agent_provider or (auto.name if auto is not None else None)
    if ctx.obj.fleet or fleet.fleet_host or fleet.fleet_labels:
        _run_on_fleet(ctx, argv, provider, ex, ag, wt, fleet)
        return
    _run_here(ctx, argv, provider, ex, ag, wt, flags)


def _run_on_fleet(ctx: click.Context, argv: tuple[str, ...], provider: str | None,
                  ex: ExecOptions, ag: AgentOptions, wt: WorktreeOptions,
                  fleet: FleetOptions) -> None:
    """``run`` with ``--fleet``: placed on a host (attached with ``-t``)."""
    from tether.cli import foreground as fg
    from tether.cli.commands.fleet import place_run
    from tether.cli.fleet_run import uncarried

    if dropped := uncarried(ctx):
        die(f"{', '.join(dropped)}: a fleet placement does not carry "
            f"{'this option' if len(dropped) == 1 else 'these options'} to its host "
            "(it runs there in the host's default sandbox with only -e variables)", 2,
            hint="leave it out, or run on one host without --fleet")

    # Only -e variables travel: this shell's environment belongs to this machine.
    spec: dict[str, Any] = {"argv": list(argv), "env": kv(ex.envs, "env"),
                            "cwd": os.path.abspath(ex.cwd) if ex.cwd else os.getcwd()}
    if ex.use_tty:
        spec["tty"] = True  # `tether --fleet URL attach WORK` reaches its terminal
    if provider is not None:
        spec.update(provider=provider, revival=ag.revival, max_revivals=ag.max_revivals,
                    stale_after=ag.stale_after, crashed_after=ag.crashed_after, name=ex.name)
    elif ex.name is not None:
        spec["name"] = ex.name
    if wt.worktree and not wt.workdir_opt:
        from tether.cli.commands.fleet import fleet_branch

        if provider is None:
            die("--worktree is for agents: add --agent NAME", 2)
        spec["git"] = fleet_branch(wt.worktree, spec["cwd"])
    ident = place_run(ctx, "agent" if provider else "exec", spec, fleet.fleet_host,
                      kv(fleet.fleet_labels, "host-label"), ag.revival)
    if ex.use_tty and not ex.detach:  # as a local `run -it`: this terminal on its session
        from tether.cli.commands.fleet import fleet_attach, started

        keys = fg.detach_keys(ex.detach_keys)
        started(ctx, ident)
        sys.exit(fleet_attach(ctx, str(ident), keys, not ex.interactive))


def _run_here(ctx: click.Context, argv: tuple[str, ...], provider: str | None,
              ex: ExecOptions, ag: AgentOptions, wt: WorktreeOptions,
              flags: dict[str, Any]) -> None:
    """``run`` on this machine's daemon: an exec, or an agent session, perhaps in a
    sandbox of its own; followed here unless ``-d``."""
    from tether.cli import foreground as fg
    from tether.cli.terminal import terminal_size

    keys = fg.detach_keys(ex.detach_keys)
    c = client(ctx)
    env = {} if ex.clean_env else dict(os.environ)
    env.update(kv(ex.envs, "env"))
    workdir = os.path.abspath(ex.cwd) if ex.cwd else os.getcwd()
    size = terminal_size(sys.stdin.fileno()) if ex.use_tty else None
    interrupts = fg.Interrupts() if not ex.detach and not ex.use_tty else None
    if ag.budget_usd is not None and provider is None:
        die("--budget is for agents: add --agent NAME (or run claude, codex, ...)", 2)
    if ag.allow_domains and provider is None:
        die("--allow-domain is for agents (their egress proxy): add --agent NAME; a plain "
            "command in a bwrap sandbox has only its own loopback, or the host's network "
            "with --network host", 2)
    if ag.allow_domains:
        from tether.egress.policy import BadEntry, Policy

        try:
            Policy.parse(ag.allow_domains)
        except BadEntry as e:
            die(f"--allow-domain: {e}", 2)
    sandbox = ex.sandbox
    made: str | None = None
    if wants_sandbox(flags):
        ephemeral = provider is None and not flags.get("keep_sandbox")
        params = create_params(sandbox if sandbox != "default"
                               else f"run-{uuid.uuid4().hex[:8]}", flags)
        try:
            made = sandbox = c.sandbox_create(**params, ephemeral=ephemeral).id
        except TetherError as e:
            die(e.message, 2 if e.code in ("INVALID_SPEC", "INVALID_PARAMS") else 1)
        if not ephemeral:
            out.note(f"sandbox {sandbox} created for this run (kept; `tether sandbox rm "
                     f"{sandbox}` removes it)")
    tree: Worktree | None = None
    try:
        if provider is not None:
            if wt.worktree and not wt.workdir_opt:
                tree = _prepare_worktree(wt.worktree, workdir)
            wt_path = tree.path if tree is not None else wt.worktree
            lin = c.agent_start(
                list(argv), provider=provider, name=ex.name, sandbox=sandbox, env=env,
                cwd=wt_path or workdir, tty=ex.use_tty, revival=ag.revival,
                max_revivals=ag.max_revivals, aging_pct=ag.aging_pct, dying_pct=ag.dying_pct,
                stale_after=ag.stale_after, crashed_after=ag.crashed_after,
                successor=ag.successor, worktree=wt_path, issue=wt.issue,
                issue_id=wt.issue_id, force=wt.force, commit_on_finish=wt.commit_on_finish,
                budget_usd=ag.budget_usd,
                budget_policy=ag.budget_policy,  # type: ignore[arg-type]
                allow_domains=ag.allow_domains)
            if lin.exec_view is None:
                # Its program could not be started: exit as the shell (and `tether run`
                # of a plain command) would, 127 not found, 126 not executable.
                hint = tree.undo() if tree is not None else None
                die(f"agent lineage {lin.id} did not start: {lin.reason}",
                    1 if lin.exit_reason != "start_failed" else
                    127 if "not found" in (lin.reason or "") else 126, hint=hint)
            x: ExecView = lin.exec_view
            if ex.detach:  # stdout is the exec ref alone: `x=$(tether run -d -- claude)`
                out.note(f"agent lineage {lin.id}: revived as a new exec if this one dies")
                click.echo(x.id)
                return
        else:
            x = c.exec_start(list(argv), sandbox=sandbox, env=env, cwd=workdir,
                             timeout=ex.timeout, name=ex.name, tty=ex.use_tty,
                             stdin=ex.interactive, rows=size[0] if size else None,
                             cols=size[1] if size else None, unconfined_ok=True)
    except TetherError as e:
        if made is not None:
            with contextlib.suppress(TetherError):
                c.sandbox_delete(made, grace=1.0)
        hint = tree.undo() if tree is not None else None
        if e.code == "START_FAILED":
            die(e.message, 127 if "not found" in e.message else 126, hint=hint)
        if hint is not None:
            die(e.message, 1, hint=hint)
        raise
    if x.notice:
        click.echo(f"tether: {x.notice}", err=True)
    if ex.detach:
        click.echo(x.id)
        return
    if ex.use_tty:
        sys.exit(fg.attach_terminal(c, x.id, keys, read_only=not ex.interactive,
                                    replay=16 * 1024 * 1024))
    assert interrupts is not None
    if ex.interactive:
        threading.Thread(target=fg.forward_stdin, args=(c.home, x.id), daemon=True).start()
    sys.exit(fg.attach_output(c, x.id, interrupts))


def _auto_provider(ctx: click.Context, argv0: str, cwd: str | None) -> Any:
    """The provider a command is (`tether run claude …`, or one a profile of the home's
    ``providers/`` names in its ``commands``), saying what is wrong with that profile."""
    from pathlib import Path

    from tether.agent.providers import for_command, load_user, user_warnings

    refused = load_user(Path(ctx.obj.home) / "providers")
    found = for_command(argv0, os.path.abspath(cwd) if cwd else os.getcwd())
    name = os.path.basename(argv0)
    for why in refused:  # a profile meant for this command that could not be used
        if f"/{name}.toml:" in why:
            out.note(f"provider file refused, so it runs as a plain command: {why}")
    if found is not None:
        for w in user_warnings():
            if w.startswith(f"{found.name}.toml: "):
                out.note(f"provider file {w}")
    return found


def _existing_worktrees(top: str) -> dict[str, str]:
    """The repository's worktrees: path -> branch name ('' when detached)."""
    import subprocess

    r = subprocess.run(["git", "-C", top, "worktree", "list", "--porcelain"],
                       capture_output=True, text=True)
    found: dict[str, str] = {}
    path = ""
    for line in r.stdout.splitlines():
        if line.startswith("worktree "):
            path = line.removeprefix("worktree ")
            found[path] = ""
        elif line.startswith("branch refs/heads/") and path:
            found[path] = line.removeprefix("branch refs/heads/")
    return found


class Worktree:
    """The worktree ``run --worktree`` chose: made by this start (``made``; the branch
    too, ``new_branch``) or one that existed (adopted). A failed start undoes what it
    made, so a retry starts afresh from the repository's HEAD instead of adopting a
    worktree left on an old commit; an adopted one is named, with how to remove it."""

    def __init__(self, path: str, branch: str | None = None, top: str | None = None, *,
                 made: bool = False, new_branch: bool = False) -> None:
        self.path, self.branch, self.top = path, branch, top
        self.made, self.new_branch = made, new_branch

    def undo(self) -> str | None:
        """After a failed start: remove what this start made (saying so), or name the
        worktree it reused; the hint for the error, if any."""
        import subprocess

        if self.top is None or self.branch is None:
            return None
        if not self.made:
            return (f"the worktree {self.path} (branch {self.branch}, at "
                    f"{_head(self.path)}) was there before this start and was reused; if "
                    f"it is stale, remove it and start again: git -C {self.top} worktree "
                    f"remove --force {self.path}")
        r = subprocess.run(["git", "-C", self.top, "worktree", "remove", "--force",
                            self.path], capture_output=True, text=True)
        if r.returncode != 0:
            return (f"the worktree {self.path} this start made could not be removed "
                    f"({r.stderr.strip()}): git -C {self.top} worktree remove --force "
                    f"{self.path}")
        if self.new_branch:
            subprocess.run(["git", "-C", self.top, "branch", "-D", self.branch],
                           capture_output=True)
        return (f"removed the worktree {self.path}" + (f" and branch {self.branch}"
                                                        if self.new_branch else "")
                + " this start made")


def _head(path: str) -> str:
    """``<short sha> <subject>`` of the worktree's HEAD, for a message."""
    import subprocess

    r = subprocess.run(["git", "-C", path, "log", "-1", "--format=%h %s"],
                       capture_output=True, text=True)
    return r.stdout.strip() or "an unknown commit"


def _prepare_worktree(branch: str, cwd: str) -> Worktree:
    """``--worktree .`` uses the current directory; ``--worktree PATH`` adopts the
    repository's existing worktree there; ``--worktree B`` adopts the worktree that has
    branch B checked out, else creates (or reuses) ``<repo>.worktrees/<B>`` for it."""
    import subprocess

    if branch == ".":
        return Worktree(cwd)
    if os.path.isdir(branch):
        real = os.path.realpath(branch)
        top = subprocess.run(["git", "-C", real, "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True).stdout.strip()
        if top and os.path.realpath(top) == real and real in {
                os.path.realpath(p) for p in _existing_worktrees(cwd)}:
            return Worktree(real)
        die(f"--worktree {branch}: a directory, but not a worktree of the repository at "
            f"{cwd}; use --workdir {branch} to run there as it is", 2)
    ok = not branch.startswith("-") and subprocess.run(
        ["git", "check-ref-format", "--branch", branch], capture_output=True).returncode == 0
    if not ok:
        die(f"--worktree {branch!r} is not a valid git branch name", 2)
    try:
        top = subprocess.run(["git", "-C", cwd, "rev-parse", "--show-toplevel"], check=True,
                             capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        die(f"--worktree {branch}: {cwd} is not inside a git repository", 2)
    for have, checked_out in _existing_worktrees(top).items():
        if checked_out == branch:
            return Worktree(have, branch, top)  # the branch's own worktree: adopted
    path = os.path.join(f"{top}.worktrees", branch.replace("/", "-"))
    if os.path.isdir(path):
        return Worktree(path, branch, top)
    exists = subprocess.run(["git", "-C", top, "rev-parse", "--verify", "--quiet",
                             f"refs/heads/{branch}"], capture_output=True).returncode == 0
    args = ["git", "-C", top, "worktree", "add", path] + ([branch] if exists
                                                         else ["-b", branch])
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        die(f"git worktree add failed: {r.stderr.strip()}", 1)
    return Worktree(path, branch, top, made=True, new_branch=not exists)


@click.command()
@click.option("--detach-keys", default=None,
              help="key sequence that detaches (default ctrl-\\; e.g. ctrl-p,ctrl-q)")
@click.option("--read-only", is_flag=True, help="watch only; typed input is dropped")
@click.option("--replay", type=click.IntRange(min=0), default=64 * 1024, show_default=True,
              help="bytes of recent output to show first")
@click.argument("exec_ref")
@click.pass_context
def attach(ctx: click.Context, detach_keys: str | None, read_only: bool, replay: int,
           exec_ref: str) -> None:
    """Attach this terminal to a running exec (works while the daemon is down); with
    --fleet, to a placement's (WORK) session on any host, through its host."""
    from tether.cli import foreground as fg

    keys = fg.detach_keys(detach_keys)
    if ctx.obj.fleet:
        from tether.cli.commands.fleet import fleet_attach

        sys.exit(fleet_attach(ctx, exec_ref, keys, read_only))
    sys.exit(fg.attach_terminal(client(ctx), exec_ref, keys, read_only=read_only,
                                replay=replay))


@click.command()
@click.option("-a", "--all", "all_", is_flag=True, help="include ended execs")
@click.option("--sandbox", default=None, help="only this sandbox's execs")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
@click.pass_context
def ps(ctx: click.Context, all_: bool, sandbox: str | None, as_json: bool) -> None:
    """List execs (running ones; -a for all); with --fleet, every host's placements."""
    if ctx.obj.fleet:
        from tether.cli.commands.fleet import fleet_ps

        fleet_ps(ctx, all_, as_json)
        return
    c = client(ctx)
    execs = c.exec_list(sandbox=sandbox, all=all_)
    if as_json:  # ids, as ever: names are for people
        out.emit_json([out.exec_row(x) for x in execs])
    else:
        named = any(x.sandbox != "default" for x in execs)
        out.exec_table(execs, {s.id: s.name for s in c.sandbox_list(all=True) if s.name}
                       if named else None)


@click.command()
@click.option("-f", "--follow", is_flag=True, help="keep printing until the exec ends")
@click.option("--stdout", "use_stdout", is_flag=True, help="only its stdout")
@click.option("--stderr", "use_stderr", is_flag=True, help="only its stderr")
@click.option("--offset", type=click.IntRange(min=0), default=0,
              help="start at this byte of what is printed (of the one stream, with "
                   "--stdout or --stderr)")
@click.option("--plain", is_flag=True, help="terminal execs: strip escape sequences")
@click.argument("exec_ref")
@click.pass_context
def logs(ctx: click.Context, follow: bool, use_stdout: bool, use_stderr: bool, offset: int,
         plain: bool, exec_ref: str) -> None:
    """Print an exec's output, byte for byte: stdout and stderr interleaved in the order
    they were written, each to its own stream, as `docker logs` does (a terminal exec's
    raw terminal log); with --fleet, a placement's (WORK or name), streamed from the host
    that runs it."""
    only = None if use_stdout == use_stderr else "stderr" if use_stderr else "stdout"
    if ctx.obj.fleet:
        from tether.cli.commands.fleet import fleet_logs

        fleet_logs(ctx, exec_ref, follow=follow, stream=only, offset=offset, plain=plain)
        return
    c = client(ctx)
    x = c.exec_get(exec_ref)
    if only is not None and x.spec.tty:
        only = "pty" if only == "stdout" else only  # a terminal's one log is its stdout
    # The one stream asked for goes to stdout (`tether logs --stderr x | less`); both go
    # each to its own, as docker logs does.
    parts = ((("stdout", data) for data in c.read_logs(x.id, stream=only, offset=offset,
                                                        follow=follow))
             if only is not None else c.read_output(x.id, offset=offset, follow=follow))
    out.write_output(parts, plain)


@click.command()
@click.argument("exec_ref")
@click.pass_context
def wait(ctx: click.Context, exec_ref: str) -> None:
    """Wait for an exec to end; print its exit code and exit with it (with --fleet, a
    placement's: WORK or its name)."""
    from tether.cli import foreground as fg

    if ctx.obj.fleet:
        from tether.cli.commands.fleet import fleet_wait

        fleet_wait(ctx, exec_ref)
    c = client(ctx)
    while True:
        x = c.exec_wait(exec_ref, timeout=30.0)
        if x.state in ("FINISHED", "FAILED", "CANCELLED"):
            break
    code = fg.exec_exit_code(x)
    click.echo(code)
    sys.exit(code)


@click.command()
@click.option("-s", "--signal", "sig", default="TERM", show_default=True,
              help="first signal (name or number)")
@click.option("--grace", type=float, default=KILL_GRACE, show_default=True,
              help="seconds before SIGKILL")
@click.argument("exec_refs", nargs=-1, required=True)
@click.pass_context
def kill(ctx: click.Context, sig: str, grace: float, exec_refs: tuple[str, ...]) -> None:
    """Cancel execs: SIGNAL to the process group, then SIGKILL after GRACE; with --fleet,
    placements (WORK or name), by the hosts that run them."""
    if ctx.obj.fleet:
        from tether.cli.commands.fleet import fleet_kill

        fleet_kill(ctx, exec_refs, sig, grace)
    c = client(ctx)
    status = 0
    for ref in exec_refs:
        try:
            x = c.exec_cancel(ref, signal=sig, grace=grace, reason="tether kill")
            click.echo(x.id)
        except TetherError as e:
            out.fail(e.message)
            status = 1
    sys.exit(status)
