"""Sandboxes: create, start, stop, delete and copy in and out (``service``), and the
``sandbox.*`` methods (``api``)."""
