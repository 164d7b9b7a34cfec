"""A worktree's scripts (``tether.agent.repoconfig``): files copied in, ports leased, the
``setup`` script before the first attempt, the ``run`` companion beside the agent, and
the ``archive`` script at the lineage's end.

``setup`` and ``archive`` (and a hand-off's command) run unsandboxed, as the daemon's user,
in the worktree: they are the repository's own commands, like a Makefile the user runs.
So they are read once, when the user starts the lineage (:meth:`WorktreeScripts.freeze`),
from the repository's main checkout — never from the agent's tree — and frozen in the
lineage's config: successors and revivals use that copy. Where the config can only be
read from a place the agent can write (a ``--workdir`` that is its own checkout), a config
naming such commands is refused. The setup's mark (it ran for this worktree) lives in the
home (``AgentCore.setup_marks``), not in the tree. ``run`` is an ordinary exec in the
lineage's sandbox. Their output goes to ``<home>/scripts/<lineage>/{setup,archive}.log``
(not the lineage's state dir, which its agent can write) and a tail to the journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
from pathlib import Path

import msgspec

from tether.agent import gitpin, repoconfig
from tether.agent.confinement import git_common_dir
from tether.daemon.agents.core import AgentCore
from tether.hostio.paths import is_within
from tether.hostio.trust import open_private
from tether.model.errors import RpcCode, TetherError
from tether.model.records import AgentConfig, ExecSpec, LineageRecord, SandboxSpec
from tether.model.repo import GitPin, RepoConfig, unsandboxed

log = logging.getLogger("tether.agents")

TAIL = 2000  # characters of a script's output kept in its event
#: Where older tethers marked a worktree's setup as done, in the tree itself. Honoured
#: (and moved into the home) so that an upgrade runs no setup again; never written.
LEGACY_MARK = os.path.join(".agent", "tether-setup.json")


def repo_root(tree: str) -> str:
    """Where a worktree's ``.tether.yaml`` is read: its repository's main checkout (the
    parent of the common ``.git``); the directory itself when it is not a git checkout."""
    common = git_common_dir(tree)
    if common and os.path.basename(common) == ".git":
        return os.path.dirname(common)
    return tree


def agent_writable(cfg: AgentConfig, spec: SandboxSpec) -> list[str]:
    """The places (real paths) a lineage's agent can write besides its own state: its
    worktree and working directory, its sandbox's workspace and read-write mounts."""
    places = [cfg.worktree, cfg.cwd, spec.workspace,
              *(m.source for m in spec.mounts if m.mode == "rw")]
    return [os.path.realpath(p) for p in places if p]


def tree_key(tree: str) -> str:
    """A worktree's identity for its setup mark: real path, device and inode."""
    real = os.path.realpath(tree)
    st = os.stat(real)
    return f"{real}:{st.st_dev}:{st.st_ino}"


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
    with os.fdopen(open_private(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "wb") as out:
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


def script_env(cfg: AgentConfig, lineage: str, tree: str, *, pinned: bool = False
               ) -> dict[str, str]:
    """A script's environment; ``pinned``: it runs outside the sandbox, so git in it is
    pointed at the repository of the lineage's start (``tether.agent.gitpin``; raises
    ``PinBroken`` when that was replaced)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/"),
           **cfg.env, "TETHER_LINEAGE": lineage, "TETHER_WORKTREE": tree}
    if cfg.port_base is not None:
        env["TETHER_PORT_BASE"] = str(cfg.port_base)
    if pinned:
        env.update(gitpin.env(pin_of(cfg, tree), tree))
    return env


def pin_of(cfg: AgentConfig, tree: str) -> GitPin | None:
    """The lineage's git pin (an older tether's lineage: made from its ``git_dir``)."""
    return cfg.git_pin if cfg.git_pin is not None else gitpin.legacy_pin(cfg.git_dir, tree)


class WorktreeScripts:
    def __init__(self, core: AgentCore) -> None:
        self.core = core

    def log_path(self, lineage: str, what: str) -> Path:
        return self.core.layout.root / "scripts" / lineage / f"{what}.log"

    async def freeze(self, cfg: AgentConfig, spec: SandboxSpec) -> AgentConfig:
        """When the user starts a lineage (``agent.start``, never a successor or a
        revival): read the repository's config once, from its main checkout, and keep it,
        where it was and the worktree's git directories in the lineage's config. Refuses
        a config that names commands run outside the sandbox when it lies where the agent
        can write. Also pins the git directories of the checkout the agent works in
        (``tether.agent.gitpin``), for the daemon's own git there later."""
        if cfg.worktree or cfg.cwd:  # the checkout the agent works in, if it is one
            pin = await asyncio.to_thread(gitpin.pin, cfg.worktree or cfg.cwd or "")
            cfg = msgspec.structs.replace(cfg, git_pin=pin)
        tree = cfg.worktree
        if not tree:
            return cfg
        root = await asyncio.to_thread(repo_root, tree)
        try:
            found = await asyncio.to_thread(repoconfig.read, root)
        except repoconfig.RepoConfigError as e:
            raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_REPO_CONFIG",
                              f"{e}; fix the file and start again") from None
        cfg = msgspec.structs.replace(cfg, repo=None, repo_root=root, repo_file=None,
                                      repo_sha256=None)
        if found is None:
            return cfg
        keys = unsandboxed(found.config)
        real = os.path.realpath(root)
        inside = next((w for w in agent_writable(cfg, spec) if is_within(real, w)), None)
        if keys and inside is not None:
            why = ("is the agent's own working directory" if real == inside else
                   f"is inside {inside}, which the agent can write")
            raise TetherError(
                RpcCode.INVALID_PARAMS, "UNSAFE_REPO_CONFIG",
                f"{found.path} names {', '.join(keys)}, which tether runs outside the "
                f"sandbox, but {real} {why}: the agent could rewrite them for its "
                "successors. Start it in a separate checkout (--worktree BRANCH; the "
                "repository's main checkout keeps the config), or remove "
                f"{', '.join(keys)} from the file",
                {"file": found.path, "keys": keys, "writable": inside})
        return msgspec.structs.replace(cfg, repo=found.config, repo_file=found.path,
                                       repo_sha256=found.sha256)

    async def prepare(self, cfg: AgentConfig, lineage: str,
                      predecessor: str | None = None) -> AgentConfig:
        """Before the lineage exists: copy the repository's files, lease its ports and
        run its setup (once per worktree), all from the config frozen at the user's start
        (a successor's is its predecessor's). Raises, with the lease freed, if any of it
        fails: no lineage is created."""
        env = {k: v for k, v in cfg.env.items()
               if k not in ("TETHER_PORT_BASE", "TETHER_PORT_COUNT")}
        cfg = msgspec.structs.replace(cfg, port_base=None, env=env)  # leased afresh
        tree = cfg.worktree
        if not tree:
            return cfg
        if predecessor is not None:
            await asyncio.to_thread(self._ignored, cfg, lineage, predecessor)
        repo = cfg.repo
        if repo is None:
            return cfg
        try:
            return await self._prepare(cfg, repo, cfg.repo_root, tree, lineage)
        except BaseException:
            self.core.ports.release(lineage)
            raise

    def _ignored(self, cfg: AgentConfig, lineage: str, predecessor: str) -> None:
        """A successor starts in its predecessor's tree: if the tree now holds another
        repository config than the one frozen at the start (the agent's, or a commit's),
        say it is ignored (``agent.refused``)."""
        tree = cfg.worktree or ""
        now = repoconfig.fingerprint(tree)
        if now is None or now[1] == cfg.repo_sha256:
            return
        frozen = cfg.repo_file or "none"
        self.core.journal.record(
            cfg.sandbox, "agent.refused", state="repo_config",
            reason=f"{now[0]} in the agent's tree is not the repository config read when "
                   f"lineage {predecessor}'s user started it ({frozen}): ignored; "
                   f"successor {lineage} runs with the one read then",
            data={"lineage": lineage, "predecessor": predecessor, "what": "repo_config",
                  "file": now[0], "sha256": now[1], "frozen_file": cfg.repo_file,
                  "frozen_sha256": cfg.repo_sha256})

    async def _prepare(self, cfg: AgentConfig, repo: RepoConfig, root: str | None, tree: str,
                       lineage: str) -> AgentConfig:
        if root is not None and os.path.realpath(root) != os.path.realpath(tree):
            for rel in repo.copy:
                await asyncio.to_thread(_copy, root, tree, rel)
        if repo.ports is not None:
            pt = repo.ports
            base = await asyncio.to_thread(self.core.ports.lease, lineage, pt.base,
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
        if repo.setup:
            await self._setup(cfg, repo, repo.setup, tree, lineage)
        return cfg

    async def _setup(self, cfg: AgentConfig, repo: RepoConfig, script: str, tree: str,
                     lineage: str) -> None:
        marks = self.core.setup_marks
        try:
            key = await asyncio.to_thread(tree_key, tree)
        except OSError as e:
            raise TetherError(RpcCode.INVALID_STATE, "WORKTREE_BROKEN",
                              f"the worktree {tree} cannot be used ({e.strerror}); its "
                              "setup was not run", {"worktree": tree}) from None
        if marks.get(key) is not None:
            return
        if await asyncio.to_thread(os.path.lexists, os.path.join(tree, LEGACY_MARK)):
            marks.put(key, lineage)  # an older tether ran it here: never again
            return
        try:
            env = script_env(cfg, lineage, tree, pinned=True)
        except gitpin.PinBroken as e:
            raise TetherError(RpcCode.INVALID_STATE, "SETUP_FAILED", f"setup not run: {e}",
                              {"worktree": tree}) from None
        code, tail = await run_script(script, tree, env, repo.setup_timeout,
                                      self.log_path(lineage, "setup"))
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
        marks.put(key, lineage)

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

    async def stop_companion(self, rec: LineageRecord) -> None:
        """Stop the ``run`` companion (before a hand-off: nothing of the sandbox may run
        while the daemon's git works in the tree)."""
        if rec.config.repo is None:
            return
        for n in range(1, rec.attempt + 1):
            x = self.core.store.exec_by_request_key(f"lineage-{rec.id}-run-{n}")
            if x is not None and x.ended_at is None:
                with contextlib.suppress(Exception):
                    await self.core.execs.cancel(x, 15, 5.0, f"lineage {rec.id} ended")

    async def on_end(self, rec: LineageRecord) -> None:
        """The lineage ended: stop its companion, free its ports, run ``archive``."""
        core, cfg = self.core, rec.config
        if cfg.repo is None:
            return
        await self.stop_companion(rec)
        if cfg.port_base is not None:
            core.ports.release(rec.id)
        if not cfg.repo.archive or not cfg.worktree \
                or not os.path.isdir(cfg.worktree):
            return
        try:
            env = script_env(cfg, rec.id, cfg.worktree, pinned=True)
        except gitpin.PinBroken as e:
            core.journal.record(cfg.sandbox, "lineage.archive", state="failed",
                                reason=f"archive not run: {e}",
                                data={"lineage": rec.id, "exit_code": None,
                                      "output_tail": str(e)})
            return
        code, tail = await run_script(cfg.repo.archive, cfg.worktree, env,
                                      cfg.repo.archive_timeout,
                                      self.log_path(rec.id, "archive"))
        core.journal.record(cfg.sandbox, "lineage.archive",
                            state="ok" if code == 0 else "failed",
                            reason=f"archive exited {code}",
                            data={"lineage": rec.id, "exit_code": code, "output_tail": tail})

