"""The CLIs' own telemetry and update checks, turned off for an agent behind tether's egress
proxy — through each CLI's documented setting, only where the user has not set it, and
nothing that turns off a feature (docs/SECURITY.md, "Agent network egress"). Pure: the
providers' plans. The daemon's side (the user's environment wins; nothing with the host's
network) is in ``tests/e2e/test_cli_quiet.py``; the real CLIs in ``tests/realcli``."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from tether.agent.providers import get
from tether.agent.providers.base import SessionContext
from tether.agent.providers.codex import CodexProvider
from tether.agent.providers.gemini import GeminiProvider


def ctx(tmp: Path, *, egress: bool, confined: bool = True) -> SessionContext:
    state = tmp / "state"
    state.mkdir(exist_ok=True)
    return SessionContext(home=str(tmp), socket=str(tmp / "s"), session="L", lineage="L",
                          state_dir=str(state), hook_command=("py", "-m", "tether.agent.hook"),
                          confined=confined, egress=egress)


def test_the_environment_each_cli_documents_and_nothing_that_turns_a_feature_off() -> None:
    assert dict(get("claude").quiet_env) == {"DISABLE_ERROR_REPORTING": "1",
                                             "DISABLE_AUTOUPDATER": "1"}
    # Its feature flags (the one-hour prompt cache, /usage) go with these: never set.
    for variable in ("DISABLE_TELEMETRY", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"):
        assert variable not in get("claude").quiet_env
    # This session only: --analytics-disable would write a permanent opt-out.
    assert dict(get("aider").quiet_env) == {"AIDER_ANALYTICS": "false",
                                            "AIDER_CHECK_UPDATE": "false"}
    assert dict(get("generic").quiet_env) == {} == dict(get("codex").quiet_env)


def overrides(argv: list[str]) -> list[str]:
    return [b for a, b in itertools.pairwise(argv) if a == "-c"
            and not b.startswith("hooks.")]


def test_codex_gets_its_config_keys_unless_the_user_sets_them(tmp_path: Path) -> None:
    p = CodexProvider(str(tmp_path / "codex-home"))
    argv = ["codex", "-c", "analytics.enabled=true", "exec", "fix it"]
    plan = p.launch(argv, ctx(tmp_path, egress=True))
    # Codex applies -c in order: the user's own, later, wins.
    assert overrides(plan.argv) == ["analytics.enabled=false",
                                    "check_for_update_on_startup=false",
                                    "analytics.enabled=true"]
    assert plan.argv[-2:] == ["exec", "fix it"]
    fresh = p.resume(argv, None, str(tmp_path / "snap"), ctx(tmp_path, egress=True))
    assert overrides(fresh.argv) == overrides(plan.argv)
    # The user's config.toml says something of one: left to it (a later -c wins anyway).
    (tmp_path / "codex-home").mkdir()
    (tmp_path / "codex-home" / "config.toml").write_text(
        'model = "m"\n[analytics]\nenabled = true\n')
    plan = p.launch(["codex"], ctx(tmp_path, egress=True))
    assert overrides(plan.argv) == ["check_for_update_on_startup=false"]
    (tmp_path / "codex-home" / "config.toml").write_text("check_for_update_on_startup = 1 2")
    plan = p.launch(["codex"], ctx(tmp_path, egress=True))  # no TOML: Codex says so
    assert overrides(plan.argv) == ["analytics.enabled=false",
                                    "check_for_update_on_startup=false"]
    # The host's network (or none): Codex as it is.
    plan = p.launch(argv, ctx(tmp_path, egress=False))
    assert overrides(plan.argv) == ["analytics.enabled=true"]


def gemini_view(tmp: Path, user: dict[str, Any] | None, *, egress: bool) -> dict[str, Any]:
    gdir = tmp / "home" / ".gemini"
    gdir.mkdir(parents=True, exist_ok=True)
    if user is not None:
        (gdir / "settings.json").write_text(json.dumps(user))
    plan = GeminiProvider(str(gdir)).launch(["gemini", "-p", "hi"], ctx(tmp, egress=egress))
    (shown,) = plan.views.values()
    data: dict[str, Any] = json.loads(plan.files[shown])
    return data


def test_gemini_sees_them_in_its_view_of_the_users_settings(tmp_path: Path) -> None:
    view = gemini_view(tmp_path, None, egress=True)
    assert view["privacy"] == {"usageStatisticsEnabled": False}
    assert view["general"] == {"enableAutoUpdate": False,
                               "enableAutoUpdateNotification": False}
    assert view["hooks"]  # tether's hooks beside them


@pytest.mark.parametrize(("user", "privacy", "general"), [
    # The user's own choice, kept: statistics on; the older name of the update setting.
    ({"privacy": {"usageStatisticsEnabled": True}, "general": {"disableAutoUpdate": False,
                                                               "vimMode": True}},
     {"usageStatisticsEnabled": True},
     {"disableAutoUpdate": False, "vimMode": True, "enableAutoUpdateNotification": False}),
    # A section that is no object: left as it is (the CLI says what is wrong).
    ({"privacy": "yes"}, "yes",
     {"enableAutoUpdate": False, "enableAutoUpdateNotification": False}),
])
def test_gemini_keeps_what_the_user_set(tmp_path: Path, user: dict[str, Any], privacy: Any,
                                        general: Any) -> None:
    view = gemini_view(tmp_path, user, egress=True)
    assert (view["privacy"], view["general"]) == (privacy, general)


def test_gemini_with_the_hosts_network_sees_the_users_settings_only(tmp_path: Path) -> None:
    view = gemini_view(tmp_path, {"general": {"vimMode": True}}, egress=False)
    assert "privacy" not in view and view["general"] == {"vimMode": True}
