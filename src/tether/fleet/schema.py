"""The fleet's PostgreSQL schema: forward-only, versioned migrations.

``migrate`` applies every missing version in one transaction under an advisory lock,
so any number of ``tether fleet init`` and daemons may race on a fresh database.
"""

from __future__ import annotations

from typing import Any

#: Serialises migrations across every client of one database (an arbitrary constant).
LOCK_KEY = 0x7E7E_F1EE

MIGRATIONS: list[tuple[int, str]] = [
    (1, """
CREATE SEQUENCE fleet_token;
CREATE TABLE hosts (
    name          text PRIMARY KEY,
    capacity      integer NOT NULL CHECK (capacity >= 0),
    labels        jsonb NOT NULL DEFAULT '{}',
    state         text NOT NULL CHECK (state IN ('ACTIVE', 'DRAINING', 'DEAD')),
    token         bigint NOT NULL,
    lease_expires timestamptz NOT NULL,
    renewed_at    timestamptz NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT now(),
    version       text NOT NULL,
    home          text NOT NULL
);
CREATE TABLE work (
    id          bigserial PRIMARY KEY,
    kind        text NOT NULL CHECK (kind IN ('exec', 'agent')),
    spec        jsonb NOT NULL,
    labels      jsonb NOT NULL DEFAULT '{}',
    want_host   text,
    revival     text NOT NULL DEFAULT 'reap',
    host        text REFERENCES hosts (name),
    token       bigint,
    generation  integer NOT NULL DEFAULT 1,
    state       text NOT NULL CHECK (state IN ('PLACED', 'RUNNING', 'ENDED', 'LOST',
                                               'REAPED', 'ASK')),
    local_id    text,
    exit_code   integer,
    reason      text,
    request_key text UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX work_live ON work (host) WHERE state IN ('PLACED', 'RUNNING');
CREATE TABLE journal (
    gseq  bigserial PRIMARY KEY,
    at    timestamptz NOT NULL DEFAULT now(),
    host  text,
    token bigint,
    work  bigint,
    type  text NOT NULL,
    data  jsonb NOT NULL DEFAULT '{}'
);
"""),
    (2, """
ALTER TABLE hosts ADD COLUMN api text;
ALTER TABLE hosts ADD COLUMN drain_now boolean NOT NULL DEFAULT false;
CREATE TABLE fleet_secret (
    id    integer PRIMARY KEY CHECK (id = 1),
    token text NOT NULL
);
INSERT INTO fleet_secret (id, token) VALUES
    (1, replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''));
"""),
    # The catch-up relay (fleet/relay.py): each host's local journal events about fleet
    # work reach this journal once, in local order; the cursor is the host name's, not a
    # lease's, so a host fenced and back relays what it recorded while it was away.
    (3, """
ALTER TABLE hosts ADD COLUMN relayed bigint NOT NULL DEFAULT 0;
ALTER TABLE hosts ADD COLUMN relay_epoch text;
ALTER TABLE journal ADD COLUMN local_epoch text;
ALTER TABLE journal ADD COLUMN local_gseq bigint;
ALTER TABLE journal ADD COLUMN local_at timestamptz;
CREATE UNIQUE INDEX journal_relayed ON journal (host, local_epoch, local_gseq)
    WHERE local_gseq IS NOT NULL;
"""),
    (4, """
ALTER TABLE fleet_secret ADD COLUMN previous text;
ALTER TABLE fleet_secret ADD COLUMN previous_until timestamptz;
ALTER TABLE work DROP CONSTRAINT IF EXISTS work_host_fkey;
"""),
    # Which daemon holds a host name's lease (fleet/identity.py): its home store's epoch,
    # so a second daemon given the same --host-name is refused instead of fencing the first.
    (5, """
ALTER TABLE hosts ADD COLUMN instance text;
"""),
    # `tether --fleet URL kill WORK`: the kill a user asked for, carried out by the host
    # that runs the placement (``daemon/fleet.py``), even after its daemon restarts.
    (6, """
ALTER TABLE work ADD COLUMN kill jsonb;
"""),
]

LATEST = max(v for v, _ in MIGRATIONS)


def migrate(conn: Any) -> list[int]:
    """Apply the missing migrations on ``conn`` (from ``store.connect``); returns the
    versions applied (none: up to date). Raises ``RuntimeError`` for a database newer
    than this tether."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        conn.execute("CREATE TABLE IF NOT EXISTS fleet_schema (version integer PRIMARY KEY,"
                     " applied_at timestamptz NOT NULL DEFAULT now())")
        have = {r["version"] for r in conn.execute("SELECT version FROM fleet_schema")}
        if have and max(have) > LATEST:
            raise RuntimeError(f"the fleet database is at schema {max(have)}, newer than this "
                               f"tether's {LATEST}: upgrade tether on this host")
        applied = []
        for version, sql in MIGRATIONS:
            if version in have:
                continue
            conn.execute(sql)
            conn.execute("INSERT INTO fleet_schema (version) VALUES (%s)", (version,))
            applied.append(version)
        return applied


def version(conn: Any) -> int:
    """The database's schema version (0: never initialised): the highest version below
    which every one of this tether's migrations is applied, so a database that lacks a
    lower one (applied by set, like the host stores) reads as older and is upgraded by
    ``tether fleet init``; one with a version this tether does not know reads as newer."""
    row = conn.execute("SELECT to_regclass('fleet_schema') IS NOT NULL AS made").fetchone()
    if not row or not row["made"]:
        return 0
    have = {int(r["version"]) for r in conn.execute("SELECT version FROM fleet_schema")}
    return contiguous(have)


def contiguous(have: set[int]) -> int:
    """The version ``have`` (the applied set) stands for: above :data:`LATEST` if it has
    one this tether does not know, else the last of this tether's versions before the
    first one missing."""
    if have and max(have) > LATEST:
        return max(have)
    at = 0
    for v, _ in MIGRATIONS:
        if v not in have:
            break
        at = v
    return at
