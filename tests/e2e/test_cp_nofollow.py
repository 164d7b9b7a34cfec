"""``tether cp`` never writes (nor reads) through a symlink a sandbox planted, at any
depth: the real CLI against a real daemon and real bwrap sandboxes (issue 11 #1)."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import pytest

from tests.e2e.test_sandbox_cli import cp, cp_box, d, mkdir, needs_bwrap, tether
from tests.harness import DaemonProc

__all__ = ["cp_box", "d"]  # fixtures, shared with test_sandbox_cli


def in_box(d: DaemonProc, name: str, ws: Path, script: str) -> None:
    r = tether(d, "run", "--sandbox", name, "--", "sh", "-c", script, cwd=ws)
    assert r.returncode == 0, r.stderr


@needs_bwrap
def test_cp_out_does_not_write_through_a_nested_symlink(
        d: DaemonProc, cp_box: tuple[str, Path]) -> None:
    """The issue's reproduction: the destination is in the workspace, where the sandbox
    made ``out/srcdir/sub`` a link to a host directory; the merge wrote through it."""
    name, t = cp_box
    host = mkdir(t / "host")
    in_box(d, name, t / "ws", f"mkdir -p out/srcdir srcdir/sub && "
           f"ln -s {host} out/srcdir/sub && echo x > srcdir/sub/f")
    r = cp(d, f"{name}:/work/srcdir", str(t / "ws" / "out"))
    assert list(host.iterdir()) == [], "tether cp wrote through a planted symlink"
    assert r.returncode == 2 and b"symlink" in r.stderr, r


@needs_bwrap
@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_cp_out_refuses_a_symlink_at_any_depth_of_the_destination(
        d: DaemonProc, cp_box: tuple[str, Path], depth: int) -> None:
    """``out/a/b/c/f``: the link (to a host directory, or at the file to a host file)
    put at ``a``, ``a/b``, ``a/b/c`` or ``a/b/c/f``; nothing lands outside."""
    name, t = cp_box
    host = mkdir(t / "host")
    victim = t / "victim.txt"
    victim.write_text("original\n")
    parts = ["a", "b", "c", "f"]
    at = "/".join(parts[:depth])
    target = victim if depth == 4 else host
    in_box(d, name, t / "ws", f"mkdir -p src/a/b/c out/{'/'.join(parts[:depth - 1]) or '.'} "
           f"&& echo x > src/a/b/c/f && ln -s {target} out/{at}")
    r = cp(d, f"{name}:/work/src/a", str(t / "ws" / "out"))
    assert list(host.iterdir()) == [] and victim.read_text() == "original\n"
    assert r.returncode == 2 and b"symlink" in r.stderr, r


@needs_bwrap
def test_cp_out_does_not_follow_a_link_an_earlier_copy_brought_out(
        d: DaemonProc, cp_box: tuple[str, Path]) -> None:
    """A symlink in the source tree is copied out as a link; a later copy merged into
    the same destination must not then write through it."""
    name, t = cp_box
    host = mkdir(t / "host")
    in_box(d, name, t / "ws", f"mkdir -p one/pkg two/pkg/sub && ln -s {host} one/pkg/sub "
           "&& echo x > two/pkg/sub/f")
    dest = mkdir(t / "dest")
    r = cp(d, f"{name}:/work/one/pkg", str(dest))
    assert r.returncode == 0 and (dest / "pkg" / "sub").is_symlink(), r
    r = cp(d, f"{name}:/work/two/pkg", str(dest))
    assert list(host.iterdir()) == [] and r.returncode == 2, r


@needs_bwrap
def test_cp_in_refuses_a_parent_that_is_a_link_to_a_host_directory(
        d: DaemonProc, cp_box: tuple[str, Path]) -> None:
    name, t = cp_box
    host = mkdir(t / "host")
    in_box(d, name, t / "ws", f"mkdir -p deep && ln -s {host} deep/link && ln -s {host} top")
    (t / "f.txt").write_text("f\n")
    for inside in ("/work/top/f.txt", "/work/deep/link/f.txt", "/work/deep/link/"):
        r = cp(d, str(t / "f.txt"), f"{name}:{inside}")
        assert r.returncode == 2 and b"symlink" in r.stderr, (inside, r)
    assert list(host.iterdir()) == []


def test_cp_out_of_a_process_sandbox_does_not_merge_through_a_symlink(
        d: DaemonProc, tmp_path: Path) -> None:
    r = tether(d, "sandbox", "create", "--runtime", "process", "proc-nofollow-box")
    assert r.returncode == 0, r.stderr
    host = mkdir(tmp_path / "host")
    (mkdir(tmp_path / "src" / "sub") / "f").write_text("x\n")
    mkdir(tmp_path / "out" / "src")
    (tmp_path / "out" / "src" / "sub").symlink_to(host)
    r = cp(d, f"proc-nofollow-box:{tmp_path / 'src'}", str(tmp_path / "out"))
    tether(d, "sandbox", "rm", "proc-nofollow-box")
    assert list(host.iterdir()) == []
    assert r.returncode == 2 and b"symlink" in r.stderr, r


def test_cp_out_cannot_be_redirected_by_a_racing_swap_in_the_destination(
        tmp_path: Path) -> None:
    """The destination lies in the workspace: a process in the sandbox swapping each
    directory the copy makes there for a link to the host must not get anything out."""
    from tether.hostio.copy import CopyError, copy_out_of

    root = mkdir(tmp_path / "ws")
    outside = mkdir(tmp_path / "outside")
    for i in range(60):
        (mkdir(root / "src" / f"d{i}") / "f").write_text("pwned\n")
    dest = mkdir(root / "dest")
    stop = threading.Event()

    def racer() -> None:
        while not stop.is_set():
            for p in list(dest.glob("src/d*")):
                with contextlib.suppress(OSError):
                    if p.is_dir() and not p.is_symlink():
                        p.rename(root / f"moved-{time.monotonic_ns()}")
                        p.symlink_to(outside)

    th = threading.Thread(target=racer, daemon=True)
    th.start()
    try:
        for _ in range(10):
            with contextlib.suppress(CopyError, OSError):
                copy_out_of(str(root), "src", str(dest), forbidden="/nowhere")
    finally:
        stop.set()
        th.join(5)
    assert list(outside.iterdir()) == []
