"""``python -m tether.daemon --home DIR``: the daemon's entry point. Clients auto-start
a daemon with it, and ``tether daemon`` execs it (so the CLI never imports the daemon)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tether.daemon.daemon import serve
from tether.model.layout import default_home


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
    p.add_argument("--fleet", default=None, metavar="URL",
                   help="join the fleet whose PostgreSQL is URL (`tether fleet init URL` first)")
    p.add_argument("--host-name", default=None, help="this host's name in the fleet")
    p.add_argument("--capacity", type=int, default=4, help="fleet work this host runs at once")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                   help="a label placement can ask for (--label gpu=1)")
    args = p.parse_args()
    labels = dict(x.split("=", 1) if "=" in x else (x, "") for x in args.label)
    home = args.home.expanduser().absolute() if args.home else default_home()
    return serve(home, pool_size=max(0, min(args.pool, 64)),
                 default_runtime=args.default_runtime, recover_store=args.recover_store,
                 fleet_url=args.fleet, host_name=args.host_name,
                 capacity=max(0, args.capacity), labels=labels)


if __name__ == "__main__":
    sys.exit(main())
