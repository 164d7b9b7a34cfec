"""A worktree's scripts (``tether.agent.repoconfig``): files copied in, ports leased, the
``setup`` script before the first attempt, the ``run`` companion beside the agent, and
the ``archive`` script at the lineage's end.

``setup`` and ``archive`` run unsandboxed, as the daemon's user, in the worktree: they
are the repository's own commands, read from its main checkout at start (not from the
worktree, which the agent may rewrite), like a Makefile the user runs. ``run`` is an
ordinary exec in the lineage's sandbox. Their output goes to
``<home>/agents/<lineage>/{setup,archive}.log`` and a tail to the journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import socket
import time
from pathlib import Path

import msgspec

from tether.agent import repoconfig
from tether.agent.confinement import git_common_dir
from tether.daemon.agents.core import AgentCore
from tether.model.errors import RpcCode, TetherError
from tether.model.records import AgentConfig, ExecSpec, LineageRecord
from tether.model.repo import RepoConfig

log = logging.getLogger("tether.agents")

TAIL = 2000  # characters of a script's output kept in its event
SETUP_MARK = os.path.join(".agent", "tether-setup.json")  # setup ran here once


def repo_root(tree: str) -> str:
    """Where a worktree's ``.tether.yaml`` is read: its repository's main checkout (the
    parent of the common ``.git``); the directory itself when it is not a git checkout."""
    common = git_common_dir(tree)
    if common and os.path.basename(common) == ".git":
        return os.path.dirname(common)
    return tree


def _free(lo: int, hi: int) -> bool:
    """Nothing on this host listens on 127.0.0.1 at ports lo..hi (a bind succeeds)."""
    for port in range(lo, hi + 1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def _copy(root: str, tree: str, rel: str) -> None:
    """Copy ``root/rel`` to ``tree/rel`` unless it is there already; refuse a source that
    resolves outside ``root`` (a symlink out) and a destination outside ``tree``."""
    src, dst = os.path.join(root, rel), os.path.join(tree, rel)
    real_root, real_tree = os.path.realpath(root), os.path.realpath(tree)
    if not os.path.lexists(src):
        raise TetherError(RpcCode.INVALID_PARAMS, "COPY_FAILED",
                          f"copy: {rel} does not exist in {root}; create it or remove it "
                          "from the repository's copy list")
    if os.path.commonpath([os.path.realpath(src), real_root]) != real_root:
        raise TetherError(RpcCode.INVALID_PARAMS, "COPY_FAILED",
                          f"copy: {rel} in {root} leads outside the repository; refusing")
    parent = os.path.realpath(os.path.dirname(dst))
    if os.path.lexists(dst):
        return  # the worktree's own copy (a revival, or the agent edited it) wins
    if os.path.commonpath([parent, real_tree]) != real_tree:
        raise TetherError(RpcCode.INVALID_PARAMS, "COPY_FAILED",
                          f"copy: {rel} would land outside the worktree {tree}; refusing")
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.isdir(src):
        shutil.copytree(src, dst, symlinks=True)
    else:
        shutil.copy2(src, dst, follow_symlinks=True)


async def run_script(script: str, cwd: str, env: dict[str, str], timeout: float,
                     log_path: Path) -> tuple[int | None, str]:
    """``sh -c script`` in ``cwd``; its output to ``log_path``. Returns (exit code, or None
    on timeout, and the output's tail)."""
    log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(log_path, "wb") as out:
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", script, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=out, stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        try:
            code: int | None = await asyncio.wait_for(proc.wait(), timeout)
        except (TimeoutError, asyncio.CancelledError):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            await proc.wait()
            code = None
    with open(log_path, "rb") as f:
        f.seek(max(0, os.fstat(f.fileno()).st_size - TAIL))
        return code, f.read().decode("utf-8", "replace")


def script_env(cfg: AgentConfig, lineage: str, tree: str) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/"),
           **cfg.env, "TETHER_LINEAGE": lineage, "TETHER_WORKTREE": tree}
    if cfg.port_base is not None:
        env["TETHER_PORT_BASE"] = str(cfg.port_base)
    return env


class WorktreeScripts:
    def __init__(self, core: AgentCore) -> None:
        self.core = core

    def log_path(self, lineage: str, what: str) -> Path:
        return self.core.layout.root / "agents" / lineage / f"{what}.log"

    async def prepare(self, cfg: AgentConfig, lineage: str) -> AgentConfig:
        """Before the lineage exists: read the repository's config, copy its files, lease
        its ports and run its setup (once per worktree). Raises, with the lease freed, if
        any of it fails: no lineage is created."""
        # A successor's config is its predecessor's: read and lease afresh.
        env = {k: v for k, v in cfg.env.items()
               if k not in ("TETHER_PORT_BASE", "TETHER_PORT_COUNT")}
        cfg = msgspec.structs.replace(cfg, repo=None, port_base=None, env=env)
        tree = cfg.worktree
        if not tree:
            return cfg
        root = await asyncio.to_thread(repo_root, tree)
        try:
            repo = await asyncio.to_thread(repoconfig.load, root)
        except repoconfig.RepoConfigError as e:
            raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_REPO_CONFIG",
                              f"{e}; fix the file and start again") from None
        if repo is None:
            return cfg
        cfg = msgspec.structs.replace(cfg, repo=repo)
        try:
            return await self._prepare(cfg, repo, root, tree, lineage)
        except BaseException:
            self.core.store.ports.release(lineage)
            raise

    async def _prepare(self, cfg: AgentConfig, repo: RepoConfig, root: str, tree: str,
                       lineage: str) -> AgentConfig:
        if os.path.realpath(root) != os.path.realpath(tree):
            for rel in repo.copy:
                await asyncio.to_thread(_copy, root, tree, rel)
        if repo.ports is not None:
            pt = repo.ports
            base = await asyncio.to_thread(self.core.store.ports.lease, lineage, pt.base,
                                           pt.per_session, pt.sessions, _free)
            if base is None:
                raise TetherError(RpcCode.CONFLICT, "NO_FREE_PORTS",
                                  f"every block of {pt.per_session} ports from {pt.base} "
                                  f"({pt.sessions} blocks) is leased or in use; end a "
                                  "lineage or widen ports.sessions in the repository's "
                                  "config")
            cfg = msgspec.structs.replace(
                cfg, port_base=base, env={**cfg.env, "TETHER_PORT_BASE": str(base),
                                          "TETHER_PORT_COUNT": str(pt.per_session)})
        mark = os.path.join(tree, SETUP_MARK)
        if repo.setup and not os.path.exists(mark):
            code, tail = await run_script(repo.setup, tree, script_env(cfg, lineage, tree),
                                          repo.setup_timeout, self.log_path(lineage, "setup"))
            self.core.journal.record(cfg.sandbox, "lineage.setup", state="ok" if code == 0
                                     else "failed", reason=f"setup exited {code}",
                                     data={"lineage": lineage, "exit_code": code,
                                           "output_tail": tail})
            if code != 0:
                what = (f"timed out after {repo.setup_timeout:g} s" if code is None
                        else f"exited {code}")
                raise TetherError(RpcCode.INVALID_STATE, "SETUP_FAILED",
                                  f"the worktree's setup script {what}; its output is in "
                                  f"{self.log_path(lineage, 'setup')}; fix it and start "
                                  f"again. Last output:\n{tail[-500:]}",
                                  {"exit_code": code, "worktree": tree})
            os.makedirs(os.path.dirname(mark), exist_ok=True)
            with open(mark, "w") as f:
                json.dump({"lineage": lineage, "at": time.time()}, f)
        return cfg

    async def start_companion(self, rec: LineageRecord) -> None:
        """The ``run`` script as an ordinary exec in the lineage's sandbox, once per
        lineage (its request key), started again at a revival if it ended."""
        cfg = rec.config
        if cfg.repo is None or not cfg.repo.run or not cfg.worktree:
            return
        core = self.core
        key = f"lineage-{rec.id}-run-{rec.attempt}"
        prev = core.store.exec_by_request_key(f"lineage-{rec.id}-run-{rec.attempt - 1}")
        if prev is not None and prev.ended_at is None:
            return  # still running from the previous attempt
        try:
            sandbox = core.sandboxes.resolve(cfg.sandbox)
            spec = ExecSpec(argv=["/bin/sh", "-c", cfg.repo.run], cwd=cfg.worktree,
                            env=script_env(cfg, rec.id, cfg.worktree),
                            name=f"{rec.name or rec.id}-run")
            await core.execs.start(sandbox, spec, key)
        except Exception as e:  # the agent runs on without its companion
            log.warning("lineage %s: companion `run` did not start: %s", rec.id, e)

    async def on_end(self, rec: LineageRecord) -> None:
        """The lineage ended: stop its companion, free its ports, run ``archive``."""
        core, cfg = self.core, rec.config
        if cfg.repo is None:
            return
        for n in range(1, rec.attempt + 1):
            x = core.store.exec_by_request_key(f"lineage-{rec.id}-run-{n}")
            if x is not None and x.ended_at is None:
                with contextlib.suppress(Exception):
                    await core.execs.cancel(x, 15, 5.0, f"lineage {rec.id} ended")
        if cfg.port_base is not None:
            core.store.ports.release(rec.id)
        if not cfg.repo.archive or not cfg.worktree \
                or not os.path.isdir(cfg.worktree):
            return
        code, tail = await run_script(cfg.repo.archive, cfg.worktree,
                                      script_env(cfg, rec.id, cfg.worktree),
                                      cfg.repo.archive_timeout,
                                      self.log_path(rec.id, "archive"))
        core.journal.record(cfg.sandbox, "lineage.archive",
                            state="ok" if code == 0 else "failed",
                            reason=f"archive exited {code}",
                            data={"lineage": rec.id, "exit_code": code, "output_tail": tail})

