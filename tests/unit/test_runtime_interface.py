"""The runtime interface and its registry, without a daemon: resolution of ``auto``,
each runtime's own spec checks, and the launch each one plans for an exec."""

from __future__ import annotations

import os
from pathlib import Path
from typing import get_args

import pytest

from tether.model.errors import TetherError
from tether.model.records import ExecSpec, RuntimeName, SandboxRecord, SandboxSpec
from tether.runtime import bwrap, registry
from tether.runtime.base import ExecRequest, Runtime
from tether.runtime.bwrap import BwrapRuntime, Probe
from tether.runtime.docker import DockerRuntime
from tether.runtime.docker.names import engine_address
from tether.runtime.process import ProcessRuntime
from tether.runtime.registry import RuntimeContext, Runtimes

NO_BWRAP = Probe(False, None, None, "bubblewrap is not installed")
BWRAP = Probe(True, "/usr/bin/bwrap", "bubblewrap 0.8.0", "ok")


def runtimes(probe: Probe) -> Runtimes:
    rts = Runtimes(RuntimeContext(home="/nonexistent/home", docker_cli="/usr/bin/docker"))
    rts._by_name["bwrap"] = BwrapRuntime(probe)  # what the daemon's probe found
    return rts


def sandbox(spec: SandboxSpec) -> SandboxRecord:
    return SandboxRecord(id="sb1", name="sb1", state="READY", spec=spec)


def test_every_registered_runtime_implements_the_interface() -> None:
    for name, (cls, _build) in registry.FACTORIES.items():
        assert issubclass(cls, Runtime) and cls.name == name
    assert registry.AUTO_ORDER[-1] in registry.FACTORIES
    # The model's list of names (what a spec may say) is the registry's.
    assert set(get_args(RuntimeName)) == set(registry.NAMES) == {"auto", *registry.FACTORIES}


def test_auto_prefers_bwrap_and_says_why_it_fell_back() -> None:
    rt, note = runtimes(BWRAP).resolve("auto")
    assert (rt.name, note) == ("bwrap", None)
    rt, note = runtimes(NO_BWRAP).resolve("auto")
    assert rt.name == "process"
    assert note == "runtime auto fell back to process: bubblewrap is not installed"


def test_a_named_runtime_that_cannot_run_here_is_refused_with_the_fix() -> None:
    with pytest.raises(TetherError) as e:
        runtimes(NO_BWRAP).resolve("bwrap")
    assert e.value.code == "RUNTIME_UNAVAILABLE"
    assert "use runtime auto or process" in e.value.message
    with pytest.raises(TetherError) as e:
        runtimes(BWRAP).get("kubernetes")
    assert e.value.code == "INVALID_PARAMS" and "auto, bwrap, process, docker" in e.value.message


@pytest.mark.parametrize(("spec", "problem"), [
    (SandboxSpec(runtime="process", network="none"), "cannot isolate"),
    (SandboxSpec(runtime="bwrap", image="busybox"), "only used by runtime: docker"),
    (SandboxSpec(runtime="process", restart="always"), "restart needs runtime: docker"),
    (SandboxSpec(runtime="docker"), "runtime: docker needs an image"),
    (SandboxSpec(runtime="bwrap", network="none"), None),
    (SandboxSpec(runtime="auto", network="none"), None),  # auto may become bwrap
    (SandboxSpec(runtime="auto", image="busybox"), "only used by runtime: docker"),
    (SandboxSpec(runtime="docker", image="busybox"), None),
])
def test_each_runtime_checks_its_own_spec_fields(spec: SandboxSpec, problem: str | None) -> None:
    found = registry.spec_problems(spec)
    if problem is None:
        assert found == []
    else:
        assert found and problem in found[0][1]


def test_process_launch_runs_the_command_as_it_is(tmp_path: Path) -> None:
    spec = ExecSpec(argv=["echo", "hi"], env={"A": "1", "LINES": "9"}, tty=True)
    req = ExecRequest(sandbox=sandbox(SandboxSpec(runtime="process", env={"B": "2"})),
                      spec=spec, cwd=str(tmp_path), tether_home="/nonexistent/home")
    launch = ProcessRuntime().prepare_exec(req)("e1")
    assert launch.argv == ["echo", "hi"] and launch.cwd == str(tmp_path)
    assert launch.signal_argv is None
    assert (launch.env["A"], launch.env["B"]) == ("1", "2")
    assert launch.env["TETHER_EXEC_ID"] == "e1" and launch.env["TETHER_SANDBOX"] == "sb1"
    assert "LINES" not in launch.env  # a terminal's size comes from the terminal


def test_bwrap_refuses_before_intent_and_wraps_the_command(tmp_path: Path) -> None:
    rt = BwrapRuntime(BWRAP)
    home = str(tmp_path / "home")
    sb = sandbox(SandboxSpec(runtime="bwrap"))
    with pytest.raises(TetherError, match="no working directory"):
        rt.prepare_exec(ExecRequest(sandbox=sb, spec=ExecSpec(argv=["true"]), cwd=None,
                                    tether_home=home))
    with pytest.raises(TetherError, match="inside tether's home"):
        rt.prepare_exec(ExecRequest(sandbox=sb, spec=ExecSpec(argv=["true"]),
                                    cwd=str(tmp_path), tether_home=str(tmp_path)))
    work = tmp_path / "work"
    work.mkdir()
    launch = rt.prepare_exec(ExecRequest(sandbox=sb, spec=ExecSpec(argv=["true"]),
                                         cwd=str(work), tether_home=home))("e2")
    assert launch.argv[0] == "/usr/bin/bwrap" and launch.argv[-6:] == ["--", *bwrap.GATE, "true"]
    assert launch.gated  # the monitor reports the command's own status, not bwrap's
    assert launch.cwd == os.path.realpath(work)


def test_docker_launch_is_an_engine_api_exec_of_the_monitors_own() -> None:
    rt = DockerRuntime("/nonexistent/home", None)  # no docker CLI needed
    sb = sandbox(SandboxSpec(runtime="docker", image="busybox", workspace="/w"))
    spec = ExecSpec(argv=["sh", "-c", "true"], env={"PATH": "/host/bin", "X": "1",
                                                    "DOCKER_HOST": "tcp://x:1"}, tty=True)
    launch = rt.prepare_exec(ExecRequest(sandbox=sb, spec=spec, cwd="/w/sub",
                                         tether_home="/nonexistent/home"))("e3")
    assert launch.argv == ["sh", "-c", "true"] and launch.env == {} and launch.cwd == "/"
    assert launch.signal_argv is None and launch.engine is not None
    engine = launch.engine
    assert engine["host"] == os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    assert engine["container"] == "tether-primary-sb1"
    assert engine["signal"][-2:] == ["tether-signal", "e3"]
    config = engine["config"]
    assert config["Cmd"] == ["sh", "-c", "true"] and config["WorkingDir"] == "/w/sub"
    assert config["Tty"] and config["AttachStdin"]
    # The host's PATH and docker's own variables mean nothing inside; the values travel
    # to dockerd in the request body, never on a command line.
    assert sorted(config["Env"]) == ["TERM=xterm", "TETHER_EXEC_ID=e3", "TETHER_SANDBOX=sb1",
                                     "X=1"]


@pytest.mark.parametrize(("sbspec", "env", "host"), [
    (SandboxSpec(runtime="docker", image="b"), {}, "unix:///var/run/docker.sock"),
    (SandboxSpec(runtime="docker", image="b"), {"DOCKER_HOST": "tcp://h:2375"}, "tcp://h:2375"),
    (SandboxSpec(runtime="docker", image="b"), {"DOCKER_HOST": "tcp://h:2376",
                                                "DOCKER_TLS_VERIFY": "1"}, None),
    (SandboxSpec(runtime="docker", image="b"), {"DOCKER_HOST": "ssh://u@h"}, None),
    (SandboxSpec(runtime="docker", image="b", docker_host="unix:///d.sock"),
     {"DOCKER_HOST": "ssh://u@h"}, "unix:///d.sock"),
    (SandboxSpec(runtime="docker", image="b", docker_host="tcp://h:2376",
                 docker_cert_path="/certs"), {}, None),
])
def test_the_engine_a_monitor_reaches_itself_is_the_sdks_on_a_plain_socket(
        sbspec: SandboxSpec, env: dict[str, str], host: str | None) -> None:
    assert engine_address(sbspec, env) == host


def test_docker_launch_drives_docker_exec_and_signals_inside() -> None:
    """TETHER_DOCKER_EXEC=cli, and engines behind TLS or ssh: ``docker exec``."""
    rt = DockerRuntime("/nonexistent/home", "/usr/bin/docker", "cli")
    sb = sandbox(SandboxSpec(runtime="docker", image="busybox"))
    spec = ExecSpec(argv=["sh", "-c", "true"], env={"PATH": "/host/bin", "X": "1"})
    launch = rt.prepare_exec(ExecRequest(sandbox=sb, spec=spec, cwd=None,
                                         tether_home="/nonexistent/home"))("e3")
    assert launch.argv[:2] == ["/usr/bin/docker", "exec"]
    assert launch.argv[-4:] == ["tether-primary-sb1", "sh", "-c", "true"]
    assert "-e" in launch.argv and "X" in launch.argv and launch.env["X"] == "1"
    assert launch.env["PATH"] != "/host/bin"  # the host's PATH means nothing inside
    assert launch.cwd == "/" and launch.signal_argv is not None
    assert launch.signal_argv[-1] == "e3"
    with pytest.raises(TetherError) as e:
        DockerRuntime("/nonexistent/home", None, "cli").prepare_exec(
            ExecRequest(sandbox=sb, spec=spec, cwd=None, tether_home="/x"))
    assert e.value.code == "RUNTIME_UNAVAILABLE"


def test_agents_are_refused_or_confined_by_the_runtime_not_by_its_name() -> None:
    assert DockerRuntime.refuses_agents is not None
    assert ProcessRuntime.refuses_agents is None and not ProcessRuntime.confines_agents
    assert BwrapRuntime.confines_agents and BwrapRuntime.refuses_agents is None
    assert not DockerRuntime.can_be_default
