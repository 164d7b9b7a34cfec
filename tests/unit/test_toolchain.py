"""The toolchain a plain bwrap exec is shown: an installation, never a whole home."""

from __future__ import annotations

import os
from pathlib import Path

from tether.model.records import SandboxSpec
from tether.runtime import bwrap
from tether.runtime.toolchain import candidates


def tree(tmp_path: Path) -> tuple[Path, str]:
    home = tmp_path / "home" / "dev"
    for d in (".venv/bin", ".local/bin", ".local/lib/python3/site-packages",
              ".local/share/keyrings", "bin", ".pyenv/shims", ".pyenv/versions/3/bin",
              ".nvm/versions/node/v20/bin"):
        (home / d).mkdir(parents=True)
    (home / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (home / ".venv" / "bin" / "python").symlink_to(home / ".pyenv/versions/3/bin/python3")
    (home / ".pyenv/versions/3/bin/python3").write_text("")
    (home / ".local" / "bin" / "tool").write_text(f"#!{home}/.venv/bin/python -u\n")
    (home / ".local" / "bin" / "tool").chmod(0o755)
    return home, ":".join(str(home / d) for d in (".local/bin", "bin", ".pyenv/shims",
                                                  ".nvm/versions/node/v20/bin"))


def test_an_installation_is_its_prefix_but_a_home_dot_directory_only_bin_and_lib(
        tmp_path: Path) -> None:
    home, path = tree(tmp_path)
    found = candidates("tool", cwd="/", path_env=path, virtual_env=None,
                       homes=(str(home),))
    h = str(home)
    assert f"{h}/.local/bin" in found and f"{h}/.local/lib" in found
    assert f"{h}/.local" not in found  # ~/.local/share (keyrings) stays hidden
    assert f"{h}/.venv" in found  # the #! interpreter's venv, whole
    assert f"{h}/.pyenv/versions/3" in found  # the venv's base python, resolved
    assert f"{h}/.pyenv" in found  # shims run pyenv's own libexec
    assert f"{h}/.nvm/versions/node/v20" in found
    assert f"{h}/bin" in found and h not in found  # ~/bin, not the home


def test_the_sandbox_never_binds_a_home_a_hidden_root_or_a_system_directory() -> None:
    home = os.path.expanduser("~")
    found = bwrap.toolchain("sh", cwd="/", path_env=f"/:/tmp:/home:/root:{home}:{home}/bin:"
                            "/usr/bin:/bin:/proc/self:/run/user:/var",
                            virtual_env=home)
    wide = ("/", "/tmp", "/home", "/root", home, "/var", "/usr/bin", "/bin", "/proc/self")
    assert not set(found) & set(wide), found
    assert all(not p.startswith(("/run", "/proc")) for p in found), found


def test_a_link_to_a_wide_place_or_into_tethers_home_is_not_bound(tmp_path: Path) -> None:
    """A PATH entry (or a venv a sandbox planted in the workspace) that is a symlink
    to / would show the whole host; one into tether's home its logs."""
    home = tmp_path / "tether-home"
    (home / "logs").mkdir(parents=True)
    (tmp_path / "to-root").symlink_to("/")
    (tmp_path / "to-logs").symlink_to(home / "logs")
    found = bwrap.toolchain("sh", cwd="/", path_env=f"{tmp_path}/to-root:{tmp_path}/to-logs")
    assert f"{tmp_path}/to-root" not in found and f"{tmp_path}/to-logs" in found
    argv = bwrap.wrap(["true"], SandboxSpec(runtime="bwrap"), cwd=str(tmp_path / "w"),
                      tether_home=str(home), tty=False, tools=found)
    assert f"{tmp_path}/to-logs" not in argv and str(home / "logs") not in argv


def _package(root: Path, name: str, **deps: dict[str, str]) -> Path:
    import json

    pkg = root / "node_modules" / name
    pkg.mkdir(parents=True)
    (pkg / "package.json").write_text(json.dumps({"name": name, "version": "1.0.0", **deps}))
    return pkg


def test_a_node_program_is_shown_its_packages_whole_dependency_closure(
        tmp_path: Path) -> None:
    """Finding 7 (issue 20): ``@openai/codex`` runs the Rust binary of its platform
    package, an optional dependency installed beside it (``@openai/codex-linux-x64``);
    bound alone, it failed with "Missing optional dependency". Its dependencies (and
    theirs, wherever node would resolve them, optional ones included) are bound too;
    what it does not depend on is not."""
    home = tmp_path / "home" / "dev"
    lib = home / "agents" / "npm"  # ``npm install --prefix ~/agents/npm`` (.ci/agents.sh)
    codex = _package(lib, "@openai/codex", optionalDependencies={
        "@openai/codex-linux-x64": "npm:@openai/codex@1.0.0-linux-x64",
        "@openai/codex-darwin-arm64": "npm:@openai/codex@1.0.0-darwin-arm64"},
        dependencies={"left-pad": "^1"}, peerDependencies={"peer": "*"})
    (codex / "bin").mkdir()
    (codex / "bin" / "codex.js").write_text("#!/usr/bin/env node\n")
    (codex / "bin" / "codex.js").chmod(0o755)
    platform = _package(lib, "@openai/codex-linux-x64")
    left_pad = _package(lib, "left-pad", dependencies={"nested": "1", "hoisted": "1"})
    nested = _package(left_pad, "nested")  # left-pad/node_modules/nested: in left-pad
    hoisted = _package(lib, "hoisted", dependencies={"left-pad": "1"})  # a cycle
    peer = _package(lib, "peer")
    unrelated = _package(lib, "unrelated")
    bin_dir = lib / "node_modules" / ".bin"
    bin_dir.mkdir()
    (bin_dir / "codex").symlink_to("../@openai/codex/bin/codex.js")
    found = candidates(str(bin_dir / "codex"), cwd="/", path_env="/usr/bin",
                       virtual_env=None, homes=(str(home),))
    for pkg in (codex, platform, left_pad, hoisted, peer):
        assert str(pkg) in found, (pkg, found)
    assert str(nested) not in found  # inside left-pad's own directory already
    assert str(unrelated) not in found and str(lib / "node_modules") not in found
    assert not any("darwin" in p for p in found)  # not installed: nothing to bind
