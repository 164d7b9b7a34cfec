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
