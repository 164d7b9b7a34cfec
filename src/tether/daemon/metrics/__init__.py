"""Metrics: the Prometheus exposition, made at scrape time from the services' own state
(``exposition``), and ``daemon.metrics`` (``api``)."""
