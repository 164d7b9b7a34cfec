"""Retention: what is kept and for how long; prunes, ``exec.remove`` and ``df``
(``service``), and the ``retention.*`` methods (``api``)."""
