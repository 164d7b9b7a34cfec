"""Drain snapshots append a turn instead of rewriting the conversation, compact when
the lines outgrow the base, and read back whole through crashes, torn lines and
retried turns."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tether.agent import snapshot


def _snap(turn: int, convo: list[dict[str, Any]]) -> dict[str, Any]:
    return snapshot.build(lineage="lin", instance="i", provider="generic", model="m",
                          usage={"input_tokens": turn}, messages=convo, turn=turn,
                          provider_session_id=None, loop_config={"argv": ["a"]})


def _turns(home: Path, n: int, size: int = 10, start: int = 1,
           convo: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    convo = list(convo or [])
    for t in range(start, n + 1):
        new = [{"role": "user", "content": f"q{t}" + "x" * size},
               {"role": "assistant", "content": f"a{t}"}]
        convo = [*convo, *new]
        snapshot.record_turn(home, _snap(t, convo), new)
    return convo


def test_turns_are_appended_not_rewritten(tmp_path: Path) -> None:
    convo = _turns(tmp_path, 1)
    base = snapshot.path_for(tmp_path, "lin")
    base_bytes = base.read_bytes()
    convo = _turns(tmp_path, 50, start=2, convo=convo)
    assert base.read_bytes() == base_bytes  # the base was not rewritten
    lines = snapshot.turns_path(base).read_text().splitlines()
    assert len(lines) == 49 and json.loads(lines[-1])["turn"] == 50
    snap = snapshot.read(base)
    assert snap["messages"] == convo and snap["turn"] == 50
    assert snap["usage"] == {"input_tokens": 50}


def test_lines_outgrowing_the_base_compact_it(tmp_path: Path) -> None:
    convo = _turns(tmp_path, 200, size=1000)
    base = snapshot.path_for(tmp_path, "lin")
    lines = snapshot.turns_path(base)
    assert base.stat().st_size > snapshot.COMPACT_MIN  # compacted at least once
    assert not lines.exists() or lines.stat().st_size <= max(base.stat().st_size,
                                                             snapshot.COMPACT_MIN) + 2100
    assert snapshot.read(base)["messages"] == convo
    # The bytes written stay linear: far below rewriting everything at every turn.


def test_compact_folds_lines_into_the_base(tmp_path: Path) -> None:
    convo = _turns(tmp_path, 5)
    base = snapshot.path_for(tmp_path, "lin")
    snapshot.compact(tmp_path, "lin")
    assert not snapshot.turns_path(base).exists()
    assert json.loads(base.read_bytes())["messages"] == convo  # the base alone is whole


def test_crash_between_rewrite_and_removal_counts_each_turn_once(tmp_path: Path) -> None:
    _turns(tmp_path, 5)
    base = snapshot.path_for(tmp_path, "lin")
    lines = snapshot.turns_path(base).read_bytes()
    full = snapshot.read(base)
    snapshot.write(tmp_path, full)
    snapshot.turns_path(base).write_bytes(lines)  # as if killed before the unlink
    assert snapshot.read(base)["messages"] == full["messages"]


def test_torn_line_is_ignored_and_cut_before_the_next(tmp_path: Path) -> None:
    convo = _turns(tmp_path, 3)
    base = snapshot.path_for(tmp_path, "lin")
    with open(snapshot.turns_path(base), "ab") as f:
        f.write(b'{"turn": 4, "messages": [{"role"')  # killed mid-append
    assert snapshot.read(base)["messages"] == convo
    new = [{"role": "user", "content": "q4"}]
    snapshot.record_turn(tmp_path, _snap(4, [*convo, *new]), new)
    assert snapshot.read(base)["messages"] == [*convo, *new]
    assert all(json.loads(x) for x in snapshot.turns_path(base).read_text().splitlines())


def test_a_retried_turn_counts_once(tmp_path: Path) -> None:
    convo = _turns(tmp_path, 3)
    base = snapshot.path_for(tmp_path, "lin")
    new = [{"role": "user", "content": "q4"}]
    snapshot.record_turn(tmp_path, _snap(4, [*convo, *new]), new)
    snapshot.record_turn(tmp_path, _snap(4, [*convo, *new]), new)  # the agent retried
    assert snapshot.read(base)["messages"] == [*convo, *new]


def test_full_rewrites_an_unreadable_base(tmp_path: Path) -> None:
    _turns(tmp_path, 3)
    base = snapshot.path_for(tmp_path, "lin")
    base.write_bytes(b"{not json")
    new = [{"role": "user", "content": "fresh"}]
    snapshot.record_turn(tmp_path, _snap(4, new), new, full=True)
    assert snapshot.read(base)["messages"] == new
    assert not os.path.exists(snapshot.turns_path(base))


def test_a_turn_retried_after_a_whole_rewrite_counts_once(tmp_path: Path) -> None:
    """The rewrite succeeded but the turn's commit did not (a full disk): the agent
    reports the same turn again, and the conversation read back holds it once."""
    convo = _turns(tmp_path, 3)
    base = snapshot.path_for(tmp_path, "lin")
    new = [{"role": "user", "content": "q4"}]
    snapshot.record_turn(tmp_path, _snap(4, []), new, full=True)
    snapshot.record_turn(tmp_path, _snap(4, []), new, full=True)
    assert snapshot.read(base)["messages"] == [*convo, *new]


def test_the_conversation_kept_is_its_newest_part(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(snapshot, "MAX_CONVERSATION_BYTES", 20_000)
    _turns(tmp_path, 300, size=100)  # 600 messages, ~70 KB: many rewrites
    base = snapshot.path_for(tmp_path, "lin")
    snap = snapshot.read(base)
    assert snap["turn"] == 300 and snap["messages"][-1] == {"role": "assistant",
                                                            "content": "a300"}
    assert snap["dropped"] + len(snap["messages"]) == 600
    whole = json.loads(base.read_bytes())
    assert snapshot.size(whole["messages"]) <= 20_000
    lines = snapshot.turns_path(base)
    on_disk = base.stat().st_size + (lines.stat().st_size if lines.exists() else 0)
    assert on_disk <= 2 * 20_000 + snapshot.COMPACT_MIN + 4096
    snapshot.compact(tmp_path, "lin")  # before a revival: the base alone, still capped
    assert snapshot.size(json.loads(base.read_bytes())["messages"]) <= 20_000


def test_verify_rewrites_a_base_it_cannot_read(tmp_path: Path) -> None:
    _turns(tmp_path, 3)
    base = snapshot.path_for(tmp_path, "lin")
    base.write_bytes(b"{not json")
    new = [{"role": "user", "content": "fresh"}]
    snapshot.record_turn(tmp_path, _snap(4, []), new, verify=True)
    assert snapshot.read(base)["messages"] == new


def test_fit_turn_keeps_the_newest_that_fit() -> None:
    small = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    assert snapshot.fit_turn(small) == small
    big = [{"role": "user", "content": "q" * 1000}, {"role": "assistant", "content": "a"}]
    assert snapshot.fit_turn(big, limit=200) == [{"role": "assistant", "content": "a"}]
    huge = [{"role": "assistant", "content": "é\"" * 100_000 + "END"}]
    cut = snapshot.fit_turn(huge, limit=10_000)
    assert snapshot.size(cut) <= 10_000
    assert cut[0]["content"].endswith("END") and cut[0]["truncated"] == 200_003
