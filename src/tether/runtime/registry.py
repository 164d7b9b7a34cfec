"""Runtimes by name. Adding a runtime is one module and one line in :data:`FACTORIES`.

``auto`` is not a runtime: it names the first of :data:`AUTO_ORDER` that works
here, resolved when a sandbox is created (and for the ``default`` sandbox at
every daemon start).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tether.model.errors import invalid_params
from tether.model.records import SandboxSpec
from tether.runtime.base import Runtime, SandboxHost, SpecProblem, unavailable
from tether.runtime.bwrap import BwrapRuntime, probe
from tether.runtime.docker import DockerRuntime
from tether.runtime.process import ProcessRuntime


@dataclass(frozen=True)
class RuntimeContext:
    """What a runtime is built from, once per daemon."""

    home: str
    docker_cli: str | None  # the docker client execs run (None: not installed)
    docker_exec: str = "api"  # TETHER_DOCKER_EXEC: api (the monitor's own client) or cli


#: name → how to build it. The classes carry what is known without an instance
#: (:meth:`Runtime.spec_problems`, ``can_be_default``).
FACTORIES: dict[str, tuple[type[Runtime], Callable[[RuntimeContext], Runtime]]] = {
    "bwrap": (BwrapRuntime, lambda ctx: BwrapRuntime(probe())),
    "process": (ProcessRuntime, lambda ctx: ProcessRuntime()),
    "docker": (DockerRuntime, lambda ctx: DockerRuntime(ctx.home, ctx.docker_cli,
                                                        ctx.docker_exec)),
}
AUTO = "auto"
#: What ``auto`` tries, best first; the last one must always be available.
AUTO_ORDER = ("bwrap", "process")
NAMES = (AUTO, *FACTORIES)


def spec_problems(spec: SandboxSpec) -> list[SpecProblem]:
    """The runtime's own checks of a spec, without a daemon. ``auto`` may become any of
    :data:`AUTO_ORDER`: a field is wrong for it only when it is wrong for all of them."""
    if spec.runtime != AUTO:
        entry = FACTORIES.get(spec.runtime)
        return entry[0].spec_problems(spec) if entry is not None else []
    each = [FACTORIES[name][0].spec_problems(spec) for name in AUTO_ORDER]
    return [p for p in each[0] if all(any(q.path == p.path for q in other)
                                       for other in each[1:])]


class Runtimes:
    """The daemon's runtimes, built once; looked up by the name in a sandbox's spec."""

    def __init__(self, ctx: RuntimeContext) -> None:
        self._by_name = {name: build(ctx) for name, (_cls, build) in FACTORIES.items()}

    def attach(self, host: Callable[[Runtime], SandboxHost]) -> None:
        """Give each runtime the journal it reports through (scoped to its sandboxes)."""
        for rt in self:
            rt.attach(host(rt))

    def __iter__(self) -> Iterator[Runtime]:
        return iter(self._by_name.values())

    def get(self, name: str) -> Runtime:
        try:
            return self._by_name[name]
        except KeyError:
            raise invalid_params(f"unknown runtime {name!r}; use one of: "
                                 f"{', '.join(NAMES)}", runtime=name) from None

    def unconfined(self) -> Runtime:
        """The runtime that runs anything anywhere (``auto``'s last resort): what the
        default sandbox falls back to where its own runtime cannot confine an exec."""
        return self._by_name[AUTO_ORDER[-1]]

    def resolve(self, wanted: str) -> tuple[Runtime, str | None]:
        """``auto`` → the first of :data:`AUTO_ORDER` that works here, with the reason
        why the better ones did not; a named runtime must work here."""
        if wanted == AUTO:
            reasons: list[str] = []
            for name in AUTO_ORDER:
                rt = self._by_name[name]
                ok, why = rt.available()
                if ok:
                    note = (f"runtime auto fell back to {name}: {'; '.join(reasons)}"
                            if reasons else None)
                    return rt, note
                reasons.append(why)
            raise unavailable(AUTO, "; ".join(reasons))
        rt = self.get(wanted)
        ok, why = rt.available()
        if not ok:
            raise unavailable(rt.name, f"{why}; use runtime auto or {AUTO_ORDER[-1]}")
        return rt, None
