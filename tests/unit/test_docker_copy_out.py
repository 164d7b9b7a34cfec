"""Copying out of a docker sandbox writes the host side by descriptor: a symlink the
sandbox planted (or swaps in mid-way) at any depth below the destination is refused,
and nothing lands outside it. Real files, real tar archives; no docker needed."""

from __future__ import annotations

import ctypes
import io
import os
import tarfile
import threading
from pathlib import Path

import pytest

from tether.hostio.copyout import CopyError
from tether.runtime.docker.copying import extract

FILES = 2000  # enough that extraction takes a while: the racer gets its chance


def archive(files: int = 1) -> bytes:
    """What ``docker cp`` of ``/data`` returns: data/, data/a/, data/a/b/, files."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("data", "data/a", "data/a/b"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for i in range(files):
            body = b"x" * 4096
            info = tarfile.TarInfo(f"data/a/b/f{i}")
            info.size, info.mode = len(body), 0o644
            tar.addfile(info, io.BytesIO(body))
    return buf.getvalue()


def everything(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def host_dir(tmp_path: Path) -> Path:
    """A host directory the sandbox wants written (or emptied): it holds a file."""
    outside = tmp_path / "outside"
    (outside / "data" / "a" / "b").mkdir(parents=True)
    (outside / "data" / "a" / "b" / "keep").write_text("precious")
    return outside


def untouched(outside: Path) -> bool:
    return everything(outside) == ["data", "data/a", "data/a/b", "data/a/b/keep"] and \
        (outside / "data" / "a" / "b" / "keep").read_text() == "precious"


@pytest.mark.parametrize("depth", ["data", "data/a", "data/a/b"])
def test_a_planted_symlink_at_any_depth_is_refused(tmp_path: Path, depth: str) -> None:
    out, outside = tmp_path / "out", host_dir(tmp_path)
    (out / depth).parent.mkdir(parents=True)
    for d in ("data", "data/a"):
        if len(d) < len(depth):
            (out / d).mkdir(exist_ok=True)
    (out / depth).symlink_to(outside)
    with pytest.raises((CopyError, OSError)):
        extract([archive()], str(out), str(tmp_path / "home"))
    assert untouched(outside)


def test_the_destination_itself_a_symlink_is_refused(tmp_path: Path) -> None:
    outside = host_dir(tmp_path)
    (tmp_path / "dst").symlink_to(outside / "data")
    with pytest.raises(CopyError):
        extract([archive()], str(tmp_path / "dst"), str(tmp_path / "home"))
    assert untouched(outside)


def test_a_directory_swapped_for_a_symlink_mid_extraction_is_not_written_through(
        tmp_path: Path) -> None:
    """The attack on the old extraction by path: whatever directory appears in the
    destination (its temporary directory, or the copy itself) is swapped for a symlink
    to a host directory while the files are being written."""
    out, outside, moved = tmp_path / "out", host_dir(tmp_path), tmp_path / "moved"
    for d in (out, moved):
        d.mkdir()
    done = threading.Event()

    def racer() -> None:
        os.symlink(outside, moved / "link")
        while not done.is_set():
            for e in os.listdir(out):
                if _exchange(moved / "link", out / e):
                    return

    t = threading.Thread(target=racer)
    t.start()
    try:
        extract([archive(FILES)], str(out), str(tmp_path / "home"))
    except (CopyError, OSError):
        pass
    finally:
        done.set()
        t.join()
    assert untouched(outside)


def test_a_clean_copy_lands_with_its_modes_and_links(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        d = tarfile.TarInfo("data")
        d.type, d.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(d)
        f = tarfile.TarInfo("data/run")
        f.size, f.mode, f.uid = 2, 0o4777, 1234
        tar.addfile(f, io.BytesIO(b"hi"))
        s = tarfile.TarInfo("data/abs")
        s.type, s.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(s)
        h = tarfile.TarInfo("data/again")
        h.type, h.linkname = tarfile.LNKTYPE, "data/run"
        tar.addfile(h)
    size = extract([buf.getvalue()], str(tmp_path), str(tmp_path / "home"))
    assert size == 2  # the bytes of its files (one, "hi"), not the archive's 10240
    run = tmp_path / "data" / "run"
    assert run.read_bytes() == b"hi" and run.stat().st_mode & 0o7022 == 0  # no setuid, no g/o w
    assert os.readlink(tmp_path / "data" / "abs") == "/etc/passwd"
    assert (tmp_path / "data" / "again").stat().st_ino == run.stat().st_ino
    # not into a directory: as dst
    extract([buf.getvalue()], str(tmp_path / "copy"), str(tmp_path / "home"))
    assert (tmp_path / "copy" / "run").read_bytes() == b"hi"


def test_devices_and_escaping_names_are_refused_before_anything_is_written(
        tmp_path: Path) -> None:
    for bad in (tarfile.TarInfo("data/../../x"), tarfile.TarInfo("data/fifo")):
        if bad.name.endswith("fifo"):
            bad.type = tarfile.FIFOTYPE
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            d = tarfile.TarInfo("data")
            d.type = tarfile.DIRTYPE
            tar.addfile(d)
            tar.addfile(bad)
        with pytest.raises(CopyError) as e:
            extract([buf.getvalue()], str(tmp_path), str(tmp_path / "home"))
        assert e.value.code == "COPY_FAILED" and everything(tmp_path) == []


def _exchange(a: Path, b: Path) -> bool:
    """``renameat2(RENAME_EXCHANGE)``: the two names swapped atomically, as a racing
    sandbox would do it (no moment where the directory is missing)."""
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, rename_exchange = -100, 2
    return int(libc.renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b),
                              rename_exchange)) == 0
