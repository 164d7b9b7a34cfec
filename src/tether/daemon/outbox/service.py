"""The hooks' service: their intent (add, remove, retry) and the delivery worker.

The worker is one task in the daemon's TaskGroup. It claims due deliveries
(PENDING or FAILED whose ``next_at`` has come) in one transaction, makes at most
:data:`CONCURRENCY` tries at once, and records each outcome guarded by the row's
state: COMPLETED, FAILED with an exponential, jittered ``next_at``, or DEAD after
the hook's ``max_tries``. Wall time comes from the daemon's :class:`Clock`, so tests
move it instead of sleeping through a backoff. A daemon killed mid-try leaves
PROCESSING rows; :meth:`HookService.recover` puts them back to PENDING, and the
receiver may see that delivery twice, with the same key. An outcome the store refused
(a full disk) is kept and committed again, with a backoff, until it is recorded: the
row does not wait for a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tether.daemon.clock import Clock
from tether.daemon.journal import Journal
from tether.daemon.outbox.deliver import DeliveryFailed, Sender, scrub
from tether.hostio.atomic import atomic_write
from tether.model.errors import RpcCode, TetherError
from tether.model.hooks import DeliveryState, HookRecord, backoff
from tether.model.records import to_builtins
from tether.model.secrets import redact_url
from tether.store.outbox import Delivery, Outbox

log = logging.getLogger("tether.daemon.outbox")

#: Tries in flight at once, over all hooks.
CONCURRENCY = 16
#: The most seconds the worker sleeps without looking at the outbox again.
IDLE_POLL = 60.0
#: After a commit the store refused: seconds before the next try, doubling to the last.
RETRY_FIRST, RETRY_MAX = 1.0, 30.0


class HookService:
    def __init__(self, journal: Journal, home: Path, clock: Clock) -> None:
        self.journal = journal
        self.outbox: Outbox = journal.hooks.outbox
        self.dir = home / "hooks"  # <name>.secret, 0600
        self.clock = clock
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(CONCURRENCY)
        self._inflight: set[asyncio.Task[None]] = set()
        self._sender = Sender()
        self._secrets: dict[str, bytes | None] = {}  # read once per hook, dropped at remove
        #: outcomes of tries the store refused to record: delivery id -> its commit
        self._unrecorded: dict[int, Callable[[], object]] = {}
        self._retry = RETRY_FIRST  # seconds before the next try after a refused commit
        self._last_refusal = -1e9  # monotonic time of the last refused commit
        journal.hooks.on_enqueued = self._wake.set

    # ------------------------------------------------------------------ intent
    def add(self, rec: HookRecord, secret: bytes | None) -> dict[str, Any]:
        if self.outbox.get_hook(rec.name) is not None:
            raise TetherError(RpcCode.CONFLICT, "NAME_IN_USE",
                              f"a hook named {rec.name!r} already exists; pick another name "
                              "or remove it with `tether hook rm`", {"name": rec.name})
        if secret is not None:
            self.dir.mkdir(mode=0o700, exist_ok=True)
            atomic_write(str(self._secret_path(rec.name)), secret, durable=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                self._secret_path(rec.name).unlink()  # a removed namesake's, left by a crash
        self.journal.commit(self.outbox.add_hook(rec))
        self._secrets.pop(rec.name, None)
        self.journal.hooks.reload()
        return self.view(rec)

    def remove(self, name: str) -> dict[str, Any]:
        try:
            dropped, ev = self.outbox.remove_hook(name)
        except KeyError:
            raise self._unknown(name) from None
        self.journal.commit_all([ev])
        self.journal.hooks.reload()
        self._secrets.pop(name, None)
        with contextlib.suppress(FileNotFoundError):
            self._secret_path(name).unlink()
        return {"name": name, "undelivered": dropped}

    def retry(self, name: str, delivery: int | None) -> dict[str, Any]:
        self.get(name)
        n, ev = self.outbox.retry(name, delivery, self.clock.now())
        self.journal.commit_all([ev])
        if delivery is not None and n == 0:
            raise TetherError(RpcCode.NOT_FOUND, "NO_SUCH_DELIVERY",
                              f"hook {name!r} has no delivery {delivery} that can be retried "
                              "(unknown, or being tried right now); see `tether hook show "
                              f"{name}`", {"name": name, "delivery": delivery})
        self._wake.set()
        return {"name": name, "retried": n}

    def get(self, name: str) -> HookRecord:
        rec = self.outbox.get_hook(name)
        if rec is None:
            raise self._unknown(name)
        return rec

    def view(self, rec: HookRecord) -> dict[str, Any]:
        """A hook as every reply shows it: its URL's credentials as ``***`` (the CLI, its
        ``--json`` and the dashboard all show this)."""
        out: dict[str, Any] = to_builtins(rec)
        if rec.url is not None:
            out["url"] = redact_url(rec.url)
        out["counts"] = self.outbox.counts(rec.name)
        return out

    def show(self, name: str, limit: int) -> dict[str, Any]:
        rec = self.get(name)
        out = self.view(rec)
        out["deliveries"] = [_delivery_view(d, rec) for d in
                             self.outbox.deliveries(name, limit=limit)]
        out["dead"] = [_delivery_view(d, rec) for d in
                       self.outbox.deliveries(name, states=("DEAD",), limit=limit)]
        return out

    def _unknown(self, name: str) -> TetherError:
        return TetherError(RpcCode.NOT_FOUND, "NO_SUCH_HOOK",
                           f"no hook named {name!r}; `tether hook ls` lists them",
                           {"name": name})

    def _secret_path(self, name: str) -> Path:
        return self.dir / f"{name}.secret"

    def _hook(self, name: str) -> HookRecord | None:
        """From the matcher's cache (reloaded at every add and remove), not the store."""
        return next((h for h in self.journal.hooks.hooks if h.name == name), None)

    def _secret(self, name: str) -> bytes | None:
        if name not in self._secrets:
            try:
                self._secrets[name] = self._secret_path(name).read_bytes()
            except FileNotFoundError:
                self._secrets[name] = None
        return self._secrets[name]

    # ------------------------------------------------------------------ delivery
    def recover(self) -> int:
        n = self.outbox.recover()
        if n:
            log.info("outbox: %d deliveries interrupted by the last stop go out again", n)
        return n

    async def run(self) -> None:
        """The worker: claim what is due, try it, sleep until the next is due."""
        try:
            while True:
                self._wake.clear()
                try:
                    self._record_again()
                    await self._dispatch()
                except Exception as e:  # a full disk, a busy store: back off, go on
                    self._refused("dispatching deliveries", e)
                    await asyncio.sleep(self._retry)
                    continue
                self._retry = RETRY_FIRST if not self._unrecorded else self._retry
                due = self.outbox.next_due()
                if self._unrecorded:  # try those again after the backoff
                    later = self.clock.now() + self._retry
                    due = later if due is None else min(due, later)
                await self._sleep(due)
        finally:
            for t in list(self._inflight):
                t.cancel()
            if self._inflight:
                await asyncio.gather(*self._inflight, return_exceptions=True)
            await self._sender.close()

    async def _dispatch(self) -> None:
        while True:
            free = CONCURRENCY - len(self._inflight)
            if free <= 0:
                await asyncio.wait(self._inflight, return_when=asyncio.FIRST_COMPLETED)
                continue
            claimed = self.outbox.claim_due(self.clock.now(), free)
            for d in claimed:
                t = asyncio.get_running_loop().create_task(self._try(d), name=f"hook-{d.key}")
                self._inflight.add(t)  # owned here: awaited or cancelled by run()
                t.add_done_callback(self._done)
            if len(claimed) < free:
                return

    def _done(self, t: asyncio.Task[None]) -> None:
        self._inflight.discard(t)
        self._wake.set()  # a slot is free, and a failure may have set an earlier next_at

    async def _sleep(self, due: float | None) -> None:
        until = self.clock.now() + IDLE_POLL if due is None else due
        if self._wake.is_set():
            return
        waker = asyncio.get_running_loop().create_task(self._wake.wait())
        sleeper = asyncio.get_running_loop().create_task(
            self.clock.sleep_until(until, at_most=IDLE_POLL))
        try:
            await asyncio.wait({waker, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (waker, sleeper):
                t.cancel()
            await asyncio.gather(waker, sleeper, return_exceptions=True)

    async def _try(self, d: Delivery) -> None:
        hook = self._hook(d.hook)
        if hook is None:
            return  # removed meanwhile (with its rows)
        outcome: Callable[[], object]
        try:
            await self._sender.send(hook, d.key, d.type, d.body, self._secret(hook.name))
        except DeliveryFailed as e:
            outcome = functools.partial(self._failed, hook, d, str(e))
        except Exception as e:  # a bug in a try must not stop the worker
            log.exception("outbox: delivery %s", d.key)
            outcome = functools.partial(self._failed, hook, d, f"internal error: {e}")
        else:
            outcome = functools.partial(self.outbox.finish, d, DeliveryState.COMPLETED)
        self._record(d, outcome)

    def _record(self, d: Delivery, outcome: Callable[[], object]) -> None:
        """Commit a try's outcome; if the store refuses (a full disk), keep it for the
        worker to commit again: the row stays PROCESSING meanwhile, never for good."""
        try:
            outcome()
        except Exception as e:
            self._refused(f"recording the outcome of {d.key}", e)
            self._unrecorded[d.id] = outcome
            self._wake.set()
        else:
            self._unrecorded.pop(d.id, None)

    def _record_again(self) -> None:
        for ident, outcome in list(self._unrecorded.items()):
            outcome()  # a refusal ends the pass: the worker backs off
            del self._unrecorded[ident]

    def _refused(self, what: str, e: Exception) -> None:
        """Back off; logged once per spell of refusals (a full disk refuses every try,
        and its log must not fill it again)."""
        now = time.monotonic()
        if self._retry == RETRY_FIRST and now - self._last_refusal > 2 * RETRY_MAX:
            log.warning("outbox: %s failed (%s); trying again, backing off up to %.0f s",
                        what, e, RETRY_MAX)
        else:
            log.debug("outbox: %s failed again: %r", what, e)
        self._last_refusal = now
        self._retry = min(self._retry * 2, RETRY_MAX)

    def _failed(self, hook: HookRecord, d: Delivery, error: str) -> None:
        if d.tries >= hook.max_tries:
            ev = self.outbox.finish(d, DeliveryState.DEAD, error=error)
            if ev is not None:
                self.journal.commit_all([ev])
            return
        at = self.clock.now() + backoff(d.tries, random.uniform(0.8, 1.2))
        self.outbox.finish(d, DeliveryState.FAILED, next_at=at, error=error)


def _delivery_view(d: Delivery, hook: HookRecord) -> dict[str, Any]:
    error = d.last_error  # (an older tether kept the URL as it was in some)
    if error is not None and hook.url is not None:
        error = scrub(error, hook.url)
    return {"id": d.id, "key": d.key, "gseq": d.gseq, "type": d.type, "state": d.state,
            "tries": d.tries, "next_at": d.next_at, "last_error": error,
            "updated_at": d.updated_at}

