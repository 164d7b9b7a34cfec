"""The fleet's placement states as data: the one guard refuses every edge not listed."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from tests.pg import bindir
from tether.fleet import states
from tether.model.states import IllegalTransition

if TYPE_CHECKING:
    from tests.pg import PgCluster

needs_pg = pytest.mark.skipif(bindir() is None
                              and os.environ.get("TETHER_REQUIRE_POSTGRES") != "1",
                              reason="PostgreSQL is not installed (apt-get install postgresql)")


def test_every_state_has_a_row_and_the_ended_ones_are_final() -> None:
    assert set(states.WORK_TRANSITIONS) == {"PLACED", "RUNNING", "ENDED", "LOST", "REAPED",
                                            "ASK"}
    for row in states.WORK_TRANSITIONS.values():
        assert row <= set(states.WORK_TRANSITIONS)
    assert not states.WORK_TRANSITIONS["ENDED"] and not states.WORK_TRANSITIONS["REAPED"]


def test_a_lost_exec_may_only_end_late_or_be_reclaimed_by_its_host() -> None:
    """A plain exec swept LOST ran on under its monitor: its host, back, reports its end
    late or, finding it still running, answers for it again (RUNNING). Never placed
    again: an exec is never run elsewhere."""
    states.check(1, "LOST", "ENDED")
    states.check(1, "LOST", "RUNNING")
    for wanted in ("PLACED", "REAPED", "ASK", "LOST"):
        with pytest.raises(IllegalTransition, match=f"placement 1: illegal transition "
                                                    f"LOST -> {wanted}"):
            states.check(1, "LOST", wanted)


def test_an_ended_placement_never_moves_again() -> None:
    with pytest.raises(IllegalTransition):
        states.check(7, "ENDED", "RUNNING")


def test_the_sources_of_a_state_are_read_off_the_table() -> None:
    """What a one-statement ``UPDATE … WHERE state IN (…)`` may move, narrowed to the
    writer's precondition: a host ends only its live work (a LOST exec ends late, through
    the relay)."""
    assert states.sources("RUNNING") == {"PLACED", "LOST"}
    assert states.sources("RUNNING", {"PLACED"}) == {"PLACED"}  # a start: mark_running
    assert states.sources("ENDED") == {"PLACED", "RUNNING", "LOST"}
    assert states.sources("ENDED", states.LIVE) == states.LIVE
    assert states.sources("PLACED") == {"PLACED", "RUNNING", "ASK"}
    assert states.sources("LOST") == states.LIVE
    assert states.INITIAL == "PLACED" and states.INITIAL in states.WORK_TRANSITIONS
    assert states.sql(states.sources("RUNNING", {"PLACED"})) == "('PLACED')"
    assert states.sql(states.LIVE) == "('PLACED', 'RUNNING')"
    for bad in ([], ["PLACED", "GONE"], ["x'); DROP TABLE work; --"]):
        with pytest.raises(ValueError, match="not a set of placement states"):
            states.sql(bad)


def test_the_fleet_store_names_no_placement_state_of_its_own() -> None:
    """Every placement state the store's SQL reads or writes comes from ``states`` (its
    constants, ``sources``, ``sql``): a quoted state name in its source would be a
    ``WHERE state IN (…)`` free to drift from the table."""
    import re
    from pathlib import Path

    from tether.fleet import store

    text = Path(store.__file__).read_text()
    names = "|".join(states.WORK_TRANSITIONS)
    quoted = re.findall(rf"""['"]({names})['"]""", text)
    assert quoted == []


def _host_db(pg: PgCluster, name: str) -> str:
    from tether.fleet import schema
    from tether.fleet import store as fs

    url = pg.new_db(f"{name}_{os.getpid()}")
    with fs.connect(url) as c:
        schema.migrate(c)
    return url


@needs_pg
def test_a_host_state_this_tether_does_not_know_refuses_the_lease(pg: PgCluster) -> None:
    """A host row left in a state no move of ``hoststates`` leads from (a newer tether's)
    is refused with what to do, and nothing is written: no token, no journal row."""
    from tether.fleet import store as fs

    url = _host_db(pg, "unknown_state")
    with fs.connect(url) as c:
        first = fs.acquire(c, "h1", capacity=1, labels={}, version="t", home="/h", ttl=5)
        c.execute("ALTER TABLE hosts DROP CONSTRAINT hosts_state_check")
        c.execute("UPDATE hosts SET state = 'RETIRED' WHERE name = 'h1'")
        seq = c.execute("SELECT last_value FROM fleet_token").fetchone()["last_value"]
        journal = len(fs.journal(c))
        with pytest.raises(fs.NoHost, match=r"host h1 is RETIRED in the fleet database.*"
                                             r"upgrade tether on this host"):
            fs.acquire(c, "h1", capacity=1, labels={}, version="t", home="/h", ttl=5)
        assert c.execute("SELECT last_value FROM fleet_token").fetchone()["last_value"] == seq
        assert len(fs.journal(c)) == journal
        row = c.execute("SELECT state, token FROM hosts WHERE name = 'h1'").fetchone()
        assert (row["state"], row["token"]) == ("RETIRED", first.token)
        # The known states still take it: DEAD (its lease swept) comes back ACTIVE.
        c.execute("UPDATE hosts SET state = 'DEAD' WHERE name = 'h1'")
        again = fs.acquire(c, "h1", capacity=1, labels={}, version="t", home="/h", ttl=5)
        assert again.state == "ACTIVE" and again.token > first.token


@needs_pg
def test_a_withdrawn_placement_waits_for_a_busy_host_rather_than_stay_here(
        pg: PgCluster) -> None:
    """A host fenced past its fence point whose next lease carried its agent's row over
    revives it on another host with room. That host's row may be locked for a moment by
    its own pass (``_guard`` reads it ``FOR SHARE``), which ``_pick`` skips: the revival
    is then left for the next pass, not kept on the host that was just fenced (seen in
    CI under load: the placement came back to h1 while h2 was idle and live). With no
    other host with room, it is revived here as its next generation."""
    from tether.fleet import admin
    from tether.fleet import store as fs

    url = _host_db(pg, "withdrawn_busy")
    with fs.connect(url) as c, fs.connect(url) as h2_pass:
        h1 = fs.acquire(c, "h1", capacity=4, labels={}, version="t", home="/h1", ttl=30)
        fs.acquire(c, "h2", capacity=4, labels={}, version="t", home="/h2", ttl=30)

        def placed_running(local: str) -> int:
            w = fs.place(c, "agent", {"argv": ["x"]}, labels={}, host="h1",
                         revival="revive", request_key=None)
            fs.mark_running(c, w["id"], "h1", h1.token, local)
            return int(w["id"])

        work = placed_running("l1")
        with h2_pass.transaction():  # h2's own pass holds its row for a moment
            h2_pass.execute("SELECT 1 FROM hosts WHERE name = 'h2' FOR SHARE")
            assert fs.revive_withdrawn(c, work, "h1", h1.token, "fenced") is None
            row = fs.get_work(c, work)
            assert row is not None and (row["host"], row["generation"]) == ("h1", 1)
        got = fs.revive_withdrawn(c, work, "h1", h1.token, "fenced")
        assert got is not None and (got["host"], got["generation"]) == ("h2", 2), got
        # No other host has room (h2 drains): revived here, as its next generation.
        admin.drain(c, "h2")
        other = placed_running("l2")
        got = fs.revive_withdrawn(c, other, "h1", h1.token, "fenced")
        assert got is not None and (got["host"], got["generation"]) == ("h1", 2), got
