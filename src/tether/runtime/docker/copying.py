"""``tether cp`` through dockerd: tar archives to and from the primary container.

What comes out of a sandbox is extracted member by member below the destination
directory's descriptor (``hostio.copyout``), never written through a symlink the
sandbox planted or swapped in mid-way, never into tether's home.
"""

from __future__ import annotations

import base64
import json
import os
import tarfile
import tempfile
from collections.abc import Iterable
from typing import Any

from tether.hostio.copyout import CopyError, fd_path, open_destination, write_tar
from tether.runtime.docker.engine import DockerEngine
from tether.runtime.docker.names import primary_name
from tether.runtime.docker.views import DockerError, short


def path_stat(engine: DockerEngine, sandbox: str, path: str) -> dict[str, Any] | None:
    """docker's stat of a path in the primary (None when it does not exist)."""
    api = engine.client().api
    url = api._url("/containers/{0}/archive", primary_name(sandbox))  # type: ignore[attr-defined]
    res = api.head(url, params={"path": path})
    if res.status_code == 404:
        return None
    if res.status_code >= 400:
        raise DockerError(f"cannot stat {path} in the sandbox: HTTP {res.status_code}")
    header = res.headers.get("X-Docker-Container-Path-Stat", "")
    stat: dict[str, Any] = json.loads(base64.b64decode(header)) if header else {}
    return stat

def copy_in(engine: DockerEngine, sandbox: str, src: str, dst: str) -> int:
    """``docker cp`` semantics: into ``dst`` if it is a directory, else as ``dst``."""
    import docker

    if not os.path.lexists(src):  # as a bwrap sandbox's copy says it
        raise DockerError(f"{src} does not exist", "PATH_NOT_FOUND")
    stat = path_stat(engine, sandbox, dst)
    is_dir = stat is not None and bool(int(stat.get("mode", 0)) & (1 << 31))
    parent, arcname = (dst, os.path.basename(src.rstrip("/"))) if is_dir else \
        (os.path.dirname(dst.rstrip("/")) or "/", os.path.basename(dst.rstrip("/")))
    size = 0  # the bytes of the files copied, not of the archive that carries them

    def counted(member: tarfile.TarInfo) -> tarfile.TarInfo:
        nonlocal size
        size += member.size if member.isreg() else 0
        return member
    with tempfile.TemporaryFile() as buf:
        try:
            with tarfile.open(fileobj=buf, mode="w") as tar:
                tar.add(src, arcname=arcname, filter=counted)
        except (OSError, tarfile.TarError) as e:
            raise DockerError(f"cannot read {src}: {e}", "COPY_FAILED") from None
        buf.seek(0)
        try:
            ok = engine.client().api.put_archive(primary_name(sandbox), parent, buf)
        except docker.errors.NotFound:
            raise DockerError(f"{parent} does not exist in the sandbox",
                              "PATH_NOT_FOUND") from None
        except docker.errors.APIError as e:
            raise DockerError(f"copying into the sandbox failed: {short(e)}") from e
    if not ok:
        raise DockerError("docker refused the copy")
    return size

def copy_out(engine: DockerEngine, sandbox: str, src: str, dst: str, forbidden: str) -> int:
    """Into ``dst`` if it is an existing directory, else as ``dst``; never into
    ``forbidden`` (tether's home)."""
    import docker

    try:
        stream, _stat = engine.client().api.get_archive(primary_name(sandbox), src)
    except docker.errors.NotFound:
        raise DockerError(f"{src} does not exist in the sandbox", "PATH_NOT_FOUND") from None
    except docker.errors.APIError as e:
        raise DockerError(f"copying out of the sandbox failed: {short(e)}") from e
    try:
        return extract(stream, dst, forbidden)
    except CopyError as e:
        raise DockerError(str(e), e.code) from None
    except (OSError, tarfile.TarError) as e:
        raise DockerError(f"copying to {dst} failed: {e}", "COPY_FAILED") from None


def extract(stream: Iterable[bytes], dst: str, forbidden: str) -> int:
    """Write docker's archive of one entry into ``dst`` if it is a directory, else as
    ``dst``, by descriptor (``hostio.copyout``): nothing through a symlink at any level,
    nothing into ``forbidden``. Returns the bytes of the files written."""
    with tempfile.TemporaryFile() as buf:
        for chunk in stream:
            buf.write(chunk)
        buf.seek(0)
        with tarfile.open(fileobj=buf, mode="r") as tar:
            first = tar.next()
            if first is None:
                raise CopyError("docker returned an empty archive", "COPY_FAILED")
            top = first.name.strip("/").split("/")[0]
            dfd, name = open_destination(top, dst, forbidden)
            try:
                return write_tar(tar, dfd, name, os.path.join(fd_path(dfd), name))
            finally:
                os.close(dfd)
