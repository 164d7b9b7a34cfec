"""The daemon's side of agents' egress: the home's proxy process (``tether.egress.proxy``)
started or adopted, told each agent's policy, and its denials journaled.

The proxy outlives the daemon, as monitors do: a daemon SIGKILL cuts no agent's
connection, and the next daemon finds it through ``egress/proxy.json`` (pid and kernel
start time, checked) or, if it died meanwhile, starts a new one, which serves every key
whose policy file is there. A key is an agent lineage's id; its policy file
(``egress/keys/<key>.json``, category D) is written before its exec starts and removed
when the lineage ends. The denial log (``egress/denied.log``) is read every
:data:`POLL` seconds; each line is journaled once as ``agent.egress_denied`` together with
the lineage's :class:`~tether.model.records.EgressLog` (its ``n``), in one transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

import tether.egress.proxy as _proxy
from tether.daemon.journal import Journal
from tether.egress.policy import BadEntry, normalise_host
from tether.hostio.atomic import atomic_write
from tether.hostio.proc import boot_id, is_same_process
from tether.model.errors import RpcCode, TetherError
from tether.model.layout import HomeLayout
from tether.model.records import MAX_DENIED_HOSTS, EgressDenial, EgressLog
from tether.store import Store

log = logging.getLogger("tether.daemon")

RUN_SCRIPT = str(Path(_proxy.__file__).resolve().with_name("run.py"))
START_TIMEOUT = 10.0  # for the proxy's ready line
CALL_TIMEOUT = 10.0
POLL = 1.0  # seconds between looks at the denial log and the proxy
ROTATE_AT = 1 << 20  # the denial log is renamed to denied.log.1 once read this far
READ_CHUNK = 1 << 20


def unavailable(why: str) -> TetherError:
    return TetherError(RpcCode.INVALID_STATE, "EGRESS_UNAVAILABLE",
                       f"the egress proxy cannot serve this agent: {why} (see "
                       "<home>/egress/proxy.log); run it with network: host to bypass it",
                       {"reason": why})


class EgressService:
    def __init__(self, store: Store, layout: HomeLayout, journal: Journal, *,
                 resolve: dict[str, list[str]] | None = None) -> None:
        self.store = store
        self.journal = journal
        self.root = layout.root / "egress"
        self.resolve = resolve or {}
        self.keys: set[str] = set()  # served (their policy files exist)
        self._lock = asyncio.Lock()  # one start of the proxy at a time
        self._children: list[subprocess.Popen[bytes]] = []  # proxies we started: to reap
        self._log_ino: int | None = None
        self._log_offset = 0

    # ------------------------------------------------------------------ keys
    def socket_dir(self, key: str) -> Path:
        return self.root / "socks" / key

    def _key_file(self, key: str) -> Path:
        return self.root / "keys" / f"{key}.json"

    async def serve(self, key: str, allow: list[str]) -> str:
        """Have the proxy serve ``key`` with this allow-list; the host directory of its
        socket, for the sandbox to bind. Raises ``EGRESS_UNAVAILABLE``."""
        path = self._key_file(key)
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            atomic_write(str(path), json.dumps({"allow": allow}).encode(), durable=False)
        except OSError as e:
            raise unavailable(f"cannot write {path}: {e}") from None
        self.keys.add(key)
        reply = await self._call({"op": "serve", "key": key})
        if not reply.get("ok"):
            raise unavailable(str(reply.get("error")))
        return str(self.socket_dir(key))

    async def drop(self, key: str) -> None:
        """The lineage ended: its socket goes, and its connections with it."""
        if key not in self.keys and not self._key_file(key).exists():
            return
        self.keys.discard(key)
        with contextlib.suppress(OSError):
            self._key_file(key).unlink()
        with contextlib.suppress(OSError, TetherError):
            if self._alive():
                await self._call({"op": "drop", "key": key}, start=False)

    async def recover(self, live: set[str]) -> dict[str, int]:
        """At start: the policy files of ended lineages go; the proxy, adopted or
        started again, serves exactly the live ones; denials logged meanwhile are
        journaled."""
        keys_dir = self.root / "keys"
        found = {p.stem for p in keys_dir.glob("*.json")} if keys_dir.is_dir() else set()
        for key in found - live:
            with contextlib.suppress(OSError):
                self._key_file(key).unlink()
        self.keys = found & live
        adopted = self._alive()
        if self.keys or adopted:
            try:
                await self._call({"op": "sync", "keys": sorted(self.keys),
                                  "resolve": self.resolve}, start=bool(self.keys))
            except TetherError as e:
                log.warning("egress proxy: %s", e.message)
        self.consume(start=True)
        return {"egress_keys": len(self.keys), "egress_proxy_adopted": int(adopted)}

    # ------------------------------------------------------------------ the process
    def _alive(self) -> bool:
        try:
            info = json.loads((self.root / "proxy.json").read_bytes())
            return (info.get("boot_id") == boot_id()
                    and is_same_process(int(info["pid"]), int(info["start_time"])))
        except (OSError, ValueError, KeyError, TypeError):
            return False

    async def _call(self, req: dict[str, Any], *, start: bool = True) -> dict[str, Any]:
        """One control request; the proxy is started first if none answers (``start``)."""
        async with self._lock:
            try:
                return await self._send(req)
            except (OSError, ValueError, TimeoutError) as e:
                if not start:
                    raise unavailable(f"no answer ({e})") from None
            try:
                await asyncio.get_running_loop().run_in_executor(None, self._spawn)
            except OSError as e:  # fork failed, the directory is unwritable, no ready line
                raise unavailable(str(e)) from None
            try:
                return await self._send(req)
            except (OSError, ValueError, TimeoutError) as e:
                raise unavailable(f"no answer after a start ({e})") from None

    async def _send(self, req: dict[str, Any]) -> dict[str, Any]:
        reader, writer = await asyncio.wait_for(
            asyncio.open_unix_connection(str(self.root / "proxy.sock")), CALL_TIMEOUT)
        try:
            writer.write(json.dumps(req).encode() + b"\n")
            line = await asyncio.wait_for(reader.readline(), CALL_TIMEOUT)
        finally:
            writer.close()
        out = json.loads(line)
        if not isinstance(out, dict):
            raise ValueError("not a JSON object")
        return out

    def _spawn(self) -> None:
        """Start a proxy (in a worker thread: fork/exec) and wait for its ready line;
        one that finds another already serving the home exits at once."""
        self.reap()
        self.root.mkdir(mode=0o700, exist_ok=True)
        with open(self.root / "proxy.log", "ab") as err:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", RUN_SCRIPT, str(self.root)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                start_new_session=True, close_fds=True, cwd="/")
        self._children.append(proc)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps({"resolve": self.resolve}).encode() + b"\n")
            proc.stdin.close()
            fd = proc.stdout.fileno()
            line = b""
            deadline = time.monotonic() + START_TIMEOUT
            while not line.endswith(b"\n") and time.monotonic() < deadline:
                if select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                    chunk = os.read(fd, 4096)
                    if not chunk:
                        break
                    line += chunk
        except OSError:
            line = b""
        finally:
            proc.stdout.close()
        if not line.endswith(b"\n"):
            with contextlib.suppress(OSError):
                proc.kill()
            raise OSError(f"the proxy did not start (see {self.root / 'proxy.log'})")
        log.info("egress proxy: %s", line.decode(errors="replace").strip())

    def reap(self) -> None:
        """Collect proxies we started that have exited (ours until we die)."""
        self._children = [p for p in self._children if p.poll() is None]

    # ------------------------------------------------------------------ the loop
    async def run(self) -> None:
        """Journal denials; start the proxy again if it died while keys are served."""
        while True:
            await asyncio.sleep(POLL)
            self.reap()
            try:
                self.consume()
            except Exception:  # never into the daemon's TaskGroup
                log.exception("egress: reading the denial log failed")
            if self.keys and not self._alive():
                try:
                    await self._call({"op": "sync", "keys": sorted(self.keys),
                                      "resolve": self.resolve})
                except TetherError as e:
                    log.warning("egress proxy: %s", e.message)
                except Exception:  # never into the daemon's TaskGroup
                    log.exception("egress: restarting the proxy failed")

    # ------------------------------------------------------------------ denials
    def consume(self, *, start: bool = False) -> int:
        """Journal what the denial log holds beyond what was read; at ``start`` also a
        rotated log a killed daemon left (each line once: the lineage's ``n``)."""
        path, rotated = self.root / "denied.log", self.root / "denied.log.1"
        done = 0
        if start and rotated.exists():
            done += self._read_all(rotated, 0)
            with contextlib.suppress(OSError):
                rotated.unlink()
        try:
            st = path.stat()
        except FileNotFoundError:
            return done
        if st.st_ino != self._log_ino:
            self._log_ino, self._log_offset = st.st_ino, 0
        n, self._log_offset = self._read(path, self._log_offset)
        done += n
        if self._log_offset >= ROTATE_AT and self._log_offset >= path.stat().st_size:
            os.replace(path, rotated)  # the proxy opens the log per line: a new one next
            done += self._read_all(rotated, self._log_offset)  # lines written meanwhile
            self._log_ino, self._log_offset = None, 0
            with contextlib.suppress(OSError):
                rotated.unlink()
        return done

    def _read_all(self, path: Path, offset: int) -> int:
        """Journal every whole line from ``offset`` to the end; the lines journaled."""
        done = 0
        while True:
            n, end = self._read(path, offset)
            done += n
            if end == offset:
                return done
            offset = end

    def _read(self, path: Path, offset: int) -> tuple[int, int]:
        """Journal the whole lines from ``offset``; (lines journaled, the new offset)."""
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read(READ_CHUNK)
        except OSError:
            return 0, offset
        end = data.rfind(b"\n") + 1
        if not end and len(data) == READ_CHUNK:  # no line that long is ours: skip it
            log.warning("egress: %d bytes without a newline skipped in %s", len(data), path)
            return 0, offset + len(data)
        done = 0
        for raw in data[:end].splitlines():
            try:
                line = json.loads(raw)
                if isinstance(line, dict) and self._apply(line):
                    done += 1
            except (ValueError, TypeError, KeyError):
                log.warning("egress: a malformed denial line skipped: %.200r", raw)
        return done, offset + end

    def _apply(self, line: dict[str, Any]) -> bool:
        key, n = str(line["key"]), int(line["n"])
        rec = self.store.get_lineage(key)
        if rec is None:
            return False
        before = rec.egress or EgressLog()
        if n <= before.n:
            return False  # journaled already (a daemon killed before it moved on)
        host = line.get("host")
        try:  # written by our proxy, normalised there: checked again all the same
            host = normalise_host(host) if isinstance(host, str) else None
        except BadEntry:
            host = None
        port = line.get("port")
        port = port if isinstance(port, int) and 0 < port < 65536 else None
        count = max(1, min(int(line.get("count") or 1), 1 << 40))
        why = str(line.get("why") or "")[:300]
        when = float(line.get("time") or time.time())
        hosts = [h for h in before.hosts if (h.host, h.port) != (host, port)]
        old = next((h for h in before.hosts if (h.host, h.port) == (host, port)), None)
        hosts.insert(0, EgressDenial(host=host, port=port, count=count + (old.count if old else 0),
                                     last=when, why=why))
        after = EgressLog(n=n, denied=before.denied + count, hosts=hosts[:MAX_DENIED_HOSTS])
        where = (f"[{host}]:{port}" if host and ":" in host else f"{host}:{port}") \
            if host is not None else "other hosts"
        times = f", {count} times" if count > 1 else ""
        self.journal.commit(self.store.update_lineage(
            key, egress=after, event="agent.egress_denied",
            event_reason=f"egress to {where} denied{times}: {why}",
            data={"host": host, "port": port, "count": count, "why": why}))
        return True


def view(rec_egress: EgressLog | None) -> dict[str, Any]:
    """A lineage's denials as ``lineage inspect`` shows them."""
    e = rec_egress or EgressLog()
    return {"denied": e.denied, "hosts": msgspec.to_builtins(e.hosts)}
