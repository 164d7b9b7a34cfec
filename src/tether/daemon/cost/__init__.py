"""Cost: pricing agents' turns, budgets and their enforcement (``service``), and the
``cost.report`` and ``budget.*`` methods (``api``). Prices and sums are :mod:`tether.cost`."""
