"""The ``sandbox.*`` methods: validate the params, parse a spec, call the service."""

from __future__ import annotations

import os
from typing import Any, cast

from tether.daemon.root import Daemon
from tether.model.errors import RpcCode, TetherError
from tether.model.records import RuntimeName, SandboxSpec, to_builtins
from tether.rpc import messages as m
from tether.rpc.server import Connection, Handler

METHODS: dict[str, type[Any]] = {
    "sandbox.create": m.SandboxCreate,
    "sandbox.get": m.SandboxRef,
    "sandbox.list": m.SandboxList,
    "sandbox.stop": m.SandboxStop,
    "sandbox.start": m.SandboxRef,
    "sandbox.delete": m.SandboxStop,
    "sandbox.copy": m.SandboxCopy,
}
# sandbox.create and sandbox.start stay inline although a docker one takes seconds:
# a client's next request on the same connection may rely on the sandbox existing.
LONG = frozenset({"sandbox.stop", "sandbox.delete", "sandbox.copy"})


def handlers(d: Daemon) -> dict[str, Handler]:
    sandboxes, store = d.sandboxes, d.store
    owned = d.tasks.owned  # a client that goes away must not leave a change half done

    async def create(p: m.SandboxCreate, c: Connection) -> Any:
        flat = (p.runtime != m.FLAT_RUNTIME or p.workspace is not None or p.env or p.labels
                or p.network is not None or p.idle_timeout is not None or p.ttl is not None)
        if p.spec is not None and flat:
            raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS",
                              "give either a spec or the runtime/workspace/env/labels/network "
                              "fields, not both (use --set to override the spec)")
        if p.spec is not None:
            from tether.spec import SpecError, parse_spec, parse_spec_object

            if p.base_dir is not None and not os.path.isabs(p.base_dir):
                raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_PARAMS",
                                  "base_dir must be an absolute path")
            try:
                if isinstance(p.spec, str):
                    spec = parse_spec(p.spec, source=p.spec_name, overrides=p.set,
                                      tether_home=str(d.layout.root), base_dir=p.base_dir)
                else:  # the spec as an object: errors name spec.<key path>
                    spec = parse_spec_object(p.spec, overrides=p.set,
                                             tether_home=str(d.layout.root),
                                             base_dir=p.base_dir)
            except SpecError as e:
                raise TetherError(RpcCode.INVALID_PARAMS, "INVALID_SPEC", e.message,
                                  {"path": e.path, "line": e.line}) from None
        else:
            # An unknown runtime is refused by the registry, with the list of known ones.
            spec = SandboxSpec(runtime=cast(RuntimeName, p.runtime), workspace=p.workspace,
                               env=p.env,
                               labels=p.labels, network=p.network,
                               idle_timeout=p.idle_timeout, ttl=p.ttl)
        spec.ephemeral = p.ephemeral
        return to_builtins(await owned(sandboxes.create(p.name, spec)))

    async def get(p: m.SandboxRef, c: Connection) -> Any:
        return to_builtins(sandboxes.resolve(p.sandbox))

    async def list_(p: m.SandboxList, c: Connection) -> Any:
        return {"sandboxes": to_builtins(store.list_sandboxes(include_deleted=p.all))}

    async def stop(p: m.SandboxStop, c: Connection) -> Any:
        return to_builtins(await owned(sandboxes.stop(sandboxes.resolve(p.sandbox), p.grace)))

    async def start(p: m.SandboxRef, c: Connection) -> Any:
        return to_builtins(await owned(sandboxes.start(sandboxes.resolve(p.sandbox))))

    async def delete(p: m.SandboxStop, c: Connection) -> Any:
        return to_builtins(await owned(sandboxes.delete(sandboxes.resolve(p.sandbox),
                                                        p.grace, p.force)))

    async def copy(p: m.SandboxCopy, c: Connection) -> Any:
        return await owned(sandboxes.copy(sandboxes.resolve(p.sandbox), p.direction,
                                          p.src, p.dst))

    return {"sandbox.create": create, "sandbox.get": get, "sandbox.list": list_,
            "sandbox.stop": stop, "sandbox.start": start, "sandbox.delete": delete,
            "sandbox.copy": copy}
