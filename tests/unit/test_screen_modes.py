"""The terminal modes a program's output sets, and what gives a terminal back on detach
(``tether.monitor.screen``): pure."""

from __future__ import annotations

import pytest

from tether.monitor.screen import ScreenModes


def test_nothing_set_gives_back_plain_attributes_only() -> None:
    s = ScreenModes()
    s.feed(b"plain text \x1b[1mbold\x1b[0m \x1b[2J\x1b[H")
    assert s.restore() == b"\x1b[0m"


def test_a_full_screen_program_is_undone_in_order() -> None:
    s = ScreenModes()
    # vi/curses: alternate screen, keypad and cursor keys in application mode, cursor
    # hidden, mouse and bracketed paste on.
    s.feed(b"\x1b[?1049h\x1b[22;0;0t\x1b[?1h\x1b=\x1b[?25l\x1b[?1000;1006h\x1b[?2004hscreen")
    assert s.restore() == (b"\x1b[0m\x1b[?1l\x1b[?1000l\x1b[?1006l\x1b[?2004l\x1b>"
                           b"\x1b[?25h\x1b[?1049l")  # the alternate screen last
    s.feed(b"\x1b[?1049l\x1b[?25h\x1b[?1l\x1b>\x1b[?1000;1006l\x1b[?2004l")  # it quit
    assert s.restore() == b"\x1b[0m"


@pytest.mark.parametrize("cut", range(1, 14))
def test_sequences_cut_across_chunks(cut: int) -> None:
    data = b"ab\x1b[?1049h\x1b[?25lcd"
    s = ScreenModes()
    s.feed(data[:cut])
    s.feed(data[cut:])
    assert s.state() == {"modes": [1049], "cursor_hidden": True, "keypad": False}


def test_the_mode_that_entered_the_alternate_screen_leaves_it() -> None:
    s = ScreenModes()
    s.feed(b"\x1b[?47h")
    assert s.restore().endswith(b"\x1b[?47l")
    s.feed(b"\x1bc")  # RIS resets everything
    assert s.restore() == b"\x1b[0m"


def test_a_client_starts_from_the_monitors_state() -> None:
    s = ScreenModes()
    s.feed(b"\x1b[?1049h\x1b[?25l\x1b=")
    copy = ScreenModes.from_state(s.state())
    assert copy.restore() == s.restore()
    assert ScreenModes.from_state(None).restore() == b"\x1b[0m"  # an older monitor
    odd = ScreenModes.from_state({"modes": [1049, 7, "x"], "cursor_hidden": "yes"})
    assert odd.restore() == b"\x1b[0m\x1b[?1049l"  # only modes it follows


def test_unfollowed_and_overlong_sequences() -> None:
    s = ScreenModes()
    s.feed(b"\x1b[?6n\x1b[?1$p\x1b[?" + b"1;" * 40 + b"1049h")
    assert s.restore() == b"\x1b[0m"
