"""The real agent CLIs under test: Claude Code, Codex and Gemini CLI (npm) and Aider (PyPI),
installed, pinned, by ``.ci/agents.sh`` into ``$TETHER_AGENTS_DIR`` (default
``/opt/tether-agents``). A test that needs one calls :func:`cli`, which skips when it is not
installed — or fails, under ``TETHER_REQUIRE_AGENTS=1`` (CI), so CI never passes without them.

Only the model APIs are faked (they cannot run here): see the ``fake*`` modules beside this one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

AGENTS_DIR = Path(os.environ.get("TETHER_AGENTS_DIR", "/opt/tether-agents"))
REQUIRE = os.environ.get("TETHER_REQUIRE_AGENTS") == "1"

_WHERE = {
    "claude": AGENTS_DIR / "npm" / "node_modules" / ".bin" / "claude",
    "codex": AGENTS_DIR / "npm" / "node_modules" / ".bin" / "codex",
    "gemini": AGENTS_DIR / "npm" / "node_modules" / ".bin" / "gemini",
    "aider": AGENTS_DIR / "aider" / "bin" / "aider",
}


def versions() -> str:
    """What ``.ci/agents.sh`` installed (``claude-code=… codex=… …``, or ``latest``)."""
    try:
        return (AGENTS_DIR / ".versions").read_text().strip()
    except OSError:
        return ""


def cli(name: str) -> Path:
    """The real CLI ``name`` (claude, codex, gemini, aider); skip (or fail under
    ``TETHER_REQUIRE_AGENTS=1``) when it is not installed."""
    path = _WHERE[name]
    if not os.access(path, os.X_OK):
        msg = (f"the real {name} CLI is not installed at {path}: run .ci/agents.sh "
               f"(or set TETHER_AGENTS_DIR)")
        if REQUIRE:
            pytest.fail(f"TETHER_REQUIRE_AGENTS=1 but {msg}", pytrace=False)
        pytest.skip(msg)
    return path
