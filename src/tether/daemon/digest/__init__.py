"""Digests: periodic summaries of what agents and commands did (``service``), and the
``digest.*`` methods (``api``). The pure periods and summaries are :mod:`tether.digest`."""
