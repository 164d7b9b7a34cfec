"""Sandboxes: create → READY and exec latency in the process, bwrap and docker
runtimes, each beside what the same work costs without tether, in the same run.

* Create: the ``sandbox.create`` round trip on an open connection; the daemon
  replies once the sandbox is READY. Each sandbox is deleted right after, outside
  the timing (the docker deletes are timed on their own, beside the CLI teardown).
  process and bwrap sandboxes start nothing at create (a bwrap exec runs its own
  ``bwrap``), so their figure is a store commit plus the RPC; the baselines are the
  RPC floor (``daemon.health``) and one ``bwrap <the exec's args> true`` — what a
  sandbox that ran bubblewrap up front would pay. A docker sandbox is an internal
  network, an iptables rule keeping it off the host, optional companions and the
  primary container; the baselines are ``docker run --rm IMAGE true`` and the same
  setup done with the CLI: ``docker network create --internal`` + ``iptables -I``
  + ``docker run -d`` per companion (polling ``docker inspect`` until healthy when
  it has a health check) + ``docker run -d`` of the primary.
* Exec: ``exec.start`` sent → reply (the exec RUNNING with a pid: the monitor has
  spawned the command, or for docker created the exec and forked its client), and
  ``exec.start`` sent → ``exec.wait`` returned, for ``true``. Baselines: the same
  argv tether's monitor runs, started with ``subprocess.Popen`` (return of
  ``Popen()``, then ``wait()``): ``true``; ``bwrap <args> -- true``; for docker,
  ``docker exec <primary> true`` and ``docker run --rm IMAGE true``, and the same
  exec on the CLI path (a second daemon, ``TETHER_DOCKER_EXEC=cli``: what every docker
  exec ran before its monitor spoke the Engine API). Docker also as whole processes,
  the issue's row: ``tether run --sandbox <docker> -- true`` on both daemons against
  ``docker exec <ctr> true``, alternated sample by sample, medians of at least 15.

tether and its baselines alternate sample by sample. The daemon and the CLI
baselines use the same docker client binary. Rows for a runtime this machine
cannot run (no bubblewrap namespaces, no dockerd or no test image) are skipped
with a note. Everything created is removed afterwards, whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.harness import (
    BenchResult,
    Daemon,
    Options,
    RawConn,
    Row,
    fmt_ms,
    fresh_home,
    kill_strays,
    percentile,
    reap_orphans,
    summarize_ms,
)
from tether.model.records import SandboxSpec
from tether.runtime import bwrap as bwrap_runtime
from tether.runtime import docker as docker_runtime

IMAGE = os.environ.get("TETHER_TEST_IMAGE", "tether-test:busybox")
WARMUP = 2
HEALTH_INTERVAL = "200ms"  # the companion health check's interval (docker's own timer)
COMPANION_CMD = ["sleep", "3600"]
TRUE = ["true"]


# ---------------------------------------------------------------------- helpers
def _docker_bin() -> str | None:
    """The client both tether and the baselines use: $TETHER_DOCKER, else the
    distribution's /usr/bin/docker (matching the engine), else the one on PATH."""
    env = os.environ.get("TETHER_DOCKER")
    if env:
        return env
    if os.access("/usr/bin/docker", os.X_OK):
        return "/usr/bin/docker"
    return shutil.which("docker")


def _docker_usable(docker: str | None) -> tuple[bool, str]:
    if docker is None:
        return False, "the docker CLI is not installed"
    try:
        r = subprocess.run([docker, "image", "inspect", "--format", "{{.Id}}", IMAGE],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"docker did not answer: {e}"
    if r.returncode != 0:
        return False, (f"`docker image inspect {IMAGE}` failed: "
                       f"{(r.stderr or r.stdout).strip()[:200]}")
    return True, "ok"


def _wait_docker(docker: str | None, timeout: float = 45.0) -> bool:
    """Until dockerd answers again (something may restart it meanwhile, e.g. the
    docker tests); False if it did not within ``timeout``."""
    if docker is None:
        return False
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            if subprocess.run([docker, "version", "--format", "{{.Server.Version}}"],
                              capture_output=True, timeout=15).returncode == 0:
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(1.0)


def _iptables() -> str:
    return shutil.which("iptables") or "/usr/sbin/iptables"


@contextlib.contextmanager
def _env(**values: str | None) -> Iterator[None]:
    """Set (or unset) environment variables for the daemon we spawn, then restore."""
    old = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _pp(samples: list[float]) -> str:
    """``p50 / p99`` of durations in seconds."""
    if not samples:
        return "n/a"
    return f"{fmt_ms(percentile(samples, 50) * 1000)} / {fmt_ms(percentile(samples, 99) * 1000)}"


def _popen_times(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int]:
    """(``Popen()`` returned, ``wait()`` returned, exit code), seconds from the call."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=env)
    t1 = time.perf_counter()
    rc = p.wait()
    return t1 - t0, time.perf_counter() - t0, rc


# ---------------------------------------------------------------------- docker CLI
class _Cli:
    """Docker work done by hand, for the baselines. Everything it makes carries the
    label ``tether-bench=<token>`` and is recorded, so :meth:`cleanup` removes it all."""

    def __init__(self, docker: str) -> None:
        self.docker = docker
        self.token = secrets.token_hex(4)
        self.n = 0
        self.containers: set[str] = set()
        self.networks: set[str] = set()
        self.bridges: set[str] = set()  # iptables INPUT rules inserted
        self.iptables_ok = True
        self.failures: list[str] = []

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([self.docker, *args], capture_output=True, text=True, timeout=120,
                           stdin=subprocess.DEVNULL)
        if check and r.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args[:2])} failed: {r.stderr.strip()[:300]}")
        return r

    def _name(self, what: str) -> str:
        self.n += 1
        return f"tbench-{self.token}-{what}{self.n}"

    def run_rm_true(self) -> float:
        """Wall time of ``docker run --rm IMAGE true``."""
        name = self._name("rm")
        self.containers.add(name)
        t0 = time.perf_counter()
        r = self._run("run", "--rm", "--name", name, "--label", f"tether-bench={self.token}",
                      IMAGE, *TRUE, check=False)
        dt = time.perf_counter() - t0
        if r.returncode != 0:
            self.failures.append(f"docker run --rm: {r.stderr.strip()[:200]}")
        else:
            self.containers.discard(name)
        return dt

    def setup(self, companion: bool = False, health: bool = False) -> tuple[float, dict[str, Any]]:
        """The docker sandbox built with the CLI. Returns (seconds, what to tear down)."""
        label = ["--label", f"tether-bench={self.token}"]
        net = self._name("net")
        bridge = "tbb" + secrets.token_hex(6)  # interface names are at most 15 bytes
        primary = self._name("primary")
        comp = self._name("comp") if companion else None
        made: dict[str, Any] = {"net": net, "bridge": bridge, "containers": []}
        t0 = time.perf_counter()
        self.networks.add(net)
        self._run("network", "create", "--driver", "bridge", "--internal", *label,
                  "-o", f"com.docker.network.bridge.name={bridge}", net)
        if self.iptables_ok:
            self.bridges.add(bridge)
            rc = subprocess.run([_iptables(), "-w", "5", "-I", "INPUT", "-i", bridge, "-j",
                                 "DROP"], capture_output=True, timeout=30).returncode
            if rc != 0:
                self.iptables_ok = False
                self.bridges.discard(bridge)
                self.failures.append("iptables -I failed: the CLI analogue runs without it")
        if comp is not None:
            hc = (["--health-cmd", "true", "--health-interval", HEALTH_INTERVAL,
                   "--health-timeout", "5s", "--health-retries", "30"] if health else [])
            self.containers.add(comp)
            made["containers"].append(comp)
            self._run("run", "-d", "--init", "--name", comp, "--network", net,
                      "--network-alias", "side", "--hostname", "side", *label, *hc,
                      IMAGE, *COMPANION_CMD)
            if health:
                deadline = time.monotonic() + 30
                while True:
                    st = self._run("inspect", "--format", "{{.State.Health.Status}}", comp,
                                   check=False).stdout.strip()
                    if st == "healthy":
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"CLI companion not healthy in 30 s ({st})")
                    time.sleep(0.1)
        self.containers.add(primary)
        made["containers"].insert(0, primary)
        self._run("run", "-d", "--init", "--name", primary, "--network", net, *label,
                  IMAGE, *docker_runtime.KEEPALIVE)
        return time.perf_counter() - t0, made

    def teardown(self, made: dict[str, Any]) -> float:
        """``docker rm -f`` the containers, ``docker network rm``, ``iptables -D``."""
        t0 = time.perf_counter()
        self._run("rm", "-f", *made["containers"])
        self._run("network", "rm", made["net"])
        if made["bridge"] in self.bridges:
            subprocess.run([_iptables(), "-w", "5", "-D", "INPUT", "-i", made["bridge"], "-j",
                            "DROP"], capture_output=True, timeout=30)
        dt = time.perf_counter() - t0
        self.containers.difference_update(made["containers"])
        self.networks.discard(made["net"])
        self.bridges.discard(made["bridge"])
        return dt

    def cleanup(self) -> None:
        """Remove whatever is left, by record and by label (waiting for dockerd if it
        is down: it may be restarting)."""
        _wait_docker(self.docker)
        with contextlib.suppress(Exception):
            ids = self._run("ps", "-aq", "--filter", f"label=tether-bench={self.token}",
                            check=False).stdout.split()
            if ids or self.containers:
                self._run("rm", "-f", *ids, *self.containers, check=False)
        with contextlib.suppress(Exception):
            ids = self._run("network", "ls", "-q", "--filter",
                            f"label=tether-bench={self.token}", check=False).stdout.split()
            if ids or self.networks:
                self._run("network", "rm", *ids, *self.networks, check=False)
        for bridge in list(self.bridges):
            rule = ["INPUT", "-i", bridge, "-j", "DROP"]
            for _ in range(10):
                if subprocess.run([_iptables(), "-w", "5", "-C", *rule],
                                  capture_output=True, timeout=30).returncode != 0:
                    break
                subprocess.run([_iptables(), "-w", "5", "-D", *rule], capture_output=True,
                               timeout=30)
        self.containers.clear()
        self.networks.clear()
        self.bridges.clear()


# ---------------------------------------------------------------------- tether side
class _Tether:
    """One connection to the daemon, recording the sandboxes it made."""

    def __init__(self, conn: RawConn) -> None:
        self.conn = conn
        self.live: list[str] = []
        self.bad: list[str] = []
        self.n = 0
        self.reply_states: Counter[str] = Counter()

    def create(self, params: dict[str, Any]) -> tuple[float, str | None]:
        self.n += 1
        t0 = time.perf_counter()
        reply = self.conn.call("sandbox.create", {"name": f"b{self.n}", **params})
        dt = time.perf_counter() - t0
        res = reply.get("result")
        if isinstance(res, dict) and res.get("id"):
            self.live.append(res["id"])
            if res.get("state") == "READY":
                return dt, str(res["id"])
        self.bad.append(f"sandbox.create: {str(reply)[:300]}")
        return dt, None

    def delete(self, sid: str) -> float:
        t0 = time.perf_counter()
        reply = self.conn.call("sandbox.delete", {"sandbox": sid, "grace": 5})
        dt = time.perf_counter() - t0
        res = reply.get("result")
        if isinstance(res, dict) and res.get("state") == "DELETED":
            with contextlib.suppress(ValueError):
                self.live.remove(sid)
        else:
            self.bad.append(f"sandbox.delete: {str(reply)[:300]}")
        return dt

    def exec_true(self, sid: str) -> tuple[float, float]:
        """(exec.start reply, exec.wait returned), seconds from sending exec.start."""
        t0 = time.perf_counter()
        reply = self.conn.call("exec.start", {"sandbox": sid, "argv": TRUE})
        t1 = time.perf_counter()
        res = reply.get("result")
        if not (isinstance(res, dict) and res.get("id")):
            self.bad.append(f"exec.start: {str(reply)[:300]}")
            return t1 - t0, float("nan")
        self.reply_states[f"{res.get('state')}{'+pid' if res.get('pid') else ''}"] += 1
        done = self.conn.call("exec.wait", {"exec": res["id"], "timeout": 60})
        t2 = time.perf_counter()
        out = done.get("result")
        if not (isinstance(out, dict) and out.get("state") == "FINISHED"
                and out.get("exit_code") == 0):
            self.bad.append(f"exec.wait: {str(done)[:300]}")
        return t1 - t0, t2 - t0

    def cleanup(self) -> None:
        for sid in list(self.live):
            with contextlib.suppress(Exception):
                self.delete(sid)


def _sweep_docker(home: Path, docker: str | None) -> list[str]:
    """Remove every container and network the daemon of ``home`` left on the engine."""
    removed: list[str] = []
    engine = docker_runtime.DockerEngine(str(home), docker_runtime.docker_binary())
    for _ in range(2):  # once more after dockerd came back, if it was down
        try:
            for sandbox in engine.labelled():
                removed += engine.remove(sandbox)
            break
        except Exception:
            engine.reset()
            if not _wait_docker(docker):
                break
    engine.reset()
    return removed


def _stop(d: Daemon) -> None:
    kill_strays(d.home)
    d.stop()
    reap_orphans()


class _Samples:
    """Every series, in seconds; samples taken while ``on`` is false are dropped."""

    def __init__(self) -> None:
        self.series: dict[str, list[float]] = {}
        self.on = True

    def __call__(self, key: str, value: float) -> None:
        if self.on:
            self.series.setdefault(key, []).append(value)

    def get(self, key: str) -> list[float]:
        return self.series.get(key, [])

    def rounds(self, n: int, gap: float, fns: dict[str, Callable[[], None]],
               warmup: int = WARMUP) -> None:
        """``warmup`` unrecorded rounds, then ``n`` rounds, the functions alternating."""
        for i in range(warmup + n):
            self.on = i >= warmup
            for fn in fns.values():
                fn()
                time.sleep(gap)
        self.on = True


# ---------------------------------------------------------------------- docker execs
def _tether_cli() -> list[str]:
    """The installed ``tether`` script beside this interpreter, as people run it."""
    script = Path(sys.executable).with_name("tether")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tether.cli.fast"]


def _docker_execs(rec: _Samples, t: _Tether, sd: str, docker: str, d: Daemon, gap: float,
                  n: int, popen_exec: Callable[..., Callable[[], None]],
                  tether_exec: Callable[[str, str], Callable[[], None]]) -> None:
    """A docker exec of ``true``, alternated sample by sample: through the Engine API
    (this daemon), through ``docker exec`` (a second daemon, TETHER_DOCKER_EXEC=cli),
    and ``docker exec <primary> true`` itself; daemon-side (exec.start → exec.wait on
    an open connection) and as whole processes (``tether run --sandbox SB -- true``)."""
    plain = [docker, "exec", docker_runtime.names.primary_name(sd), *TRUE]
    run_api = [*_tether_cli(), "--home", str(d.home), "run", "--sandbox", sd, "--", *TRUE]
    fns: dict[str, Callable[[], None]] = {
        "api": tether_exec("docker", sd), "plain": popen_exec("docker_exec", plain),
        "run_api": popen_exec("run.docker", run_api)}
    with fresh_home() as d2, _env(TETHER_DOCKER=docker, TETHER_DOCKER_EXEC="cli"):
        d2.start()
        conn2 = RawConn(d2.socket, timeout=120)
        t2 = _Tether(conn2)
        try:
            _, sd2 = t2.create({"spec": f"runtime: docker\nimage: {IMAGE}\n"})
            if sd2:
                def cli_exec() -> None:
                    start, e2e = t2.exec_true(sd2)
                    rec("exec.docker_cli.start", start)
                    rec("exec.docker_cli.e2e", e2e)
                fns["cli"] = cli_exec
                fns["run_cli"] = popen_exec("run.docker_cli", [
                    *_tether_cli(), "--home", str(d2.home), "run", "--sandbox", sd2, "--",
                    *TRUE])
            rec.rounds(n, gap, fns)
        finally:
            t.bad += t2.bad
            t2.cleanup()
            conn2.close()
            _stop(d2)
            _sweep_docker(d2.home, docker)


def _docker_exec_rows(p: Callable[[str], list[float]], n: int) -> list[Row]:
    def med(key: str) -> float:
        v = p(key)
        return statistics.median(v) * 1000 if v else float("nan")

    plain = med("docker_exec.wall")
    ratio = med("run.docker.wall") / plain if plain else float("nan")
    return [
        Row("sandbox exec", f"docker: exec.start → reply (n={n})", _pp(p("exec.docker.start")),
            f"docker CLI path {_pp(p('exec.docker_cli.start'))}"),
        Row("sandbox exec", "docker: exec.start → exec.wait, true", _pp(p("exec.docker.e2e")),
            f"docker CLI path {_pp(p('exec.docker_cli.e2e'))} · docker exec … true "
            f"{_pp(p('docker_exec.wall'))} · docker run --rm true {_pp(p('docker_run_rm'))}"),
        Row("sandbox exec", f"`tether run --sandbox <docker> -- true`, whole process, "
            f"median (n={n})", f"{fmt_ms(med('run.docker.wall'))} ({ratio:.2f}x)",
            f"`docker exec <ctr> true` {fmt_ms(plain)} · docker CLI path "
            f"{fmt_ms(med('run.docker_cli.wall'))} "
            f"({med('run.docker_cli.wall') / plain if plain else float('nan'):.2f}x)",
            "≤ 1.3x docker exec", ratio <= 1.3),
    ]


# ---------------------------------------------------------------------- run
def run(opts: Options) -> BenchResult:
    n = opts.sandbox_samples or (4 if opts.quick else 10)
    n_local_create, n_local_exec = 3 * n, 5 * n
    n_comp, n_health = max(2, n // 2), max(2, n // 3)
    n_docker_exec = max(15, 2 * n)  # the rows: medians of 15 or more
    gap = opts.gap
    docker = _docker_bin()
    docker_ok, docker_why = _docker_usable(docker)
    bw = bwrap_runtime.probe()
    notes: list[str] = []
    if not bw.available:
        notes.append(f"bwrap rows skipped: {bw.reason}")
    if not docker_ok:
        notes.append(f"docker rows skipped: {docker_why}")

    rec = _Samples()

    ws = Path(tempfile.mkdtemp(prefix="tbws", dir="/tmp"))
    cli = _Cli(docker) if docker_ok and docker else None
    bwrap_argv: list[str] = []
    swept: list[str] = []
    status: dict[str, Any] = {}
    t: _Tether | None = None
    try:
        with fresh_home() as d, _env(TETHER_DOCKER=docker if docker_ok else None):
            d.start()
            conn = RawConn(d.socket, timeout=120)
            t = _Tether(conn)
            try:
                status = conn.result("daemon.status")
                rt = status.get("runtimes", {})
                if bw.available and not rt.get("bwrap", {}).get("available"):
                    notes.append("bwrap rows skipped: the daemon's probe says "
                                 f"{rt.get('bwrap', {}).get('reason')}")
                    bw = bwrap_runtime.Probe(False, None, None, "daemon probe")
                if bw.available:
                    spec = SandboxSpec(runtime="bwrap", workspace=str(ws))
                    bwrap_argv = bwrap_runtime.wrap(
                        TRUE, spec, cwd=str(ws), tether_home=os.path.realpath(d.home),
                        tty=False, bwrap_path=bw.path or "bwrap")

                # ---------------------------------------------- create, process / bwrap
                def health() -> None:
                    t0 = time.perf_counter()
                    conn.result("daemon.health")
                    rec("health", time.perf_counter() - t0)

                def local_create(runtime: str) -> Callable[[], None]:
                    def fn() -> None:
                        dt, sid = t.create({"runtime": runtime, "workspace": str(ws)})
                        rec(f"create.{runtime}", dt)
                        if sid:
                            rec(f"delete.{runtime}", t.delete(sid))
                    return fn

                def bwrap_true() -> None:
                    s, e, rc = _popen_times(bwrap_argv)
                    rec("bwrap_true.start", s)
                    rec("bwrap_true.wall", e)
                    if rc != 0:
                        t.bad.append(f"bwrap true exited {rc}")

                fns: dict[str, Callable[[], None]] = {"process": local_create("process"),
                                                       "health": health}
                if bw.available:
                    fns |= {"bwrap": local_create("bwrap"), "bwrap_true": bwrap_true}
                rec.rounds(n_local_create, gap, fns)

                # ---------------------------------------------- create, docker
                if cli is not None:
                    def docker_create(key: str, yaml: str, companion: bool = False,
                                      health: bool = False) -> dict[str, Callable[[], None]]:
                        def tether() -> None:
                            dt, sid = t.create({"spec": yaml, "spec_name": key})
                            rec(f"create.{key}", dt)
                            if sid:
                                rec(f"delete.{key}", t.delete(sid))

                        def analogue() -> None:
                            assert cli is not None
                            dt, made = cli.setup(companion, health)
                            rec(f"cli_setup.{key}", dt)
                            rec(f"cli_teardown.{key}", cli.teardown(made))
                        return {"tether": tether, "cli": analogue}

                    base = f"runtime: docker\nimage: {IMAGE}\n"
                    comp = (f"{base}companions:\n  - name: side\n    image: {IMAGE}\n"
                            f"    command: {' '.join(COMPANION_CMD)}\n")
                    health_yaml = (f"{comp}    health:\n      command: 'true'\n"
                                   f"      interval: {HEALTH_INTERVAL}\n")
                    primary = docker_create("docker", base)
                    primary["run_rm"] = lambda: rec("docker_run_rm", cli.run_rm_true())
                    rec.rounds(n, gap, primary)
                    rec.rounds(n_comp, gap, docker_create("docker_comp", comp, True), warmup=0)
                    rec.rounds(n_health, gap, docker_create("docker_health", health_yaml,
                                                            True, True), warmup=0)

                # ---------------------------------------------- exec
                def tether_exec(key: str, sid: str) -> Callable[[], None]:
                    def fn() -> None:
                        s, e = t.exec_true(sid)
                        rec(f"exec.{key}.start", s)
                        rec(f"exec.{key}.e2e", e)
                    return fn

                def popen_exec(key: str, argv: list[str],
                               env: dict[str, str] | None = None) -> Callable[[], None]:
                    def fn() -> None:
                        s, e, rc = _popen_times(argv, env)
                        rec(f"{key}.start", s)
                        rec(f"{key}.wall", e)
                        if rc != 0:
                            t.bad.append(f"{key}: {argv[:2]} exited {rc}")
                    return fn

                _, sp = t.create({"runtime": "process", "workspace": str(ws)})
                if sp:
                    rec.rounds(n_local_exec, gap, {"t": tether_exec("process", sp),
                                                "b": popen_exec("popen_true", TRUE)})
                if bw.available:
                    _, sb = t.create({"runtime": "bwrap", "workspace": str(ws)})
                    if sb:
                        rec.rounds(n_local_exec, gap, {"t": tether_exec("bwrap", sb),
                                                    "b": popen_exec("bwrap_exec", bwrap_argv)})
                if cli is not None and docker:
                    _, sd = t.create({"spec": f"runtime: docker\nimage: {IMAGE}\n"})
                    if sd:
                        _docker_execs(rec, t, sd, docker, d, gap, n_docker_exec,
                                      popen_exec, tether_exec)
                status = conn.result("daemon.status")
            finally:
                t.cleanup()
                conn.close()
                _stop(d)
                if docker_ok:
                    swept = _sweep_docker(d.home, docker)
    finally:
        if cli is not None:
            bad_cli = cli.failures
            cli.cleanup()
        else:
            bad_cli = []
        shutil.rmtree(ws, ignore_errors=True)

    assert t is not None
    if swept:
        notes.append(f"removed docker leftovers of the bench daemon: {', '.join(swept)}")
    bad = t.bad + bad_cli
    if bad:
        notes.append(f"{len(bad)} failed operations, first: {bad[0]}")

    p = rec.get

    skip_bw = "skipped (bwrap unusable)"
    skip_dk = "skipped (docker unusable)"
    rows = [
        Row("sandbox create", f"process → READY, p50 / p99 (n={n_local_create})",
            _pp(p("create.process")), f"daemon.health RPC {_pp(p('health'))}"),
        Row("sandbox create", f"bwrap → READY, p50 / p99 (n={n_local_create})",
            _pp(p("create.bwrap")) if bw.available else skip_bw,
            f"bwrap … true (wall) {_pp(p('bwrap_true.wall'))}" if bw.available else ""),
    ]
    if cli is not None:
        rows += [
            Row("sandbox create", f"docker, primary only → READY (n={n})",
                _pp(p("create.docker")),
                f"docker run --rm true {_pp(p('docker_run_rm'))} · CLI net+iptables+run -d "
                f"{_pp(p('cli_setup.docker'))}"),
            Row("sandbox create", f"docker + 1 companion, no health check (n={n_comp})",
                _pp(p("create.docker_comp")),
                f"CLI net+iptables+2 run -d {_pp(p('cli_setup.docker_comp'))}"),
            Row("sandbox create", f"docker + 1 companion, health check {HEALTH_INTERVAL} "
                f"(n={n_health})", _pp(p("create.docker_health")),
                f"CLI same + poll inspect until healthy {_pp(p('cli_setup.docker_health'))}"),
            Row("sandbox delete", f"docker, primary only (n={n})", _pp(p("delete.docker")),
                f"CLI rm -f + network rm + iptables -D {_pp(p('cli_teardown.docker'))}"),
            Row("sandbox delete", f"docker + 1 companion (n={n_comp})",
                _pp(p("delete.docker_comp")),
                f"CLI same {_pp(p('cli_teardown.docker_comp'))}"),
        ]
    else:
        rows.append(Row("sandbox create", "docker", skip_dk, ""))
    rows += [
        Row("sandbox exec", f"process: exec.start → reply (n={n_local_exec})",
            _pp(p("exec.process.start")), f"Popen(true) returns {_pp(p('popen_true.start'))}"),
        Row("sandbox exec", "process: exec.start → exec.wait, true",
            _pp(p("exec.process.e2e")), f"Popen(true).wait() {_pp(p('popen_true.wall'))}"),
    ]
    if bw.available:
        rows += [
            Row("sandbox exec", f"bwrap: exec.start → reply (n={n_local_exec})",
                _pp(p("exec.bwrap.start")),
                f"Popen(bwrap … true) returns {_pp(p('bwrap_exec.start'))}"),
            Row("sandbox exec", "bwrap: exec.start → exec.wait, true",
                _pp(p("exec.bwrap.e2e")),
                f"Popen(bwrap … true).wait() {_pp(p('bwrap_exec.wall'))}"),
        ]
    else:
        rows.append(Row("sandbox exec", "bwrap", skip_bw, ""))
    if cli is not None:
        rows += _docker_exec_rows(p, n_docker_exec)
    else:
        rows.append(Row("sandbox exec", "docker", skip_dk, ""))
    notes.append("p50 / p99 are nearest-rank; with n < 100 the p99 is the slowest sample. "
                 "A docker exec's reply comes once its monitor has created the exec and "
                 "forked its client (`docker exec` on the CLI path), before the command "
                 "runs in the container. The CLI path is a second daemon on its own home "
                 "with TETHER_DOCKER_EXEC=cli (what every docker exec ran before), measured "
                 "in the same rounds.")
    if t.reply_states:
        notes.append("exec.start reply states: " + ", ".join(
            f"{k} {v}" for k, v in sorted(t.reply_states.items())))

    return BenchResult(
        name="sandboxes", title="sandbox create and exec latency per runtime", rows=rows,
        notes=notes,
        params={"n": n, "n_local_create": n_local_create, "n_local_exec": n_local_exec,
                "n_docker_companion": n_comp, "n_docker_health": n_health,
                "n_docker_exec": n_docker_exec, "warmup": WARMUP, "gap_s": gap, "image": IMAGE,
                "docker_bin": docker, "docker_usable": docker_ok, "docker_reason": docker_why,
                "bwrap": {"available": bw.available, "version": bw.version,
                          "reason": bw.reason},
                "bwrap_argv": bwrap_argv, "health_interval": HEALTH_INTERVAL,
                "companion_command": COMPANION_CMD, "command": TRUE},
        data={"ms": {k: summarize_ms(v) for k, v in sorted(rec.series.items())},
              "bad": bad[:20], "reply_states": dict(t.reply_states),
              "docker_leftovers_swept": swept,
              "daemon_runtimes": status.get("runtimes"),
              "daemon_counts": status.get("counts")},
    )
