"""Forward-only, numbered migrations of the core store on PostgreSQL (``store/postgres.py``).

Numbered on their own (not SQLite's ``store/migrations.py``): this backend holds only
the core tables, already in their current shape (records as ``jsonb``). Each runs in
its own transaction with its ``schema_migrations`` row, under an advisory lock, so
daemons racing on a fresh database apply each exactly once. Never edit a shipped
migration: append a new one.
"""

from __future__ import annotations

#: Serialises migrations (and the default sandbox's creation) across every client of
#: one database; not the fleet schema's key, so both may share a database.
LOCK_KEY = 0x7E7E_5702

MIGRATIONS: list[tuple[int, str, str]] = [
    (
        1,
        "sandboxes, execs and the journal",
        # `n` orders rows as SQLite's rowid does (insertion order). `journal_head` is the
        # journal's one counter: its row lock, held to commit, makes gseq gap-free and in
        # commit order (a bigserial would leave gaps and commit out of order).
        """
        CREATE TABLE id_reservations (
            id          text PRIMARY KEY,
            kind        text NOT NULL,
            reserved_at double precision NOT NULL
        );
        CREATE TABLE sandboxes (
            n      bigserial UNIQUE,
            id     text PRIMARY KEY,
            name   text NOT NULL,
            state  text NOT NULL,
            record jsonb NOT NULL
        );
        CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes (name) WHERE state <> 'DELETED';
        CREATE TABLE execs (
            n           bigserial UNIQUE,
            id          text PRIMARY KEY,
            sandbox_id  text NOT NULL REFERENCES sandboxes (id),
            name        text,
            state       text NOT NULL,
            request_key text UNIQUE,
            record      jsonb NOT NULL
        );
        CREATE INDEX execs_sandbox ON execs (sandbox_id);
        CREATE INDEX execs_state ON execs (state);
        CREATE INDEX execs_name ON execs (name);
        CREATE INDEX execs_lineage ON execs ((record->>'lineage'));
        CREATE TABLE events (
            gseq   bigint PRIMARY KEY,
            stream text NOT NULL,
            seq    bigint NOT NULL,
            body   jsonb NOT NULL,
            UNIQUE (stream, seq)
        );
        CREATE INDEX events_exec ON events ((body->>'exec'));
        CREATE TABLE journal_head (
            one  boolean PRIMARY KEY DEFAULT true CHECK (one),
            gseq bigint NOT NULL
        );
        INSERT INTO journal_head VALUES (true, 0);
        CREATE TABLE sandbox_deletions (
            sandbox_id text PRIMARY KEY,
            deleted_at double precision NOT NULL
        );
        CREATE TABLE meta (
            key   text PRIMARY KEY,
            value text NOT NULL
        );
        INSERT INTO meta VALUES
            ('epoch', substr(md5(random()::text || clock_timestamp()::text), 1, 16));
        """,
    ),
    (
        2,
        "agent lineages",
        """
        CREATE TABLE lineages (
            n      bigserial UNIQUE,
            id     text PRIMARY KEY,
            name   text,
            status text NOT NULL,
            record jsonb NOT NULL
        );
        CREATE INDEX lineages_status ON lineages (status);
        CREATE INDEX lineages_request_key ON lineages ((record->>'request_key'));
        """,
    ),
]
