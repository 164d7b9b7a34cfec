"""Terminal queries are taken out of a replay (tether.monitor.queries): pure."""

from __future__ import annotations

import pytest

from tether.monitor.queries import strip


@pytest.mark.parametrize("query", [
    b"\x1b[c", b"\x1b[0c", b"\x1b[>c", b"\x1b[>0c", b"\x1b[=c",  # DA1, DA2, DA3
    b"\x1b[5n", b"\x1b[6n", b"\x1b[?6n",  # status, cursor position
    b"\x1b[>0q", b"\x1b[>q",  # XTVERSION
    b"\x1b[?2004$p", b"\x1b[4$p",  # DECRQM
    b"\x1b[?u",  # kitty keyboard flags
    b"\x1b[14t", b"\x1b[18t", b"\x1b[14;2t",  # window reports
    b"\x1b]11;?\x07", b"\x1b]10;?\x1b\\", b"\x1b]4;1;?\x07",  # colours
    b"\x1bP+q544e\x1b\\", b"\x1bP$qm\x1b\\",  # XTGETTCAP, DECRQSS
])
def test_each_query_is_taken_out(query: bytes) -> None:
    assert strip(b"before" + query + b"after") == b"beforeafter"


def test_drawing_is_kept() -> None:
    screen = (b"\x1b[?1049h\x1b[2J\x1b[H\x1b[1;31mred\x1b[0m\x1b[8;24;80t\x1b[?25l"
              b"\x1b]0;title\x07\x1b[10;5H\x1b[K\x1b[?2004h\x1b[>4;1m\x1b[=1;1u plain")
    assert strip(screen) == screen
    assert strip(b"no escapes") == b"no escapes"
