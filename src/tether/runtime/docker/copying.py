"""``tether cp`` through dockerd: tar archives to and from the primary container.

What comes out of a sandbox is extracted into a private temporary directory
beside the destination and moved into place, never written through a symlink the
sandbox planted, never into tether's home.
"""

from __future__ import annotations

import base64
import json
import os
import tarfile
import tempfile
from typing import Any

from tether.hostio.copy import CopyError, check_write
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

    stat = path_stat(engine, sandbox, dst)
    is_dir = stat is not None and bool(int(stat.get("mode", 0)) & (1 << 31))
    parent, arcname = (dst, os.path.basename(src.rstrip("/"))) if is_dir else \
        (os.path.dirname(dst.rstrip("/")) or "/", os.path.basename(dst.rstrip("/")))
    with tempfile.TemporaryFile() as buf:
        try:
            with tarfile.open(fileobj=buf, mode="w") as tar:
                tar.add(src, arcname=arcname)
        except (OSError, tarfile.TarError) as e:
            raise DockerError(f"cannot read {src}: {e}", "COPY_FAILED") from None
        size = buf.tell()
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
    into_dir = os.path.isdir(dst)
    parent = dst if into_dir else (os.path.dirname(os.path.abspath(dst)) or "/")
    try:
        check_write(os.path.join(parent, "x") if into_dir else dst, None, forbidden)
        return _extract(stream, dst, parent, into_dir, forbidden)
    except CopyError as e:
        raise DockerError(str(e), e.code) from None
    except (OSError, tarfile.TarError) as e:
        raise DockerError(f"copying to {dst} failed: {e}", "COPY_FAILED") from None

def _extract(stream: Any, dst: str, parent: str, into_dir: bool, forbidden: str) -> int:
    with tempfile.TemporaryFile() as buf:
        for chunk in stream:
            buf.write(chunk)
        size = buf.tell()
        buf.seek(0)
        with tempfile.TemporaryDirectory(dir=parent, prefix=".tether-cp-") as tmp, \
                tarfile.open(fileobj=buf, mode="r") as tar:
            tar.extractall(tmp, filter=_copy_filter)
            entries = os.listdir(tmp)
            if len(entries) != 1:
                raise DockerError("docker returned an unexpected archive", "COPY_FAILED")
            final = os.path.join(dst, entries[0]) if into_dir else dst
            check_write(final, None, forbidden)
            os.replace(os.path.join(tmp, entries[0]), final)
    return size


def _copy_filter(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
    """tarfile's "data" filter (no devices or FIFOs, no owners, no setuid, nothing
    outside ``path``), except that symlinks are kept as they are, absolute ones too:
    the archive comes from a sandbox, and a link is only a name until followed."""
    if member.issym():
        where = os.path.realpath(os.path.join(path, os.path.dirname(member.name)))
        if not (where + "/").startswith(os.path.realpath(path).rstrip("/") + "/"):
            raise tarfile.OutsideDestinationError(member, where)
        # None: not chowned on extraction (what tarfile.data_filter does; typeshed says int)
        return member.replace(uid=None, gid=None, uname=None, gname=None,  # type: ignore[arg-type]
                              deep=False)
    return tarfile.data_filter(member, path)
