"""What the CLI prints of agent-written strings (docs/SECURITY.md, "What the daemon sends
out"): no control character reaches the terminal as such."""

from __future__ import annotations

from tether.cli.output import event_line, printable
from tether.model.records import Event


def test_escape_sequences_in_agent_strings_are_shown_not_sent() -> None:
    osc52 = "\x1b]52;c;cm0gLXJmIH4K\x07"  # "set the clipboard": an agent's waiting message
    line = event_line(Event(gseq=1, seq=1, type="agent.waiting", time=0.0,
                            state="notification", reason=f"needs you{osc52}\x1b[2J"))
    assert "\x1b" not in line and "\x07" not in line and "\\x1b]52;c;" in line
    assert printable("a\tb\x9bc\x7f") == "a\tb\\x9bc\\x7f"
    assert printable("one\ntwo\x1b", lines=True) == "one\ntwo\\x1b"
