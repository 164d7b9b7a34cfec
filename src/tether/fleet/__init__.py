"""Fleet mode: many hosts' daemons sharing intent in one PostgreSQL.

PostgreSQL holds the fleet's intent (hosts and their leases, placed work and the
lineages it carries, the fleet journal); each host's SQLite keeps its per-exec detail
(docs/STATE.md, "Fleet"). This package is the SQL and nothing else: the daemon's
``daemon/fleet/service.py`` runs the lease and placement loops on top of it, the CLI calls it
for ``tether fleet init``, ``hosts``, ``drain`` and ``run --host``. It is imported only
when a fleet URL is given (``fleet.url``, which finds one, excepted: it imports no
driver), so a single-host tether never loads ``psycopg``.
"""
