"""``tether cp`` for the runtimes whose files live on the host (process, bwrap).

A path inside a bwrap sandbox is on the host only when it lies in the workspace
or a mount; everything else (``/tmp``, ``/run``) is private to each exec and
gone when it ends, so it cannot be copied. The docker runtime copies through
dockerd instead (:meth:`tether.runtime.docker.DockerEngine.copy_in`).
"""

from __future__ import annotations

import os
import shutil

from tether.model.records import SandboxSpec


class CopyError(Exception):
    def __init__(self, message: str, code: str = "INVALID_PATH") -> None:
        super().__init__(message)
        self.code = code


def host_path(spec: SandboxSpec, inside: str, *, writing: bool) -> str:
    """Where ``inside`` (a path as the sandbox sees it) lives on the host."""
    if not os.path.isabs(inside):
        raise CopyError(f"a path in a sandbox must be absolute, got {inside!r}")
    inside = os.path.normpath(inside)
    if spec.runtime == "process":
        return inside  # the process runtime does not isolate: its paths are the host's
    places: list[tuple[str, str, bool]] = []
    if spec.workspace is not None:
        places.append((spec.workspace_target or spec.workspace, spec.workspace, True))
    places += [(m.target, m.source, m.mode == "rw") for m in spec.mounts]
    for target, source, rw in sorted(places, key=lambda p: -len(p[0])):
        if inside == target or inside.startswith(target.rstrip("/") + "/"):
            if writing and not rw:
                raise CopyError(f"{inside} is in a read-only mount of the sandbox",
                                "READ_ONLY")
            return os.path.join(source, os.path.relpath(inside, target))
    raise CopyError(f"{inside} is not in the sandbox's workspace or mounts; only those "
                    "are kept on the host (its /tmp is private to each exec)")


def copy_path(src: str, dst: str) -> int:
    """``cp -a`` with ``docker cp``'s rule: into ``dst`` if it is a directory, else as
    ``dst``. Returns the bytes copied."""
    if not os.path.lexists(src):
        raise CopyError(f"{src} does not exist", "PATH_NOT_FOUND")
    if os.path.isdir(dst):
        dst = os.path.join(dst, os.path.basename(src.rstrip("/")))
    if not os.path.isdir(os.path.dirname(os.path.abspath(dst))):
        raise CopyError(f"{os.path.dirname(dst)} does not exist", "PATH_NOT_FOUND")
    if os.path.isdir(src) and not os.path.islink(src):
        shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(dst)
                   for f in fs if not os.path.islink(os.path.join(d, f)))
    shutil.copy2(src, dst, follow_symlinks=False)
    return os.lstat(dst).st_size
