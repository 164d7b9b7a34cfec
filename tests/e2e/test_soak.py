"""The soak of ``make soak`` (bench/soak.py), short: 15 s of the same mixed load — agents
at full speed in bwrap sandboxes, execs, schedules, webhooks, a subscriber flood — so the
soak keeps working, with only generous sanity bounds (the figures are the bench's)."""

from __future__ import annotations

from pathlib import Path

from bench import soak
from bench.harness import Options


def test_a_short_soak_stays_bounded() -> None:
    res = soak.run(Options(quick=True, samples=1, gap=0.0, sizes=[1], threads=1,
                           log_bytes=1, log_reps=1, rpc_seconds=1.0,
                           results=Path("/nonexistent")), seconds=15)
    data = res.data
    assert data["errors"] == {}, data["errors"]
    agents = data["agents"]  # (whether they reach their rate limit depends on the load)
    assert all(agents[k]["ok"] > 0 for k in ("polite", "hostile", "big")), agents
    assert all(a.get("other", 0) == 0 for a in agents.values()), agents
    counts = data["counts"]
    assert counts["execs.ended"] > 0 and counts["subscribers.bytes_read"] > 0, counts
    assert data["webhooks_delivered"] > 0
    assert data["health_pings"] > 50
    assert data["peak"]["wal_mib"] <= 128, data["peak"]
    assert data["end"]["rss_mib"] < data["start"]["rss_mib"] + 64, data
