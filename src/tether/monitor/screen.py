"""The terminal modes a program's output has set, so that a user's terminal can be given
back as tmux gives it back on detach: out of the program's alternate screen, the cursor
shown, mouse reporting, focus events, bracketed paste and application keys off, plain
attributes. Without it, detaching from ``vi`` left the user's shell on vi's screen with
the cursor hidden (``tput rmcup`` needed).

Only what a program turns on is turned off again (never a mode it did not set), and the
alternate screen is left with the very mode that entered it (``1049`` also restores the
cursor saved on entry). The monitor feeds every output chunk (:meth:`ScreenModes.feed`);
a client attaching in the middle is sent :meth:`ScreenModes.state` so that it can follow
too. Standard library only (see :mod:`tether.monitor.main`).
"""

from __future__ import annotations

#: DEC private modes whose "set" a detached terminal must not keep: application cursor
#: keys, mouse reporting (X10, normal, highlight, button, any-event, UTF-8, SGR, urxvt,
#: SGR pixels), focus events, bracketed paste.
RESETTABLE = frozenset({1, 9, 1000, 1001, 1002, 1003, 1004, 1005, 1006, 1015, 1016, 2004})
#: The alternate screen, by the modes that enter it (xterm: 1049 saves the cursor too).
ALT_SCREEN = (1049, 1047, 47)
CURSOR = 25  # DECTCEM: reset (``l``) hides the cursor
#: A sequence longer than this (``ESC [ ? 1;2;…``) is not one we follow.
_MAX_SEQ = 64
_DIGITS = b"0123456789;"


class ScreenModes:
    """The modes set by a program's output, followed chunk by chunk."""

    def __init__(self) -> None:
        self.modes: set[int] = set()  # RESETTABLE and ALT_SCREEN modes that are set
        self.cursor_hidden = False
        self.keypad = False  # DECKPAM (ESC =): application keypad
        self._tail = b""

    def feed(self, data: bytes) -> None:
        if self._tail:
            data, self._tail = self._tail + data, b""
        i = data.find(b"\x1b")
        n = len(data)
        while i >= 0:
            if i + 1 >= n:
                self._tail = data[i:]  # a sequence cut by the chunk's end
                return
            kind = data[i + 1:i + 2]
            if kind in (b"=", b">"):
                self.keypad = kind == b"="
            elif kind == b"c":  # RIS: the terminal is reset
                self.modes.clear()
                self.cursor_hidden = self.keypad = False
            elif kind == b"[":
                if i + 2 >= n:
                    self._tail = data[i:]
                    return
                if data[i + 2:i + 3] == b"?":
                    j = i + 3
                    while j < n and j - i < _MAX_SEQ and data[j] in _DIGITS:
                        j += 1
                    if j >= n:
                        if j - i < _MAX_SEQ:
                            self._tail = data[i:]
                        return
                    if data[j:j + 1] in (b"h", b"l"):
                        self._set(data[i + 3:j], data[j:j + 1] == b"h")
            i = data.find(b"\x1b", i + 1)

    def _set(self, params: bytes, on: bool) -> None:
        for p in params.split(b";"):
            if not p.isdigit():
                continue
            mode = int(p)
            if mode == CURSOR:
                self.cursor_hidden = not on
            elif mode in RESETTABLE or mode in ALT_SCREEN:
                if on:
                    self.modes.add(mode)
                else:
                    self.modes.discard(mode)

    def restore(self) -> bytes:
        """What gives a terminal back: attributes reset, the modes the program set turned
        off, the cursor shown, and last the alternate screen left (as tmux: ``sgr0``,
        ``rmkx``, ``cnorm``, mouse, focus and paste off, ``rmcup``)."""
        out = [b"\x1b[0m"]
        out += [b"\x1b[?%dl" % m for m in sorted(self.modes & RESETTABLE)]
        if self.keypad:
            out.append(b"\x1b>")
        if self.cursor_hidden:
            out.append(b"\x1b[?25h")
        alt = [m for m in ALT_SCREEN if m in self.modes]
        if alt:
            out.append(b"\x1b[?%dl" % alt[0])
        return b"".join(out)

    def state(self) -> dict[str, object]:
        """For a client that attaches now: what is set (JSON)."""
        return {"modes": sorted(self.modes), "cursor_hidden": self.cursor_hidden,
                "keypad": self.keypad}

    @classmethod
    def from_state(cls, state: object) -> ScreenModes:
        """The tracker a client starts from (``state`` from the monitor; anything else,
        from an older monitor: nothing set)."""
        s = cls()
        if isinstance(state, dict):
            modes = state.get("modes")
            if isinstance(modes, list):
                s.modes = {m for m in modes if isinstance(m, int)
                           and (m in RESETTABLE or m in ALT_SCREEN)}
            s.cursor_hidden = state.get("cursor_hidden") is True
            s.keypad = state.get("keypad") is True
        return s
