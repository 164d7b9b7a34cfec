"""``hostio.beneath``: no symlink followed at any level, nothing outside reached —
by openat2 where the kernel has it, and by the component walk that stands in for it."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.hostio import beneath


@pytest.fixture(params=[False, True], ids=["openat2", "walk"])
def walk(request: pytest.FixtureRequest) -> bool:
    if not request.param and not beneath.has_openat2():
        pytest.skip("this kernel has no openat2")
    return bool(request.param)


@pytest.fixture
def root(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    (tmp_path / "r" / "a" / "b").mkdir(parents=True)
    (tmp_path / "r" / "a" / "b" / "f").write_text("in\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "f").write_text("outside\n")
    (tmp_path / "r" / "a" / "link").symlink_to(tmp_path / "out")
    (tmp_path / "r" / "rel").symlink_to("a")
    fd = os.open(tmp_path / "r", os.O_RDONLY | os.O_DIRECTORY)
    yield fd, tmp_path
    os.close(fd)


def test_a_plain_path_opens(root: tuple[int, Path], walk: bool) -> None:
    fd, _ = root
    f = beneath.open_beneath(fd, "a/b/f", os.O_RDONLY, walk=walk)
    with os.fdopen(f) as o:
        assert o.read() == "in\n"
    d = beneath.open_dir_beneath(fd, "./a//b/", walk=walk)
    assert sorted(os.listdir(d)) == ["f"]
    os.close(d)


@pytest.mark.parametrize("rel", ["a/link/f", "a/link", "rel/b/f", "rel"])
def test_a_symlink_at_any_level_is_eloop(root: tuple[int, Path], walk: bool,
                                         rel: str) -> None:
    fd, _ = root
    with pytest.raises(OSError) as e:
        beneath.open_beneath(fd, rel, os.O_RDONLY, walk=walk)
    assert e.value.errno == errno.ELOOP


def test_creating_through_a_symlinked_parent_is_refused(root: tuple[int, Path],
                                                        walk: bool) -> None:
    fd, tmp = root
    with pytest.raises(OSError):
        beneath.open_beneath(fd, "a/link/new", os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                             walk=walk)
    assert sorted(os.listdir(tmp / "out")) == ["f"]
    new = beneath.open_beneath(fd, "a/b/new", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640,
                               walk=walk)
    os.close(new)
    assert (tmp / "r" / "a" / "b" / "new").exists()


@pytest.mark.parametrize("rel", ["../out/f", "a/../../out/f", "/etc/passwd"])
def test_leaving_the_directory_is_exdev(root: tuple[int, Path], walk: bool, rel: str) -> None:
    fd, _ = root
    with pytest.raises(OSError) as e:
        beneath.open_beneath(fd, rel, os.O_RDONLY, walk=walk)
    assert e.value.errno == errno.EXDEV


def test_a_file_on_the_way_is_enotdir(root: tuple[int, Path], walk: bool) -> None:
    fd, _ = root
    with pytest.raises(OSError) as e:
        beneath.open_beneath(fd, "a/b/f/x", os.O_RDONLY, walk=walk)
    assert e.value.errno == errno.ENOTDIR
