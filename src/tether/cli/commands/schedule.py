"""``tether schedule``: jobs whose runs are execs, at cron times or every period; and
``tether scheduler status``, the table of every job."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

import click
import msgspec

from tether.cli import output as out
from tether.cli.argvcommand import ArgvCommand
from tether.cli.context import client, die, kv
from tether.client.replies import JobView

#: Jobs per ``scheduler.status`` call after the first (the daemon's maximum).
PAGE = 5000


def _duration(value: str | None, flag: str) -> float | None:
    if value is None:
        return None
    from tether.sandbox.spec.convert import parse_duration

    seconds = parse_duration(value)
    if seconds is None or seconds < 0:
        raise click.BadParameter(f"{value!r} is not a duration like 30s, 15m, 1h or 1d",
                                 param_hint=flag)
    return seconds


def _when(job: JobView) -> str:
    spec = job.spec
    if spec.cron is not None:
        return f"cron {spec.cron} {spec.tz}"
    return f"every {_period(spec.every or 0.0)}"


def _period(seconds: float) -> str:
    """A period in the largest unit that holds it whole (``--every 15m`` is stored as
    900 s, and shown as 15m again)."""
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= n and seconds % n == 0:
            return f"{seconds / n:g}{unit}"
    return f"{seconds:g}s"


def _at(ts: float | None, tz: str | None = None) -> str:
    """A time in this machine's zone, labelled (``2026-01-05 02:00:00 CET``): a job's cron
    has a zone of its own, so an unlabelled time is ambiguous. With the job's ``tz``,
    when it is another: in that zone first (what its cron says), then in this one."""
    if not ts:
        return "-"
    import datetime as dt

    fmt = "%Y-%m-%d %H:%M:%S %Z"
    here = dt.datetime.fromtimestamp(ts).astimezone()
    if tz:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            there = here.astimezone(ZoneInfo(tz))
        except (ZoneInfoNotFoundError, ValueError):
            return here.strftime(fmt)
        if there.utcoffset() != here.utcoffset() or there.tzname() != here.tzname():
            return f"{there.strftime(fmt)} ({here.strftime(fmt)})"
    return here.strftime(fmt)


def _next(job: JobView) -> str:
    """Its next run: in its cron's zone too, when that is not this machine's."""
    return _at(job.next_fire, job.spec.tz if job.spec.cron is not None else None)


def _print(table: object) -> None:
    from rich.console import Console

    # Piped output keeps whole names instead of rich's 80-column default.
    Console(highlight=False, width=None if sys.stdout.isatty() else 240).print(table)


def _table(jobs: Iterable[JobView]) -> None:
    from rich.table import Table

    t = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("JOB", "STATUS", "SCHEDULE", "LAST RUN", "NEXT RUN", "RUNS", "ERRORS"):
        t.add_column(col, no_wrap=True)
    for j in jobs:
        status = j.state if not j.live else f"{j.state} ({j.live} live)"
        last = f"{_at(j.last_run_at)} {j.last_state or ''}".strip()
        t.add_row(j.name, status, _when(j), last,
                  _next(j) if j.state == "ACTIVE" else "-", str(j.runs),
                  str(j.errors))
    _print(t)


@click.group()
def schedule() -> None:
    """Scheduled jobs: each fire time runs once, as an ordinary exec, across crashes."""


@schedule.command("add", cls=ArgvCommand, leading=1)
@click.argument("name")
@click.option("--cron", help="five cron fields, e.g. '0 2 * * *' (in --tz)")
@click.option("--every", help="a period, e.g. 15m (counted from now)")
@click.option("--tz", default="UTC", show_default=True, help="IANA zone of --cron")
@click.option("--sandbox", default="default", show_default=True,
              help="the sandbox its runs start in")
@click.option("-e", "--env", "envs", multiple=True,
              help="KEY=VALUE (or KEY to copy); only these: the values are stored")
@click.option("--cwd", type=click.Path(file_okay=False),
              help="working directory (default: this one)")
@click.option("--timeout", help="cancel a run after this long, e.g. 30m")
@click.option("--overlap", type=click.Choice(["skip", "concurrent", "queue"]),
              default="skip", show_default=True,
              help="a fire time while a run still runs")
@click.option("--queue", "queue_max", type=click.IntRange(1, 1000), default=1,
              show_default=True, help="with --overlap queue: how many may wait")
@click.option("--max-concurrent", type=click.IntRange(1, 10000), default=None,
              help="runs at once (default 1; unbounded with --overlap concurrent)")
@click.option("--jitter", help="delay each fire time by up to this, e.g. 30s")
@click.option("--missed", type=click.Choice(["skip", "run-once"]), default="skip",
              show_default=True, help="fire times that passed while no daemon ran")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def add(ctx: click.Context, name: str, cron: str | None, every: str | None, tz: str,
        sandbox: str, envs: tuple[str, ...], cwd: str | None, timeout: str | None,
        overlap: str, queue_max: int, max_concurrent: int | None, jitter: str | None,
        missed: str, as_json: bool, argv: tuple[str, ...]) -> None:
    """Add a job: tether schedule add NAME --cron "0 2 * * *" -- CMD ARGS..."""
    if (cron is None) == (every is None):
        raise click.UsageError("give exactly one of --cron EXPR and --every DURATION")
    job = client(ctx).schedule_add(
        name, list(argv), cron=cron, every=_duration(every, "--every"), tz=tz,
        sandbox=sandbox, env=kv(envs, "env"), cwd=os.path.abspath(cwd or os.getcwd()),
        timeout=_duration(timeout, "--timeout"), overlap=overlap,  # type: ignore[arg-type]
        queue=queue_max, max_concurrent=max_concurrent,
        jitter=_duration(jitter, "--jitter"), missed=missed,  # type: ignore[arg-type]
        unconfined_ok=True)
    if as_json:
        out.emit_json(job)
    else:
        click.echo(f"{job.id} {job.name}: {_when(job)}, next run {_next(job)}")


@schedule.command("ls")
@click.option("-a", "--all", "show_all", is_flag=True, help="removed jobs too")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
@click.pass_context
def ls(ctx: click.Context, show_all: bool, as_json: bool) -> None:
    """List scheduled jobs."""
    jobs = client(ctx).schedule_list(all=show_all)
    if as_json:
        for j in jobs:
            out.emit_json(j)
    else:
        _table(jobs)


@schedule.command("show")
@click.argument("job")
@click.option("-n", "--limit", type=click.IntRange(1, 10000), default=20, show_default=True,
              help="how many recent runs")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
@click.pass_context
def show(ctx: click.Context, job: str, limit: int, as_json: bool) -> None:
    """A job and its recent runs (exec ids, exit codes, durations)."""
    d = client(ctx).schedule_show(job, limit=limit)
    if as_json:
        out.emit_json(d)
        return
    click.echo(f"{d.name} ({d.id}) {d.state}: {_when(d)} -> {' '.join(d.spec.exec.argv)}")
    click.echo(f"  overlap={d.spec.overlap} missed={d.spec.missed} runs={d.runs} "
               f"errors={d.errors} skipped={d.skipped} next={_next(d)}")
    from rich.table import Table

    t = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("RUN", "FIRE TIME", "STATE", "EXEC", "EXIT", "DURATION", "REASON"):
        t.add_column(col, no_wrap=col != "REASON")
    for r in d.recent:
        took = (f"{r.ended_at - r.started_at:.1f}s" if r.started_at and r.ended_at else "-")
        t.add_row(str(r.number or f"id {r.id}"), _at(r.fire_at), r.state, r.exec_id or "-",
                  "-" if r.exit_code is None else str(r.exit_code), took, r.reason or "")
    _print(t)


def _simple(verb: str, doc: str) -> None:
    @schedule.command(verb, help=doc)
    @click.argument("job")
    @click.pass_context
    def command(ctx: click.Context, job: str) -> None:
        c = client(ctx)
        if verb == "run-now":
            run = c.schedule_run_now(job)
            if run is None:
                die("that fire time already has a run; try again in a moment")
            name = c.schedule_show(job, limit=1).name
            named = (f" (its exec: {name}#{run.number})" if run.number and run.state ==
                     "PENDING" else "")
            click.echo(f"run {run.number or run.id} of {name}: {run.state}{named}"
                       + (f": {run.reason}" if run.state != "PENDING" else ""))
            return
        act = {"pause": c.schedule_pause, "resume": c.schedule_resume,
               "rm": c.schedule_remove}[verb]
        j = act(job)
        click.echo(f"{j.name}: {j.state}")


_simple("pause", "Stop firing (runs in progress go on); state kept across restarts.")
_simple("resume", "Fire again, from the next fire time after now.")
_simple("run-now", "One run now, under the job's overlap policy.")
_simple("rm", "Remove a job (runs in progress go on; queued ones are skipped).")


@click.group()
def scheduler() -> None:
    """The scheduler itself."""


@scheduler.command("status")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Every job: JOB, STATUS, LAST RUN, NEXT RUN, RUNS, ERRORS."""
    c = client(ctx)
    st = c.scheduler_status()
    jobs = list(st.jobs)
    while st.next is not None:  # a page at a time: the daemon never builds them all at once
        st = c.scheduler_status(limit=PAGE, after=st.next)
        jobs += st.jobs
    st = msgspec.structs.replace(st, jobs=jobs, next=None)
    if as_json:
        out.emit_json(st)
    else:
        _table(st.jobs)
