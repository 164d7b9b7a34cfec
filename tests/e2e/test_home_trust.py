"""A home another user could write is refused, by the daemon and by every client.

Each attack is played by a real second user (``tetherx``, made here if missing): it
owns or writes the home, plants symlinks and a fake daemon; root then runs the real
CLI, SDK and daemon against it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import TETHER, DaemonProc, kill_strays, wait_for
from tether.client.blocking import Client
from tether.client.errors import DaemonUnavailable, HomeUntrusted
from tether.model.layout import HOME_UNTRUSTED_EXIT
from tether.runtime.docker.names import home_key
from tether.runtime.docker.views import DockerError

OTHER = "tetherx"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a 2nd user")

# A fake daemon: listens where tether.sock was and writes whatever it receives to argv[2].
FAKE_DAEMON = r"""
import os, socket, sys
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o777)
s.listen(8); open(sys.argv[2] + ".ready", "w").close()
while True:
    c, _ = s.accept(); data = c.recv(65536)
    with open(sys.argv[2], "ab") as f: f.write(data)
    c.close()
"""


@pytest.fixture(scope="session")
def other() -> tuple[int, int]:
    """A real second user (uid, gid)."""
    if subprocess.run(["id", "-u", OTHER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", OTHER], check=True)
    uid = int(subprocess.run(["id", "-u", OTHER], capture_output=True, check=True).stdout)
    gid = int(subprocess.run(["id", "-g", OTHER], capture_output=True, check=True).stdout)
    return uid, gid


def as_other(other: tuple[int, int], *argv: str) -> list[str]:
    uid, gid = other
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *argv]


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A root-owned 0755 directory under /tmp for homes and their parents."""
    d = Path(tempfile.mkdtemp(prefix="tt", dir="/tmp"))
    d.chmod(0o755)
    yield d
    # Any daemon a test (or the unfixed code) started, homes behind symlinks included.
    for top, _dirs, files in os.walk(d, followlinks=True):
        if "daemon.lock" in files:
            DaemonProc(Path(top)).cleanup()
            kill_strays(Path(top))
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def secret(scratch: Path) -> Path:
    """A root-only file the attacker wants root's daemon to write to."""
    f = scratch / "root-only"
    f.write_text("root's\n")
    f.chmod(0o600)
    return f


def tether(home: Path, *args: str, env: dict[str, str] | None = None,
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TETHER, "--home", str(home), *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **(env or {})})


def refused(r: subprocess.CompletedProcess[str], path: Path, fix: str) -> None:
    assert r.returncode == HOME_UNTRUSTED_EXIT, r
    # The daemon's own log lines aside, one line says what is wrong and how to fix it.
    lines = [ln for ln in r.stderr.strip().splitlines() if " INFO tether." not in ln]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert str(path) in lines[0] and fix in lines[0], lines[0]


def test_home_owned_by_another_user_is_refused(other: tuple[int, int], scratch: Path,
                                               secret: Path) -> None:
    # The report's attack: a 0777 home of tetherx whose daemon.log points at a root-only file.
    home = scratch / "h"
    home.mkdir()  # scratch is root's: root makes it, then gives it away
    os.chown(home, *other)
    home.chmod(0o777)
    subprocess.run(as_other(other, "ln", "-s", str(secret), str(home / "daemon.log")),
                   check=True)
    r = tether(home, "status")
    refused(r, home, "chown")
    assert secret.read_text() == "root's\n"
    assert not (home / "daemon.lock").exists()  # no daemon was started
    # The daemon itself refuses too, with its documented status.
    d = subprocess.run([*TETHER, "--home", str(home), "daemon"], capture_output=True,
                       text=True, timeout=30)
    refused(d, home, "chown")
    assert secret.read_text() == "root's\n"
    with pytest.raises(HomeUntrusted, match="chown"):
        Client(home, reconnect=2).status()


def test_world_writable_home_gets_no_connection_to_a_planted_socket(
        other: tuple[int, int], scratch: Path) -> None:
    # Root's own home, but 0777: tetherx moves tether.sock aside and listens in its place.
    home = scratch / "h"
    home.mkdir(mode=0o700)
    d = DaemonProc(home)
    d.start()
    try:
        home.chmod(0o777)
        loot_dir = scratch / "loot.d"
        loot_dir.mkdir()
        os.chown(loot_dir, *other)
        got = loot_dir / "loot"
        subprocess.run(as_other(other, "mv", str(home / "tether.sock"), str(home / "old")),
                       check=True)
        fake = subprocess.Popen(as_other(other, sys.executable, "-c", FAKE_DAEMON,
                                         str(home / "tether.sock"), str(got)))
        try:
            wait_for(lambda: Path(f"{got}.ready").exists(), what="the fake daemon")
            r = tether(home, "run", "-e", "API_TOKEN=hunter2", "--", "true")
            refused(r, home, f"chmod 700 {home}")
            with pytest.raises(HomeUntrusted, match="chmod 700"):
                Client(home, reconnect=2).status()
            time.sleep(0.2)
            assert not got.exists() or b"hunter2" not in got.read_bytes()
        finally:
            fake.kill()
            fake.wait()
    finally:
        d.cleanup()


def test_a_parent_another_user_owns_is_refused(other: tuple[int, int],
                                               scratch: Path) -> None:
    # Root's 0700 home inside tetherx's directory: tetherx can rename the home away.
    parent = scratch / "p"
    parent.mkdir(mode=0o755)
    os.chown(parent, *other)
    home = parent / "h"
    home.mkdir(mode=0o700)
    refused(tether(home, "status"), parent, "chown")
    refused(tether(home, "daemon"), parent, "chown")


def test_a_group_writable_parent_is_refused_but_sticky_tmp_is_not(scratch: Path) -> None:
    parent = scratch / "p"
    parent.mkdir()
    parent.chmod(0o775)
    refused(tether(parent / "h", "status"), parent, f"chmod go-w {parent}")
    # A sticky, root-owned, world-writable parent is fine (as /tmp is, here and for
    # every other test): others may add names there but not move ours.
    parent.chmod(0o1777)
    d = DaemonProc(parent / "h")
    try:
        r = tether(parent / "h", "status")
        assert r.returncode == 0, r.stderr
    finally:
        d.cleanup()


def test_a_symlinked_home_owned_by_another_user_is_refused(other: tuple[int, int],
                                                            scratch: Path) -> None:
    real = scratch / "real"
    real.mkdir(mode=0o700)
    sticky = scratch / "t"
    sticky.mkdir()
    sticky.chmod(0o1777)
    link = sticky / "h"
    subprocess.run(as_other(other, "ln", "-s", str(real), str(link)), check=True)
    refused(tether(link, "status"), link, "chown")
    # Root's own symlink to tetherx's directory, the home not made yet: the resolved
    # parents are checked too.
    evil = scratch / "evil"
    evil.mkdir()
    os.chown(evil, *other)
    (scratch / "ln").symlink_to(evil)
    refused(tether(scratch / "ln" / "sub" / "h", "status"), evil, "chown")
    assert not (evil / "sub").exists()


def test_symlinks_planted_earlier_are_never_written_through(scratch: Path,
                                                            secret: Path) -> None:
    # The home is private now, but was not when these were planted.
    home = scratch / "h"
    home.mkdir(mode=0o700)
    (home / "daemon.log").symlink_to(secret)
    with pytest.raises(DaemonUnavailable, match="symlink"):
        Client(home, reconnect=2).status()
    (home / "daemon.log").unlink()
    os.mkfifo(home / "daemon.log")  # nor blocked on a FIFO
    with pytest.raises(DaemonUnavailable, match="daemon's log"):
        Client(home, reconnect=2).status()
    (home / "daemon.log").unlink()
    for name in ("run", "daemon.lock", "daemon.pid", "tether.db", "tether.db-wal"):
        (home / name).symlink_to(secret)
        r = tether(home, "daemon")
        assert r.returncode != 0, (name, r)
        assert "Traceback" not in r.stderr and "symlink" in r.stderr, (name, r.stderr)
        assert secret.read_text() == "root's\n", name
        (home / name).unlink()
    # A sandbox's log directory leading elsewhere: the monitors would create files there.
    (home / "logs").mkdir(mode=0o700, exist_ok=True)
    (home / "logs" / "default").symlink_to(scratch)
    r = subprocess.run([*TETHER, "--home", str(home), "daemon"], capture_output=True,
                       text=True, timeout=30)
    refused(r, home / "logs" / "default", "rm ")
    (home / "logs" / "default").unlink()
    (home / "docker.key").symlink_to(secret)
    with pytest.raises(DockerError, match="symlink"):
        home_key(str(home))
    assert secret.read_text() == "root's\n"


def test_daemon_stop_signals_no_pid_from_an_untrusted_home(other: tuple[int, int],
                                                           scratch: Path) -> None:
    home = scratch / "h"
    home.mkdir()
    os.chown(home, *other)
    victim = subprocess.Popen(["sleep", "60"])
    try:
        subprocess.run(as_other(other, "sh", "-c", f"echo {victim.pid} > {home}/daemon.lock"),
                       check=True)
        refused(tether(home, "daemon", "stop"), home, "chown")
        assert victim.poll() is None
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()
