"""Sandbox spec files (tether.spec): strict parsing with the key path and
line in every error, params and ``--set`` overrides, host path safety."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pytest

from tether.model.records import (
    CompanionSpec,
    HealthCheckSpec,
    MountSpec,
    ResourceSpec,
    SandboxSpec,
)
from tether.spec import (
    MAX_SPEC_BYTES,
    SpecError,
    load_spec_file,
    parse_duration,
    parse_size,
    parse_spec,
    parse_spec_object,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "sandbox.yaml"
DOCKER = "runtime: docker\nimage: busybox\n"


def parse(text: str, base: Path | None = None, **kw: object) -> SandboxSpec:
    return parse_spec(textwrap.dedent(text), source="spec.yaml",
                      base_dir=str(base) if base else None, **kw)  # type: ignore[arg-type]


def fail(text: str, base: Path | None = None, **kw: object) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse(text, base, **kw)
    return info.value


def check(err: SpecError, line: int | None, path: str, *fragments: str) -> None:
    """The message starts with ``spec.yaml:LINE: PATH:`` and says the fragments."""
    msg = str(err)
    where = f"spec.yaml:{line}: " if line is not None else ""
    assert msg.startswith(f"{where}{path}: " if path else where), msg
    assert err.line == line, msg
    assert err.path == path, msg
    for fragment in fragments:
        assert fragment in msg, msg


# ----------------------------------------------------------------- basic shape


def test_empty_document_is_all_defaults() -> None:
    assert parse("") == SandboxSpec(runtime="auto")
    assert parse("# nothing\n") == SandboxSpec(runtime="auto")


def test_runtime_auto_is_kept_for_the_daemon() -> None:
    assert parse("runtime: auto").runtime == "auto"
    assert parse("runtime: bwrap").runtime == "bwrap"


def test_top_level_must_be_a_mapping() -> None:
    check(fail("- runtime: docker\n"), 1, "", "expected a mapping of spec fields",
          "got a list")


# ---------------------------------------------------------------- error classes


def test_unknown_key_suggests_the_close_one() -> None:
    err = fail("""\
        runtime: process
        netwrok: none
    """)
    check(err, 2, "netwrok", "unknown key", "did you mean 'network'?")


def test_unknown_nested_key_has_the_full_path() -> None:
    err = fail(DOCKER + textwrap.dedent("""\
        companions:
          - name: db
            image: postgres
          - name: cache
            image: redis
            health:
              command: redis-cli ping
              intervall: 2s
    """))
    check(err, 10, "companions[1].health.intervall", "did you mean 'interval'?")


def test_unknown_key_without_a_close_match_lists_the_keys() -> None:
    err = fail("resources:\n  gpu: 1\n")
    check(err, 2, "resources.gpu", "unknown key; expected one of: memory, cpus, pids")


@pytest.mark.parametrize(("text", "line", "path", "fragment"), [
    ("mounts: /data\n", 1, "mounts", "expected a list of mounts, got '/data'"),
    ("env:\n  - A=1\n", 2, "env", "expected a mapping of NAME: value, got a list"),
    ("resources:\n  cpus: two\n", 2, "resources.cpus", "got 'two'"),
    ("resources:\n  pids: 1.5\n", 2, "resources.pids", "whole number"),
    ("resources:\n  pids: 0\n", 2, "resources.pids", "more than 0"),
    ("resources:\n  cpus: -1\n", 2, "resources.cpus", "more than 0"),
    ("resources:\n  cpus: true\n", 2, "resources.cpus", "got the boolean true"),
    ("resources: 1g\n", 1, "resources", "expected a mapping of memory, cpus and pids"),
    ("workspace: [a]\n", 1, "workspace", "expected a string, got a list"),
    (DOCKER + "companions:\n  - name: db\n    image: pg\n    required: maybe\n", 6,
     "companions[0].required", "expected true or false, got 'maybe'"),
    (DOCKER + "companions:\n  - name: db\n    image: pg\n    command: {a: b}\n", 6,
     "companions[0].command", "expected a command"),
    (DOCKER + "companions:\n  - name: db\n    image: pg\n    command: [sleep, 10]\n", 6,
     "companions[0].command[1]", "quote it"),
    (DOCKER + "companions: {db: {image: pg}}\n", 3, "companions",
     "expected a list of companions"),
    ("labels:\n  tier: 1\n", 2, "labels.tier", "got the number 1; quote it"),
])
def test_wrong_type(text: str, line: int, path: str, fragment: str) -> None:
    check(fail(text), line, path, fragment)


def test_missing_required_fields() -> None:
    check(fail("runtime: docker\n"), 1, "image", "required field is missing",
          "runtime: docker needs an image")
    err = fail(DOCKER + "companions:\n  - image: postgres\n")
    check(err, 4, "companions[0].name", "required field is missing",
          "needs a name and an image")
    err = fail(DOCKER + "companions:\n  - name: db\n    env: {A: b}\n")
    check(err, 4, "companions[0].image", "required field is missing")
    err = fail(DOCKER + "companions:\n  - name: db\n    image: pg\n    health:\n"
               "      interval: 1s\n")
    check(err, 7, "companions[0].health.command", "required field is missing")
    err = fail(DOCKER + "companions:\n  - name: db\n    image:\n")
    check(err, 5, "companions[0].image", "required field is empty")
    err = fail("mounts:\n  - target: /data\n")
    check(err, 2, "mounts[0].source", "required field is missing")


@pytest.mark.parametrize(("text", "line", "path", "fragment"), [
    ("runtime: dokcer\n", 1, "runtime",
     "expected one of auto, process, bwrap, docker, got 'dokcer' (did you mean 'docker'?)"),
    ("network: public\n", 1, "network",
     "expected one of none, private, host, or a mapping {allow: [HOST, ...]}, got 'public'"),
    ("network: no\n", 1, "network", "got the boolean no"),
    ("mounts:\n  - source: .\n    target: /x\n    mode: rx\n", 4, "mounts[0].mode",
     "expected one of ro, rw, got 'rx'"),
])
def test_bad_enum(text: str, line: int, path: str, fragment: str, tmp_path: Path) -> None:
    check(fail(text, tmp_path), line, path, fragment)


def test_bad_size() -> None:
    err = fail("runtime: process\nresources:\n  memory: lots\n")
    assert str(err) == ("spec.yaml:3: resources.memory: expected a size like 512m or 2g "
                        "(or a number of bytes), got 'lots'")
    check(fail("resources:\n  memory: 1.5\n"), 2, "resources.memory", "the number 1.5")
    check(fail("resources:\n  memory: 0m\n"), 2, "resources.memory", "more than 0 bytes")


@pytest.mark.parametrize(("text", "size"), [
    ("512m", 512 << 20), ("2g", 2 << 30), ("2G", 2 << 30), ("1.5g", 3 << 29),
    ("64k", 64 << 10), ("512mb", 512 << 20), ("512MiB", 512 << 20), ("1t", 1 << 40),
    ("4096", 4096), ("4096b", 4096), ("lots", None), ("1x", None), ("", None), ("g", None),
])
def test_sizes(text: str, size: int | None) -> None:
    assert parse_size(text) == size


def test_memory_as_bytes() -> None:
    assert parse("resources: {memory: 1048576}").resources == ResourceSpec(memory=1 << 20)


def test_bad_duration() -> None:
    err = fail(DOCKER + "companions:\n  - name: db\n    image: pg\n    health:\n"
               "      command: ['true']\n      timeout: soon\n")
    check(err, 8, "companions[0].health.timeout", "expected a duration like 500ms, 30s",
          "got 'soon'")
    check(fail("ttl: 0\n"), 1, "ttl", "must be more than 0")
    check(fail("idle_timeout: -5s\n"), 1, "idle_timeout", "expected a duration")
    check(fail("idle_timeout: true\n"), 1, "idle_timeout", "got the boolean true")


@pytest.mark.parametrize(("text", "seconds"), [
    ("500ms", 0.5), ("2s", 2.0), ("1m", 60.0), ("1h30m", 5400.0), ("1d", 86400.0),
    ("1.5s", 1.5), ("30", 30.0), ("2.5", 2.5), ("soon", None), ("1 m", None), ("5x", None),
    ("nan", None), ("inf", None),
])
def test_durations(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == seconds


def test_duration_numbers_are_seconds() -> None:
    spec = parse("idle_timeout: 90\nttl: 1.5\n")
    assert (spec.idle_timeout, spec.ttl) == (90.0, 1.5)


@pytest.mark.parametrize("name", ["DB", "-db", "db!", "a" * 64, "", "my db"])
def test_bad_companion_name(name: str) -> None:
    err = fail(DOCKER + f"companions:\n  - name: '{name}'\n    image: pg\n")
    check(err, 4, "companions[0].name", "expected a name of lowercase letters")


def test_good_companion_names() -> None:
    spec = parse(DOCKER + "companions:\n  - {name: db, image: pg}\n"
                 f"  - {{name: {'a' * 63}, image: pg}}\n  - {{name: 0redis_x.y-z, image: r}}\n")
    assert [c.name for c in spec.companions] == ["db", "a" * 63, "0redis_x.y-z"]


def test_duplicate_companion() -> None:
    err = fail(DOCKER + textwrap.dedent("""\
        companions:
          - name: db
            image: postgres
          - name: db
            image: mysql
    """))
    check(err, 6, "companions[1].name", "duplicate companion name 'db'", "companions[0]")


def test_companions_need_docker() -> None:
    err = fail("runtime: bwrap\ncompanions:\n  - {name: db, image: pg}\n")
    check(err, 2, "companions", "companions need runtime: docker")
    check(fail("runtime: bwrap\nimage: busybox\n"), 2, "image",
          "only used by runtime: docker")
    err = fail(DOCKER + "network: none\ncompanions:\n  - {name: db, image: pg}\n")
    check(err, 3, "network", "cuts the sandbox off from its companions")


def test_restart_policy() -> None:
    assert parse(DOCKER).restart == "never"
    assert parse(DOCKER + "restart: always\n").restart == "always"
    check(fail("runtime: bwrap\nrestart: always\n"), 2, "restart",
          "restart needs runtime: docker")
    check(fail(DOCKER + "restart: sometimes\n"), 3, "restart", "never")
    assert parse("runtime: bwrap\nrestart: never\n").restart == "never"


def test_duplicate_yaml_key() -> None:
    check(fail("network: none\nenv: {}\nnetwork: host\n"), 3, "network",
          "duplicate key (first at line 1)")


def test_invalid_yaml_has_a_line() -> None:
    check(fail("env:\n  A: x\n  B: y: z\nttl: 1\n"), 3, "", "invalid YAML",
          "mapping values are not allowed here")
    check(fail("env: {A: b\n"), 2, "", "invalid YAML")
    check(fail("runtime: process\n---\nruntime: bwrap\n"), 2, "", "invalid YAML",
          "single document")


def test_anchors_aliases_and_tags_are_refused() -> None:
    bomb = 'a: &a ["x","x"]\nb: &b [*a,*a]\nc: &c [*b,*b]\n'
    check(fail(bomb), 1, "", "anchors and aliases")
    check(fail("env: &e {A: b}\nlabels: *e\n"), 1, "", "anchors and aliases")
    check(fail("image: !!python/object/apply:os.system [echo hi]\n"), 1, "image",
          "YAML tag", "not supported")
    check(fail("labels: !custom {a: b}\n"), 1, "labels", "YAML tag")
    check(fail("env:\n  <<: {A: b}\n"), 2, "env", "merge keys")
    check(fail("\n\nworkspace: " + "[" * 100 + "]" * 100 + "\n"), 3, "", "nested more than")


def test_keys_must_be_strings() -> None:
    check(fail("env:\n  1: x\n"), 2, "env", "keys must be strings, got 1")
    check(fail("labels:\n  yes: x\n"), 2, "labels", "keys must be strings")


def test_env_values_must_be_quoted_strings() -> None:
    check(fail("env:\n  A: ok\n  PORT: 5432\n"), 3, "env.PORT",
          "expected a string, got the number 5432", 'quote it ("5432")')
    check(fail("env:\n  DEBUG: true\n"), 2, "env.DEBUG", "got the boolean true", "quote it")
    check(fail("env:\n  EMPTY:\n"), 2, "env.EMPTY", "got null", 'write ""')
    check(fail("env:\n  A=B: x\n"), 2, "env['A=B']", "cannot contain '='")
    spec = parse("env:\n  PORT: '5432'\n  DEBUG: \"true\"\n  EMPTY: ''\n  V: 1.10.2\n"
                 "  EQ: =\n  D: 2024-01-01\n")
    assert spec.env == {"PORT": "5432", "DEBUG": "true", "EMPTY": "", "V": "1.10.2",
                        "EQ": "=", "D": "2024-01-01"}


def test_reserved_labels() -> None:
    check(fail("labels:\n  tether.sandbox: x\n"), 2, "labels['tether.sandbox']", "reserved")


def test_oversized_document(tmp_path: Path) -> None:
    text = "# " + "x" * MAX_SPEC_BYTES + "\nruntime: process\n"
    err = fail(text)
    assert str(err).startswith("spec.yaml: the spec is"), err
    assert "1 MiB" in str(err) and err.line is None and err.path == ""
    path = tmp_path / "big.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=r"big\.yaml: the spec is over 1 MiB"):
        load_spec_file(path)
    # Just under the limit is fine.
    ok = "runtime: process\n#" + "x" * (MAX_SPEC_BYTES - 100) + "\n"
    assert parse(ok).runtime == "process"


# ------------------------------------------------------------------ host paths


def test_workspace_resolves_relative_to_base_dir(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    spec = parse("workspace: proj\n", tmp_path)
    assert spec.workspace == str(tmp_path.resolve() / "proj")
    assert spec.workspace_target is None
    spec = parse("workspace: proj\nworkspace_target: /workspace/\n", tmp_path)
    assert spec.workspace_target == "/workspace"


def test_workspace_errors(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    check(fail("workspace: nope\n", tmp_path), 1, "workspace", "'nope' does not exist",
          f"resolved to {tmp_path}/nope")
    check(fail("workspace: file\n", tmp_path), 1, "workspace", "is not a directory")
    check(fail("workspace_target: /w\n", tmp_path), 1, "workspace_target",
          "needs a workspace")
    check(fail("workspace: .\nworkspace_target: w\n", tmp_path), 2, "workspace_target",
          "relative targets are refused")


def test_mounts_long_and_short_forms(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "cfg.toml").write_text("")
    spec = parse(f"""\
        mounts:
          - data:/data
          - data:/data-rw:rw
          - {tmp_path}/cfg.toml:/etc-not/cfg.toml:ro
          - source: data
            target: /x/./y/../z/
            mode: rw
          - source: data
    """, tmp_path)
    real = tmp_path.resolve()
    assert spec.mounts == [
        MountSpec(source=f"{real}/data", target="/data", mode="ro"),
        MountSpec(source=f"{real}/data", target="/data-rw", mode="rw"),
        MountSpec(source=f"{real}/cfg.toml", target="/etc-not/cfg.toml", mode="ro"),
        MountSpec(source=f"{real}/data", target="/x/z", mode="rw"),
        MountSpec(source=f"{real}/data", target=f"{real}/data", mode="ro"),
    ]


@pytest.mark.parametrize("entry", ["data", "data:/a:b:ro", "data:/a:rx", ":/a", "data:"])
def test_bad_short_mount(entry: str, tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    check(fail(f"mounts:\n  - '{entry}'\n", tmp_path), 2, "mounts[0]",
          "expected SOURCE:TARGET[:ro|rw]")


def test_mount_source_missing(tmp_path: Path) -> None:
    err = fail("runtime: process\nmounts:\n  - source: ./missing\n    target: /m\n", tmp_path)
    check(err, 3, "mounts[0].source", "mount source './missing' does not exist")
    check(fail("mounts: ['/no/such/dir:/m']\n"), 1, "mounts[0]",
          "'/no/such/dir' does not exist")
    os.symlink(tmp_path / "gone", tmp_path / "dangling")
    check(fail("mounts: ['dangling:/m']\n", tmp_path), 1, "mounts[0]",
          "'dangling' cannot be resolved")


def test_symlinks_are_resolved(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    os.symlink(real, tmp_path / "link")
    os.symlink("real/sub", tmp_path / "sublink")
    spec = parse("workspace: link\nmounts: ['sublink:/s', {source: link/sub, target: /t}]\n",
                 tmp_path)
    resolved = str(real.resolve())
    assert spec.workspace == resolved
    assert [m.source for m in spec.mounts] == [f"{resolved}/sub", f"{resolved}/sub"]


@pytest.mark.parametrize("target", [
    "/", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/boot", "/run", "/var/run",
    "/proc", "/proc/sys", "/sys", "/sys/fs/cgroup", "/dev", "/dev/shm", "/etc/", "//etc",
    "/data/../etc", "/usr/./", "/tmp/../../proc/1",
])
def test_mount_over_a_system_path_is_refused(target: str, tmp_path: Path) -> None:
    err = fail(f"mounts:\n  - source: .\n    target: '{target}'\n", tmp_path)
    check(err, 3, "mounts[0].target", "is a system path; mounting over it is refused")


@pytest.mark.parametrize("target", ["/data", "/usr/local/src", "/etc-x", "/run/user/x",
                                    "/workspace", "/devices", "/home/agent"])
def test_mount_targets_that_are_fine(target: str, tmp_path: Path) -> None:
    assert parse(f"mounts: ['.:{target}']\n", tmp_path).mounts[0].target == target


def test_relative_target_is_refused(tmp_path: Path) -> None:
    err = fail("mounts:\n  - source: .\n    target: data\n", tmp_path)
    check(err, 3, "mounts[0].target", "absolute path", "relative targets are refused")
    check(fail("mounts: ['.:../etc']\n", tmp_path), 1, "mounts[0]", "relative targets")


def test_workspace_at_a_system_path_is_refused() -> None:
    check(fail("workspace: /\n"), 1, "workspace", "is a system path")
    check(fail("workspace: /etc\n"), 1, "workspace", "is a system path")


def test_duplicate_targets(tmp_path: Path) -> None:
    err = fail("workspace: .\nworkspace_target: /w\nmounts:\n  - .:/a\n  - .:/w/../w\n",
               tmp_path)
    check(err, 5, "mounts[1]", "target /w is already used by the workspace")


def test_tether_home_is_never_exposed(tmp_path: Path) -> None:
    home = tmp_path / "state" / "tether"
    (home / "logs").mkdir(parents=True)
    os.symlink(home, tmp_path / "home-link")
    kw = {"tether_home": str(home)}
    for source in ("state/tether", "state/tether/logs", "state", ".", "home-link", "/"):
        err = fail(f"runtime: process\nmounts:\n  - source: {source}\n    target: /m\n",
                   tmp_path, **kw)
        check(err, 3, "mounts[0].source", "would expose tether's own state")
    check(fail("workspace: state\n", tmp_path, **kw), 1, "workspace",
          "would expose tether's own state")
    check(fail("mounts: ['state/tether/logs:/l']\n", tmp_path, **kw), 1, "mounts[0]",
          "would expose tether's own state")
    # A sibling of the home, or a name that merely shares its prefix, is fine.
    (tmp_path / "state" / "tether-other").mkdir()
    spec = parse("mounts: ['state/tether-other:/o']\n", tmp_path, **kw)
    assert spec.mounts[0].source == str((tmp_path / "state" / "tether-other").resolve())


# -------------------------------------------------------------------- commands


def test_commands_and_health() -> None:
    spec = parse(DOCKER + textwrap.dedent("""\
        companions:
          - name: db
            image: postgres
            command: postgres -c 'log_line_prefix=%m [%p] '
            health:
              command: pg_isready -U "$$USER"
              interval: 500ms
              timeout: 2
              retries: 5
              start_period: 0
            required: false
          - name: cache
            image: redis
            command: [redis-server, --save, ""]
            health:
              command: [redis-cli, ping]
    """))
    db, cache = spec.companions
    assert db.command == ["postgres", "-c", "log_line_prefix=%m [%p] "]
    assert db.health == HealthCheckSpec(command=["sh", "-c", 'pg_isready -U "$$USER"'],
                                        interval=0.5, timeout=2.0, retries=5,
                                        start_period=0.0)
    assert db.required is False
    assert cache.command == ["redis-server", "--save", ""]
    assert cache.health == HealthCheckSpec(command=["redis-cli", "ping"])
    assert cache.required is True


def test_command_errors() -> None:
    base = DOCKER + "companions:\n  - name: db\n    image: pg\n"
    check(fail(base + "    command: \"echo 'unclosed\"\n"), 6, "companions[0].command",
          "cannot split")
    check(fail(base + "    command: []\n"), 6, "companions[0].command", "empty")
    check(fail(base + "    health: {command: '  '}\n"), 6, "companions[0].health.command",
          "empty")
    check(fail(base + "    health: {command: ['true'], retries: 0}\n"), 6,
          "companions[0].health.retries", "more than 0")
    check(fail(base + "    image: my image\n"), 6, "companions[0].image", "duplicate key")
    check(fail("runtime: docker\nimage: 'my image'\n"), 2, "image", "no spaces")


# ---------------------------------------------------------- params and --set


PARAMS = DOCKER + textwrap.dedent("""\
    params:
      pg: "16"
      mem: 2g
      cpus: 1.5
      user: agent
      token:
    env:
      IMAGE: postgres:${params.pg}
      WHO: ${user}@${params.user}
      LITERAL: $${user} and $${params.pg} and $$ and ${
    resources:
      memory: ${params.mem}
      cpus: ${cpus}
    companions:
      - name: db
        image: postgres:${pg}
""")


def test_params_defaults_are_substituted() -> None:
    spec = parse(PARAMS.replace(" and ${\n", "\n"))
    assert spec.env == {"IMAGE": "postgres:16", "WHO": "agent@agent",
                        "LITERAL": "${user} and ${params.pg} and $$"}
    assert spec.resources == ResourceSpec(memory=2 << 30, cpus=1.5)
    assert spec.companions[0].image == "postgres:16"


def test_unterminated_reference() -> None:
    check(fail(PARAMS), 12, "env.LITERAL", "unterminated ${")


def test_set_overrides_params_and_fields() -> None:
    text = PARAMS.replace(" and ${\n", "\n")
    spec = parse(text, overrides=["pg=15", "params.mem=512m", "cpus=4",
                                  "network=host", "env.FOO=bar", "env.PORT=5432",
                                  "resources.pids=64", "ttl=1h", "labels.team=infra",
                                  "companions[0].required=false",
                                  "companions.db.health.command=pg_isready",
                                  "env.A.B=dotted"])
    assert spec.companions[0].image == "postgres:15"
    assert spec.companions[0].required is False
    assert spec.companions[0].health == HealthCheckSpec(command=["sh", "-c", "pg_isready"])
    assert spec.resources == ResourceSpec(memory=512 << 20, cpus=4.0, pids=64)
    assert spec.network == "host"
    assert spec.env["IMAGE"] == "postgres:15"
    assert spec.env["FOO"] == "bar"
    assert spec.env["PORT"] == "5432"  # --set values are text: no quoting needed
    assert spec.env["A.B"] == "dotted"
    assert spec.ttl == 3600.0
    assert spec.labels == {"team": "infra"}
    # A later --set wins; an empty value unsets an optional field.
    spec = parse("network: private\n", overrides=["network=none", "network=host"])
    assert spec.network == "host"
    assert parse("network: private\n", overrides=["network="]).network is None


def test_set_creates_missing_mappings_and_replaces_list_items(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    spec = parse("mounts: ['d:/a']\n", tmp_path,
                 overrides=["resources.memory=1g", "mounts[0]=d:/b:rw"])
    assert spec.resources == ResourceSpec(memory=1 << 30)
    assert spec.mounts == [MountSpec(source=str((tmp_path / "d").resolve()), target="/b",
                                     mode="rw")]


def test_param_without_default_must_be_set() -> None:
    text = PARAMS.replace(" and ${\n", "\n") + "labels:\n  t: ${token}\n"
    check(fail(text), 20, "labels.t", "param 'token' has no default",
          "pass --set token=VALUE")
    assert parse(text, overrides=["token=abc"]).labels == {"t": "abc"}


def test_unknown_param_reference() -> None:
    err = fail("params:\n  user: me\nenv:\n  HOME: /home/${usr}\n")
    check(err, 4, "env.HOME", "unknown param 'usr' in ${usr}", "did you mean 'user'?",
          "$${...}")
    check(fail("env:\n  X: ${params.nope}\n"), 2, "env.X", "unknown param 'nope'",
          "declared: none")
    check(fail("params: {a: 1}\nenv:\n  X: ${a b}\n"), 3, "env.X", "bad reference ${a b}")


def test_param_declarations() -> None:
    check(fail("params:\n  1x: a\n"), 2, "params['1x']", "a param name is")
    check(fail("params:\n  a: [1]\n"), 2, "params.a", "expected a scalar default")
    check(fail("params: [a]\n"), 1, "params", "expected a mapping of name: default")


def test_whole_value_reference_keeps_the_type_the_field_needs() -> None:
    text = "params:\n  n: 2\n  flag: 'true'\nresources:\n  cpus: ${n}\n  pids: ${n}\n" \
           "env:\n  N: ${n}\n"
    spec = parse(text)
    assert spec.resources == ResourceSpec(cpus=2.0, pids=2)
    assert spec.env == {"N": "2"}
    spec = parse(DOCKER + "params: {r: 'false'}\ncompanions:\n"
                 "  - {name: db, image: pg, required: '${r}'}\n")
    assert spec.companions[0].required is False


def test_errors_in_substituted_values_name_the_param() -> None:
    text = "params:\n  mem: 2g\nresources:\n  memory: ${params.mem}\n"
    err = fail(text, overrides=["mem=lots"])
    check(err, 4, "resources.memory", "got 'lots'", "from ${params.mem}",
          "set by --set mem=lots")


def test_unknown_set_key() -> None:
    with pytest.raises(SpecError) as info:
        parse("params: {user: me}\n", overrides=["nework=host"])
    err = info.value
    assert str(err).startswith("--set nework=host: nework: unknown key"), err
    assert "did you mean 'network'?" in str(err) and "params: user" in str(err)
    assert err.path == "nework" and err.line is None
    for item, fragment in [
        ("usr=x", "did you mean 'user'?"),
        ("params.usr=x", "unknown param"),
        ("resources.memroy=1g", "resources.memroy: unknown key (did you mean 'memory'?)"),
        ("runtime.kind=x", "runtime is a single value"),
        ("companions[0].image=x", "companions has no items"),
        ("mounts[0].mode=rw", "mounts has no items"),
        ("novalue", "expected KEY=VALUE"),
        ("=x", "expected KEY=VALUE"),
        ("a..b=x", "malformed key"),
    ]:
        with pytest.raises(SpecError, match=r"^--set ") as info:
            parse("params: {user: me}\n", overrides=[item])
        assert fragment in str(info.value), (item, str(info.value))


def test_set_into_lists() -> None:
    text = DOCKER + "companions:\n  - {name: db, image: pg}\n"
    for item, fragment in [
        ("companions[1].image=x", "companions has 1 item(s); there is no companions[1]"),
        ("companions.dbx.image=x", "no item named 'dbx' in companions (names: db)"),
        ("companions[0].imag=x", "companions[0].imag: unknown key (did you mean 'image'?)"),
        ("companions[0].env.X.Y=1", ""),
    ]:
        if not fragment:
            assert parse(text, overrides=[item]).companions[0].env == {"X.Y": "1"}
            continue
        with pytest.raises(SpecError) as info:
            parse(text, overrides=[item])
        assert fragment in str(info.value), (item, str(info.value))


def test_bad_values_from_set_name_the_item() -> None:
    with pytest.raises(SpecError) as info:
        parse("runtime: process\n", overrides=["resources.memory=lots"])
    assert str(info.value) == ("--set resources.memory=lots: resources.memory: expected a "
                               "size like 512m or 2g (or a number of bytes), got 'lots'")
    assert info.value.line is None and info.value.path == "resources.memory"


# ------------------------------------------------------------ files and example


def test_load_spec_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    path = tmp_path / "my.yaml"
    path.write_text("workspace: ws\nresources:\n  memory: lots\n")
    with pytest.raises(SpecError) as info:
        load_spec_file(path)
    assert str(info.value).startswith(f"{path}:3: resources.memory: "), info.value
    assert info.value.source == str(path)
    path.write_text("workspace: ws\n")
    assert load_spec_file(path).workspace == str((tmp_path / "ws").resolve())
    with pytest.raises(SpecError, match="cannot read the spec"):
        load_spec_file(tmp_path / "missing.yaml")
    path.write_bytes(b"env:\n  A: \xff\n")
    with pytest.raises(SpecError, match=r"my\.yaml:2: the spec is not UTF-8"):
        load_spec_file(path)


def test_full_example(tmp_path: Path) -> None:
    shutil.copy(EXAMPLE, tmp_path / "sandbox.yaml")
    (tmp_path / "datasets").mkdir()
    real = tmp_path.resolve()
    expected = SandboxSpec(
        runtime="docker",
        workspace=str(real),
        workspace_target="/workspace",
        image="python:3.12-slim",
        mounts=[MountSpec(source=f"{real}/datasets", target="/data", mode="ro")],
        env={"DATABASE_URL": "postgresql://postgres:agent-only@db:5432/app",
             "PYTHONDONTWRITEBYTECODE": "1"},
        network="private",
        resources=ResourceSpec(memory=4 << 30, cpus=2.0, pids=512),
        companions=[CompanionSpec(
            name="db",
            image="postgres:16",
            env={"POSTGRES_PASSWORD": "agent-only", "POSTGRES_DB": "app"},
            command=["postgres", "-c", "fsync=off", "-c", "full_page_writes=off"],
            health=HealthCheckSpec(command=["sh", "-c", "pg_isready -U postgres -d app"],
                                   interval=1.0, timeout=5.0, retries=30, start_period=2.0),
            required=True,
        )],
        idle_timeout=1800.0,
        ttl=7 * 86400.0,
        labels={"project": "webapp", "owner": "platform-team"},
    )
    assert load_spec_file(tmp_path / "sandbox.yaml") == expected
    # The overrides the file's header suggests.
    spec = load_spec_file(tmp_path / "sandbox.yaml",
                          overrides=["pg_version=15", "resources.memory=8g"])
    assert spec.companions[0].image == "postgres:15"
    assert spec.resources == ResourceSpec(memory=8 << 30, cpus=2.0, pids=512)
    # Its home is refused when the example would mount it.
    with pytest.raises(SpecError, match="would expose tether's own state"):
        load_spec_file(tmp_path / "sandbox.yaml", tether_home=str(tmp_path / "datasets"))


# ------------------------------------------------------------------ spec objects


def test_an_object_is_the_same_spec_as_its_yaml(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    text = DOCKER + ("mounts: ['d:/data:rw']\nresources: {memory: 1g, cpus: 1.5}\n"
                     "params: {pg: '16'}\ncompanions:\n  - {name: db, image: 'pg:${pg}', "
                     "health: {command: pg_isready, interval: 2s}}\n")
    obj = {"runtime": "docker", "image": "busybox", "mounts": ["d:/data:rw"],
           "resources": {"memory": "1g", "cpus": 1.5}, "params": {"pg": "16"},
           "companions": [{"name": "db", "image": "pg:${pg}",
                           "health": {"command": "pg_isready", "interval": "2s"}}]}
    assert parse_spec_object(obj, base_dir=str(tmp_path)) == parse(text, tmp_path)
    assert (parse_spec_object(obj, base_dir=str(tmp_path), overrides=["pg=15"])
            .companions[0].image == "pg:15")


@pytest.mark.parametrize(("obj", "path", "fragment"), [
    ({"resources": {"memory": "lots"}}, "resources.memory", "expected a size like 512m"),
    ({"env": {"PORT": 5432}}, "env.PORT", "expected a string, got the number 5432"),
    ({"mounts": [{"source": "/no/such/dir", "target": "/x"}]}, "mounts[0].source",
     "does not exist"),
    ({"runtime": "docker"}, "image", "required field is missing"),
    ({"labels": {"tether.x": "1"}}, "labels['tether.x']", "reserved"),
    ({"ephemeral": True}, "ephemeral", "unknown key"),
    ({"a": [[[[]]]] * 1, "b": 1}, "a", "unknown key"),
])
def test_object_errors_name_the_key_path(obj: dict[str, object], path: str,
                                          fragment: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec_object(obj)
    err = info.value
    assert str(err).startswith(f"spec.{path}: "), err
    assert fragment in str(err), err
    assert (err.path, err.line, err.source) == (path, None, "spec")


def test_object_nesting_is_bounded() -> None:
    deep: object = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(SpecError, match=r"^spec: nested more than 64 levels deep"):
        parse_spec_object({"labels": deep})


def test_docker_host_and_its_tls_files(tmp_path: Path) -> None:
    for host in ("unix:///run/d2.sock", "tcp://10.0.0.2:2376", "ssh://me@box:2222"):
        assert parse(DOCKER + f"docker_host: {host}\n").docker_host == host
    check(fail(DOCKER + "docker_host: http://box\n"), 3, "docker_host",
          "unix:///path/to/docker.sock, tcp://HOST:PORT or ssh://")
    check(fail(DOCKER + "docker_host: unix://relative.sock\n"), 3, "docker_host", "unix:///")
    check(fail("runtime: bwrap\ndocker_host: ssh://box\n"), 2, "docker_host",
          "docker_host needs runtime: docker")
    certs = tmp_path / "certs"
    certs.mkdir()
    tcp = DOCKER + "docker_host: tcp://box:2376\n"
    check(fail(tcp + "docker_cert_path: certs\n", tmp_path), 4, "docker_cert_path",
          "lacks ca.pem, cert.pem, key.pem")
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (certs / name).write_text("x")
    assert parse(tcp + "docker_cert_path: certs\n", tmp_path).docker_cert_path == str(certs)
    check(fail(DOCKER + "docker_host: ssh://box\ndocker_cert_path: certs\n", tmp_path), 4,
          "docker_cert_path", "tcp://HOST:PORT")
