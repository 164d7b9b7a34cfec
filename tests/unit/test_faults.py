"""TETHER_FAULT parsing: points, ``point#N`` (only the Nth passage fires), and errors that
name what is accepted."""

from __future__ import annotations

import pytest

from tether.daemon.faults import Faults


def test_a_point_with_a_passage_fires_only_there() -> None:
    f = Faults("exec.after_commit#2, exec.after_handoff")
    assert f.armed == {"exec.after_commit": 2, "exec.after_handoff": 0}
    f.armed["exec.after_commit"] = 99  # not passage 1 nor 2: hit() would SIGKILL us
    f.hit("exec.after_commit")
    f.hit("exec.after_commit")
    assert f.passed == {"exec.after_commit": 2}
    f.hit("digest.after_node")  # not armed: nothing counted
    assert "digest.after_node" not in f.passed


@pytest.mark.parametrize("spec, needle", [("exec.after_commit#x", "a number"),
                                          ("nope#2", "unknown TETHER_FAULT point")])
def test_bad_specs_say_what_is_accepted(spec: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        Faults(spec)
