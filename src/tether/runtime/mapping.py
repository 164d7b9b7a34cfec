"""Where a path inside a sandbox lives on the host, for the runtimes whose files are the
host's own (process, bwrap): the workspace and the mounts, nothing else.

A path inside a bwrap sandbox is on the host only when it lies in the workspace
or a mount; everything else (``/tmp``, ``/run``) is private to each exec and
gone when it ends, so it cannot be copied.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tether.hostio.copy import CopyError
from tether.hostio.paths import is_within
from tether.model.records import SandboxSpec


@dataclass(frozen=True)
class HostPlace:
    """A sandbox path's place on the host, and the root it must stay under."""

    path: str
    root: str  # the real path of the workspace or mount it lies in
    rel: str = "."  # the path below root


def inside_path(inside: str) -> str:
    """A path as the sandbox sees it, checked and normalised."""
    if not os.path.isabs(inside):
        raise CopyError(f"a path in a sandbox must be absolute, got {inside!r}")
    return os.path.normpath(inside)


def host_path(spec: SandboxSpec, inside: str, *, writing: bool) -> HostPlace:
    """Where ``inside`` (a path as the sandbox sees it) lives on the host."""
    inside = inside_path(inside)
    places: list[tuple[str, str, bool]] = []
    if spec.workspace is not None:
        places.append((spec.workspace_target or spec.workspace, spec.workspace, True))
    places += [(m.target, m.source, m.mode == "rw") for m in spec.mounts]
    for target, source, rw in sorted(places, key=lambda p: -len(p[0])):
        if is_within(inside, target):
            if writing and not rw:
                raise CopyError(f"{inside} is in a read-only mount of the sandbox",
                                "READ_ONLY")
            rel = os.path.relpath(inside, target)
            return HostPlace(os.path.normpath(os.path.join(source, rel)),
                             os.path.realpath(source), rel)
    raise CopyError(f"{inside} is not in the sandbox's workspace or mounts; only those "
                    "are kept on the host (its /tmp is private to each exec)")
