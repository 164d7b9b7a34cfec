"""Sandbox flags on ``tether run`` / ``tether sandbox create``, and ``tether cp``:
the real CLI against a real daemon (bwrap where it works here)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import TETHER, DaemonProc, wait_for
from tether.client.replies import ExecView
from tether.runtime import bwrap

PROBE = bwrap.probe()
needs_bwrap = pytest.mark.skipif(not PROBE.available, reason=f"bwrap: {PROBE.reason}")


@pytest.fixture(scope="module")
def d() -> Iterator[DaemonProc]:
    """One daemon for the module. Its home is ``<parent>/h`` so that a test can use the
    parent as a bwrap exec's cwd without exposing the rest of /tmp."""
    parent = Path(tempfile.mkdtemp(prefix="tp", dir="/tmp"))
    home = parent / "h"
    home.mkdir()
    dp = DaemonProc(home, env={"TETHER_DEFAULT_RUNTIME": "auto",
                               "TETHER_SWEEP_INTERVAL": "0.2"})
    dp.start()
    yield dp
    dp.cleanup()
    shutil.rmtree(parent, ignore_errors=True)


def tether(d: DaemonProc, *args: str, cwd: Path | None = None,
           timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*TETHER, "--home", str(d.home), *args], cwd=cwd,
                          capture_output=True, timeout=timeout, env=d.env)


def sandboxes(d: DaemonProc) -> list[dict[str, Any]]:
    r = tether(d, "sandbox", "ls", "--all", "--json")
    assert r.returncode == 0, r.stderr
    rows: list[dict[str, Any]] = json.loads(r.stdout)
    return rows


def by_name(d: DaemonProc, name: str) -> dict[str, Any] | None:
    return next((s for s in sandboxes(d) if s["name"] == name), None)


def execs_in(d: DaemonProc, sandbox_id: str) -> list[ExecView]:
    return [x for x in d.client().exec_list(all=True) if x.sandbox == sandbox_id]


def mkdir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


# ---------------------------------------------------------------------- tether run
@needs_bwrap
def test_run_with_sandbox_flags_uses_an_ephemeral_sandbox(d: DaemonProc,
                                                          tmp_path: Path) -> None:
    ws = mkdir(tmp_path / "ws")
    before = {s["id"] for s in sandboxes(d)}
    r = tether(d, "run", "--runtime", "bwrap", "--workspace", str(ws), "--label", "t=1",
               "--", "sh", "-c", "echo out; echo err >&2; echo made > made; exit 3", cwd=ws)
    assert r.returncode == 3, r.stderr
    assert r.stdout == b"out\n" and b"err\n" in r.stderr
    assert (ws / "made").read_text() == "made\n"
    (sb,) = [s for s in sandboxes(d) if s["id"] not in before]
    assert sb["name"].startswith("run-") and len(sb["name"]) == len("run-") + 8
    assert sb["spec"]["runtime"] == "bwrap" and sb["spec"]["ephemeral"] is True
    assert sb["spec"]["workspace"] == os.path.realpath(ws)
    assert sb["spec"]["labels"] == {"t": "1"}
    wait_for(lambda: by_name(d, sb["name"])["state"] == "DELETED",  # type: ignore[index]
             timeout=20, what="the ephemeral sandbox deleted")
    # History stays: the exec and its logs outlive the sandbox.
    (x,) = execs_in(d, sb["id"])
    assert (x.state, x.exit_code) == ("FINISHED", 3)
    out = tether(d, "logs", x.id)
    err = tether(d, "logs", "--stderr", x.id)
    assert (out.returncode, out.stdout) == (0, b"out\n"), out.stderr
    assert (err.returncode, err.stdout) == (0, b"err\n"), err.stderr


@needs_bwrap
def test_keep_sandbox_keeps_it_and_sandbox_names_it(d: DaemonProc, tmp_path: Path) -> None:
    ws = mkdir(tmp_path / "ws")
    r = tether(d, "run", "--sandbox", "kept-box", "--keep-sandbox", "--runtime", "bwrap",
               "--", "sh", "-c", "echo kept > k", cwd=ws)
    assert r.returncode == 0, r.stderr
    kept = by_name(d, "kept-box")
    assert kept is not None
    assert f"sandbox {kept['id']} created for this run (kept".encode() in r.stderr
    assert (ws / "k").read_text() == "kept\n"
    r = tether(d, "run", "--sandbox", "named-box", "--runtime", "bwrap", "--", "true", cwd=ws)
    assert r.returncode == 0, r.stderr
    named = by_name(d, "named-box")
    assert named is not None and named["spec"]["ephemeral"] is True
    wait_for(lambda: by_name(d, "named-box")["state"] == "DELETED",  # type: ignore[index]
             timeout=20, what="named-box deleted")
    time.sleep(0.6)  # three sweeps
    kept = by_name(d, "kept-box")
    assert kept is not None and kept["state"] == "READY"
    assert kept["spec"].get("ephemeral", False) is False
    # A kept sandbox runs more: the next command sees the first one's files.
    r = tether(d, "run", "--sandbox", "kept-box", "--", "cat", "k", cwd=ws)
    assert (r.returncode, r.stdout) == (0, b"kept\n"), r.stderr
    assert tether(d, "sandbox", "rm", "kept-box").returncode == 0


@needs_bwrap
def test_resources_need_the_docker_runtime(d: DaemonProc, tmp_path: Path) -> None:
    before = len(sandboxes(d))
    for flags in (["--memory", "64m", "--runtime", "bwrap"], ["--cpus", "1", "--runtime",
                                                                "process"],
                  ["--pids", "10"]):
        r = tether(d, "run", *flags, "--", "true", cwd=tmp_path)
        assert r.returncode == 2, (flags, r.stderr)
        assert b"docker runtime" in r.stderr and b"resource" in r.stderr, r.stderr
        assert b"Traceback" not in r.stderr
    assert len(sandboxes(d)) == before  # nothing was recorded


def test_bad_sandbox_flags_exit_2_naming_the_field(d: DaemonProc, tmp_path: Path) -> None:
    before = len(sandboxes(d))
    cases = [
        (["--mount", "/nonexistent-tether-src:/x"], b"mounts[0].source"),
        (["--mount", "no-colon"], b"--mount"),
        (["--mount", f"{tmp_path}:/x:rwx"], b"--mount"),
        (["--set", "no_such_field=1"], b"no_such_field"),
        (["--label", "nokv"], b"--label"),
        (["--network", "bogus"], b"--network"),
        (["--runtime", "bogus"], b"runtime"),
        (["--idle-timeout", "0"], b"--idle-timeout"),
    ]
    for flags, needle in cases:
        r = tether(d, "run", *flags, "--", "true", cwd=tmp_path)
        assert r.returncode == 2 and needle in r.stderr, (flags, r.returncode, r.stderr)
        assert b"Traceback" not in r.stderr
    r = tether(d, "sandbox", "create", "--mount", "/nonexistent-tether-src:/x", "bad-box")
    assert r.returncode == 2 and b"mounts[0].source" in r.stderr, r.stderr
    assert len(sandboxes(d)) == before


@needs_bwrap
def test_mounts_are_read_only_unless_rw(d: DaemonProc, tmp_path: Path) -> None:
    src, rw_src, cwd = mkdir(tmp_path / "src"), mkdir(tmp_path / "rwsrc"), mkdir(tmp_path / "c")
    (src / "in.txt").write_text("from the host\n")
    r = tether(d, "sandbox", "create", "--runtime", "bwrap", "--mount", f"{src}:/data",
               "ro-box")
    assert r.returncode == 0, r.stderr
    r = tether(d, "sandbox", "create", "--runtime", "bwrap", "--mount", f"{rw_src}:/data:rw",
               "rw-box")
    assert r.returncode == 0, r.stderr
    script = "cat /data/in.txt 2>/dev/null; echo new > /data/new && echo wrote"
    r = tether(d, "run", "--sandbox", "ro-box", "--", "sh", "-c", script, cwd=cwd)
    assert r.stdout == b"from the host\n" and b"Read-only file system" in r.stderr
    assert r.returncode != 0 and not (src / "new").exists()
    r = tether(d, "run", "--sandbox", "rw-box", "--", "sh", "-c", script, cwd=cwd)
    assert (r.returncode, r.stdout) == (0, b"wrote\n"), r.stderr
    assert (rw_src / "new").read_text() == "new\n"
    for name in ("ro-box", "rw-box"):
        assert tether(d, "sandbox", "rm", name).returncode == 0


# ---------------------------------------------------------------------- tether cp
SPEC = """\
runtime: bwrap
workspace: ./ws
workspace_target: /work
mounts:
  - ./ro:/data
  - ./rw:/out:rw
"""


@pytest.fixture
def cp_box(d: DaemonProc, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    for sub in ("ws", "ro", "rw"):
        mkdir(tmp_path / sub)
    (tmp_path / "ro" / "ro.txt").write_text("read only\n")
    spec = tmp_path / "box.yaml"
    spec.write_text(SPEC)
    name = f"cp-{tmp_path.name[-12:].replace('_', '-')}"
    r = tether(d, "sandbox", "create", "-f", str(spec), name)
    assert r.returncode == 0, r.stderr
    yield name, tmp_path
    tether(d, "sandbox", "rm", name)


def cp(d: DaemonProc, src: str, dst: str, cwd: Path | None = None,
       ) -> subprocess.CompletedProcess[bytes]:
    return tether(d, "cp", src, dst, cwd=cwd)


@needs_bwrap
def test_cp_in_and_out_of_a_bwrap_sandbox(d: DaemonProc, cp_box: tuple[str, Path]) -> None:
    name, t = cp_box
    ws = t / "ws"
    payload = bytes(range(256)) * 64 + b"\x00\r\n tail"
    (t / "blob.bin").write_bytes(payload)
    r = cp(d, str(t / "blob.bin"), f"{name}:/work/blob.bin")
    assert (r.returncode, r.stdout) == (0, f"copied {len(payload)} bytes\n".encode()), r.stderr
    assert (ws / "blob.bin").read_bytes() == payload
    # The sandbox sees it at /work, and what it writes there comes back out.
    r = tether(d, "run", "--sandbox", name, "--", "sh", "-c",
               "pwd -P; cmp /work/blob.bin blob.bin && mkdir -p made/deep && "
               "printf 'one\\n' > made/a && printf 'two' > made/deep/b && "
               "cp /work/blob.bin made/deep/blob", cwd=ws)
    assert (r.returncode, r.stdout) == (0, b"/work\n"), r.stderr
    r = cp(d, f"{name}:/work/made/a", str(t / "a.txt"))
    assert r.returncode == 0 and (t / "a.txt").read_bytes() == b"one\n", r.stderr
    # A directory, into an existing host directory (docker cp's rule).
    dest = mkdir(t / "dest")
    r = cp(d, f"{name}:/work/made", str(dest))
    assert r.returncode == 0, r.stderr
    assert (dest / "made" / "a").read_bytes() == b"one\n"
    assert (dest / "made" / "deep" / "b").read_bytes() == b"two"
    assert (dest / "made" / "deep" / "blob").read_bytes() == payload
    # A directory in, then into a rw mount; relative host paths are the CLI's cwd's.
    tree = mkdir(t / "tree" / "sub")
    (tree / "f").write_bytes(b"\xff\xfe")
    r = cp(d, "tree", f"{name}:/work/", cwd=t)
    assert r.returncode == 0, r.stderr
    assert (ws / "tree" / "sub" / "f").read_bytes() == b"\xff\xfe"
    r = cp(d, "blob.bin", f"{name}:/out/x.bin", cwd=t)
    assert r.returncode == 0 and (t / "rw" / "x.bin").read_bytes() == payload, r.stderr
    # Reading a read-only mount out is fine.
    r = cp(d, f"{name}:/data/ro.txt", str(t / "ro-copy.txt"))
    assert r.returncode == 0 and (t / "ro-copy.txt").read_text() == "read only\n", r.stderr


@needs_bwrap
def test_cp_refusals(d: DaemonProc, cp_box: tuple[str, Path]) -> None:
    name, t = cp_box
    (t / "f.txt").write_text("f\n")
    r = cp(d, str(t / "f.txt"), f"{name}:/data/f.txt")
    assert r.returncode == 2 and b"/data/f.txt is in a read-only mount" in r.stderr, r.stderr
    assert not (t / "ro" / "f.txt").exists()
    for inside in ("/etc/f.txt", "/tmp/f.txt", "/workspace/f.txt"):
        r = cp(d, str(t / "f.txt"), f"{name}:{inside}")
        assert r.returncode == 2, r.stderr
        assert b"is not in the sandbox's workspace or mounts" in r.stderr
    r = cp(d, f"{name}:/etc/hostname", str(t / "h.txt"))
    assert r.returncode == 2 and b"not in the sandbox's workspace" in r.stderr
    assert not (t / "h.txt").exists()
    r = cp(d, f"{name}:/work/missing", str(t / "m.txt"))
    assert r.returncode != 0 and b"does not exist" in r.stderr
    r = cp(d, str(t / "f.txt"), f"{name}:work/f.txt")
    assert r.returncode == 2 and b"must be absolute" in r.stderr
    # tether's home: nothing is written into it, nothing of it goes in.
    (t / "ws" / "w.txt").write_text("w\n")
    for dst in (d.home, d.home / "logs", d.home / "new.txt"):
        r = cp(d, f"{name}:/work/w.txt", str(dst))
        assert r.returncode == 2 and b"tether's home" in r.stderr, (dst, r.stderr)
    assert not (d.home / "new.txt").exists() and not (d.home / "w.txt").exists()
    for src in (d.home / "tether.db", d.home, d.home.parent):
        r = cp(d, str(src), f"{name}:/work/")
        assert r.returncode == 2 and b"tether's home" in r.stderr, (src, r.stderr)
    assert sorted(p.name for p in (t / "ws").iterdir()) == ["w.txt"]
    # Neither side a sandbox, or both: a usage error.
    assert cp(d, str(t / "f.txt"), str(t / "g.txt")).returncode == 2
    assert cp(d, f"{name}:/work/w.txt", f"{name}:/work/v.txt").returncode == 2
    r = cp(d, str(t / "f.txt"), "no-such-box:/work/f.txt")
    assert r.returncode == 1 and b"no sandbox matches" in r.stderr


def test_cp_with_the_process_runtime_is_a_host_copy(d: DaemonProc, tmp_path: Path) -> None:
    r = tether(d, "sandbox", "create", "--runtime", "process", "proc-box")
    assert r.returncode == 0, r.stderr
    payload = os.urandom(3000)
    (tmp_path / "src.bin").write_bytes(payload)
    inside = mkdir(tmp_path / "inside")
    r = cp(d, str(tmp_path / "src.bin"), f"proc-box:{inside}")
    assert r.returncode == 0 and (inside / "src.bin").read_bytes() == payload, r.stderr
    r = cp(d, f"proc-box:{inside / 'src.bin'}", str(tmp_path / "back.bin"))
    assert r.returncode == 0 and (tmp_path / "back.bin").read_bytes() == payload, r.stderr
    r = cp(d, f"proc-box:{inside}", str(mkdir(tmp_path / "out")))
    assert r.returncode == 0 and (tmp_path / "out" / "inside" / "src.bin").read_bytes() == \
        payload, r.stderr
    r = cp(d, f"proc-box:{inside / 'src.bin'}", str(d.home / "x.bin"))
    assert r.returncode == 2 and b"tether's home" in r.stderr
    assert tether(d, "sandbox", "rm", "proc-box").returncode == 0


# ---------------------------------------------------------------------- the home
@needs_bwrap
def test_a_cwd_containing_the_home_hides_it_and_one_inside_is_refused(d: DaemonProc,
                                                                     ) -> None:
    parent = d.home.parent
    script = f"ls -a {d.home}; test -e {d.home}/tether.sock && echo SOCK; " \
             f"test -e {d.home}/tether.db && echo DB; echo hi > marker; ls"
    r = tether(d, "run", "--runtime", "bwrap", "--", "sh", "-c", script, cwd=parent)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [b".", b"..", b"h", b"marker"]  # the home is an empty tmpfs
    assert (parent / "marker").read_text() == "hi\n"  # the cwd itself is the workspace
    (parent / "marker").unlink()
    for cwd in (d.home, d.home / "logs"):
        r = tether(d, "run", "--", "pwd", cwd=cwd)  # the default sandbox is bwrap too
        assert r.returncode == 1 and b"inside tether's home" in r.stderr, r.stderr


# ---------------------------------------------------------------------- regressions from review
@needs_bwrap
def test_the_workspace_target_cwd_is_a_clean_path(d: DaemonProc, tmp_path: Path) -> None:
    ws = mkdir(tmp_path / "ws")
    mkdir(ws / "sub")
    out = []
    for cwd in (ws, ws / "sub"):
        r = tether(d, "run", "--runtime", "bwrap", "--workspace", str(ws), "--set",
                   "workspace_target=/work", "--", "sh", "-c", 'echo "$PWD"', cwd=cwd)
        assert r.returncode == 0, r.stderr
        out.append(r.stdout)
    assert out[1] == b"/work/sub\n"
    assert out[0] == b"/work\n"


@needs_bwrap
def test_a_workspace_run_from_elsewhere_starts_in_the_workspace_or_says_why(
        d: DaemonProc, tmp_path: Path) -> None:
    ws, elsewhere = mkdir(tmp_path / "ws"), mkdir(tmp_path / "elsewhere")
    r = tether(d, "run", "--runtime", "bwrap", "--workspace", str(ws), "--", "pwd",
               cwd=elsewhere)
    assert (r.returncode, r.stdout) == (0, f"{os.path.realpath(ws)}\n".encode()), r


@needs_bwrap
def test_cp_in_does_not_follow_symlinks_planted_in_the_sandbox(
        d: DaemonProc, cp_box: tuple[str, Path]) -> None:
    name, t = cp_box
    victim = t / "victim.txt"
    victim.write_text("original\n")
    r = tether(d, "run", "--sandbox", name, "--", "sh", "-c",
               f"ln -s {victim} /work/evil && ln -s {d.home} /work/homelink", cwd=t / "ws")
    assert r.returncode == 0, r.stderr
    (t / "payload").write_text("pwned\n")
    r1 = cp(d, str(t / "payload"), f"{name}:/work/evil")
    r2 = cp(d, str(t / "payload"), f"{name}:/work/homelink/planted")
    planted = (d.home / "planted").exists()
    (d.home / "planted").unlink(missing_ok=True)
    assert not planted, "a copy followed a symlink into tether's home"
    assert victim.read_text() == "original\n"
    assert r1.returncode == 2 and b"symlink" in r1.stderr, r1
    assert r2.returncode == 2, r2


@needs_bwrap
def test_cp_out_of_a_directory_named_like_the_home_does_not_merge_into_it(
        d: DaemonProc, cp_box: tuple[str, Path]) -> None:
    name, t = cp_box
    same = mkdir(t / "ws" / d.home.name)
    (same / "intruder.txt").write_text("x\n")
    r = cp(d, f"{name}:/work/{d.home.name}", str(d.home.parent))
    merged = (d.home / "intruder.txt").exists()
    (d.home / "intruder.txt").unlink(missing_ok=True)
    assert not merged
    assert r.returncode == 2 and b"tether's home" in r.stderr, r


def test_cp_into_a_process_sandbox_does_not_write_into_the_home(d: DaemonProc,
                                                                 tmp_path: Path) -> None:
    r = tether(d, "sandbox", "create", "--runtime", "process", "proc-home-box")
    assert r.returncode == 0, r.stderr
    (tmp_path / "f").write_text("f\n")
    r = cp(d, str(tmp_path / "f"), f"proc-home-box:{d.home}/planted")
    wrote = (d.home / "planted").exists()
    (d.home / "planted").unlink(missing_ok=True)
    tether(d, "sandbox", "rm", "proc-home-box")
    assert not wrote
    assert r.returncode == 2 and b"tether's home" in r.stderr, r


def test_cp_reports_the_bytes_it_copied(d: DaemonProc, tmp_path: Path) -> None:
    r = tether(d, "sandbox", "create", "--runtime", "process", "proc-count-box")
    assert r.returncode == 0, r.stderr
    src = mkdir(tmp_path / "src" / "d")
    (src / "new").write_bytes(b"x" * 10)
    dest = mkdir(tmp_path / "dest" / "d")
    (dest / "old").write_bytes(b"y" * 1000)  # already there: not part of this copy
    r = cp(d, str(src), f"proc-count-box:{tmp_path / 'dest'}")
    tether(d, "sandbox", "rm", "proc-count-box")
    assert r.returncode == 0 and (dest / "new").read_bytes() == b"x" * 10, r.stderr
    assert r.stdout == b"copied 10 bytes\n"


def test_cp_into_a_sandbox_cannot_be_redirected_by_a_racing_swap(tmp_path: Path) -> None:
    """Second review: with the check done once and the copy by path, a process in the
    sandbox swapping the fresh directory for a symlink landed 287 of 300 files outside.
    copy_into walks by descriptors: whatever the racer does, nothing lands outside."""
    import threading

    from tether.hostio.copy import CopyError, copy_into

    root = mkdir(tmp_path / "ws")
    outside = mkdir(tmp_path / "outside")
    src = mkdir(tmp_path / "src" / "tree")
    for i in range(300):
        (src / f"f{i}.sh").write_text("echo pwned\n")
    stop = threading.Event()

    def racer() -> None:
        target = root / "tree"
        while not stop.is_set():
            try:
                if target.is_dir() and not target.is_symlink():
                    target.rename(root / f"moved-{time.monotonic_ns()}")
                    target.symlink_to(outside)
            except OSError:
                pass

    t = threading.Thread(target=racer, daemon=True)
    t.start()
    try:
        for _ in range(20):
            with contextlib.suppress(CopyError, OSError):
                copy_into(str(src), str(root), ".")
            if (root / "tree").is_symlink():
                (root / "tree").unlink()
    finally:
        stop.set()
        t.join(5)
    assert list(outside.iterdir()) == []


@needs_bwrap
def test_cp_out_never_reads_through_links_the_sandbox_planted(
        d: DaemonProc, cp_box: tuple[str, Path]) -> None:
    """Third review: copying out went by path, so a planted symlink made the daemon read
    host files (or /dev/zero, filling the disk). Links are copied as links, and a path
    through a planted directory link is refused."""
    name, t = cp_box
    secret = t / "secret.txt"
    secret.write_text("host secret\n")
    r = tether(d, "run", "--sandbox", name, "--", "sh", "-c",
               f"ln -s /dev/zero /work/zero && ln -s {t} /work/hostdir && "
               "mkdir /work/tree && ln -s /dev/zero /work/tree/z", cwd=t / "ws")
    assert r.returncode == 0, r.stderr
    out = mkdir(t / "out")
    r = cp(d, f"{name}:/work/zero", str(out))
    assert r.returncode == 0 and os.readlink(out / "zero") == "/dev/zero", r
    r = cp(d, f"{name}:/work/hostdir/secret.txt", str(out))
    assert r.returncode == 2 and not (out / "secret.txt").exists(), r
    r = cp(d, f"{name}:/work/tree", str(out))
    assert r.returncode == 0 and os.readlink(out / "tree" / "z") == "/dev/zero", r


def test_cp_with_a_single_file_mount(tmp_path: Path) -> None:
    """A mount whose source is a file: copied out, and written in place (a rename would
    leave a running sandbox the old inode)."""
    from tether.hostio.copy import copy_into, copy_out_of

    mounted = tmp_path / "m.txt"
    mounted.write_text("mount\n")
    inode = mounted.stat().st_ino
    assert copy_out_of(str(mounted), ".", str(tmp_path / "out.txt"), forbidden="/nowhere") == 6
    assert (tmp_path / "out.txt").read_text() == "mount\n"
    (tmp_path / "src.txt").write_text("new content\n")
    assert copy_into(str(tmp_path / "src.txt"), str(mounted), ".") == 12
    assert mounted.read_text() == "new content\n" and mounted.stat().st_ino == inode
