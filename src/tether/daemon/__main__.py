"""``python -m tether.daemon --home DIR``: the daemon's entry point. Clients auto-start
a daemon with it, and ``tether daemon`` execs it (so the CLI never imports the daemon)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from tether.daemon.daemon import serve
from tether.fleet import url
from tether.model.layout import default_home
from tether.model.retention import parse_duration, parse_size

#: Retention flags, each overriding its variable (durations like 14d, sizes like 2G).
RETENTION_FLAGS = (
    ("--keep-logs", "TETHER_KEEP_LOGS", "remove ended execs' logs after this long"),
    ("--logs-max", "TETHER_LOGS_MAX", "remove the oldest ended execs' logs above this size"),
    ("--keep-events", "TETHER_KEEP_EVENTS", "compact journal events older than this"),
)


def _checked(parse: Callable[[str], object]) -> Callable[[str], str]:
    """An argparse type: the text as given, once ``parse`` accepts it."""
    def check(text: str) -> str:
        try:
            parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return text
    return check


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m tether.daemon")
    p.add_argument("--home", type=Path, default=None)
    p.add_argument("--pool", type=int, default=2)
    p.add_argument("--default-runtime", default=None,
                   help="runtime of the default sandbox (default: $TETHER_DEFAULT_RUNTIME "
                   "or auto)")
    p.add_argument("--recover-store", action="store_true",
                   help="the store is missing, empty or corrupt: move it aside, make a new "
                   "one and put back the execs its monitors' files name")
    p.add_argument("--log-format", choices=("text", "json"), default=None,
                   help="the daemon's log lines (default: $TETHER_LOG_FORMAT, else text)")
    for flag, var, what in RETENTION_FLAGS:
        parse = parse_size if var == "TETHER_LOGS_MAX" else parse_duration
        p.add_argument(flag, dest=var, default=None, type=_checked(parse),
                       help=f"{what} (default: ${var})")
    p.add_argument("--fleet", default=None, metavar="URL",
                   help="join the fleet whose PostgreSQL is URL (`tether fleet init` first); "
                   "default: $TETHER_FLEET_URL (a password on this command line is "
                   "readable by every local user)")
    p.add_argument("--fleet-url-file", default=None, metavar="FILE",
                   help="read the fleet's URL from FILE (yours, mode 600); default: "
                   "$TETHER_FLEET_URL_FILE")
    p.add_argument("--host-name", default=None, help="this host's name in the fleet")
    p.add_argument("--capacity", type=int, default=4, help="fleet work this host runs at once")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                   help="a label placement can ask for (--label gpu=1)")
    args = p.parse_args()
    try:
        fleet_url = url.resolve(args.fleet, args.fleet_url_file, os.environ)
    except (ValueError, url.SecretFileError) as e:
        p.error(str(e))
    if args.fleet and (warning := url.warn_argv(args.fleet)):
        print(f"tether: {warning}", file=sys.stderr)
    # Read once: nothing the daemon starts (scripts, hooks, the summarizer) inherits it.
    for var in (url.ENV, url.FILE_ENV):
        os.environ.pop(var, None)
    labels = dict(x.split("=", 1) if "=" in x else (x, "") for x in args.label)
    home = args.home.expanduser().absolute() if args.home else default_home()
    retention = {var: getattr(args, var) for _, var, _ in RETENTION_FLAGS
                 if getattr(args, var) is not None}
    return serve(home, pool_size=max(0, min(args.pool, 64)),
                 default_runtime=args.default_runtime, recover_store=args.recover_store,
                 log_format=args.log_format, retention=retention,
                 fleet_url=fleet_url, host_name=args.host_name,
                 capacity=max(0, args.capacity), labels=labels)


if __name__ == "__main__":
    sys.exit(main())
