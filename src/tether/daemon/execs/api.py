"""The ``exec.*`` methods, and an exec's view as every method returns it."""

from __future__ import annotations

from typing import Any

import msgspec

from tether.daemon.root import Daemon
from tether.daemon.signals import parse_signal
from tether.model.records import ExecRecord, ExecSpec
from tether.rpc import messages as m
from tether.rpc.server import Connection, Handler
from tether.store.base import Page

METHODS: dict[str, type[Any]] = {
    "exec.start": m.ExecStart,
    "exec.get": m.ExecRef,
    "exec.list": m.ExecList,
    "exec.wait": m.ExecWait,
    "exec.cancel": m.ExecCancel,
    "exec.logs": m.ExecLogs,
    "exec.remove": m.ExecRemove,
}
LONG = frozenset({"exec.wait", "exec.logs"})

#: tether's own secrets a client's environment may hold (``tether run`` sends the whole
#: shell's): never handed on to a command, least of all an agent (docs/SECURITY.md).
TETHER_SECRETS = ("TETHER_FLEET_URL",)


def without_tether_secrets(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in TETHER_SECRETS}


def exec_view(d: Daemon, rec: ExecRecord) -> dict[str, Any]:
    """An exec as the methods return it: the service's view and its agent's summary."""
    out = d.execs.view(rec)
    out["agent"] = d.agents.summary_for_exec(rec.id, rec.lineage) if rec.lineage else None
    return out


def handlers(d: Daemon) -> dict[str, Handler]:
    execs, sandboxes, store = d.execs, d.sandboxes, d.store

    def xview(rec: ExecRecord) -> dict[str, Any]:
        return exec_view(d, rec)

    async def start(p: m.ExecStart, c: Connection) -> Any:
        sb = sandboxes.resolve(p.sandbox)
        spec = msgspec.convert(p, ExecSpec, from_attributes=True)  # the params are one
        spec.env = without_tether_secrets(spec.env)
        spec.stdin = p.stdin or p.tty
        return xview(await execs.start(sb, spec, p.request_key,
                                       unconfined_ok=p.unconfined_ok))

    async def get(p: m.ExecRef, c: Connection) -> Any:
        return xview(execs.resolve(p.exec))

    async def list_(p: m.ExecList, c: Connection) -> Any:
        sb = sandboxes.resolve(p.sandbox).id if p.sandbox else None
        states = tuple(p.states) if p.states else None if p.all else ("PENDING", "RUNNING")
        rows, total = store.page_execs(
            Page(p.limit, p.offset, p.newest_first, p.query), sandbox=sb, states=states)
        return {"execs": [xview(x) for x in rows], "total": total}

    async def wait(p: m.ExecWait, c: Connection) -> Any:
        return xview(await execs.wait(execs.resolve(p.exec), p.timeout))

    async def cancel(p: m.ExecCancel, c: Connection) -> Any:
        sig = parse_signal(p.signal)
        rec = execs.resolve(p.exec)
        return xview(await execs.cancel(rec, sig, p.grace, p.reason or "cancelled"))

    async def logs(p: m.ExecLogs, c: Connection) -> Any:
        rec = execs.resolve(p.exec)
        d.retention.logs_gone(rec)
        return await execs.logs(rec, p.stream, p.offset, p.limit, p.wait)

    async def remove(p: m.ExecRemove, c: Connection) -> Any:
        recs = list({r.id: r for r in (execs.resolve(ref) for ref in p.execs)}.values())
        return {"removed": await d.retention.remove_execs(recs)}

    return {"exec.start": start, "exec.get": get, "exec.list": list_, "exec.wait": wait,
            "exec.cancel": cancel, "exec.logs": logs, "exec.remove": remove}
