"""The agent package's pure parts: the lifecycle table, snapshots, the confinement
policy and the guards on files an agent can plant (no daemon, no agent process)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tether.agent import lifecycle as lc
from tether.agent import snapshot


def test_lifecycle_is_monotonic_and_jumps_skip_states() -> None:
    th = lc.Thresholds()
    assert lc.on_turn_end("HEALTHY", 60, th) == "HEALTHY"
    assert lc.on_turn_end("HEALTHY", 92, th) == "DYING"  # the jump skips AGING
    assert lc.on_turn_end("AGING", 10, th) == "AGING"  # never regresses
    assert lc.on_turn_end("DYING", 10, th) == "DEAD"  # the finalization turn ended
    for a in lc.ORDER:
        for b in lc.ORDER:
            assert lc.can_transition_to(a, b) == (lc.ORDER.index(b) > lc.ORDER.index(a))
    assert lc.authorize_tool("DYING").allowed and lc.authorize_tool("DYING").next_state == \
        "DRAINING"
    assert not lc.authorize_tool("DRAINING").allowed
    assert not lc.authorize_tool("DEAD").allowed
    with pytest.raises(ValueError):
        lc.Thresholds(95, 90)


def test_snapshot_v1_upgrades_on_read(tmp_path: Path) -> None:
    v1 = {"version": 1, "lineage": "abc", "daemon": "d1", "written_at": "2026-01-01T00:00:00Z",
          "model": "m", "tokens": 1234, "session_id": "s-1",
          "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
          "config": {"provider": "claude", "revival": "ask"}}
    p = tmp_path / "abc.json"
    p.write_text(json.dumps(v1))
    snap = snapshot.read(p)
    assert snap["version"] == snapshot.VERSION
    assert snap["lineage_id"] == "abc" and snap["anchor_id"] == "d1"
    assert snap["usage"]["input_tokens"] == 1234
    assert snap["provider"] == "claude" and snap["provider_session_id"] == "s-1"
    assert snap["turn"] == 1 and snap["messages"] == v1["messages"]
    assert snap["loop_config"] == {"revival": "ask"}


def test_provider_files_are_never_written_through_a_planted_symlink(tmp_path: Path) -> None:
    """Review finding: a sandboxed agent could swap its settings file for a symlink
    and have a root daemon overwrite the target at the next revival."""
    from tether.daemon.agents import _write_private

    state = tmp_path / "state"
    state.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (state / "claude-settings.json").symlink_to(victim)
    _write_private(state, str(state / "claude-settings.json"), b"{}\n")
    assert victim.read_text() == "precious\n"
    assert not (state / "claude-settings.json").is_symlink()
    assert (state / "claude-settings.json").read_bytes() == b"{}\n"
    assert sorted(p.name for p in state.iterdir()) == ["claude-settings.json"]


def test_a_transcript_path_that_is_a_fifo_is_not_read(tmp_path: Path) -> None:
    """Review finding: a hook could name a FIFO as its transcript and freeze the daemon."""
    from tether.agent.providers.claude import read_transcript

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    assert read_transcript(str(fifo)) == (None, None, [])
    assert read_transcript("/dev/zero") == (None, None, [])
    assert time.monotonic() - t0 < 2.0


def test_a_sandboxed_agent_names_transcripts_only_beneath_its_own_places(
        tmp_path: Path) -> None:
    """Issue 21 audit: a hook's transcript path made the daemon read any file for the
    agent. Under ``AGENT_FILES`` only beneath its roots, no symlink on the way, no ``..``
    out; each refusal is collected for the daemon to journal."""
    from tether.agent.providers.base import AGENT_FILES, AgentFiles, open_agent_file

    mine, other = tmp_path / "mine", tmp_path / "other"
    (mine / "projects").mkdir(parents=True)
    other.mkdir()
    (mine / "projects" / "t.jsonl").write_text("{}\n")
    (other / "secret.jsonl").write_text("secret\n")
    (mine / "link").symlink_to(other)
    files = AgentFiles((str(mine),))
    token = AGENT_FILES.set(files)
    try:
        f = open_agent_file(str(mine / "projects" / "t.jsonl"))
        assert f is not None and f.read() == "{}\n"
        f.close()
        for bad in (other / "secret.jsonl", mine / "link" / "secret.jsonl",
                    mine / "projects" / ".." / ".." / "other" / "secret.jsonl", mine):
            assert open_agent_file(str(bad)) is None, bad
        # Not written yet (a CLI writes its transcript after its hook): not a refusal,
        # so the count of a turn waits for it as for an unsandboxed agent's.
        assert open_agent_file(str(mine / "projects" / "later.jsonl")) is None
    finally:
        AGENT_FILES.reset(token)
    assert len(files.refused) == 4
    f = open_agent_file(str(other / "secret.jsonl"))  # no policy: an unsandboxed agent
    assert f is not None
    f.close()


def test_the_toolchain_never_shows_a_whole_home_or_tmp(tmp_path: Path) -> None:
    """Second review: ~/bin/claude made the whole home visible; a PATH entry in /tmp
    all of /tmp (other homes' sockets)."""
    from tether.agent.confinement import _toolchain

    home = os.path.expanduser("~")
    found = _toolchain(os.path.join(home, "bin", "claude"), f"/tmp:{home}:/usr/bin")
    assert home not in found and "/tmp" not in found and "/" not in found
    assert all(p != "/root" and p != "/home" for p in found)


def test_the_git_dir_of_a_worktree_is_read_and_checked_both_ways(tmp_path: Path) -> None:
    """Third review: `git rev-parse` as root refuses a user's repository (so agents could
    not commit) and trusted the agent-writable `.git` file; the files are now read
    directly and a forged pointer to another repository gives nothing."""
    import subprocess

    from tether.agent.confinement import git_common_dir

    repo, wt, other = tmp_path / "repo", tmp_path / "wt", tmp_path / "other"
    repo.mkdir()
    other.mkdir()
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "-C", str(repo), "init", "-q"], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "x"],
                   check=True)
    subprocess.run([*git, "-C", str(repo), "worktree", "add", "-q", str(wt)], check=True)
    subprocess.run([*git, "-C", str(other), "init", "-q"], check=True)
    common = str((repo / ".git").resolve())
    assert git_common_dir(str(repo)) == common
    assert git_common_dir(str(wt)) == common
    forged = wt / "evilgd"
    forged.mkdir()
    (forged / "commondir").write_text(str(other / ".git"))
    (forged / "gitdir").write_text(str(wt / ".git"))
    (wt / ".git").write_text("gitdir: evilgd\n")
    assert git_common_dir(str(wt)) is None


def test_each_provider_sees_its_own_home_config_and_keys_only(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              ) -> None:
    """Finding 11 (issue 20): Aider's config and keys in the home (``~/.aider.conf.yml``,
    ``~/.env``, ``~/.aider/``) were hidden by the sandbox. They are shown to Aider — its
    state read-write, its config and keys read-only — and to no other agent (``~/.env``
    holds more than Aider's keys). Codex runs ``~/.codex/hooks.json``: read-only."""
    from tether.agent.confinement import agent_view
    from tether.model.records import AgentConfig

    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    (home / ".aider").mkdir()
    for name in (".aider.conf.yml", ".env"):
        (home / name).write_text("x: 1\n")
    monkeypatch.setenv("HOME", str(home))

    def view(provider: str) -> tuple[set[str], set[str]]:
        v = agent_view(state_dir=tmp_path / "state", socket_dir=tmp_path / "sock",
                       config=AgentConfig(provider=provider, argv=[provider]),
                       snapshot=tmp_path / "snap.json", handoff=None, argv0="/usr/bin/true",
                       path_env="/usr/bin")
        return set(v.rw), set(v.ro)

    rw, ro = view("aider")
    assert str(home / ".aider") in rw
    assert {str(home / ".aider.conf.yml"), str(home / ".env")} <= ro
    assert str(home / ".env") not in rw
    for other in ("claude", "codex", "generic"):
        rw, ro = view(other)
        assert not {str(home / ".env"), str(home / ".aider.conf.yml")} & (rw | ro), other
        assert str(home / ".aider") not in rw, other
    assert str(home / ".codex" / "hooks.json") in ro
    assert (home / ".codex" / "hooks.json").read_text() == "{}\n"  # made, to be bound
