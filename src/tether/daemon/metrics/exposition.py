"""Prometheus metrics of the daemon (``daemon.metrics``, ``tether metrics``).

Collected at scrape time from the services' own state (the store, the watches, the bus,
the agent core, the runtimes' status), so no hot path is instrumented for them; only
two cheap counters are kept as things happen: RPC requests by method and error code
(``RpcServer.requests``) and exec starts with their latency
(:mod:`tether.daemon.execs.latency`).
``prometheus_client`` is imported on the first scrape: the daemon's start never pays
for it.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from tether.model.states import LINEAGE_LIVE
from tether.store.metrics import MetricsReads

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from tether.daemon.root import Daemon


def _disk_bytes(root: Path) -> int:
    """Bytes allocated under ``root`` (the logs), without following links."""
    total = 0
    stack = [str(root)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        else:
                            total += entry.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        continue
        except OSError:
            continue
    return total


async def exposition(d: Daemon) -> str:
    """The Prometheus text exposition (format 0.0.4) of the daemon as it is now."""
    from prometheus_client import CollectorRegistry, generate_latest

    families = await _families(d)

    class _Snapshot:
        def collect(self) -> Iterable[Metric]:
            return families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot())
    return generate_latest(registry).decode()


async def _families(d: Daemon) -> list[Metric]:
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )

    out: list[Metric] = []

    def gauge(name: str, doc: str, labels: list[str],
              values: Iterable[tuple[tuple[str, ...], float]]) -> None:
        g = GaugeMetricFamily(name, doc, labels=labels)
        for key, v in values:
            g.add_metric(list(key), v)
        out.append(g)

    def counter(name: str, doc: str, labels: list[str],
                values: Iterable[tuple[tuple[str, ...], float]]) -> None:
        c = CounterMetricFamily(name, doc, labels=labels)
        for key, v in values:
            c.add_metric(list(key), v)
        out.append(c)

    gauge("tether_daemon_start_time_seconds", "When this daemon started (Unix time).", [],
          [((), d.started_at)])
    # Sandboxes and execs, by runtime.
    sandboxes = d.store.list_sandboxes()
    runtime_of = {sb.id: sb.spec.runtime for sb in sandboxes}
    by_sb: Counter[tuple[str, ...]] = Counter((sb.spec.runtime, sb.state) for sb in sandboxes)
    gauge("tether_sandboxes", "Sandboxes (not deleted) by runtime and state.",
          ["runtime", "state"], by_sb.items())
    execs: Counter[tuple[str, ...]] = Counter()
    for sb, state, n in MetricsReads(d.store).execs_by_sandbox_state():
        execs[(state, runtime_of.get(sb, "deleted-sandbox"))] += n
    gauge("tether_execs", "Execs in the store by state and their sandbox's runtime.",
          ["state", "runtime"], execs.items())
    gauge("tether_execs_watched", "Execs whose monitor the daemon watches now.", [],
          [((), d.execs.live_count())])
    hist = d.execs.start_latency
    counter("tether_exec_starts", "Execs started (RUNNING) by this daemon.", [],
            [((), hist.count)])
    h = HistogramMetricFamily("tether_exec_start_seconds",
                              "From exec.start to RUNNING, for execs this daemon started.")
    h.add_metric([], hist.cumulative(), hist.sum)
    out.append(h)
    # Recovery at this daemon's start.
    rec = d.recovery_summary
    gauge("tether_recovery_seconds", "How long recovery took at the last start.", [],
          [((), rec.get("ms", 0) / 1000)])
    gauge("tether_recovery_execs", "What recovery found at the last start, by outcome.",
          ["outcome"], [((k,), v) for k, v in rec.items()
                        if k in ("adopted", "finished", "failed")])
    # RPC.
    counter("tether_rpc_requests", "JSON-RPC requests answered, by method and error code "
            "(OK: no error).", ["method", "code"], d.rpc_requests().items())
    # The journal and its subscribers.
    counter("tether_journal_events", "Events committed to the journal (the last gseq).", [],
            [((), d.store.last_gseq())])
    subs = list(d.bus.subs.values())
    gauge("tether_subscriptions", "Live event subscriptions.", [], [((), len(subs))])
    gauge("tether_subscriber_lag_events", "Events queued for the slowest subscriber.", [],
          [((), max((s.queue.qsize() for s in subs), default=0))])
    # Agents.
    lineages = d.store.list_lineages()
    classes: Counter[tuple[str, ...]] = Counter(
        (r.status, r.lifecycle, d.agents.heartbeat_class(r) or "none") for r in lineages)
    gauge("tether_lineages", "Agent lineages by status, lifecycle and heartbeat class.",
          ["status", "lifecycle", "heartbeat"], classes.items())
    counter("tether_agent_turns", "Turns reported by the lineages in the store.", [],
            [((), sum(r.turns for r in lineages))])
    counter("tether_agent_revivals", "Revivals of the lineages in the store.", [],
            [((), sum(max(0, r.attempt - 1) for r in lineages))])
    tokens: Counter[tuple[str, ...]] = Counter()
    for r in lineages:
        for kind, n in r.usage.items():
            tokens[(kind,)] += n
    counter("tether_agent_tokens", "Tokens the lineages in the store reported, by kind.",
            ["kind"], tokens.items())
    # Runtimes: availability and what their status reports as flags (docker: connected,
    # its event stream).
    avail: list[tuple[tuple[str, ...], float]] = []
    flags: list[tuple[tuple[str, ...], float]] = []
    for rt in d.runtimes:
        st = await rt.status()
        avail.append(((rt.name,), float(bool(st.available))))
        flags.extend(((rt.name, k), float(v)) for k, v in st.fields.items()
                     if isinstance(v, bool))
    gauge("tether_runtime_available", "1 when the runtime can run execs here.",
          ["runtime"], avail)
    gauge("tether_runtime_flag", "The runtime's yes/no status fields (docker's connected: "
          "its event stream is up).", ["runtime", "flag"], flags)
    # The scheduler, webhooks, digests, cost: from their tables, at scrape time.
    reads = MetricsReads(d.store)
    gauge("tether_schedule_jobs", "Scheduled jobs by state.", ["state"],
          reads.schedule_jobs_by_state())
    gauge("tether_schedule_runs", "Scheduled runs in the store by state (retention "
          "prunes settled ones at the journal's age).", ["state"],
          reads.schedule_runs_by_state())
    deliveries = reads.deliveries_by_hook_state()
    gauge("tether_webhook_deliveries", "Webhook deliveries in the outbox by hook and state.",
          ["hook", "state"], deliveries)
    gauge("tether_webhook_dead_letters", "DEAD webhook deliveries by hook (`tether hook "
          "retry` tries them again).", ["hook"],
          [((hook,), n) for (hook, state), n in deliveries if state == "DEAD"])
    gauge("tether_digest_nodes", "Digest nodes (their latest versions) by level and state.",
          ["level", "state"], reads.digest_nodes_by_level_state())
    budgets = d.cost.show([r for r in lineages if r.status in LINEAGE_LIVE])
    gauge("tether_cost_spent_today_usd", "What agents' turns cost today (the digest's "
          "time zone), priced turns only.", [], [((), budgets["spent_today_usd"])])
    daily = budgets["daily"]
    reached = [(("lineage",), float(sum(b["spent_usd"] >= b["budget_usd"]
                                        for b in budgets["lineages"])))]
    if daily is not None:
        gauge("tether_budget_daily_usd", "The daily budget over every agent.", [],
              [((), daily["budget_usd"])])
        reached.append((("daily",), float(budgets["spent_today_usd"] >= daily["budget_usd"])))
    gauge("tether_budgets_reached", "Budgets reached now: live lineages at their budget, "
          "and 1 when today's spend reached the daily budget.", ["scope"], reached)
    gauge("tether_log_bytes", "Disk used by the execs' logs.", [],
          [((), _disk_bytes(d.layout.logs))])
    gauge("tether_scrape_time_seconds", "When these metrics were collected (Unix time).", [],
          [((), time.time())])
    return out


