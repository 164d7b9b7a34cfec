"""The command a zygote's stub runs (tether.monitor.zygote.script), through a real /bin/sh:
every environment value and argument arrives byte for byte, and nothing runs before the
function is called."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tether.monitor.zygote import script
from tether.runtime.bwrap import bind_identity

AWKWARD = ["it's", 'a "quote"', "$HOME `id` $(id)", "back\\slash", "new\nline", "", "-n",
           "x=y", "*", "tab\there", "}", "'\n}\n'"]


def _run(tmp_path: Path, env: dict[str, str], argv: list[str], call: bool = True) -> bytes:
    fn = tmp_path / "fn.sh"
    fn.write_bytes(script(str(tmp_path), env, argv))
    body = f". {fn}" + ("; tether_run" if call else "; echo defined-only")
    return subprocess.run(["/bin/sh", "-c", body], capture_output=True, check=True,
                          timeout=10, env={"LEAK": "1"}).stdout


def test_arguments_and_environment_arrive_exactly(tmp_path: Path) -> None:
    env = {f"V{i}": v for i, v in enumerate(AWKWARD)} | {"PATH": "/usr/bin:/bin"}
    out = _run(tmp_path, env, ["printf", "[%s]", *AWKWARD])
    assert out == b"".join(b"[" + a.encode() + b"]" for a in AWKWARD)
    out = _run(tmp_path, env, ["env", "-0"])
    got = dict(e.split("=", 1) for e in out.decode().split("\0") if e)
    assert got.pop("PWD") == str(tmp_path)  # the shell's, as behind a cold gate
    assert got == env  # exactly: nothing of the stub's own environment (LEAK)


def test_defining_the_function_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    assert _run(tmp_path, {}, ["touch", str(marker)], call=False) == b"defined-only\n"
    assert not marker.exists()


def test_bind_identity_names_each_source_and_misses(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    ident = bind_identity(["bwrap", "--bind", str(a), "/w", "--ro-bind-try", str(b), str(b),
                           "--tmpfs", "/tmp"])
    assert ident == ((a.stat().st_dev, a.stat().st_ino), (0, 0))
    held = os.open(a, os.O_RDONLY)  # as a zygote's bind mount holds it: its inode stays
    try:
        a.rmdir()
        a.mkdir()
        assert bind_identity(["--bind", str(a), "/w"]) != ident[:1]
    finally:
        os.close(held)
