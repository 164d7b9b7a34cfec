"""The ``tether`` command line, built on :class:`tether.Client`."""
