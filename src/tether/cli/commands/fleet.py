"""Fleet commands: ``tether fleet init URL``, ``tether --fleet URL hosts|drain|ps`` and
``run --host`` (placement). They speak to the fleet's PostgreSQL directly
(``tether.fleet.store``); psycopg is imported only here, only with a fleet URL."""

from __future__ import annotations

import os
import uuid
from typing import Any, NamedTuple, NoReturn

import click

from tether.cli import output as out
from tether.cli.context import die


def _url(ctx: click.Context) -> str:
    url: str | None = ctx.obj.fleet
    if not url:
        die("this command needs the fleet's PostgreSQL: tether --fleet URL ... (or "
            "TETHER_FLEET_URL, or --fleet-url-file FILE)", 2)
    return url


def _given(ctx: click.Context, url: str | None) -> str:
    """A command's own URL argument (warned about when it carries a password), else the
    fleet's."""
    if url is None:
        return _url(ctx)
    from tether.fleet import url as fleet_url

    if (warning := fleet_url.warn_argv(url)) is not None:
        out.note(warning)
    return url


def _connect(url: str) -> Any:
    import psycopg

    from tether.fleet import names
    from tether.fleet import store as fs

    if (bad := names.url_error(url)) is not None:
        die(bad, 2)

    try:
        return fs.connect(url)
    except psycopg.Error as e:
        die(f"cannot reach the fleet database: {str(e).strip()}", 125,
            hint="check the URL and that PostgreSQL is up")


def _ready(url: str) -> Any:
    from tether.fleet import schema

    conn = _connect(url)
    have = schema.version(conn)
    if have == 0:
        die("the fleet database is not initialised", 1,
            hint="tether --fleet URL fleet init (with the same URL)")
    if have < schema.LATEST:
        die(f"the fleet database is at schema {have}, older than this tether's "
            f"{schema.LATEST}", 1, hint="tether --fleet URL fleet init (with the same URL)")
    return conn


@click.group()
def fleet() -> None:
    """Fleet mode: many hosts' daemons sharing one PostgreSQL."""


@fleet.command("init")
@click.argument("url", required=False)
@click.pass_context
def fleet_init(ctx: click.Context, url: str | None) -> None:
    """Create or upgrade the fleet's schema in PostgreSQL URL (safe to run again); without
    URL, the fleet's (--fleet, TETHER_FLEET_URL, --fleet-url-file)."""
    from tether.fleet import schema

    url = _given(ctx, url)
    with _connect(url) as conn:
        try:
            applied = schema.migrate(conn)
        except RuntimeError as e:
            die(str(e), 1)
        v = schema.version(conn)
    click.echo(f"fleet schema at version {v}" +
               (f" (applied {', '.join(map(str, applied))})" if applied else " (up to date)"))


def host_state(r: dict[str, Any]) -> str:
    """A host's state as ``hosts`` shows it: ACTIVE or DRAINING only while its lease is
    live. Past it the host is DOWN (stopped, or cut off) until it takes a lease again, or
    DEAD once a live host's sweep has settled its work."""
    return str(r["state"]) if r["live"] or r["state"] == "DEAD" else "DOWN"


def _ago(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size:.0f}{unit} ago"
    return f"{max(seconds, 0):.0f}s ago"


@click.command()
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
@click.pass_context
def hosts(ctx: click.Context, as_json: bool) -> None:
    """The fleet's hosts: their lease, capacity, load, version."""
    from tether.fleet import store as fs

    with _ready(_url(ctx)) as conn:
        rows = fs.hosts(conn)
    if as_json:
        out.emit_json([{**r, "shown": host_state(r)} for r in rows])
        return
    click.echo(f"{'HOST':<16} {'STATE':<9} {'LEASE':<15} {'LOAD':>9} {'TOKEN':>6}  "
               "VERSION  LABELS")
    for r in rows:
        lease = (f"{r['lease_left']:.1f}s left" if r["live"] else
                 f"expired {_ago(-r['lease_left'])}")
        labels = ",".join(f"{k}={v}" for k, v in sorted(r["labels"].items())) or "-"
        click.echo(f"{r['name']:<16} {host_state(r):<9} {lease:<15} "
                   f"{r['load']:>4}/{r['capacity']:<4} {r['token']:>6}  "
                   f"{r['version']:<8} {labels}")


@click.command()
@click.option("--now", is_flag=True, help="move its agents at once, mid-turn")
@click.argument("host")
@click.pass_context
def drain(ctx: click.Context, host: str, now: bool) -> None:
    """Place no new work on HOST and move its agents to other hosts, each after its
    current turn (--now: at once); its plain commands finish there. Undo: undrain."""
    from tether.fleet import admin

    with _ready(_url(ctx)) as conn:
        try:
            changed = admin.drain(conn, host, now=now)
        except admin.NoHost as e:
            die(str(e), 1)
    click.echo(f"host {host} draining" + (" (agents move now)" if now else "")
               if changed else f"host {host} was not ACTIVE")


@click.command()
@click.argument("host")
@click.pass_context
def undrain(ctx: click.Context, host: str) -> None:
    """Undo a drain: HOST (DRAINING) takes new work again. Agents it already handed
    over stay where they went."""
    from tether.fleet import admin

    with _ready(_url(ctx)) as conn:
        try:
            admin.undrain(conn, host)
        except admin.NoHost as e:
            die(str(e), 1)
    click.echo(f"host {host} ACTIVE")


@click.command()
@click.argument("host")
@click.pass_context
def forget(ctx: click.Context, host: str) -> None:
    """Remove HOST from the fleet: only once its lease expired and none of its work
    is live. Its ended placements keep its name."""
    from tether.fleet import admin

    with _ready(_url(ctx)) as conn:
        try:
            ended = admin.forget(conn, host)
        except admin.NoHost as e:
            die(str(e), 1)
    click.echo(f"host {host} forgotten ({ended} ended placement(s) keep its name)")


@fleet.command("rotate-token")
@click.option("--grace", type=click.FloatRange(min=0), default=300.0, show_default=True,
              help="seconds the previous token is still accepted")
@click.argument("url", required=False)
@click.pass_context
def fleet_rotate_token(ctx: click.Context, url: str | None, grace: float) -> None:
    """Make a new token for the hosts' host-to-host API (logs, events, attach across
    hosts). Hosts pick it up within a third of a lease; the old one is accepted for
    --grace seconds more, and streams already open are never cut. Without URL, the
    fleet's (--fleet, TETHER_FLEET_URL, --fleet-url-file)."""
    from tether.fleet import admin

    with _ready(_given(ctx, url)) as conn:
        try:
            admin.rotate_token(conn, grace)
        except admin.NoHost as e:
            die(str(e), 1)
    click.echo(f"fleet token rotated; the previous one is accepted for {grace:g} s more")


def shown_state(r: dict[str, Any]) -> str:
    """A placement's state as ``ps`` and ``lineage ls`` show it: a live or LOST one whose
    host has no live lease is UNREACHABLE (its command may run on there: a host's monitors
    outlive its daemon) until that host answers, or is forgotten (then LOST)."""
    if r["state"] in ("PLACED", "RUNNING") and not r.get("host_live", True):
        return "UNREACHABLE"
    if r["state"] == "LOST" and r.get("host_known") and not r.get("host_live"):
        return "UNREACHABLE"
    return str(r["state"])


def fleet_ps(ctx: click.Context, all_: bool, as_json: bool) -> None:
    """``ps`` with ``--fleet``: every placement on every host."""
    from tether.fleet import store as fs

    with _ready(_url(ctx)) as conn:
        rows = fs.work(conn, all_=all_)
    if as_json:
        out.emit_json([{**r, "shown": shown_state(r)} for r in rows])
        return
    click.echo(f"{'WORK':>6} {'NAME':<16} {'KIND':<6} {'HOST':<16} {'STATE':<11} "
               f"{'EXIT':>4} {'GEN':>3} {'LOCAL':<12} COMMAND")
    for r in rows:
        cmd = " ".join(r["argv"] or [])
        code = "-" if r["exit_code"] is None else str(r["exit_code"])
        click.echo(f"{r['id']:>6} {(r['name'] or '-')[:16]:<16} {r['kind']:<6} "
                   f"{r['host'] or '-':<16} {shown_state(r):<11} {code:>4} "
                   f"{r['generation']:>3} {r['local_id'] or '-':<12} {cmd[:60]}")


def fleet_lineages(ctx: click.Context, all_: bool, as_json: bool) -> None:
    """``lineage ls`` with ``--fleet``: the agent placements, on every host."""
    from tether.fleet import store as fs

    with _ready(_url(ctx)) as conn:
        rows = fs.work(conn, all_=all_, kind="agent")
    if as_json:
        out.emit_json([{**r, "shown": shown_state(r)} for r in rows])
        return
    click.echo(f"{'WORK':>6} {'NAME':<16} {'HOST':<16} {'STATE':<11} {'GEN':>3} "
               f"{'LINEAGE':<14} REASON")
    for r in rows:
        click.echo(f"{r['id']:>6} {(r['name'] or '-')[:16]:<16} {r['host'] or '-':<16} "
                   f"{shown_state(r):<11} {r['generation']:>3} {r['local_id'] or '-':<14} "
                   f"{(r['reason'] or '')[:70]}")


def fleet_lineage_inspect(ctx: click.Context, work_ref: str, as_json: bool) -> None:
    """``lineage inspect`` with ``--fleet``: an agent placement, and its lineage as its
    host's daemon has it (when that host answers)."""
    import json

    with _ready(_url(ctx)) as conn:
        w = _find(conn, work_ref)
        if w["kind"] != "agent":
            die(f"placement {w['id']} is a command, not an agent: "
                f"`tether --fleet URL ps -a` shows it", 1)
        at = _where(conn, w["host"], {"lineage": w["local_id"]}) if w["local_id"] else None
    lineage: Any = None
    why = "not started yet" if at is None else None
    if at is not None:
        try:
            lineage = json.loads(b"".join(_stream(at, "/v1/lineage", at.query,
                                                  "lineage is on its disk", fatal=False)))
        except _Unanswered as e:
            why = str(e)
    row = {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in w.items()}
    if as_json:
        out.emit_json({"placement": row, "lineage": lineage})
        return
    click.echo(f"placement {w['id']}  {shown_state(w)} on {w['host'] or '-'}, generation "
               f"{w['generation']}" + (f": {w['reason']}" if w["reason"] else ""))
    if lineage is not None:
        out.lineage_detail(lineage)
    else:
        click.echo(f"lineage: {why}")


def fleet_kill(ctx: click.Context, refs: tuple[str, ...], sig: str, grace: float) -> NoReturn:
    """``kill`` with ``--fleet``: ask each placement's host to stop it (a placement not
    started yet never starts; one waiting for a human is reaped)."""
    import sys

    from tether.fleet import store as fs

    status = 0
    with _ready(_url(ctx)) as conn:
        for ref in refs:
            try:
                w = _find(conn, ref, fatal=False)
                row = fs.request_kill(conn, int(w["id"]), sig, grace)
            except fs.NoHost as e:
                out.fail(str(e))
                status = 1
                continue
            click.echo(row["id"])
            if row["state"] in ("ENDED", "REAPED") and row["id"] == w["id"] \
                    and w["state"] == row["state"]:
                out.note(f"placement {row['id']} had already ended ({row['state']})")
            elif shown_state(w) == "UNREACHABLE":
                out.note(f"placement {row['id']}: host {w['host']} does not answer; it "
                         "stops it when it is back")
    sys.exit(status)


def fleet_wait(ctx: click.Context, work_ref: str) -> NoReturn:
    """``wait`` with ``--fleet``: until the placement ends; print its exit status and exit
    with it (1, and why on stderr, for one that ended without one: reaped, never
    started, or lost with its forgotten host)."""
    import sys
    import time

    from tether.fleet import store as fs

    said: set[str] = set()
    with _ready(_url(ctx)) as conn:
        ident = int(_find(conn, work_ref)["id"])
        while True:
            w = fs.get_work(conn, ident)
            if w is None:
                die(f"placement {ident} was removed while waiting", 1)
            shown = shown_state(w)
            if w["state"] in ("ENDED", "REAPED") or (w["state"] == "LOST"
                                                     and not w["host_known"]):
                break
            if shown in ("UNREACHABLE", "ASK") and shown not in said:
                said.add(shown)
                out.note(f"placement {ident} is {shown} on host {w['host']}: "
                         + ("waiting for it to answer" if shown == "UNREACHABLE" else
                            "waiting for a human (tether --fleet URL lineage resolve "
                            f"--revive/--reap {ident})"))
            time.sleep(0.5)
    code = w["exit_code"]
    if code is None:
        out.fail(f"placement {ident} {shown}: {w['reason'] or 'no exit status'}")
        code = 1
    click.echo(code)
    sys.exit(code)


def fleet_rm(ctx: click.Context, refs: tuple[str, ...]) -> NoReturn:
    """``rm`` with ``--fleet``: forget ended placements (their journal rows stay). The
    host's local record and logs of it go with that host's retention (`tether prune`)."""
    import sys

    from tether.fleet import store as fs

    status = 0
    with _ready(_url(ctx)) as conn:
        for ref in refs:
            try:
                w = _find(conn, ref, fatal=False)
                fs.remove_work(conn, int(w["id"]))
            except fs.NoHost as e:
                out.fail(str(e))
                status = 1
                continue
            click.echo(w["id"])
    sys.exit(status)


def place_run(ctx: click.Context, kind: str, params: dict[str, Any], host: str | None,
              labels: dict[str, str], revival: str) -> int:
    """``run`` with ``--fleet``: place the work on a host and print where it went; its
    WORK number."""
    from tether.fleet import store as fs

    want = None if host in (None, "auto") else host
    with _ready(_url(ctx)) as conn:
        try:
            row = fs.place(conn, kind, params, labels=labels, host=want,
                           revival=revival if kind == "agent" else "reap",
                           request_key=uuid.uuid4().hex)
        except fs.NoHost as e:
            die(str(e), 1)
    click.echo(f"{row['id']}  placed on {row['host']}")
    return int(row["id"])


def started(ctx: click.Context, ident: int, timeout: float = 60.0) -> None:
    """Wait for placement ``ident``'s host to start it (``run -t`` attaches then)."""
    import time

    from tether.fleet import store as fs

    deadline = time.monotonic() + timeout
    with _ready(_url(ctx)) as conn:
        while True:
            w = fs.get_work(conn, ident)
            if w is None or w["local_id"] or w["state"] not in ("PLACED", "RUNNING"):
                return
            if time.monotonic() > deadline:
                die(f"placement {ident} has not started on {w['host']} after "
                    f"{timeout:.0f} s", 1, hint=f"tether --fleet URL attach {ident} once it "
                    "runs (`tether --fleet URL ps` shows it)")
            time.sleep(0.2)


#: Seconds to wait for a host without a live lease to accept a connection: partitioned
#: from PostgreSQL it may still serve; down, it should not hold the command long.
GONE_CONNECT = 2.0


class Remote(NamedTuple):
    """Where a placement's (or a host's) logs and events are served, and how to ask."""

    api: str
    token: str  # the fleet's API token
    query: dict[str, str]  # names the local exec or lineage
    host: str
    live: bool  # the host holds a live lease (else: tried with a short connect timeout)


def gone(host: str, api: str, what: str) -> str:
    """The one line for a host without a live lease that does not answer either."""
    return (f"host {host} has no live lease and does not answer at {api}: its {what} "
            "until it comes back")


def _unanswered(e: OSError) -> bool:
    """Whether ``e`` means nothing answers at the address (not a refused certificate)."""
    import errno

    return isinstance(e, ConnectionError | TimeoutError) or e.errno in (
        errno.EHOSTUNREACH, errno.ENETUNREACH)


def _find(conn: Any, ref: str, *, fatal: bool = True) -> dict[str, Any]:
    """The placement ``ref`` names (its WORK number or its name); ends the command when
    there is none (``fatal=False``: raises ``NoHost`` instead, for one of many refs)."""
    from tether.fleet import store as fs

    try:
        w = fs.find_work(conn, ref)
        if w is None:
            raise fs.NoHost(f"no placement {ref if ref.isdigit() else repr(ref)} in the "
                            "fleet (a WORK number or a name: `tether --fleet URL ps -a` "
                            "lists them)")
    except fs.NoHost as e:
        if not fatal:
            raise
        die(str(e), 1)
    return w


def _remote(ctx: click.Context, work_ref: str) -> Remote:
    """Where placement ``work_ref``'s logs and events live."""
    with _ready(_url(ctx)) as conn:
        w = _find(conn, work_ref)
        if not w["local_id"] or not w["host"]:
            die(f"placement {w['id']} has not started yet (it is {w['state']} on "
                f"{w['host'] or 'no host'})", 1, hint="try again in a moment")
        key = "lineage" if w["kind"] == "agent" else "exec"
        return _where(conn, w["host"], {key: w["local_id"]})


def _where(conn: Any, host: str, query: dict[str, str]) -> Remote:
    from tether.fleet import store as fs

    try:
        end, token = fs.endpoint(conn, host), fs.secret(conn)
    except fs.NoHost as e:
        die(str(e), 1)
    return Remote(end.api, token, query, host, end.live)


class _Unanswered(Exception):
    """A host API call failed (``_stream`` with ``fatal=False``); the message says why."""


def _stream(at: Remote, path: str, query: dict[str, str], what: str, *,
            fatal: bool = True) -> Any:
    """GET ``path`` on a host's API, streamed; yields the body's chunks. An error reply
    or an unreachable host ends the command with what to do (``what``: the
    ``logs are on its disk``, for a host without a lease that does not answer), or with
    ``fatal=False`` raises ``_Unanswered`` saying it. The standard library's
    ``http.client`` (not httpx): a CLI run pays ~100 ms less of imports."""
    import http.client
    import json
    from urllib.parse import urlencode, urlsplit

    def fail(message: str, code: int, hint: str | None = None) -> NoReturn:
        if not fatal:
            raise _Unanswered(message)
        die(message, code, hint=hint)

    api, host = at.api, at.host
    u = urlsplit(api)
    conn: http.client.HTTPConnection
    wait = 10.0 if at.live else GONE_CONNECT
    try:
        if u.scheme == "https":
            import ssl

            conn = http.client.HTTPSConnection(u.hostname or "", u.port, timeout=wait,
                                               context=ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(u.hostname or "", u.port, timeout=wait)
        conn.connect()
        if conn.sock is not None:
            conn.sock.settimeout(10)
        conn.request("GET", f"{u.path.rstrip('/')}{path}?{urlencode(query)}",
                     headers={"Authorization": f"Bearer {at.token}"})
        r = conn.getresponse()
    except (OSError, http.client.HTTPException) as e:
        if not at.live and isinstance(e, OSError) and _unanswered(e):
            fail(gone(host, api, what), 1)
        fail(f"cannot reach host {host}'s fleet API at {api}: {e}", 125,
             hint="is its daemon up, and TETHER_FLEET_LISTEN/ADVERTISE reachable from here?")
    try:
        if r.status != 200:
            body = r.read()
            try:
                msg = json.loads(body)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                msg = body[:200].decode(errors="replace")
            fail(f"host {host}: {msg}", 1)
        if conn.sock is not None:
            conn.sock.settimeout(None)  # a follow waits as long as the exec runs
        while chunk := r.read1(1 << 16):
            yield chunk
    except (OSError, http.client.HTTPException) as e:
        fail(f"lost host {host}'s fleet API at {api}: {e}", 125)
    finally:
        conn.close()


def fleet_logs(ctx: click.Context, work_ref: str, *, follow: bool, stream: str | None,
               offset: int, plain: bool) -> None:
    """``logs`` with ``--fleet``: a placement's output, streamed from its host's daemon
    (both streams interleaved, framed; or the one ``stream``)."""
    from tether.cli.output import write_output

    at = _remote(ctx, work_ref)
    query = {**at.query, "offset": str(offset), "follow": "1" if follow else "0",
             "stream": stream or "all"}
    body = _stream(at, "/v1/logs", query, "logs are on its disk")
    write_output((("stdout", data) for data in body) if stream else unframe(body), plain)


#: ``/v1/logs?stream=all``: each part of the output is a frame, its stream's letter, its
#: length (4 bytes, big-endian), its bytes.
FRAME_STREAMS = {b"o": "stdout", b"e": "stderr", b"p": "pty"}


def unframe(body: Any) -> Any:
    """(stream, bytes) of each frame in ``body``'s chunks."""
    buf = b""
    for chunk in body:
        buf += chunk
        while len(buf) >= 5 and len(buf) >= 5 + int.from_bytes(buf[1:5], "big"):
            n = int.from_bytes(buf[1:5], "big")
            yield FRAME_STREAMS.get(buf[:1], "stdout"), buf[5:5 + n]
            buf = buf[5 + n:]


def fleet_events(ctx: click.Context, *, work_ref: str | None, host: str | None,
                 follow: bool, since: int, as_json: bool) -> None:
    """``events`` with ``--fleet``: the fleet journal (PostgreSQL); with ``--work`` or
    ``--host``, that host's own journal streamed from its daemon."""
    import json
    import sys
    import time

    from tether.fleet import store as fs

    if work_ref is not None or host is not None:
        if work_ref is not None:
            at = _remote(ctx, work_ref)
        else:
            assert host is not None
            with _ready(_url(ctx)) as conn:
                at = _where(conn, host, {})
        query = {**at.query, "since": str(since), "follow": "1" if follow else "0"}
        buf = b""
        try:
            for data in _stream(at, "/v1/events", query, "events are on its disk"):
                buf += data
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    _show_event(json.loads(line), at.host, as_json)
        except KeyboardInterrupt:
            pass
        return
    cursor = since
    try:
        with _ready(_url(ctx)) as conn:
            while True:
                for row in fs.journal(conn, cursor):
                    cursor = row["gseq"]
                    if as_json:
                        out.emit_json(row)
                    else:
                        data = " ".join(f"{k}={v}" for k, v in row["data"].items())
                        if row.get("local_gseq") is not None:  # relayed from its host
                            t = time.strftime("%H:%M:%S", time.localtime(row["local_at"]))
                            data = f"local={row['local_gseq']}@{t} {data}"
                        click.echo(f"{row['gseq']:>6} {row['type']:<16} "
                                   f"{row['host'] or '-':<12} work={row['work'] or '-'} {data}")
                    sys.stdout.flush()
                if not follow:
                    return
                time.sleep(0.5)
    except KeyboardInterrupt:
        pass


def _show_event(ev: dict[str, Any], host: str, as_json: bool) -> None:
    from tether.model.records import Event

    if as_json:
        out.emit_json({**ev, "host": host})
    else:
        import msgspec

        click.echo(f"{host}: {out.event_line(msgspec.convert(ev, Event))}")


def fleet_branch(branch: str, cwd: str) -> dict[str, str]:
    """``run --worktree BRANCH`` in a fleet: the host that runs the agent clones the
    repository's ``origin`` and works on BRANCH there, pushing it back as it goes, so
    the branch must travel through a remote every host reaches."""
    import subprocess

    ok = not branch.startswith("-") and subprocess.run(
        ["git", "check-ref-format", "--branch", branch], capture_output=True).returncode == 0
    if not ok or branch == ".":
        die(f"--worktree {branch!r}: in a fleet, name a branch (the worktree is made on "
            "the host that runs the agent)", 2)
    r = subprocess.run(["git", "-C", cwd, "remote", "get-url", "origin"],
                       capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        die(f"--worktree {branch}: {cwd} has no `origin` remote, so its branch cannot "
            "reach another host", 2,
            hint="git remote add origin URL (a URL every host can fetch from and push to)")
    remote = r.stdout.strip()
    if os.path.isdir(os.path.join(cwd, remote)) and not os.path.isabs(remote):
        remote = os.path.abspath(os.path.join(cwd, remote))
    return {"remote": remote, "branch": branch}


def fleet_attach(ctx: click.Context, work_ref: str, keys: bytes, read_only: bool) -> int:
    """``attach`` with ``--fleet``: a placement's session, proxied by its host."""
    from tether.cli import fleet_attach as fa

    at = _remote(ctx, work_ref)
    grant = None
    if not read_only:  # typing: prove we may write to the fleet database (fleet_http)
        import hashlib
        import secrets

        from tether.fleet import store as fs

        grant = secrets.token_hex(32)
        with _ready(_url(ctx)) as conn:
            fs.grant_attach(conn, at.host, at.query,
                            hashlib.sha256(grant.encode()).hexdigest())
    return fa.attach(at.api, at.token, at.query, what=f"placement {work_ref} on {at.host}",
                     again=f"tether --fleet URL attach {work_ref}", keys=keys,
                     read_only=read_only, grant=grant,
                     gone=None if at.live else gone(at.host, at.api, "sessions cannot be attached"))


def fleet_resolve(ctx: click.Context, work_ref: str, action: str) -> None:
    """``lineage resolve`` with ``--fleet``: answer an ASK placement (its host died)."""
    from tether.fleet import store as fs

    with _ready(_url(ctx)) as conn:
        try:
            row = fs.resolve_ask(conn, int(_find(conn, work_ref)["id"]), action)
        except fs.NoHost as e:
            die(str(e), 1)
    click.echo(f"{row['id']} {row['state']}" + (f" on {row['host']} (generation "
                                               f"{row['generation']})"
                                               if row["state"] == "PLACED" else ""))
