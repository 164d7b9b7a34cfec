"""The ``tether`` command line, built on :class:`tether.Client` (the SDK is its only way
to the daemon)."""
