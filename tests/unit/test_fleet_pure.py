"""Fleet mode's pure parts: the migrations' order, and that a single host never loads
the PostgreSQL driver."""

from __future__ import annotations

import subprocess
import sys

from tether.fleet import schema


def test_migrations_are_numbered_forward_from_one() -> None:
    """Strictly increasing (applied by set: branches own numbers, so a gap may exist
    until the branch owning it is merged)."""
    versions = [v for v, _ in schema.MIGRATIONS]
    assert versions[0] == 1 and versions == sorted(set(versions))
    assert versions[-1] == schema.LATEST


def test_a_database_missing_a_lower_migration_reads_as_older() -> None:
    """Applied by set: {1, 2, 4} stands for 2, so a host refuses it and `tether fleet
    init` applies 3; a version this tether does not know reads as newer."""
    every = {v for v, _ in schema.MIGRATIONS}
    assert schema.contiguous(every) == schema.LATEST
    assert schema.contiguous(every - {3}) == 2
    assert schema.contiguous(set()) == 0
    assert schema.contiguous(every | {schema.LATEST + 1}) == schema.LATEST + 1


def test_host_states_move_only_along_the_table() -> None:
    from tether.fleet import hoststates as admin

    assert admin.sources("DEAD", "sweep") == ["ACTIVE", "DRAINING"]
    assert admin.allowed("DRAINING", "ACTIVE", "undrain")
    assert not admin.allowed("ACTIVE", "ACTIVE", "undrain")
    assert not admin.allowed("DEAD", "ACTIVE", "undrain")  # only its own new lease
    assert [k for k, ops in admin.HOST_MOVES.items() if k[0] == "DEAD"] == [("DEAD", "ACTIVE")]
    assert admin.HOST_MOVES[("DEAD", "ACTIVE")] == {"acquire"}
    assert not admin.allowed("DEAD", "DRAINING", "drain")


def test_the_single_host_paths_never_import_psycopg() -> None:
    code = ("import sys, tether.daemon.daemon, tether.cli.main, tether.cli.commands.execs, "
            "tether.cli.commands.daemon; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'psycopg' "
            "or m.startswith('tether.fleet')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_the_single_host_paths_never_import_the_fleet_api_or_its_clients() -> None:
    code = ("import sys, tether.daemon.daemon, tether.cli.main, tether.cli.commands.execs, "
            "tether.cli.commands.events; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('uvicorn', "
            "'websockets', 'httpx') or m in ('tether.daemon.fleet.http', "
            "'tether.daemon.fleet.git', 'tether.cli.fleet_attach')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_the_fleet_api_address_is_checked_with_what_to_set() -> None:
    import pytest

    from tether.daemon.fleet import http as fleet_http

    sock = fleet_http.bind("127.0.0.1:0")
    try:
        assert sock.getsockname()[1] > 0
        with pytest.raises(ValueError, match="TETHER_FLEET_LISTEN"):
            fleet_http.bind(f"127.0.0.1:{sock.getsockname()[1]}")  # taken
    finally:
        sock.close()
    with pytest.raises(ValueError, match="cannot listen on 'nonsense'"):
        fleet_http.bind("nonsense")
