"""The ``process`` runtime: the command runs as a plain process in its working
directory, with no isolation. Its sandboxes are only records; its paths are the
host's own."""

from __future__ import annotations

import asyncio
from functools import partial

from tether.hostio.copy import copy_path
from tether.model.records import SandboxRecord, SandboxSpec
from tether.runtime.base import (
    ExecRequest,
    Launch,
    LaunchPlan,
    Runtime,
    SpecProblem,
    host_env,
)
from tether.runtime.mapping import inside_path


def no_container_fields(spec: SandboxSpec) -> list[SpecProblem]:
    """Fields only a container engine can honour, for the runtimes that have none."""
    out: list[SpecProblem] = []
    runtime = f"(runtime is {spec.runtime!r})"
    if spec.image is not None:
        out.append(SpecProblem("image", f"an image is only used by runtime: docker {runtime}"))
    if spec.companions:
        out.append(SpecProblem("companions", f"companions need runtime: docker {runtime}"))
    if spec.restart != "never":
        out.append(SpecProblem("restart", f"restart needs runtime: docker {runtime}; other "
                               "runtimes have no long-lived container"))
    for field in ("docker_host", "docker_cert_path"):
        if getattr(spec, field) is not None:
            out.append(SpecProblem(field, f"{field} needs runtime: docker {runtime}"))
    return out


class ProcessRuntime(Runtime):
    name = "process"

    @classmethod
    def spec_problems(cls, spec: SandboxSpec) -> list[SpecProblem]:
        out: list[SpecProblem] = []
        if spec.mounts or spec.workspace_target or spec.network not in (None, "host"):
            out.append(SpecProblem(
                "mounts" if spec.mounts else "workspace_target" if spec.workspace_target
                else "network", "the process runtime cannot isolate: mounts, "
                "workspace_target and network none/private/allow need bwrap"))
        return out + no_container_fields(spec)

    def prepare_exec(self, req: ExecRequest) -> LaunchPlan:
        def launch(exec_id: str) -> Launch:
            return Launch(argv=req.spec.argv, env=host_env(req.spec, req.sandbox, exec_id),
                          cwd=req.cwd)
        return launch

    async def copy(self, sb: SandboxRecord, direction: str, src: str, dst: str, *,
                   tether_home: str) -> int:
        # No isolation: the sandbox's paths are the host's own.
        if direction == "in":
            return await asyncio.to_thread(partial(copy_path, src, inside_path(dst),
                                                   forbidden=tether_home))
        return await asyncio.to_thread(partial(copy_path, inside_path(src), dst,
                                               forbidden=tether_home))
