"""``tether run`` under the product default (``auto`` → bwrap) with a newcomer's own
toolchain: a virtualenv, a pipx-like tool in ``~/.local/bin``, from a checkout under a
home directory and under /tmp; and from where no sandbox can apply (``/tmp``, a home),
unsandboxed with a one-line notice. A real daemon, the real CLI, real bubblewrap."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import TETHER, DaemonProc, new_home, remove_home
from tether.runtime import bwrap

PROBE = bwrap.probe()
pytestmark = pytest.mark.skipif(not PROBE.available, reason=f"bwrap: {PROBE.reason}")

#: What users make venvs with: here possibly a pyenv python, itself under a home.
PYTHON3 = shutil.which("python3") or sys.executable
PROBE_PY = """
import os, sys
print("prefix", sys.prefix)
for name, path in (("venv", sys.argv[1]), ("outside", sys.argv[2])):
    try:
        open(os.path.join(path, "planted"), "w").close()
        print(name, "writable")
    except OSError as e:
        print(name, "refused", e.errno)
open("made.txt", "w").write("made")
print("tether-home", os.path.exists(sys.argv[3]))
print("secret", os.path.exists(sys.argv[4]))
"""


def venv(path: Path, *site: str) -> Path:
    """A real virtualenv, nothing installed (no network, no pip)."""
    subprocess.run([PYTHON3, "-m", "venv", "--without-pip", *site, str(path)], check=True,
                   timeout=120)
    return path


@pytest.fixture
def user_home() -> Iterator[Path]:
    """A real user home directory under /home (the daemon's and the CLI's $HOME)."""
    home = Path(f"/home/tetherdev-{uuid.uuid4().hex[:8]}")
    home.mkdir(parents=True)
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_ed25519").write_text("key")
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def auto_daemon(user_home: Path) -> Iterator[DaemonProc]:
    d = DaemonProc(new_home(), env={"TETHER_DEFAULT_RUNTIME": "auto",
                                    "HOME": str(user_home)})
    yield d
    d.cleanup()
    remove_home(d.home)


def tether(d: DaemonProc, *args: str, cwd: Path,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TETHER, "--home", str(d.home), *args], cwd=cwd, text=True,
                          capture_output=True, timeout=60, env={**d.env, **(env or {})})


def check_isolated(out: str, *, venv_dir: Path, workspace: Path, outside: Path) -> None:
    lines = out.splitlines()
    assert f"prefix {venv_dir}" in lines, out  # the venv's own interpreter and site
    assert "venv refused 30" in lines, out  # EROFS: read-only
    assert "outside refused 2" in lines or "outside refused 30" in lines, out
    assert not (outside / "planted").exists() and not (venv_dir / "planted").exists()
    assert (workspace / "made.txt").read_text() == "made"
    assert "tether-home False" in lines and "secret False" in lines, out


def test_a_venv_and_a_pipx_tool_run_sandboxed_from_a_checkout_in_a_home(
        auto_daemon: DaemonProc, user_home: Path) -> None:
    d = auto_daemon
    d.start()
    assert d.client().sandbox_get("default").spec.runtime == "bwrap"
    app = user_home / "src" / "app"
    app.mkdir(parents=True)
    outside = user_home / "src" / "other"
    outside.mkdir()
    # Its base interpreter's packages too (pytest, where the base python has it).
    env_dir = venv(user_home / ".venvs" / "app", "--system-site-packages")
    tool_venv = venv(user_home / ".local" / "share" / "pipx" / "venvs" / "hello")
    bin_dir = user_home / ".local" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "hello").write_text(f"#!{tool_venv}/bin/python\n" + PROBE_PY)
    (bin_dir / "hello").chmod(0o755)
    secret = str(user_home / ".ssh" / "id_ed25519")
    argv = [str(env_dir), str(outside), str(d.home), secret]
    r = tether(d, "run", "--", f"{env_dir}/bin/python", "-c", PROBE_PY, *argv, cwd=app)
    assert r.returncode == 0, r.stderr
    assert "not sandboxed" not in r.stderr, r.stderr
    check_isolated(r.stdout, venv_dir=env_dir, workspace=app, outside=outside)
    (app / "made.txt").unlink()
    host = subprocess.run([f"{env_dir}/bin/python", "-m", "pytest", "--version"],
                          capture_output=True, text=True, timeout=60)
    if host.returncode == 0:  # the README's `tether run -- .venv/bin/python -m pytest`
        r = tether(d, "run", "--", f"{env_dir}/bin/python", "-m", "pytest", "--version",
                   cwd=app)
        assert (r.returncode, r.stdout) == (0, host.stdout), r.stderr
    # The pipx-like command found on PATH, its #! naming its own venv.
    path = f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    r = tether(d, "run", "--", "hello", str(tool_venv), *argv[1:], cwd=app,
               env={"PATH": path})
    assert r.returncode == 0, r.stderr
    check_isolated(r.stdout, venv_dir=tool_venv, workspace=app, outside=outside)
    # An activated venv ($VIRTUAL_ENV, its bin/ first on PATH) is seen too.
    r = tether(d, "run", "--", "python", "-c", PROBE_PY, *argv, cwd=app,
               env={"VIRTUAL_ENV": str(env_dir), "PATH": f"{env_dir}/bin:{path}"})
    assert r.returncode == 0, r.stderr
    assert f"prefix {env_dir}" in r.stdout.splitlines(), r.stdout


def test_a_checkout_under_tmp_runs_its_venv_sandboxed(auto_daemon: DaemonProc,
                                                      tmp_path: Path) -> None:
    d = auto_daemon
    d.start()
    app, outside = tmp_path / "app", tmp_path / "other"
    app.mkdir()
    outside.mkdir()
    env_dir = venv(tmp_path / "venv")
    argv = [str(env_dir), str(outside), str(d.home), str(tmp_path / "none")]
    r = tether(d, "run", "--", f"{env_dir}/bin/python", "-c", PROBE_PY, *argv, cwd=app)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    check_isolated(r.stdout, venv_dir=env_dir, workspace=app, outside=outside)


def test_where_no_sandbox_applies_the_default_runs_unsandboxed_with_a_notice(
        auto_daemon: DaemonProc, user_home: Path) -> None:
    d = auto_daemon
    d.start()
    seen = f"test -S {d.home}/tether.sock && echo sees-tether-home"
    for cwd in (Path("/tmp"), user_home):
        r = tether(d, "run", "--", "sh", "-c", f"pwd; {seen}", cwd=cwd)
        assert r.returncode == 0, r.stderr
        assert r.stdout == f"{cwd}\nsees-tether-home\n"  # really unsandboxed
        notice = r.stderr.splitlines()
        assert len(notice) == 1 and notice[0].startswith("tether: ran unsandboxed"), notice
        for hint in ("run from a project directory", "--runtime bwrap refuses"):
            assert hint in notice[0], notice
        assert len(notice[0]) < 200, notice  # one line a person reads (it was 330)
    c = d.client()
    x = max(c.exec_list(all=True), key=lambda e: e.created_at)
    assert x.notice is not None and str(user_home) in x.notice
    # Asked for by name, bwrap stays strict.
    r = tether(d, "run", "--runtime", "bwrap", "--", "true", cwd=Path("/tmp"))
    assert r.returncode != 0 and "cannot run in a bwrap sandbox" in r.stderr, r.stderr
    # So does a default runtime named bwrap.
    assert d.term() == 0
    d.start(env={"TETHER_DEFAULT_RUNTIME": "bwrap"})
    r = tether(d, "run", "--", "true", cwd=Path("/tmp"))
    assert r.returncode != 0 and "cannot run in a bwrap sandbox" in r.stderr, r.stderr


def test_directories_made_to_hold_binds_are_read_only(auto_daemon: DaemonProc,
                                                      user_home: Path) -> None:
    """The home and `src/` above a workspace in a home, and the home above a toolchain,
    exist inside only because bwrap made them to hold the binds: a write there must
    fail, not land in the sandbox's own root and vanish (found by `make demo`)."""
    d = auto_daemon
    d.start()
    app = user_home / "src" / "app"
    app.mkdir(parents=True)
    script = ("for f in \"$HOME/x\" \"$HOME/src/y\" /root/z /new-top; do "
              "touch \"$f\" 2>/dev/null && echo \"wrote $f\" || echo \"refused $f\"; done; "
              "echo ok > inside && echo wrote-workspace")
    r = tether(d, "run", "--", "sh", "-c", script, cwd=app)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "wrote-workspace" in lines and (app / "inside").read_text() == "ok\n"
    assert not [x for x in lines if x.startswith("wrote /")], r.stdout
    assert not (user_home / "x").exists() and not (user_home / "src" / "y").exists()
