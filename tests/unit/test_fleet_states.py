"""The fleet's placement states as data: the one guard refuses every edge not listed."""

from __future__ import annotations

import pytest

from tether.fleet import states
from tether.model.states import IllegalTransition


def test_every_state_has_a_row_and_the_ended_ones_are_final() -> None:
    assert set(states.WORK_TRANSITIONS) == {"PLACED", "RUNNING", "ENDED", "LOST", "REAPED",
                                            "ASK"}
    for row in states.WORK_TRANSITIONS.values():
        assert row <= set(states.WORK_TRANSITIONS)
    assert not states.WORK_TRANSITIONS["ENDED"] and not states.WORK_TRANSITIONS["REAPED"]


def test_a_lost_exec_may_only_end_late() -> None:
    states.check(1, "LOST", "ENDED")
    for wanted in ("PLACED", "RUNNING", "REAPED", "ASK", "LOST"):
        with pytest.raises(IllegalTransition, match=f"placement 1: illegal transition "
                                                    f"LOST -> {wanted}"):
            states.check(1, "LOST", wanted)


def test_an_ended_placement_never_moves_again() -> None:
    with pytest.raises(IllegalTransition):
        states.check(7, "ENDED", "RUNNING")
