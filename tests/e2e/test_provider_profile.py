"""A provider profile of one's own (issue 23, item 13), as the README documents it: the
README's `myagent.toml`, written to the home as is, makes `tether run -- ./myagent` an
agent session (it ran as a plain exec: only `--agent myagent` worked); its turns are
read from its output and priced as the model the profile names, so `tether cost` and
budgets work for it; a profile's regex that can never match is warned about, one
without the groups tether reads is refused and said so; unpriced turns are never shown
as $0. The agent is a shell script printing what such a CLI prints (no model runs
here); the daemon, the CLI and the profile loader are the real ones."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.harness import TETHER, DaemonProc, wait_for

README = Path(__file__).resolve().parents[2] / "README.md"
MYAGENT = """#!/bin/sh
echo "myagent 1.0, session s-42"
echo "thinking about: $*"
echo "tokens: 120000 in, 3400 out, context 37%"
printf '> '
exec sleep 600
"""


@pytest.fixture
def fast(stopped_daemon: DaemonProc) -> DaemonProc:
    stopped_daemon.start(env={"TETHER_AGENT_TICK": "0.2"})
    return stopped_daemon


def readme_profile() -> str:
    """The README's profile, as a reader copies it."""
    blocks = re.findall(r"```toml\n(.*?)```", README.read_text(), re.S)
    [profile] = [b for b in blocks if b.startswith("# <home>/providers/myagent.toml")]
    return profile


def _agent(tmp: Path, name: str = "myagent") -> Path:
    script = tmp / name
    script.write_text(MYAGENT)
    script.chmod(0o755)
    return script


def _tether(d: DaemonProc, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TETHER, "--home", str(d.home), *args], cwd=cwd, env=d.env,
                          capture_output=True, text=True, timeout=60)


def test_the_readme_profile_makes_myagent_an_agent_priced_as_its_model(
        fast: DaemonProc, tmp_path: Path) -> None:
    (fast.home / "providers").mkdir()
    (fast.home / "providers" / "myagent.toml").write_text(readme_profile())
    _agent(tmp_path)
    r = _tether(fast, "run", "-d", "--", "./myagent", "fix the tests", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "agent lineage" in r.stderr, r.stderr  # an agent session, not a plain exec
    assert "can never match" not in r.stderr
    c = fast.client()
    [lin] = c.lineage_list(all=True)
    assert lin.provider == "myagent"
    wait_for(lambda: c.lineage_get(lin.id).turns == 1, timeout=30, what="a turn")
    rec = c.lineage_get(lin.id)
    assert rec.provider_session_id == "s-42" and rec.context_pct == 37.0
    assert rec.usage == {"input_tokens": 120000, "output_tokens": 3400}
    assert rec.model == "gpt-4.1"
    cost = _tether(fast, "cost", cwd=tmp_path)
    row = next(line for line in cost.stdout.splitlines() if line.startswith(lin.id))
    assert "$" in row and "unknown" not in row, cost.stdout
    assert cost.stderr == ""  # no "no price" note: its model is priced
    _tether(fast, "budget", "set", "5", "--lineage", lin.id, cwd=tmp_path)
    shown = _tether(fast, "budget", cwd=tmp_path).stdout
    assert re.search(rf"lineage {lin.id}\s+ACTIVE\s+\$0\.\d{{4}} of \$5\.00", shown), shown
    # By a path too: the same file named another way.
    (tmp_path / "bin").mkdir()
    _agent(tmp_path / "bin")
    r = _tether(fast, "run", "-d", "--", str(tmp_path / "bin" / "myagent"), cwd=tmp_path)
    assert r.returncode == 0 and "agent lineage" in r.stderr, r.stderr


def test_doubtful_profiles_are_said_and_unpriced_turns_are_never_free(
        fast: DaemonProc, tmp_path: Path) -> None:
    providers = fast.home / "providers"
    providers.mkdir()
    tool = _agent(tmp_path, "tool")
    # The docstring's old example: a prompt regex with its trailing space.
    (providers / "spacey.toml").write_text(
        "commands = ['spacey']\n[turns]\nidle_seconds = 1\nend_regex = '^> $'\n")
    _agent(tmp_path, "spacey")
    r = _tether(fast, "run", "-d", "--", "./spacey", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    said = " ".join(r.stderr.split())
    assert "end_regex '^> $' can never match" in said and "'^>$'" in said, r.stderr
    # A regex without the group tether reads: refused, and `run` says why.
    (providers / "nogroup.toml").write_text(
        "[turns]\ncontext_regex = 'context \\d+%'\n")
    _agent(tmp_path, "nogroup")
    r = _tether(fast, "run", "-d", "--", "./nogroup", cwd=tmp_path)
    said = " ".join(r.stderr.split())
    assert "provider file refused, so it runs as a plain command" in said, r.stderr
    assert "captures 0 group(s)" in said, r.stderr
    # A path in `commands`, and no model: its turns have no price.
    (providers / "unpriced.toml").write_text(
        f"commands = ['{tool}']\n[turns]\nidle_seconds = 1\nend_regex = '^> ?$'\n"
        "usage_regex = 'tokens: (\\d+) in, (\\d+) out'\n")
    r = _tether(fast, "run", "-d", "--name", "cheap", "--", "./tool", cwd=tmp_path)
    assert r.returncode == 0 and "agent lineage" in r.stderr, r.stderr
    c = fast.client()
    lin = next(x for x in c.lineage_list(all=True) if x.name == "cheap")
    assert lin.provider == "unpriced"
    wait_for(lambda: c.lineage_get(lin.id).turns == 1, timeout=30, what="a turn")
    _tether(fast, "budget", "set", "5", "--lineage", lin.id, cwd=tmp_path)
    shown = _tether(fast, "budget", cwd=tmp_path)
    line = next(x for x in shown.stdout.splitlines() if lin.id in x)
    assert "unknown (>= $0.0000; 1 turn of a model without a price)" in line, line
    assert "$0.0000 of" not in line
    assert "counts only what is priced" in shown.stderr
    cost = _tether(fast, "cost", cwd=tmp_path)
    row = next(x for x in cost.stdout.splitlines() if x.startswith(lin.id))
    assert "unknown" in row and "$0.0000 " not in row, cost.stdout
