"""JSON-RPC 2.0 over a Unix socket, one message per line. Transport and dispatch only:
it knows nothing of sandboxes or execs (``tether.daemon.api`` registers the methods)."""
