"""Forward-only, numbered schema migrations.

Each migration runs in its own transaction together with the row that records
it in ``schema_migrations``; a crash mid-migration leaves the previous version.
Never edit a shipped migration: append a new one.
"""

from __future__ import annotations

MIGRATIONS: list[tuple[int, str, str]] = [
    (
        1,
        "initial buckets of a docker sandbox daemon as tables",
        """
        CREATE TABLE id_reservations (
            id          TEXT PRIMARY KEY,
            kind        TEXT NOT NULL,
            reserved_at REAL NOT NULL
        );
        CREATE TABLE sandboxes (
            id     TEXT PRIMARY KEY,
            name   TEXT NOT NULL,
            state  TEXT NOT NULL,
            record BLOB NOT NULL
        );
        CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes(name) WHERE state != 'DELETED';
        CREATE TABLE execs (
            id          TEXT PRIMARY KEY,
            sandbox_id  TEXT NOT NULL REFERENCES sandboxes(id),
            name        TEXT,
            state       TEXT NOT NULL,
            request_key TEXT UNIQUE,
            record      BLOB NOT NULL
        );
        CREATE INDEX execs_sandbox ON execs(sandbox_id);
        CREATE INDEX execs_state ON execs(state);
        CREATE INDEX execs_name ON execs(name);
        CREATE TABLE events (
            gseq   INTEGER PRIMARY KEY AUTOINCREMENT,
            stream TEXT NOT NULL,
            seq    INTEGER NOT NULL,
            body   BLOB NOT NULL,
            UNIQUE(stream, seq)
        );
        CREATE TABLE sandbox_deletions (
            sandbox_id TEXT PRIMARY KEY,
            deleted_at REAL NOT NULL
        );
        """,
    ),
    (
        2,
        "agent lineages",
        """
        CREATE TABLE lineages (
            id     TEXT PRIMARY KEY,
            name   TEXT,
            status TEXT NOT NULL,
            record BLOB NOT NULL
        );
        CREATE INDEX lineages_status ON lineages(status);
        CREATE INDEX execs_lineage ON execs(json_extract(record, '$.lineage'));
        """,
    ),
    (
        3,
        "index the journal by exec",
        """
        CREATE INDEX events_exec ON events(json_extract(body, '$.exec'));
        """,
    ),
    (
        4,
        "every sandbox spec names its runtime",
        # Specs written while the field had a default could omit it (it meant process).
        """
        UPDATE sandboxes SET record = CAST(json_set(CAST(record AS TEXT), '$.spec.runtime',
                                                    'process') AS BLOB)
            WHERE json_extract(CAST(record AS TEXT), '$.spec.runtime') IS NULL;
        """,
    ),
    (
        5,
        "exec records keep the names of their env, not the values",
        # Values (API keys, agents' TETHER_TOKEN) were stored before; only the monitor,
        # in memory, needs them.
        """
        UPDATE execs SET record = CAST(json_set(CAST(record AS TEXT), '$.spec.env',
            (SELECT json_group_object(key, '')
               FROM json_each(CAST(execs.record AS TEXT), '$.spec.env'))) AS BLOB)
            WHERE json_type(CAST(record AS TEXT), '$.spec.env') = 'object';
        """,
    ),
    (
        6,
        "the journal's epoch",
        # A random id made with the store: a client's cursor (gseq) means something only
        # within one epoch, so a rebuilt store (--recover-store) is told from the old one.
        """
        CREATE TABLE meta (
            key   TEXT PRIMARY KEY,
            value TEXT NOT NULL
        );
        INSERT INTO meta VALUES ('epoch', lower(hex(randomblob(8))));
        """,
    ),
    (
        7,
        "scheduled jobs and their runs",
        # A run's (job, fire_at) is unique: a fire time is committed once, before its exec.
        """
        CREATE TABLE schedule_jobs (
            id     TEXT PRIMARY KEY,
            name   TEXT NOT NULL,
            state  TEXT NOT NULL,
            due_at REAL NOT NULL,
            record BLOB NOT NULL
        );
        CREATE UNIQUE INDEX schedule_jobs_live_name ON schedule_jobs(name)
            WHERE state != 'REMOVED';
        CREATE INDEX schedule_jobs_due ON schedule_jobs(due_at) WHERE state = 'ACTIVE';
        CREATE TABLE schedule_runs (
            id      INTEGER PRIMARY KEY AUTOINCREMENT,
            job_id  TEXT NOT NULL REFERENCES schedule_jobs(id),
            fire_at REAL NOT NULL,
            state   TEXT NOT NULL,
            exec_id TEXT,
            record  BLOB NOT NULL,
            UNIQUE(job_id, fire_at)
        );
        CREATE INDEX schedule_runs_live ON schedule_runs(state)
            WHERE state IN ('PENDING', 'PAUSED', 'RUNNING');
        CREATE INDEX schedule_runs_exec ON schedule_runs(exec_id);
        """,
    ),
    (
        8,
        "webhook subscriptions and their outbox",
        # An outbox row is written in the transaction of the event it is about (the
        # journal's matcher): at-least-once delivery, keyed by (hook, gseq).
        """
        CREATE TABLE hooks (
            name   TEXT PRIMARY KEY,
            record BLOB NOT NULL
        );
        CREATE TABLE outbox (
            id         INTEGER PRIMARY KEY AUTOINCREMENT,
            hook       TEXT NOT NULL,
            gseq       INTEGER NOT NULL,
            type       TEXT NOT NULL,
            state      TEXT NOT NULL,
            tries      INTEGER NOT NULL DEFAULT 0,
            next_at    REAL NOT NULL,
            last_error TEXT,
            updated_at REAL NOT NULL,
            body       BLOB NOT NULL,
            UNIQUE(hook, gseq)
        );
        CREATE INDEX outbox_due ON outbox(state, next_at);
        """,
    ),
    (
        9,
        "retention: journal floors and exec prunes",
        # A compacted journal remembers, per stream, the highest seq it removed (so a
        # cursor below it gets EVENTS_PURGED, never a silent gap); an exec whose files
        # are being removed is marked first, so a crash mid-way is finished at restart
        # and `tether logs` says "pruned" instead of reading a half-deleted file.
        """
        CREATE TABLE journal_floor (
            stream TEXT PRIMARY KEY,
            seq    INTEGER NOT NULL,
            gseq   INTEGER NOT NULL
        );
        CREATE TABLE exec_prunes (
            exec_id   TEXT PRIMARY KEY,
            what      TEXT NOT NULL,
            reason    TEXT NOT NULL,
            bytes     INTEGER NOT NULL,
            pruned_at REAL NOT NULL,
            done      INTEGER NOT NULL DEFAULT 0
        );
        INSERT INTO meta VALUES ('journal_floor', '0');
        """,
    ),
    (
        10,
        "activity digests: versioned nodes, their latest version, rollup checkpoints",
        # Versions are append-only (digest_nodes); digest_latest points at the newest.
        """
        CREATE INDEX execs_ended ON execs(json_extract(record, '$.ended_at'));
        CREATE TABLE digest_nodes (
            id           TEXT NOT NULL,
            version      INTEGER NOT NULL,
            state        TEXT NOT NULL,
            record       BLOB NOT NULL,
            PRIMARY KEY (id, version)
        );
        CREATE TABLE digest_latest (
            id           TEXT PRIMARY KEY,
            version      INTEGER NOT NULL,
            level        TEXT NOT NULL,
            period_start REAL NOT NULL,
            state        TEXT NOT NULL
        );
        CREATE INDEX digest_latest_level ON digest_latest(level, period_start);
        CREATE TABLE digest_checkpoints (
            level        TEXT PRIMARY KEY,
            period_start REAL NOT NULL,
            processed    INTEGER NOT NULL,
            updated_at   REAL NOT NULL
        );
        """,
    ),
    (
        11,
        "cost budgets, and the journal indexed by event type",
        # Costs are computed from the journal's agent.turn events (priced when read, so a
        # corrected price table corrects past figures): the partial indexes find them by
        # time, and a crossing's agent.budget event by its key (exactly once).
        """
        CREATE INDEX events_turn_time ON events(json_extract(body, '$.time'))
            WHERE json_extract(body, '$.type') = 'agent.turn';
        CREATE INDEX events_budget_key ON events(json_extract(body, '$.data.key'))
            WHERE json_extract(body, '$.type') = 'agent.budget';
        CREATE TABLE budgets (
            scope      TEXT PRIMARY KEY,
            usd        REAL NOT NULL,
            policy     TEXT NOT NULL,
            updated_at REAL NOT NULL
        );
        """,
    ),
    (
        12,
        "port ranges leased to agent lineages (worktree scripts)",
        # One row per lineage holding ports; a row whose lineage is gone or no longer live
        # is free (swept in the transaction that leases), so a crash never double-leases.
        """
        CREATE TABLE port_leases (
            lineage   TEXT PRIMARY KEY,
            lo        INTEGER NOT NULL,
            hi        INTEGER NOT NULL,
            leased_at REAL NOT NULL
        );
        CREATE INDEX port_leases_lo ON port_leases(lo);
        """,
    ),
    (
        13,
        "setup marks in the home; repository commands an agent may have written dropped",
        # A worktree's setup ran once: the mark was a file in the worktree, which its agent
        # may delete (the setup runs again) — now a row here, keyed by the worktree's real
        # path, device and inode. A lineage whose repository config was read where its
        # agent could write (a successor's, read again from its tree; one read from the
        # agent's own checkout) keeps no command run outside the sandbox (docs/SECURITY.md).
        """
        CREATE TABLE setup_marks (
            tree    TEXT PRIMARY KEY,
            lineage TEXT NOT NULL,
            at      REAL NOT NULL
        );
        UPDATE lineages SET record = CAST(json_remove(CAST(record AS TEXT),
                '$.config.repo.setup', '$.config.repo.archive',
                '$.config.repo.handoff.command') AS BLOB)
            WHERE json_type(CAST(record AS TEXT), '$.config.repo') = 'object'
              AND (json_extract(CAST(record AS TEXT), '$.predecessor') IS NOT NULL
                   OR json_extract(CAST(record AS TEXT), '$.config.git_dir') IS NULL
                   OR json_extract(CAST(record AS TEXT), '$.config.git_dir') =
                      rtrim(json_extract(CAST(record AS TEXT), '$.config.worktree'), '/')
                      || '/.git');
        """,
    ),
]
