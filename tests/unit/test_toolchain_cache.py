"""ToolchainCache: a toolchain looked up once serves later execs until a tool is
installed or removed on PATH, the virtualenv or a named path changes, or it ages out."""

from __future__ import annotations

import os
from pathlib import Path

from tether.runtime.toolchain import ToolchainCache, candidates


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _setup(tmp_path: Path) -> tuple[ToolchainCache, Clock, list[int], str, Path]:
    bin1, bin2 = tmp_path / "venv" / "bin", tmp_path / "other"
    bin1.mkdir(parents=True)
    bin2.mkdir()
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    tool = bin2 / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    clock, calls = Clock(), [0]
    return ToolchainCache(ttl=5.0, clock=clock), clock, calls, f"{bin1}:{bin2}:/usr/bin", bin1


def _get(cache: ToolchainCache, calls: list[int], path_env: str,
         venv: str | None = None) -> tuple[str, ...]:
    def lookup() -> tuple[str, ...]:
        calls[0] += 1
        return tuple(candidates("tool", cwd="/", path_env=path_env, virtual_env=venv,
                                homes=()))
    return cache.get(("tool", path_env, venv), path_env, venv, lookup)


def test_an_answer_serves_again_until_a_tool_is_installed_on_path(tmp_path: Path) -> None:
    cache, _, calls, path_env, bin1 = _setup(tmp_path)
    first = _get(cache, calls, path_env)
    assert str(tmp_path / "other") in first and calls == [1]
    assert _get(cache, calls, path_env) == first and calls == [1]
    # A tool of the same name earlier on PATH: now it is the venv's.
    (bin1 / "tool").write_text("#!/bin/sh\n")
    (bin1 / "tool").chmod(0o755)
    second = _get(cache, calls, path_env)
    assert calls == [2] and str(tmp_path / "venv") in second


def test_an_answer_ages_out(tmp_path: Path) -> None:
    cache, clock, calls, path_env, _ = _setup(tmp_path)
    _get(cache, calls, path_env)
    clock.now += 4.9
    _get(cache, calls, path_env)
    assert calls == [1]
    clock.now += 0.2
    _get(cache, calls, path_env)
    assert calls == [2]


def test_a_virtualenv_made_again_or_a_named_path_replaced_is_looked_up_again(
        tmp_path: Path) -> None:
    cache, _, calls, path_env, _ = _setup(tmp_path)
    venv = tmp_path / "venv"
    _get(cache, calls, path_env, str(venv))
    os.rename(venv, tmp_path / "old")
    (venv / "bin").mkdir(parents=True)
    _get(cache, calls, path_env, str(venv))
    assert calls == [2]
    other = tmp_path / "other"
    os.rename(other, tmp_path / "other.old")  # a named directory replaced
    other.mkdir()
    _get(cache, calls, path_env, str(venv))
    assert calls == [3]


def test_the_cache_keeps_at_most_its_size(tmp_path: Path) -> None:
    cache, _, calls, path_env, _ = _setup(tmp_path)
    cache.size = 2
    for venv in ("a", "b", "c"):
        _get(cache, calls, path_env, venv)
    assert len(cache._entries) == 2
