"""`make demo` is the first command a newcomer runs: it must pass, every check of it, on
the code as it is (a change to a command's output once broke it while every test passed)."""

from __future__ import annotations

import subprocess
import sys

from tests.harness import REPO


def test_make_demo_passes_every_check() -> None:
    p = subprocess.run([sys.executable, str(REPO / "demo" / "story.py")], cwd=REPO,
                       capture_output=True, timeout=300)
    out = p.stdout.decode(errors="replace")
    assert p.returncode == 0, out[-4000:] + p.stderr.decode(errors="replace")[-2000:]
    assert "checks passed" in out and "✘" not in out


def test_make_demo_fleet_passes_every_check() -> None:
    """The README's three-host walkthrough (``make demo-fleet``), on a real PostgreSQL."""
    import os

    import pytest

    from tests.pg import bindir

    if bindir() is None and os.environ.get("TETHER_REQUIRE_POSTGRES") != "1":
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    p = subprocess.run([sys.executable, str(REPO / "demo" / "fleet.py")], cwd=REPO,
                       capture_output=True, timeout=300)
    out = p.stdout.decode(errors="replace")
    assert p.returncode == 0, out[-4000:] + p.stderr.decode(errors="replace")[-2000:]
    assert out.count("✓") >= 14 and "✗" not in out
