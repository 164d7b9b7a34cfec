"""Fleet mode, the daemon's side: this host's lease (``lease``), placements and hand-over
(``service``), event relay (``relay``), the repository clones and git transfer (``clones``,
``git``) and the fleet HTTP listener (``http``). The shared store is :mod:`tether.fleet`."""
