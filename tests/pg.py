"""A throw-away PostgreSQL cluster for the fleet tests and bench: ``initdb`` in a temp
dir, a Unix socket beside it, trust auth, run as an unprivileged user (PostgreSQL
refuses root). Debian's ``postgresql`` package provides the binaries."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

SUPERUSER = "tether"


def bindir() -> Path | None:
    """Where initdb and pg_ctl are: $PG_BINDIR, Debian's newest, else PATH."""
    if os.environ.get("PG_BINDIR"):
        return Path(os.environ["PG_BINDIR"])
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PgCluster:
    """One cluster: ``start()``, ``url``, ``stop()`` (fast or immediate), ``destroy()``."""

    def __init__(self, tcp_port: int | None = None) -> None:
        """``tcp_port``: also listen on 127.0.0.1:PORT (the egress test's target)."""
        self.tcp_port = tcp_port
        bins = bindir()
        if bins is None:
            raise RuntimeError("PostgreSQL is not installed: apt-get install -y postgresql")
        self.bin = bins
        self.root = Path(tempfile.mkdtemp(prefix="tether-pg-"))
        self.data = self.root / "data"
        self.sock = self.root / "sock"
        self.user = "nobody" if os.geteuid() == 0 else None
        os.chmod(self.root, 0o755)
        self.sock.mkdir()
        if self.user:
            pw = pwd.getpwnam(self.user)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            os.chown(self.sock, pw.pw_uid, pw.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "--auth=trust",
                  "-E", "UTF8", "--no-sync")

    @property
    def _port(self) -> str:
        """The socket's name follows the port: libpq must be told it."""
        return f"&port={self.tcp_port}" if self.tcp_port else ""

    @property
    def url(self) -> str:
        return f"postgresql://{SUPERUSER}@/tether?host={self.sock}{self._port}"

    def _run(self, tool: str, *args: str) -> None:
        argv = [str(self.bin / tool), *args]
        if self.user:
            argv = ["runuser", "-u", self.user, "--", *argv]
        subprocess.run(argv, check=True, capture_output=True, cwd=self.root)

    def start(self) -> None:
        listen = f"127.0.0.1 -p {self.tcp_port}" if self.tcp_port else "''"
        opts = (f"-k {self.sock} -c listen_addresses={listen} -c fsync=off "
                "-c max_connections=200 -c shared_buffers=16MB")
        self._run("pg_ctl", "-D", str(self.data), "-o", opts, "-l",
                  str(self.root / "pg.log"), "-w", "start")
        if not (self.root / ".created").exists():
            import psycopg

            with psycopg.connect(f"postgresql://{SUPERUSER}@/postgres?host={self.sock}{self._port}",
                                 autocommit=True) as c:
                c.execute("CREATE DATABASE tether")
            (self.root / ".created").touch()

    def new_db(self, name: str) -> str:
        """A fresh database in this cluster (one per test); its URL."""
        import psycopg

        with psycopg.connect(f"postgresql://{SUPERUSER}@/postgres?host={self.sock}{self._port}",
                             autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://{SUPERUSER}@/{name}?host={self.sock}{self._port}"

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
