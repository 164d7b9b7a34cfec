"""The ``tether`` console script: the commands people and scripts run most start without
the rest of the CLI. ``tether attach`` goes to :mod:`tether.cli.attachfast`; ``ps``,
``status`` and ``logs`` to :mod:`tether.cli.fast`; every other command, and any line
those do not take, to the click CLI (:mod:`tether.cli.main`), byte for byte the same."""

from __future__ import annotations

import sys


def main() -> None:
    if "attach" in sys.argv[1:4]:  # [--home H] attach
        from tether.cli.attachfast import run

        code = run(sys.argv[1:])
        if code is not None:
            sys.exit(code)
        from tether.cli.main import main as full

        full()
        return
    from tether.cli.fast import main as fast

    fast()


if __name__ == "__main__":
    main()
