"""The repository config (.tether.yaml / tether.toml) and the port leases of the store."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.agent import repoconfig
from tether.model.records import AgentConfig, LineageRecord
from tether.store import Store
from tether.store.ports import PortLeases


def test_yaml_and_toml_say_the_same() -> None:
    y = repoconfig.parse(b"setup: make\ncopy: [.env]\nports: {base: 4000}\n"
                         b"handoff: {commit: true, remote: origin}\n", ".tether.yaml")
    t = repoconfig.parse(b'setup = "make"\ncopy = [".env"]\n[ports]\nbase = 4000\n'
                         b'[handoff]\ncommit = true\nremote = "origin"\n', "tether.toml")
    assert y == t and y.ports is not None and y.ports.per_session == 10


@pytest.mark.parametrize("text, words", [
    (b"setpu: make\n", "setpu"),
    (b"copy: [/etc/passwd]\n", "inside the repository"),
    (b"copy: [a/../../b]\n", "inside the repository"),
    (b"ports: {base: 80}\n", "1024..65535"),
    (b"ports: {base: 65000, per_session: 100, sessions: 10}\n", "1024..65535"),
    (b"setup: [unclosed\n", "not valid YAML"),
])
def test_bad_configs_are_refused_precisely(text: bytes, words: str) -> None:
    with pytest.raises(repoconfig.RepoConfigError, match=r"x\.yaml") as e:
        repoconfig.parse(text, "x.yaml")
    assert words in str(e.value)


def test_load_refuses_a_symlinked_config(tmp_path: Path) -> None:
    assert repoconfig.load(str(tmp_path)) is None
    (tmp_path / "real.yaml").write_text("setup: x\n")
    (tmp_path / ".tether.yaml").symlink_to(tmp_path / "real.yaml")
    with pytest.raises(repoconfig.RepoConfigError, match="symlink"):
        repoconfig.load(str(tmp_path))


def _lineage(store: Store, ident: str) -> None:
    store.create_lineage(LineageRecord(id=ident, config=AgentConfig(argv=["x"])))


def test_leases_never_overlap_and_free_with_their_lineage(tmp_path: Path) -> None:
    store = Store(tmp_path / "t.db")
    ports = PortLeases(store)
    assert ports.lease("a", 4000, 10, 3) == 4000
    assert ports.lease("a", 4000, 10, 3) == 4000  # a retried start
    assert ports.lease("b", 4000, 10, 3) == 4010  # "a" is not created yet: held
    # 4005 and 4015 overlap a and b; 4025 is in use on the host
    assert ports.lease("c", 4005, 10, 4, usable=lambda lo, hi: lo != 4025) == 4035
    assert ports.lease("d", 4000, 10, 2) is None
    _lineage(store, "a")
    store.update_lineage("a", status="FINISHED")  # type: ignore[arg-type]
    assert ports.lease("d", 4000, 10, 2) == 4000  # swept in the same transaction
    assert ports.sweep_unborn() == 3  # b, c, d were never created
    assert ports.held() == {}


def test_migration_13_drops_commands_an_agent_may_have_written(tmp_path: Path) -> None:
    """Rows of an older tether: a successor's config (read again from its predecessor's
    tree) and one read from the agent's own checkout keep no command run outside the
    sandbox; one read from a main checkout beside the worktree keeps its commands."""
    import sqlite3

    from tether.model.repo import Handoff, RepoConfig

    store = Store(tmp_path / "t.db")
    cmds = RepoConfig(setup="make", archive="make clean", run="make dev",
                      handoff=Handoff(remote="origin", command="gh pr create"))
    rows = {
        "main": AgentConfig(argv=["x"], worktree="/r.worktrees/a", git_dir="/r/.git",
                            repo=cmds),
        "succ": AgentConfig(argv=["x"], worktree="/r.worktrees/a", git_dir="/r/.git",
                            repo=cmds),
        "own": AgentConfig(argv=["x"], worktree="/r/", git_dir="/r/.git", repo=cmds),
        "plain": AgentConfig(argv=["x"], worktree="/w", repo=cmds),
    }
    for ident, cfg in rows.items():
        store.create_lineage(LineageRecord(id=ident, config=cfg,
                                           predecessor="main" if ident == "succ" else None))
    store.close()
    db = sqlite3.connect(tmp_path / "t.db")
    db.execute("DELETE FROM schema_migrations WHERE version = 13")
    db.execute("DROP TABLE setup_marks")
    db.commit()
    db.close()
    store = Store(tmp_path / "t.db")  # applies migration 13 to the rows above
    kept = {i: store.get_lineage(i) for i in rows}
    main = kept["main"]
    assert main is not None and main.config.repo == cmds
    for ident in ("succ", "own", "plain"):
        rec = kept[ident]
        assert rec is not None and rec.config.repo is not None, ident
        assert (rec.config.repo.setup, rec.config.repo.archive) == (None, None), ident
        assert rec.config.repo.run == "make dev"  # in the sandbox: kept
        assert rec.config.repo.handoff == Handoff(remote="origin"), ident
    store.close()
