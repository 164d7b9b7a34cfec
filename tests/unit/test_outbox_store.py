"""The outbox's SQL on a real SQLite file: deliveries commit with their event or not at all,
and every state change is guarded by the row's state."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tether.daemon.journal import HookMatcher
from tether.model.hooks import DeliveryState, HookRecord
from tether.model.records import ExecRecord, ExecSpec
from tether.model.states import ExecState, IllegalTransition
from tether.store import Store
from tether.store.outbox import Outbox


def setup(tmp_path: Path) -> tuple[Store, Outbox]:
    store = Store(tmp_path / "t.db")
    outbox = Outbox(store)
    outbox.add_hook(HookRecord(name="ci", on=["exec.*"], url="http://127.0.0.1:9/"))
    store.on_append = HookMatcher(outbox)
    return store, outbox


def rows(store: Store) -> list[tuple[int, str]]:
    return store._db.execute("SELECT gseq, state FROM outbox ORDER BY id").fetchall()


def test_a_delivery_commits_with_its_event_or_not_at_all(tmp_path: Path) -> None:
    store, _ = setup(tmp_path)
    rec = ExecRecord(id="e1", sandbox="default", state="PENDING", spec=ExecSpec(argv=["true"]),
                     name="job", created_at=time.time())
    _, ev = store.create_exec(rec)
    assert rows(store) == [(ev.gseq, "PENDING")]
    with pytest.raises(IllegalTransition):  # PENDING -> FINISHED: refused, rolled back
        store.transition_exec("e1", ExecState.FINISHED, reason="x")
    assert rows(store) == [(ev.gseq, "PENDING")]
    assert store.last_gseq() == ev.gseq
    store.append_event(None, "daemon.started", state="RUNNING")  # no hook matches it
    assert len(rows(store)) == 1


def test_outcomes_are_guarded_by_the_claim(tmp_path: Path) -> None:
    store, outbox = setup(tmp_path)
    store.create_exec(ExecRecord(id="e1", sandbox="default", state="PENDING",
                                 spec=ExecSpec(argv=["true"])))
    [d] = outbox.claim_due(time.time(), 10)
    assert d.state == "PROCESSING" and d.tries == 1 and b'"hook":"ci"' in d.body
    assert outbox.claim_due(time.time(), 10) == []  # not claimed twice
    assert outbox.recover() == 1  # a restart: back to PENDING...
    outbox.finish(d, DeliveryState.COMPLETED)  # ...so the old try's outcome changes nothing
    assert rows(store)[0][1] == "PENDING"
    [d2] = outbox.claim_due(time.time(), 10)
    assert d2.tries == 2
    ev = outbox.finish(d2, DeliveryState.DEAD, error="HTTP 500")
    assert ev is not None and ev.type == "hook.dead" and rows(store)[0][1] == "DEAD"
    n, _ = outbox.retry("ci", None, time.time())
    assert n == 1 and rows(store)[0][1] == "PENDING"
