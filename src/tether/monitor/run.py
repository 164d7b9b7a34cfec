"""The monitor's entry point: ``python -I -S .../tether/monitor/run.py``.

Kept tiny on purpose: a script is compiled from source at every start (no .pyc
for ``__main__``) and the compiler's garbage stays in the process, so the real
code lives in :mod:`tether.monitor.main`, imported from its cached bytecode.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tether.monitor.main import main

sys.exit(main())
