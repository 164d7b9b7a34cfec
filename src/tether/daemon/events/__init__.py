"""Events: the bus that fans the journal out to subscribers (``bus``), and the
``events.*`` methods (``api``)."""
