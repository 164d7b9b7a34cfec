"""The catch-up relay's SQL: a host's local journal is the fleet's outbox.

What a host records locally about fleet work (its ``fleet.*`` events, the end of each
placed exec or lineage) is appended to the fleet journal once, in local order, with
its local ``gseq`` and time. The host's cursor (``hosts.relayed``, in its store's
``relay_epoch``) advances in the same transaction as the rows it relays, which is
fenced by the host's current lease token: a crash after the commit relays nothing
twice, one before it loses nothing. The cursor is the host name's, not a lease's, so
a host that was fenced relays its history once it holds a new token.

The end of a placed plain exec also settles its row when it is still this host's:
live (``ENDED``, as the work pass would), or ``LOST`` by a sweep while the host was
cut off (``ENDED`` reported late: the exec ran on and its result is real).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tether.fleet import states
from tether.fleet.store import Fenced, _journal


@dataclass(frozen=True)
class Item:
    """One local event to relay."""

    local_gseq: int
    local_at: float  # the local journal's time (seconds since the epoch)
    type: str
    work: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    #: a placed plain exec's end: (generation, local exec id, exit code, reason)
    end: tuple[int, str, int | None, str] | None = None


@dataclass(frozen=True)
class Relayed:
    cursor: int  # the last local gseq now in the fleet journal
    journaled: int
    settled: list[dict[str, Any]]  # placements this batch ended (``late``: were LOST)


def cursor(conn: Any, host: str) -> tuple[int, str | None]:
    """``host``'s relay cursor and the local store epoch it counts in ((0, None) for a
    host never seen)."""
    row = conn.execute("SELECT relayed, relay_epoch FROM hosts WHERE name = %s",
                       (host,)).fetchone()
    return (0, None) if row is None else (int(row["relayed"]), row["relay_epoch"])


def relay(conn: Any, host: str, token: int, epoch: str, items: list[Item]) -> Relayed:
    """Append ``items`` (in local order) after ``host``'s cursor and advance it, in one
    transaction fenced by ``token``. Items at or before the cursor are skipped (already
    relayed: a crash after the commit); a new ``epoch`` (the host's store was made
    anew) starts its count again."""
    settled: list[dict[str, Any]] = []
    with conn.transaction():
        row = conn.execute(
            "SELECT relayed, relay_epoch FROM hosts WHERE name = %s AND token = %s AND "
            "state <> 'DEAD' AND lease_expires > now() FOR NO KEY UPDATE",
            (host, token)).fetchone()
        if row is None:
            raise Fenced(f"host {host} no longer holds lease {token}")
        done = int(row["relayed"]) if row["relay_epoch"] == epoch else 0
        fresh = [i for i in items if i.local_gseq > done]
        for it in fresh:
            _journal(conn, it.type, host=host, token=token, work=it.work,
                     origin_=(epoch, it.local_gseq, it.local_at), data_=it.data)
            if it.end is not None and it.work is not None:
                got = _settle(conn, it.work, host, token, it.end)
                if got is not None:
                    settled.append(got)
        last = max([done, *(i.local_gseq for i in fresh)])
        conn.execute("UPDATE hosts SET relayed = %s, relay_epoch = %s WHERE name = %s",
                     (last, epoch, host))
    return Relayed(cursor=last, journaled=len(fresh), settled=settled)


def _settle(conn: Any, work: int, host: str, token: int,
            end: tuple[int, str, int | None, str]) -> dict[str, Any] | None:
    """End placement ``work`` from its exec's local end, when the row is still this
    host's for that generation: live under ``token``, or LOST with that exec (or
    none yet recorded: it was swept before RUNNING was written)."""
    generation, local_id, exit_code, reason = end
    w = conn.execute("SELECT state, token, local_id FROM work WHERE id = %s AND host = %s "
                     "AND kind = 'exec' AND generation = %s FOR UPDATE",
                     (work, host, generation)).fetchone()
    if w is None or w["local_id"] not in (None, local_id):
        return None
    late = w["state"] == states.LOST
    if not late and not (w["state"] in states.LIVE and w["token"] == token):
        return None
    states.check(work, w["state"], states.ENDED)
    if late:
        reason = f"{reason}; reported late by host {host}"
    conn.execute("UPDATE work SET state = 'ENDED', exit_code = %s, reason = %s, token = %s, "
                 "local_id = %s, updated_at = now() WHERE id = %s",
                 (exit_code, reason, token, local_id, work))
    _journal(conn, "work.ended", host=host, token=token, work=work, exit_code=exit_code,
             reason=reason, late=late)
    return {"id": work, "exit_code": exit_code, "late": late}
