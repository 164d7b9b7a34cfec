"""Fleet mode's pure parts: the migrations' order, and that a single host never loads
the PostgreSQL driver."""

from __future__ import annotations

import subprocess
import sys

from tether.fleet import schema


def test_migrations_are_numbered_forward_from_one() -> None:
    versions = [v for v, _ in schema.MIGRATIONS]
    assert versions == list(range(1, len(versions) + 1))
    assert versions[-1] == schema.LATEST


def test_the_single_host_paths_never_import_psycopg() -> None:
    code = ("import sys, tether.daemon.daemon, tether.cli.main, tether.cli.commands.execs, "
            "tether.cli.commands.daemon; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'psycopg' "
            "or m.startswith('tether.fleet')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
