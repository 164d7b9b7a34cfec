"""Where a fleet's PostgreSQL URL comes from without entering a process list.

``--fleet URL`` on a command line is readable by every local user in ``/proc/PID/cmdline``
for as long as the process runs, so the URL (and the password it may carry) reaches tether
through the environment (:data:`ENV`), a file only its owner can read (:data:`FILE_ENV`,
``--fleet-url-file``), or libpq's own password sources for a URL without one (``PGPASSFILE``,
``~/.pgpass``, a service file). ``--fleet URL`` still works; a password in it is warned
about, and tether never passes the URL on to a process it starts by its command line (the
daemon ``tether daemon`` execs gets it in its environment).
"""

from __future__ import annotations

from collections.abc import Mapping

from tether.hostio.secretfile import SecretFileError, read_secret_line
from tether.model.secrets import has_password

ENV = "TETHER_FLEET_URL"
FILE_ENV = "TETHER_FLEET_URL_FILE"
#: What ``--fleet URL`` with a password makes the CLI and the daemon say (once).
ARGV_WARNING = ("the fleet URL's password is on this command line, where every local user "
                "can read it (ps); give the URL in TETHER_FLEET_URL, in a file only you can "
                "read (--fleet-url-file FILE), or leave the password out and keep it in "
                "~/.pgpass (PGPASSFILE)")

__all__ = ["ARGV_WARNING", "ENV", "FILE_ENV", "SecretFileError", "resolve", "warn_argv"]


def resolve(url: str | None, url_file: str | None, environ: Mapping[str, str]) -> str | None:
    """The fleet URL from a flag's ``url`` or ``url_file``, else :data:`ENV`, else the file
    :data:`FILE_ENV` names; None without one. Raises ``ValueError`` for both flags at once,
    :class:`SecretFileError` for a file that cannot hold it."""
    if url and url_file:
        raise ValueError("give the fleet's URL once: --fleet URL or --fleet-url-file FILE")
    if url_file:
        return read_secret_line(url_file, "the fleet's PostgreSQL URL")
    if url:
        return url
    if environ.get(ENV):
        return environ[ENV]
    if environ.get(FILE_ENV):
        return read_secret_line(environ[FILE_ENV], "the fleet's PostgreSQL URL")
    return None


def warn_argv(url: str | None) -> str | None:
    """:data:`ARGV_WARNING` when ``url`` (given on a command line) carries a password."""
    return ARGV_WARNING if url and has_password(url) else None
