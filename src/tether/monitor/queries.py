"""Terminal queries taken out of a replay.

A program asks its terminal things by writing escape sequences (ECMA-48/xterm "control
sequences"): device attributes (DA ``CSI c``, DA2 ``CSI > c``), status and cursor
reports (``CSI 5 n``, ``CSI 6 n``), the terminal's version (XTVERSION ``CSI > 0 q``),
modes (DECRQM ``CSI ? Ps $ p``), keyboard protocol flags (``CSI ? u``), window reports
(``CSI 14 t`` …), colours (``OSC 10 ; ? ST`` …) and capabilities (XTGETTCAP ``DCS + q``,
DECRQSS ``DCS $ q``). The terminal answers by *typing* the reply. A query in the recent
output an attaching client is shown again (the replay) would be answered by that
client's terminal minutes after the program asked — and the answer would land in the
program's input, as if its user had typed ``^[[>84;0;0c``. So the replay is shown without
its queries; the program's live output is never changed (a query it makes while a
client is attached is answered as usual).

Standard library only (see :mod:`tether.monitor.main`); ``re`` is imported on first use
(an attach with a replay), not at the monitor's start.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see tether/__init__.py
if TYPE_CHECKING:
    import re

_QUERY = (
    rb"\x1b\[[>=]?[0-9;]*c"  # DA1, DA2, DA3
    rb"|\x1b\[\??[0-9;]*n"  # DSR: status, cursor position (CPR), ?-forms
    rb"|\x1b\[>[0-9;]*q"  # XTVERSION
    rb"|\x1b\[\??[0-9;]*\$p"  # DECRQM
    rb"|\x1b\[\?u"  # kitty keyboard protocol: the current flags
    rb"|\x1b\[(?:1[13-9]|2[01])(?:;[0-9]*)?t"  # window reports (XTWINOPS 11, 13-21)
    rb"|\x1b\](?:4;[0-9]+|1[0-9]|5;[0-9]+|52;[a-z0-9]*);\?(?:\x07|\x1b\\)"  # OSC colour ?
    rb"|\x1bP[+$]q[^\x1b]*\x1b\\"  # XTGETTCAP, DECRQSS
)
_compiled: re.Pattern[bytes] | None = None


def strip(data: bytes) -> bytes:
    """``data`` without the terminal queries in it."""
    global _compiled
    if b"\x1b" not in data:
        return data
    if _compiled is None:
        import re

        _compiled = re.compile(_QUERY)
    return _compiled.sub(b"", data)
