"""What a fleet accepts as its database URL and as a host's name, checked before any
connection: a malformed URL is a usage error to fix (exit 2), not a database to wait
for, and a host name is typed in commands and shown in tables, so it is one word."""

from __future__ import annotations

import re

#: A host name: like a DNS label (dots allowed), so `drain NAME` needs no quoting and
#: `hosts` keeps its columns.
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z")


def host_name_error(name: str) -> str | None:
    if HOST_NAME.match(name):
        return None
    shown = name if len(name) <= 40 else f"{name[:40]}… ({len(name)} characters)"
    return (f"--host-name {shown!r} is not a host name: use 1 to 63 ASCII letters, "
            "digits, '.', '-' or '_', starting with a letter or digit (e.g. build-3)")


def url_error(url: str) -> str | None:
    """Why ``url`` cannot be a PostgreSQL connection string, else None (libpq's own
    parser: a ``postgresql://`` URL or ``key=value`` pairs)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError as e:
        if "@" in url or "password" in url.lower():  # unparsable: any of it may be secret
            return ("the fleet URL is not a PostgreSQL URL (not shown: it may hold a "
                    "password): write postgresql://USER@HOST[:PORT]/DATABASE, its password "
                    "in ~/.pgpass")
        return (f"{url!r} is not a PostgreSQL URL ({str(e).strip()}): write "
                "postgresql://USER@HOST[:PORT]/DATABASE")
    return None
