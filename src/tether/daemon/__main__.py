"""``python -m tether.daemon --home DIR``: the lean entry point clients use to auto-start
a daemon. ``tether daemon`` does the same through the CLI, which also imports click
and rich (about 100 ms more start-up)."""

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
    args = p.parse_args()
    home = args.home.expanduser().absolute() if args.home else default_home()
    return serve(home, pool_size=max(0, min(args.pool, 64)))


if __name__ == "__main__":
    sys.exit(main())
