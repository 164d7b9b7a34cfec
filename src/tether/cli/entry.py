"""The ``tether`` console script: ``tether attach`` starts without the rest of the CLI
(:mod:`tether.cli.attachfast`); every other command, and any attach it does not take,
goes to the click CLI (:mod:`tether.cli.main`)."""

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


if __name__ == "__main__":
    main()
