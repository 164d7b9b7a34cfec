"""The lean ``tether attach`` takes only plain command lines; the rest goes to click."""

from __future__ import annotations

import pytest

from tether.cli.attachfast import _parse


@pytest.mark.parametrize(("argv", "want"), [
    (["attach", "x"], {"ref": "x"}),
    (["--home", "/h", "attach", "x"], {"--home": "/h", "ref": "x"}),
    (["--home=/h", "attach", "--read-only", "x", "--replay", "0"],
     {"--home": "/h", "--read-only": True, "ref": "x", "--replay": "0"}),
    (["attach", "--detach-keys=ctrl-p,ctrl-q", "x"],
     {"--detach-keys": "ctrl-p,ctrl-q", "ref": "x"}),
])
def test_plain_command_lines_are_taken(argv: list[str], want: dict[str, object]) -> None:
    assert _parse(argv) == want


@pytest.mark.parametrize("argv", [
    ["attach"], ["attach", "--help"], ["attach", "-h", "x"], ["attach", "x", "y"],
    ["attach", "--bogus", "x"], ["attach", "--replay"], ["attach", "--", "x"],
    ["--home", "attach", "x"], ["attach", "--home", "/h", "x"], ["ps"],
    ["--home", "/h", "--home", "/i", "attach", "x"], ["attach", "--replay", "-1", "x"],
])
def test_anything_else_goes_to_click(argv: list[str]) -> None:
    assert _parse(argv) is None
