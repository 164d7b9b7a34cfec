"""The fleet's SQL: hosts and their leases, placement, orphans and the fleet journal.

Every write a host makes is fenced: it names the host's lease token and holds only
while that token is the host's current one and its lease has not expired, judged by
PostgreSQL's own clock (``now()``), so hosts' clocks never need to agree. Placement
picks a host with ``SELECT … FOR UPDATE SKIP LOCKED`` by free capacity and labels;
an orphan (work whose host lost its lease) changes hands in one conditional
transaction, so it is revived on exactly one host.

Every placement state written here is an edge of ``states.WORK_TRANSITIONS``: a
writer holding the row locked asks ``states.check``; the one-statement hot paths
(``mark_running``, ``mark_ended``) take their ``WHERE state IN (…)`` from
``states.sources``, so their SQL cannot drift from the table.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from tether.fleet import hoststates, identity, states

#: Serialises fleet journal appends, so its sequence has no gap (a bigserial would
#: leave one at every rolled-back transaction).
JOURNAL_LOCK = 0x7E7E_10C4
LIVE = tuple(sorted(states.LIVE))
_IN_LIVE = states.sql(states.LIVE)
#: What a host's own pass may move: PLACED → RUNNING, and its live work → ENDED (a
#: LOST one ends only late, through ``relay``, which checks its generation and exec).
_TO_RUNNING = states.sql(states.sources(states.RUNNING, {states.PLACED}))
_TO_ENDED = states.sql(states.sources(states.ENDED, states.LIVE))
CHANNEL = "tether_work"


class NoHost(Exception):
    """No host can take this work now (the message says why and what to do)."""


class Fenced(Exception):
    """This host's lease is gone: it must not start work or write fleet intent."""


@dataclass(frozen=True)
class Lease:
    token: int
    carried: int  # work rows kept from the previous lease (a restart within the lease)
    state: str


_LIVE_HOST = "h.state <> 'DEAD' AND h.lease_expires > now()"
_LOAD = f"(SELECT count(*) FROM work w WHERE w.host = h.name AND w.state IN {_IN_LIVE})"


def connect(url: str, *, timeout: float = 5.0) -> psycopg.Connection[dict[str, Any]]:
    """A connection in autocommit mode (each ``transaction()`` is one commit)."""
    return psycopg.connect(url, autocommit=True, row_factory=dict_row,
                           connect_timeout=max(1, int(timeout)))


def _journal(conn: Any, type_: str, *, host: str | None = None, token: int | None = None,
             work: int | None = None, origin_: tuple[str, int, float] | None = None,
             data_: dict[str, Any] | None = None, **data: Any) -> None:
    """Append one fleet journal row, gap-free (under ``JOURNAL_LOCK``). ``origin_``: a
    row relayed from a host's local journal, (its store epoch, local gseq, local time);
    ``data_``: a relayed event's data as is (its keys may be ``host`` or ``work``)."""
    epoch, local_gseq, local_at = origin_ or (None, None, None)
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (JOURNAL_LOCK,))
    conn.execute("INSERT INTO journal (gseq, host, token, work, type, data, local_epoch, "
                 "local_gseq, local_at) SELECT coalesce(max(gseq), 0) + 1, %s, %s, %s, %s, "
                 "%s, %s, %s, to_timestamp(%s) FROM journal",
                 (host, token, work, type_, json.dumps({**(data_ or {}), **data}), epoch,
                  local_gseq, local_at))


def _guard(conn: Any, host: str, token: int) -> None:
    """Raise ``Fenced`` unless ``token`` is ``host``'s live lease (inside a transaction,
    locking the host row so the lease cannot change until it commits)."""
    row = conn.execute("SELECT 1 FROM hosts h WHERE name = %s AND token = %s AND "
                       f"{_LIVE_HOST} FOR SHARE", (host, token)).fetchone()
    if row is None:
        raise Fenced(f"host {host} no longer holds lease {token}")


# ---------------------------------------------------------------------- host side
def acquire(conn: Any, name: str, *, capacity: int, labels: dict[str, str], version: str,
            home: str, ttl: float, api: str | None = None, instance: str | None = None) -> Lease:
    """Take (or take again) ``name``'s lease with a new, larger fencing token. Work of
    a lease still live (a daemon restarted within it) moves to the new token; of an
    expired one, only its plain execs not yet swept do (they never run elsewhere), its
    agents stay orphans for the others to revive. Raises ``identity.HostTaken`` while
    another daemon (``instance``) holds the name's live lease."""
    with conn.transaction():
        old = conn.execute("SELECT token, state, lease_expires > now() AS live, "
                           f"{identity.COLUMNS} FROM hosts h WHERE name = %s FOR UPDATE",
                           (name,)).fetchone()
        if instance is not None and (why := identity.taken_by(old, name, instance)):
            raise identity.HostTaken(why)
        state = "DRAINING" if old and old["state"] == "DRAINING" else "ACTIVE"
        if old is not None and not hoststates.allowed(old["state"], state, "acquire"):
            raise NoHost(f"host {name} is {old['state']} in the fleet database, a state "
                         "this tether cannot take a lease from (a newer tether's?): "
                         "upgrade tether on this host, or `tether --fleet URL forget "
                         f"{name}` once no work is placed on it")
        token = conn.execute("SELECT nextval('fleet_token') AS t").fetchone()["t"]
        conn.execute(
            "INSERT INTO hosts (name, capacity, labels, state, token, lease_expires, "
            "renewed_at, version, home, api, instance) VALUES (%s, %s, %s, %s, %s, "
            "now() + make_interval(secs => %s), now(), %s, %s, %s, %s) ON CONFLICT (name) DO "
            "UPDATE SET capacity = EXCLUDED.capacity, labels = EXCLUDED.labels, state = %s, "
            "token = EXCLUDED.token, lease_expires = EXCLUDED.lease_expires, "
            "renewed_at = now(), version = EXCLUDED.version, home = EXCLUDED.home, "
            "api = EXCLUDED.api, instance = EXCLUDED.instance",
            (name, capacity, json.dumps(labels), state, token, ttl, version, home, api,
             instance, state))
        carried = 0
        if old and old["live"]:
            carried = conn.execute(
                "UPDATE work SET token = %s, updated_at = now() WHERE host = %s AND "
                f"token = %s AND state IN {_IN_LIVE}",
                (token, name, old["token"])).rowcount
        elif old:
            # Its plain execs still live here are its own even after the lease expired
            # (an exec is never run elsewhere): they run on, and end with a real result.
            carried = conn.execute(
                "UPDATE work SET token = %s, updated_at = now() WHERE host = %s AND "
                f"kind = 'exec' AND state IN {_IN_LIVE}", (token, name)).rowcount
        _journal(conn, "host.acquired", host=name, token=token, capacity=capacity,
                 labels=labels, carried=carried, previous=old["token"] if old else None)
    return Lease(token=token, carried=carried, state=state)


def renew(conn: Any, name: str, token: int, ttl: float) -> str | None:
    """Extend the lease; its state (ACTIVE, DRAINING), or None when it is lost."""
    row = conn.execute(
        "UPDATE hosts h SET lease_expires = now() + make_interval(secs => %s), "
        f"renewed_at = now() WHERE name = %s AND token = %s AND {_LIVE_HOST} "
        "RETURNING state", (ttl, name, token)).fetchone()
    return None if row is None else str(row["state"])


def placed_for(conn: Any, name: str, token: int) -> list[dict[str, Any]]:
    return list(conn.execute(
        "SELECT id, kind, spec, generation, kill FROM work WHERE host = %s AND token = %s "
        "AND state = %s ORDER BY id", (name, token, states.PLACED)))


def running_on(conn: Any, name: str, token: int) -> list[dict[str, Any]]:
    return list(conn.execute(
        "SELECT id, kind, local_id, generation, spec, labels, kill FROM work WHERE "
        "host = %s AND token = %s AND state = %s", (name, token, states.RUNNING)))


def lost_here(conn: Any, name: str) -> list[dict[str, Any]]:
    """Plain execs of ``name`` that a sweep marked LOST while it was unreachable (they
    ran on: a host's monitors outlive its daemon and its lease). Back with a lease, the
    host reclaims those still running (``reclaim``); the end of the others reaches the
    fleet through the relay."""
    return list(conn.execute(
        "SELECT id, kind, local_id, generation, kill FROM work WHERE host = %s AND "
        f"kind = 'exec' AND state IN {states.sql({states.LOST})} AND local_id IS NOT NULL",
        (name,)))


def reclaim(conn: Any, work: int, name: str, token: int, local_id: str) -> bool:
    """LOST → RUNNING under ``token``, fenced: the host that ran plain exec ``work`` is
    back and its exec ``local_id`` still runs, so it answers for it again (``ps`` shows
    it RUNNING; a ``kill`` reaches it; its end is reported as any other's)."""
    with conn.transaction():
        _guard(conn, name, token)
        w = conn.execute("SELECT state FROM work WHERE id = %s AND host = %s AND "
                         "local_id = %s FOR UPDATE", (work, name, local_id)).fetchone()
        if w is None or w["state"] != states.LOST:
            return False
        states.check(work, w["state"], states.RUNNING)
        conn.execute("UPDATE work SET state = %s, token = %s, reason = %s, updated_at = "
                     "now() WHERE id = %s", (states.RUNNING, token,
                                             f"host {name} answered again", work))
        _journal(conn, "work.reclaimed", host=name, token=token, work=work,
                 local_id=local_id)
    return True


def mark_running(conn: Any, work: int, name: str, token: int, local_id: str) -> None:
    """PLACED → RUNNING, fenced; a row already moved on (swept, ended) is left alone."""
    with conn.transaction():
        _guard(conn, name, token)
        cur = conn.execute("UPDATE work SET state = %s, local_id = %s, updated_at = now() "
                           "WHERE id = %s AND host = %s AND token = %s AND state IN "
                           f"{_TO_RUNNING}", (states.RUNNING, local_id, work, name, token))
        if cur.rowcount:
            _journal(conn, "work.running", host=name, token=token, work=work,
                     local_id=local_id)


def mark_ended(conn: Any, work: int, name: str, token: int, *, exit_code: int | None,
               reason: str) -> None:
    """This host's live work → ENDED, fenced; a row already moved on is left alone."""
    with conn.transaction():
        _guard(conn, name, token)
        cur = conn.execute("UPDATE work SET state = %s, exit_code = %s, reason = %s, "
                           "updated_at = now() WHERE id = %s AND host = %s AND token = %s "
                           f"AND state IN {_TO_ENDED}",
                           (states.ENDED, exit_code, reason, work, name, token))
        if cur.rowcount:
            _journal(conn, "work.ended", host=name, token=token, work=work,
                     exit_code=exit_code, reason=reason)


def sweep_orphans(conn: Any, name: str, token: int, lease: float = 10.0,
                  ) -> list[dict[str, Any]]:
    """Settle the work of hosts whose lease expired (or was taken again): an exec is
    LOST; an agent is placed again on a live host (``revive``), REAPED or left to a
    human (``ask``), each at most once, whoever sweeps. Returns what changed.

    A lease that ran out while PostgreSQL itself was down is not held against its
    host until the database has been up for a whole ``lease``: no host could renew
    during the outage, and every live one renews within that time once it is back."""
    done: list[dict[str, Any]] = []
    with conn.transaction():
        _guard(conn, name, token)
        up = conn.execute("SELECT now() - pg_postmaster_start_time() > make_interval("
                          "secs => %s) AS up", (lease,)).fetchone()
        if not up["up"]:
            return done
        dead = conn.execute("UPDATE hosts SET state = 'DEAD' WHERE state = ANY(%s) AND "
                            "lease_expires <= now() RETURNING name",
                            (hoststates.sources("DEAD", "sweep"),)).fetchall()
        for row in dead:
            _journal(conn, "host.dead", host=row["name"], by=name)
        orphans = conn.execute(
            "SELECT w.id, w.state, w.kind, w.host, w.revival, w.generation, w.labels FROM "
            f"work w JOIN hosts h ON h.name = w.host WHERE w.state IN {_IN_LIVE} "
            "AND (h.lease_expires <= now() OR h.token <> w.token) "
            "ORDER BY w.id FOR UPDATE OF w SKIP LOCKED").fetchall()
        for w in orphans:
            got = _settle_orphan(conn, w, f"host {w['host']} lost its lease", by=name)
            if got is not None:
                done.append(got)
    return done


def _settle_orphan(conn: Any, w: dict[str, Any], why: str, *, by: str,
                   here: str | None = None) -> dict[str, Any] | None:
    """Settle live placement ``w`` (read ``FOR UPDATE``) whose copy runs nowhere: an exec
    is LOST; an agent is placed again on the freest live host other than its own
    (``revive``; ``here``: else on host ``here`` itself, the caller), REAPED or left to a
    human (``ask``). None when no host has room, or when ``here`` would take it while
    another host with room is only locked for a moment (the row is left as it was: tried
    again)."""
    if w["kind"] == "exec" or w["revival"] == "reap":
        state = states.LOST if w["kind"] == "exec" else states.REAPED
        states.check(w["id"], w["state"], state)
        conn.execute("UPDATE work SET state = %s, reason = %s, updated_at = now() "
                     "WHERE id = %s", (state, why, w["id"]))
        _journal(conn, f"work.{state.lower()}", host=w["host"], work=w["id"], reason=why,
                 by=by)
        return {"id": w["id"], "state": state}
    if w["revival"] == "ask":
        states.check(w["id"], w["state"], states.ASK)
        conn.execute("UPDATE work SET state = %s, reason = %s, updated_at = now() "
                     "WHERE id = %s", (states.ASK, why + ": waiting for a human", w["id"]))
        _journal(conn, "work.ask", host=w["host"], work=w["id"], reason=why, by=by)
        return {"id": w["id"], "state": states.ASK}
    target = _pick(conn, w["labels"], None, exclude=w["host"])
    if target is None and here is not None:
        if _room_elsewhere(conn, w["labels"], w["host"]):
            # Another host has room but ``_pick`` skipped its row, locked for a moment by
            # that host's own renewal or pass: try again next pass rather than keep the
            # work here (it moves away from a host that was just fenced).
            return None
        target = _room_here(conn, here, w)
    if target is None:
        return None  # no live host with room: the next sweep tries again
    _place_again(conn, w, target, why + ": revived")
    _journal(conn, "work.revived", host=target["name"], token=target["token"], work=w["id"],
             previous=w["host"], generation=w["generation"] + 1, by=by)
    conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, target["name"]))
    return {"id": w["id"], "state": states.PLACED, "host": target["name"],
            "generation": w["generation"] + 1}


def _room_elsewhere(conn: Any, labels: Any, exclude: str) -> bool:
    """Whether a live ACTIVE host other than ``exclude`` has ``labels`` and room, locked
    or not (``_pick`` skips a row another transaction holds)."""
    return _pick(conn, labels, None, exclude=exclude, lock=False) is not None


def _room_here(conn: Any, name: str, w: dict[str, Any]) -> dict[str, Any] | None:
    """Host ``name`` (the caller, whose row ``_guard`` holds) as the target of its own
    placement ``w``, when it is ACTIVE, has ``w``'s labels and room besides ``w``."""
    row: dict[str, Any] | None = conn.execute(
        f"SELECT h.name, h.token FROM hosts h WHERE h.name = %s AND h.state = 'ACTIVE' AND "
        f"h.lease_expires > now() AND h.labels @> %s::jsonb AND h.capacity > "
        f"(SELECT count(*) FROM work x WHERE x.host = h.name AND x.state IN {_IN_LIVE} "
        f"AND x.id <> %s)", (name, json.dumps(w["labels"] or {}), w["id"])).fetchone()
    return row


def revive_withdrawn(conn: Any, work: int, name: str, token: int, why: str,
                     ) -> dict[str, Any] | None:
    """This host's live agent placement ``work``, whose local lineage this host withdrew
    when it was fenced, settled as an orphan is (``_settle_orphan``: revived on the
    freest other live host, else here as its next generation; or REAPED, or ASK, by its
    revival policy). Reached when the host stalled past its fence point and took its
    lease again while PostgreSQL's still ran, carrying the row over. Fenced by
    ``token``; once: the row moves on. None when nothing changed."""
    with conn.transaction():
        _guard(conn, name, token)
        w = conn.execute(
            "SELECT id, state, kind, host, revival, generation, labels FROM work WHERE "
            f"id = %s AND host = %s AND token = %s AND kind = 'agent' AND state IN {_IN_LIVE} "
            "FOR UPDATE", (work, name, token)).fetchone()
        if w is None:
            return None
        return _settle_orphan(conn, dict(w), why, by=name, here=name)


# ---------------------------------------------------------------------- client side
def _pick(conn: Any, labels: Any, host: str | None, *, exclude: str | None = None,
          lock: bool = True) -> dict[str, Any] | None:
    """The freest live ACTIVE host with ``labels`` and room (``host``: that one only;
    never ``exclude``), its row locked; ``lock=False``: a plain read."""
    locking = f"FOR UPDATE OF h {'' if host is not None else 'SKIP LOCKED '}" if lock else ""
    row: dict[str, Any] | None = conn.execute(
        f"SELECT h.name, h.token FROM hosts h WHERE h.state = 'ACTIVE' AND "
        f"h.lease_expires > now() AND h.labels @> %s::jsonb AND "
        f"(%s::text IS NULL OR h.name = %s) AND (%s::text IS NULL OR h.name <> %s) AND "
        f"h.capacity > {_LOAD} ORDER BY h.capacity - {_LOAD} DESC, h.name "
        # A named host is waited for: its own renewal or sweep may hold its row for a
        # moment, and skipping it would answer "no such host" for a live one. Among
        # many (``auto``), a locked one is skipped for the next.
        f"{locking}LIMIT 1",
        (json.dumps(labels or {}), host, host, exclude, exclude)).fetchone()
    return row


def place(conn: Any, kind: str, spec: dict[str, Any], *, labels: dict[str, str],
          host: str | None, revival: str, request_key: str | None) -> dict[str, Any]:
    """Place work on a live host with free capacity (``host``: that one only) and
    commit it there; a retry with the same ``request_key`` returns the first row."""
    with conn.transaction():
        if request_key:
            row = conn.execute("SELECT * FROM work WHERE request_key = %s",
                               (request_key,)).fetchone()
            if row is not None:
                return dict(row)
        target = _pick(conn, labels, host)
        if target is None and host is None:
            # Every candidate may be locked for a moment by its renewal: look again.
            for _ in range(20):
                time.sleep(0.05)
                if (target := _pick(conn, labels, host)) is not None:
                    break
        if target is None:
            raise NoHost(_why_no_host(conn, labels, host))
        row = conn.execute(
            "INSERT INTO work (kind, spec, labels, want_host, revival, host, token, state, "
            "request_key) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING *",
            (kind, json.dumps(spec), json.dumps(labels), host, revival, target["name"],
             target["token"], states.INITIAL, request_key)).fetchone()
        _journal(conn, "work.placed", host=target["name"], token=target["token"],
                 work=row["id"], kind=kind)
        conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, target["name"]))
        return dict(row)


def _why_no_host(conn: Any, labels: dict[str, str], host: str | None) -> str:
    rows = hosts(conn)
    if host is not None:
        h = next((r for r in rows if r["name"] == host), None)
        if h is None:
            return f"no host named {host!r} in the fleet (`tether --fleet URL hosts` lists them)"
        if not h["live"]:
            return f"host {host} has no live lease (its daemon is down or partitioned)"
        if h["state"] != "ACTIVE":
            return f"host {host} is {h['state']}: it takes no new work"
        if h["load"] >= h["capacity"]:
            return f"host {host} is full ({h['load']}/{h['capacity']}); try --host auto"
        return f"host {host} lacks the labels {labels}"
    live = [r for r in rows if r["live"] and r["state"] == "ACTIVE"]
    if not live:
        return ("no live ACTIVE host in the fleet: start one with "
                "`tether daemon --fleet URL --host-name NAME`")
    return (f"no live host with free capacity{' and labels ' + str(labels) if labels else ''}"
            f" ({len(live)} live): wait for work to end, or add capacity")


def hosts(conn: Any) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute(
        f"SELECT h.name, h.capacity, h.labels, h.state, h.token, h.version, h.home, h.api, "
        f"{_LOAD} AS load, h.lease_expires > now() AS live, "
        f"extract(epoch FROM h.lease_expires - now())::float AS lease_left "
        f"FROM hosts h ORDER BY h.name")]


#: A placement's host as its readers see it: whether it holds a live lease, and whether
#: it is still listed at all (a forgotten host never answers again).
_HOST_SEEN = ("h.name IS NOT NULL AS host_known, coalesce(h.state <> 'DEAD' AND "
              "h.lease_expires > now(), false) AS host_live")


def work(conn: Any, *, all_: bool = False, kind: str | None = None) -> list[dict[str, Any]]:
    """Placements, oldest first: the live ones, those waiting for a human and the plain
    execs of an unreachable host (LOST while it is still listed: they may run on there);
    ``all_``: every one. ``kind``: only ``exec`` or ``agent`` placements."""
    where = [] if all_ else [f"(w.state IN {states.sql({*states.LIVE, states.ASK})} OR "
                             f"(w.state IN {states.sql({states.LOST})} AND h.name IS NOT "
                             "NULL))"]
    if kind is not None:
        where.append("w.kind = %(kind)s")
    return [dict(r) for r in conn.execute(
        "SELECT w.id, w.kind, w.host, w.state, w.generation, w.local_id, w.exit_code, "
        "w.reason, w.spec->'argv' AS argv, w.spec->>'name' AS name, w.kill IS NOT NULL "
        f"AS killing, w.created_at, w.updated_at, {_HOST_SEEN} FROM work w LEFT JOIN "
        f"hosts h ON h.name = w.host {'WHERE ' + ' AND '.join(where) if where else ''} "
        "ORDER BY w.id", {"kind": kind})]


def get_work(conn: Any, ident: int) -> dict[str, Any] | None:
    row = conn.execute(f"SELECT w.*, {_HOST_SEEN} FROM work w LEFT JOIN hosts h ON "
                       "h.name = w.host WHERE w.id = %s", (ident,)).fetchone()
    return dict(row) if row else None


def find_work(conn: Any, ref: str) -> dict[str, Any] | None:
    """The placement ``ref`` names: its WORK number, or the name it was given (``run
    --name``): the one of that name still live (or waiting, or unreachable), else the
    newest. Raises ``NoHost`` when several live ones share the name."""
    if ref.isdigit():
        return get_work(conn, int(ref))
    rows = [dict(r) for r in conn.execute(
        f"SELECT w.*, {_HOST_SEEN} FROM work w LEFT JOIN hosts h ON h.name = w.host "
        "WHERE w.spec->>'name' = %s ORDER BY w.id DESC", (ref,))]
    live = [r for r in rows if r["state"] in {*states.LIVE, states.ASK} or
            (r["state"] == states.LOST and r["host_known"])]
    if len(live) > 1:
        raise NoHost(f"{len(live)} placements are named {ref!r} (WORK "
                     f"{', '.join(str(r['id']) for r in reversed(live))}): name one by its "
                     "WORK number")
    found = live or rows
    return found[0] if found else None


def request_kill(conn: Any, work: int, signal: str, grace: float) -> dict[str, Any]:
    """``tether --fleet URL kill``: record the kill on placement ``work`` for its host to
    carry out (it signals the local exec or the agent's attempt, which then ends the
    placement; a placement not started yet is never started), and wake that host. One
    waiting for a human (ASK) is reaped at once; an ended one is left as it is.
    Returns the row as it now is."""
    with conn.transaction():
        w = conn.execute("SELECT id, state, host, kind, exit_code, reason FROM work "
                         "WHERE id = %s FOR UPDATE", (work,)).fetchone()
        if w is None:
            raise NoHost(f"no placement {work} in the fleet")
        w = dict(w)
        if w["state"] == states.ASK:
            states.check(work, w["state"], states.REAPED)
            conn.execute("UPDATE work SET state = %s, reason = 'killed by a human', "
                         "updated_at = now() WHERE id = %s", (states.REAPED, work))
            _journal(conn, "work.reaped", host=w["host"], work=work, by="kill")
            return {**w, "state": states.REAPED, "reason": "killed by a human"}
        if w["state"] in states.LIVE or w["state"] == states.LOST:
            conn.execute("UPDATE work SET kill = %s, updated_at = now() WHERE id = %s",
                         (json.dumps({"signal": signal, "grace": grace}), work))
            _journal(conn, "work.kill", host=w["host"], work=work, signal=signal,
                     grace=grace)
            conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, w["host"]))
        return w


def remove_work(conn: Any, work: int) -> dict[str, Any]:
    """``tether --fleet URL rm``: delete an ended placement's row (its journal rows stay,
    as history). Refused (``NoHost``, saying what to do) while it may still run: live,
    waiting for a human, or LOST on a host still listed (it may answer again)."""
    with conn.transaction():
        w = conn.execute(f"SELECT w.id, w.state, w.host, {_HOST_SEEN} FROM work w LEFT "
                         "JOIN hosts h ON h.name = w.host WHERE w.id = %s FOR UPDATE OF w",
                         (work,)).fetchone()
        if w is None:
            raise NoHost(f"no placement {work} in the fleet")
        if w["state"] in {*states.LIVE, states.ASK}:
            raise NoHost(f"placement {work} is {w['state']} on {w['host']}: stop it first "
                         f"(tether --fleet URL kill {work})")
        if w["state"] == states.LOST and w["host_known"]:
            raise NoHost(f"placement {work} is unreachable on host {w['host']}, where it "
                         "may still run: remove it once its host answers (its end is then "
                         f"known), or after `tether --fleet URL forget {w['host']}`")
        conn.execute("DELETE FROM work WHERE id = %s", (work,))
        _journal(conn, "work.removed", host=w["host"], work=work, state=w["state"])
        return dict(w)


def journal(conn: Any, after: int = 0) -> list[dict[str, Any]]:
    """The fleet journal after ``after``; a row relayed from a host's local journal
    (``fleet.relay``) also has its ``local_gseq`` and ``local_at`` (seconds)."""
    return [dict(r) for r in conn.execute(
        "SELECT gseq, host, token, work, type, data, local_gseq, "
        "extract(epoch FROM local_at)::float AS local_at FROM journal WHERE gseq > %s "
        "ORDER BY gseq", (after,))]


def secret(conn: Any) -> str:
    """The fleet's token: hosts accept a host-to-host API call only with it."""
    row = conn.execute("SELECT token FROM fleet_secret WHERE id = 1").fetchone()
    if row is None:
        raise NoHost("the fleet database has no API token: run `tether fleet init URL` "
                     "with this tether to upgrade its schema")
    return str(row["token"])


#: The fleet journal row a caller writes to type into a session on a host
#: (``/v1/attach`` without ``ro=1``): its proof that it may write to the fleet database.
ATTACH_GRANT = "attach.grant"
#: Seconds a grant may be used after it was written (once).
GRANT_SECONDS = 60.0
#: A grant is looked for among the journal's newest rows only (its primary key).
GRANT_WINDOW = 100_000


def grant_attach(conn: Any, host: str, target: dict[str, str], nonce_sha256: str) -> None:
    """Journal that the caller will type into ``target`` (``{"exec"|"lineage": id}``) on
    ``host``: only whoever may write to the fleet database can, so the host lets the
    WebSocket that shows the nonce whose SHA-256 this is write (fleet_http)."""
    with conn.transaction():
        _journal(conn, ATTACH_GRANT, host=host, target=target, nonce_sha256=nonce_sha256)


def attach_grant(conn: Any, host: str, nonce_sha256: str,
                 within: float = GRANT_SECONDS) -> dict[str, Any] | None:
    """The grant for ``host`` with that nonce digest written in the last ``within`` seconds
    (PostgreSQL's clock): ``{"gseq", "target"}``, or None."""
    row = conn.execute(
        "SELECT gseq, data->'target' AS target FROM journal WHERE gseq > "
        "(SELECT coalesce(max(gseq), 0) FROM journal) - %s AND type = %s AND host = %s "
        "AND data->>'nonce_sha256' = %s AND at > now() - make_interval(secs => %s)",
        (GRANT_WINDOW, ATTACH_GRANT, host, nonce_sha256, within)).fetchone()
    return None if row is None else {"gseq": int(row["gseq"]), "target": row["target"]}


@dataclass(frozen=True)
class Endpoint:
    """Where a host's daemon serves the host-to-host API, as it last recorded it."""

    api: str
    #: It holds a live lease. Without one its daemon may still serve (partitioned from
    #: PostgreSQL, not down): worth a try, with a short connect timeout.
    live: bool


def endpoint(conn: Any, host: str) -> Endpoint:
    """``host``'s API (raises ``NoHost`` saying why it has none to try)."""
    row = conn.execute("SELECT api, state, lease_expires > now() AS live FROM hosts "
                       "WHERE name = %s", (host,)).fetchone()
    if row is None:
        raise NoHost(f"no host named {host!r} in the fleet (forgotten, or never joined): "
                     "`tether --fleet URL hosts` lists them")
    if not row["api"]:
        raise NoHost(f"host {host} advertises no API (its tether predates it): upgrade it")
    return Endpoint(str(row["api"]), bool(row["live"]) and row["state"] != "DEAD")


def drain_now(conn: Any, name: str) -> bool:
    """Whether ``name``'s drain moves its agents at once (``drain --now``)."""
    row = conn.execute("SELECT drain_now FROM hosts WHERE name = %s", (name,)).fetchone()
    return bool(row and row["drain_now"])


def room(conn: Any, labels: Any, exclude: str) -> bool:
    """Whether a live ACTIVE host other than ``exclude`` could take work with ``labels``
    now (a hint: ``hand_over`` decides)."""
    return _pick(conn, labels, None, exclude=exclude) is not None


def hand_over(conn: Any, work: int, name: str, token: int) -> dict[str, Any] | None:
    """A draining host gives placement ``work`` (whose local copy it already stopped) to
    the freest other live host, as its next generation; None when none has room (the
    row stays this host's: try again later). Fenced like every host write."""
    with conn.transaction():
        _guard(conn, name, token)
        w = conn.execute("SELECT id, state, labels, generation FROM work WHERE id = %s AND "
                         f"host = %s AND token = %s AND state IN {_IN_LIVE} FOR UPDATE",
                         (work, name, token)).fetchone()
        if w is None:
            return None
        target = _pick(conn, w["labels"], None, exclude=name)
        if target is None:
            return None
        _place_again(conn, w, target, f"host {name} is draining: handed over")
        _journal(conn, "work.handed_over", host=target["name"], token=target["token"],
                 work=work, previous=name, generation=w["generation"] + 1)
        conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, target["name"]))
    return {"id": work, "host": target["name"], "generation": w["generation"] + 1}


def resolve_ask(conn: Any, work: int, action: str) -> dict[str, Any]:
    """A human's answer to an ASK placement (its host died under revival ``ask``):
    ``revive`` places it again on the freest live host, as its next generation;
    ``reap`` ends it. Once: a second answer finds it no longer ASK (``NoHost`` says so)."""
    with conn.transaction():
        w = conn.execute("SELECT id, state, labels, generation, host FROM work WHERE id = %s "
                         "FOR UPDATE", (work,)).fetchone()
        if w is None:
            raise NoHost(f"no placement {work} in the fleet")
        if w["state"] != states.ASK:
            raise NoHost(f"placement {work} is {w['state']}, not waiting for an answer")
        if action == "reap":
            states.check(work, w["state"], states.REAPED)
            conn.execute("UPDATE work SET state = %s, reason = 'reaped by a human', "
                         "updated_at = now() WHERE id = %s", (states.REAPED, work))
            _journal(conn, "work.reaped", host=w["host"], work=work, by="human")
            return {"id": work, "state": states.REAPED, "host": w["host"]}
        target = _pick(conn, w["labels"], None)
        if target is None:
            raise NoHost(f"no live host with free capacity can revive placement {work} now: "
                         "wait for room, or add capacity")
        _place_again(conn, w, target, "revived by a human")
        _journal(conn, "work.revived", host=target["name"], token=target["token"], work=work,
                 previous=w["host"], generation=w["generation"] + 1, by="human")
        conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, target["name"]))
    return {"id": work, "state": states.PLACED, "host": target["name"],
            "generation": w["generation"] + 1}


def _place_again(conn: Any, w: dict[str, Any], target: dict[str, Any], why: str) -> None:
    """Row ``w`` (read ``FOR UPDATE`` with its state) placed on ``target`` as its next
    generation: a revival, a hand-over or a human's answer."""
    states.check(w["id"], w["state"], states.PLACED)
    conn.execute("UPDATE work SET host = %s, token = %s, generation = generation + 1, "
                 "state = %s, local_id = NULL, reason = %s, updated_at = now() WHERE id = %s",
                 (target["name"], target["token"], states.PLACED, why, w["id"]))
