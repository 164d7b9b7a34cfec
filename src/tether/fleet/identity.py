"""Which daemon a host name belongs to: one host name, one daemon at a time.

Every lease acquisition stores the acquiring daemon's *instance* (its home store's
epoch, a random id made with the store), so two daemons given the same ``--host-name``
— a copied unit file, a second home on one machine — cannot both take the name's lease
in turn, each fencing the other and running its work twice. While the name's lease is
live, only the instance that holds it may take it again (a restart of the same home);
another one is refused until that lease has expired, which is exactly when the fleet
treats the holder as gone anyway.
"""

from __future__ import annotations

from typing import Any

#: The columns of the host row ``taken_by`` reads (inside ``acquire``'s transaction or not).
COLUMNS = ("h.instance, h.home, h.api, h.state <> 'DEAD' AND h.lease_expires > now() "
           "AS held, extract(epoch FROM h.lease_expires - now())::float AS held_for")


class HostTaken(Exception):
    """Another daemon holds this host name's live lease (the message says what to do)."""


def taken_by(row: dict[str, Any] | None, name: str, instance: str) -> str | None:
    """Why a daemon of ``instance`` may not take ``name``'s lease now, or None. ``row``
    has :data:`COLUMNS`; a row without an instance (written before schema 5) is free."""
    if row is None or not row["held"] or row["instance"] in (None, instance):
        return None
    return (f"host name {name!r} is held by another daemon (home {row['home']}, API "
            f"{row['api'] or '-'}; its lease has {max(0.0, row['held_for']):.1f} s left): "
            f"give this daemon its own --host-name, or stop that daemon first (a dead "
            f"one's lease expires within TETHER_FLEET_LEASE)")


def holder(conn: Any, name: str, instance: str) -> str | None:
    """:func:`taken_by` read outside a lease acquisition: a daemon's check at start."""
    row = conn.execute(f"SELECT {COLUMNS} FROM hosts h WHERE name = %s", (name,)).fetchone()
    return taken_by(row, name, instance)
