"""What a new user hit first (issue 23): fleet mode without its extra, and a home whose
sockets' paths are too long. The real CLI and daemon as subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness import TETHER
from tether.model.layout import MAX_SOCKET_PATH, HomeLayout

#: ``python -m tether.cli.main`` as if psycopg were not installed: an import of it fails
#: exactly as a missing package does (``ModuleNotFoundError``, ``name == "psycopg"``).
WITHOUT_PSYCOPG = [sys.executable, "-c",
                   "import sys; sys.modules['psycopg'] = None; sys.argv[0] = 'tether'; "
                   "from tether.cli.main import main; main()"]
URL = "postgresql://tether@127.0.0.1:1/tether"


@pytest.mark.parametrize("args", [
    ["--fleet", URL, "hosts"],
    ["--fleet", URL, "ps"],
    ["fleet", "init", URL],
    ["daemon", "--fleet", URL, "--host-name", "build-3"],
])
def test_fleet_without_its_extra_says_so_in_one_line(args: list[str], tmp_path: Path) -> None:
    """Issue 23, item 5: a 30-line ``ModuleNotFoundError: psycopg`` traceback before."""
    home = tmp_path / "h"
    r = subprocess.run([*WITHOUT_PSYCOPG, "--home", str(home), *args], capture_output=True,
                       timeout=60, text=True)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "`fleet` extra" in lines[0] and "'.[fleet]'" in lines[0]
    assert "tether[fleet]" not in lines[0]  # not on PyPI: that install cannot work


def long_home(tmp_path: Path, size: int) -> Path:
    """A home path of exactly ``size`` bytes (its parent made, 0700)."""
    base = tmp_path / f"p{size}"
    base.mkdir(mode=0o700)
    name = "h" * (size - len(os.fsencode(base)) - 1)
    return base / name


@pytest.mark.parametrize("extra", [1, 20])  # monitors' sockets too long; tether.sock too
def test_a_home_too_long_for_its_sockets_is_named_at_once(tmp_path: Path, extra: int) -> None:
    """Issue 23, item 6: with a home whose sockets' paths pass 107 bytes, every command
    waited 30 s, then said "no tether daemon answers …; see …/daemon.log" — a log that did
    not exist. Now the CLI and the daemon both say what is wrong and what to do."""
    room = MAX_SOCKET_PATH - len("/run/000000000000.sock")
    home = long_home(tmp_path, room + extra)
    for env in ({"TETHER_HOME": str(home)}, {}):
        args = [] if env else ["--home", str(home)]
        started = time.monotonic()
        r = subprocess.run([*TETHER, *args, "ps"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, **env})
        assert time.monotonic() - started < 20  # not the 30 s reconnect budget
        assert r.returncode == 125, r.stderr
        assert "too long a path for its sockets" in r.stderr
        assert f"at most {room} bytes" in r.stderr and "$TETHER_HOME" in r.stderr
        assert "daemon.log" not in r.stderr
    assert not home.exists()  # nothing was made there
    r = subprocess.run([*TETHER, "--home", str(home), "daemon"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and f"at most {room} bytes" in r.stderr, r.stderr
    assert HomeLayout(home).socket_path_problem() is not None
    assert HomeLayout(Path("/" + "h" * (room - 1))).socket_path_problem() is None
