"""An agent behind the egress proxy gets its CLI's telemetry and update checks turned off
(``Provider.quiet_env``), unless the user's environment (the lineage's or its sandbox's)
sets them; with the host's network it gets nothing of the kind. A real daemon and real
bubblewrap; the "CLI" is a program named ``aider`` (Aider's provider reads only its
output) that writes down the environment it was given — what is tested is tether's, not
Aider's (the real Aider runs in ``tests/realcli/test_aider.py``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import DaemonProc, new_home, remove_home, wait_for
from tether.runtime import bwrap

PROBE = bwrap.probe()
pytestmark = pytest.mark.skipif(not PROBE.available, reason=f"bwrap: {PROBE.reason}")

PROGRAM = r'''#!/usr/bin/python3
import json, os, sys
keys = ("AIDER_ANALYTICS", "AIDER_CHECK_UPDATE", "HTTPS_PROXY")
with open(sys.argv[1] + ".tmp", "w") as f:
    json.dump({k: os.environ.get(k) for k in keys}, f)
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
'''


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProc]:
    d = DaemonProc(new_home(), env={"TETHER_DEFAULT_RUNTIME": "auto",
                                    "HOME": str(tmp_path / "home"), "TETHER_AGENT_TICK": "0.2"})
    (tmp_path / "home").mkdir()
    d.start()
    yield d
    d.cleanup()
    remove_home(d.home)


def run(d: DaemonProc, work: Path, name: str, *flags: str,
        env: dict[str, str] | None = None) -> dict[str, str | None]:
    r = d.cli("run", "-d", "--cwd", str(work), *flags, "--", str(work / "aider"), name,
              env=env)
    assert r.returncode == 0, r.stderr
    wait_for(lambda: (work / name).exists(), timeout=60, what=f"{name} written")
    out: dict[str, str | None] = json.loads((work / name).read_text())
    return out


def test_behind_the_proxy_only_and_the_users_own_value_wins(daemon: DaemonProc,
                                                           tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "aider").write_text(PROGRAM)
    (work / "aider").chmod(0o755)
    assert run(daemon, work, "default") == {"AIDER_ANALYTICS": "false",
                                            "AIDER_CHECK_UPDATE": "false",
                                            "HTTPS_PROXY": "http://127.0.0.1:3128"}
    assert run(daemon, work, "theirs", env={"AIDER_ANALYTICS": "true"}) == {
        "AIDER_ANALYTICS": "true", "AIDER_CHECK_UPDATE": "false",
        "HTTPS_PROXY": "http://127.0.0.1:3128"}
    # A sandbox's own env is the user's too.
    r = daemon.cli("sandbox", "create", "--runtime", "bwrap", "-e", "AIDER_CHECK_UPDATE=true",
                   "updating")
    assert r.returncode == 0, r.stderr
    assert run(daemon, work, "box", "--sandbox", "updating") == {
        "AIDER_ANALYTICS": "false", "AIDER_CHECK_UPDATE": "true",
        "HTTPS_PROXY": "http://127.0.0.1:3128"}
    assert run(daemon, work, "host", "--network", "host") == {
        "AIDER_ANALYTICS": None, "AIDER_CHECK_UPDATE": None, "HTTPS_PROXY": None}
