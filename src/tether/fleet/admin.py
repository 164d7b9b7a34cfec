"""The fleet's operator SQL: drain and undrain a host, forget a dead one, rotate the
host-to-host API's token. A host's state changes here through ``_move``, which checks
``hoststates.HOST_MOVES`` under the host row's lock."""

from __future__ import annotations

import secrets as _secrets
from typing import Any

from tether.fleet.hoststates import HOST_MOVES, allowed
from tether.fleet.store import CHANNEL, LIVE, NoHost, _journal, renew

__all__ = ["GRACE", "HOST_MOVES", "BadMove", "NoHost", "allowed", "api_tokens", "drain",
           "forget", "host_state", "renew_reading_tokens", "rotate_token", "undrain"]
Tokens = tuple[str, str | None, float]

#: Seconds the previous API token stays accepted after a rotation (by default).
GRACE = 300.0


class BadMove(NoHost):
    """A host state change ``HOST_MOVES`` does not allow; the message says what to do."""


def _move(conn: Any, name: str, to: str, op: str) -> dict[str, Any]:
    """The one guard: lock ``name``'s row and check ``op`` may move it to ``to``
    (inside a transaction). Returns the row as it was."""
    row = conn.execute("SELECT name, state, drain_now FROM hosts WHERE name = %s FOR UPDATE",
                       (name,)).fetchone()
    if row is None:
        raise NoHost(f"no host named {name!r} in the fleet "
                     "(`tether --fleet URL hosts` lists them)")
    if not allowed(row["state"], to, op):
        hint = {"DEAD": "its daemon takes a new lease when it comes back"}.get(
            row["state"], f"`{op}` does not apply to a host that is {row['state']}")
        raise BadMove(f"host {name} is {row['state']}, not "
                      f"{'DRAINING' if op == 'undrain' else 'ACTIVE'}: {hint}")
    return dict(row)


def drain(conn: Any, name: str, *, now: bool = False) -> bool:
    """Mark ``name`` DRAINING: no new work, and its agents are handed over (after their
    current turn, or at once with ``now``). True when this changed anything; a DEAD
    host raises ``BadMove``."""
    with conn.transaction():
        old = _move(conn, name, "DRAINING", "drain")
        if old["state"] == "DRAINING" and (old["drain_now"] or not now):
            return False
        conn.execute("UPDATE hosts SET state = 'DRAINING', drain_now = drain_now OR %s "
                     "WHERE name = %s", (now, name))
        _journal(conn, "host.draining", host=name, now=now)
        conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, name))  # it acts at once
    return True


def undrain(conn: Any, name: str) -> None:
    """DRAINING → ACTIVE: new work may be placed on ``name`` again; ``drain --now`` is
    cleared. What was already handed over stays where it went."""
    with conn.transaction():
        _move(conn, name, "ACTIVE", "undrain")
        conn.execute("UPDATE hosts SET state = 'ACTIVE', drain_now = false WHERE name = %s",
                     (name,))
        _journal(conn, "host.activated", host=name, by="undrain")
        conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, name))


def host_state(conn: Any, name: str) -> str | None:
    """``name``'s state (ACTIVE, DRAINING, DEAD), or None without a row: what a host
    reads when a NOTIFY names it, so a drain takes effect before its next renewal."""
    row = conn.execute("SELECT state FROM hosts WHERE name = %s", (name,)).fetchone()
    return None if row is None else str(row["state"])


def forget(conn: Any, name: str) -> int:
    """Delete host ``name``'s row: refused while its lease is live or work is still
    placed on it (PLACED, RUNNING, or ASK waiting for a human). Its ended work keeps
    the host's name as history. Returns how many ended placements name it."""
    with conn.transaction():
        row = conn.execute("SELECT state, lease_expires > now() AS live FROM hosts "
                           "WHERE name = %s FOR UPDATE", (name,)).fetchone()
        if row is None:
            raise NoHost(f"no host named {name!r} in the fleet "
                         "(`tether --fleet URL hosts` lists them)")
        if row["live"]:
            raise BadMove(f"host {name} holds a live lease ({row['state']}): stop its "
                          f"daemon (after `tether --fleet URL drain {name}` to move its "
                          "agents), then forget it once its lease expired")
        counts = {r["state"]: r["n"] for r in conn.execute(
            "SELECT state, count(*) AS n FROM work WHERE host = %s GROUP BY state", (name,))}
        live = sum(counts.get(s, 0) for s in LIVE)
        if live:
            raise BadMove(f"host {name} still has {live} placement(s) PLACED or RUNNING: "
                          "wait for a live host's orphan sweep to settle them (about one "
                          "lease period; `tether --fleet URL ps` shows them)")
        if counts.get("ASK"):
            raise BadMove(f"host {name} has {counts['ASK']} placement(s) waiting for a "
                          "human (ASK): answer them with `tether --fleet URL lineage "
                          "resolve --revive/--reap WORK` first")
        conn.execute("DELETE FROM hosts WHERE name = %s", (name,))
        ended = int(sum(counts.values()))
        _journal(conn, "host.forgotten", host=name, placements=ended)
    return ended


def rotate_token(conn: Any, grace: float = GRACE) -> None:
    """A new API token; the previous one stays accepted for ``grace`` seconds (a CLI
    that read it just before keeps working). A second rotation within the grace ends
    the first one's previous token at once."""
    with conn.transaction():
        cur = conn.execute(
            "UPDATE fleet_secret SET previous = token, previous_until = now() + "
            "make_interval(secs => %s), token = %s WHERE id = 1",
            (grace, _secrets.token_hex(32)))
        if not cur.rowcount:
            raise NoHost("the fleet database has no API token: run `tether fleet init URL`")
        _journal(conn, "fleet.token_rotated", grace=grace)


def renew_reading_tokens(conn: Any, name: str, token: int, ttl: float,
                         ) -> tuple[str | None, Tokens | None]:
    """``store.renew`` and ``api_tokens`` in one transaction: a host learns of a token
    rotation at every renewal for no extra PostgreSQL commit (the idle cost the bench
    measures). The tokens are None when the lease is lost."""
    with conn.transaction():
        state = renew(conn, name, token, ttl)
        return state, (api_tokens(conn) if state is not None else None)


def api_tokens(conn: Any) -> Tokens:
    """(current token, previous token or None, seconds the previous one is still
    accepted), by PostgreSQL's clock: what a host's API checks a caller against."""
    row = conn.execute("SELECT token, previous, extract(epoch FROM previous_until - now())"
                       "::float AS left FROM fleet_secret WHERE id = 1").fetchone()
    if row is None:
        raise NoHost("the fleet database has no API token: run `tether fleet init URL` "
                     "with this tether to upgrade its schema")
    left = float(row["left"] or 0.0)
    if row["previous"] is None or left <= 0:
        return str(row["token"]), None, 0.0
    return str(row["token"]), str(row["previous"]), left
