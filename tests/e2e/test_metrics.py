"""``daemon.metrics`` and ``tether metrics``: the Prometheus exposition, parsed with
prometheus_client's own parser, after real execs, errors and a SIGKILLed daemon."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import DaemonProc, raw_call, wait_for


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def _scrape(daemon: DaemonProc) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    p = daemon.cli("metrics")
    assert p.returncode == 0, p.stderr
    return _samples(p.stdout.decode())


def test_metrics_after_execs_errors_and_a_crash(daemon: DaemonProc) -> None:
    c = daemon.client()
    done = c.exec_start(["sh", "-c", "echo some output"])
    c.exec_wait(done.id, timeout=20)
    running = c.exec_start(["sleep", "300"])
    assert "error" in raw_call(daemon.socket, "exec.get", {"exec": "nosuchexec"})
    m = _scrape(daemon)
    assert m[("tether_execs", (("runtime", "process"), ("state", "FINISHED")))] == 1
    assert m[("tether_execs", (("runtime", "process"), ("state", "RUNNING")))] == 1
    assert m[("tether_execs_watched", ())] == 1
    assert m[("tether_exec_starts_total", ())] == 2
    assert m[("tether_exec_start_seconds_count", ())] == 2
    assert 0 < m[("tether_exec_start_seconds_sum", ())] < 60
    assert m[("tether_rpc_requests_total",
              (("code", "OK"), ("method", "exec.start")))] == 2
    assert m[("tether_rpc_requests_total",
              (("code", "EXEC_NOT_FOUND"), ("method", "exec.get")))] == 1
    assert m[("tether_sandboxes", (("runtime", "process"), ("state", "READY")))] == 1
    assert m[("tether_journal_events_total", ())] > 0
    assert m[("tether_log_bytes", ())] > 0
    assert m[("tether_runtime_available", (("runtime", "process"),))] == 1

    # A method name a client made up is one "unknown" label, not a new series.
    for name in ("made.up.one", "made.up.two"):
        raw_call(daemon.socket, name)
    m = _scrape(daemon)
    assert m[("tether_rpc_requests_total",
              (("code", "METHOD_NOT_FOUND"), ("method", "unknown")))] == 2

    # A crash and a restart: recovery adopts the running exec, and says so.
    daemon.kill9()
    daemon.start()
    m = _scrape(daemon)
    assert m[("tether_recovery_execs", (("outcome", "adopted"),))] == 1
    assert m[("tether_recovery_seconds", ())] >= 0
    assert m[("tether_exec_starts_total", ())] == 0  # counted per daemon
    c.exec_cancel(running.id, signal="KILL")


def test_metrics_rpc_returns_the_exposition(daemon: DaemonProc) -> None:
    reply = raw_call(daemon.socket, "daemon.metrics")["result"]
    assert reply["content_type"].startswith("text/plain; version=0.0.4")
    names = {f.name for f in text_string_to_metric_families(reply["text"])}
    assert {"tether_execs", "tether_exec_start_seconds", "tether_rpc_requests",
            "tether_lineages", "tether_agent_tokens", "tether_subscriber_lag_events",
            "tether_recovery_seconds", "tether_runtime_flag", "tether_log_bytes"} <= names


def test_metrics_of_schedules_webhooks_digests_and_cost(daemon: DaemonProc,
                                                        tmp_path: Path) -> None:
    """The newer features' tables, counted at scrape time."""
    c = daemon.client()
    c.schedule_add("tick", ["true"], every=3600, cwd=str(tmp_path))
    c.schedule_run_now("tick")
    wait_for(lambda: c.schedule_list()[0].last_state == "SUCCESS", 20, what="the run")
    c.hook_add("broken", ["exec.finished"], exec=["false"], max_tries=1, match_name="poke")
    c.exec_wait(c.exec_start(["true"], cwd=str(tmp_path), name="poke").id, timeout=20)
    wait_for(lambda: c.hook_list()[0].counts == {"DEAD": 1}, 20, what="the dead letter")
    c.budget_set(1.0)  # the daily budget
    creds = tmp_path / "creds"
    c.agent_start(["sh", "-c", f'printf "%s %s" "$TETHER_SESSION" "$TETHER_TOKEN" > '
                   f"{creds}.tmp; mv {creds}.tmp {creds}; exec sleep 120"],
                  provider="generic", name="spender", budget_usd=0.5)
    wait_for(creds.exists, 20, what="the agent's credentials")
    session, token = creds.read_text().split()
    c.agent_turn(session, token, model="claude-sonnet-4-5-20250929",
                 usage={"output_tokens": 40_000})  # $0.60: its budget, not the daily one
    c.digest_build()
    m = _scrape(daemon)
    assert m[("tether_schedule_jobs", (("state", "ACTIVE"),))] == 1
    assert m[("tether_schedule_runs", (("state", "SUCCESS"),))] == 1
    assert m[("tether_webhook_deliveries", (("hook", "broken"), ("state", "DEAD")))] == 1
    assert m[("tether_webhook_dead_letters", (("hook", "broken"),))] == 1
    assert m[("tether_cost_spent_today_usd", ())] == pytest.approx(0.60)
    assert m[("tether_budget_daily_usd", ())] == 1.0
    assert m[("tether_budgets_reached", (("scope", "lineage"),))] == 1
    assert m[("tether_budgets_reached", (("scope", "daily"),))] == 0
    assert sum(v for (name, _), v in m.items() if name == "tether_digest_nodes") > 0
