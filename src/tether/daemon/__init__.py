"""The daemon: composition root (``daemon.py``), its services and its RPC surface."""
