"""The monitor's entry point: ``python -I -S .../tether/monitor/run.py`` (a monitor), or
``... run.py --fork-server`` (the process that forks monitors: :mod:`tether.monitor.forkserver`).

Kept tiny on purpose: a script is compiled from source at every start (no .pyc
for ``__main__``) and the compiler's garbage stays in the process, so the real
code lives in :mod:`tether.monitor.main`, imported from its cached bytecode.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

if sys.argv[1:] == ["--fork-server"]:  # tether.monitor.forkserver: monitors forked
    from tether.monitor.forkserver import serve

    sys.exit(serve())

from tether.monitor.main import main

sys.exit(main())
