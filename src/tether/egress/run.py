"""The egress proxy's entry point: ``python -I -S .../tether/egress/run.py HOME/egress``.

Kept tiny, as the monitor's: a script is compiled at every start, the real code is
imported from its cached bytecode (:mod:`tether.egress.proxy`).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tether.egress.proxy import main

sys.exit(main(sys.argv))
