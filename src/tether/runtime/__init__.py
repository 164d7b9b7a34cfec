"""Where processes run (category B: never persisted, always re-inspected).

Issue 2 ships the ``process`` runtime; bwrap and docker plug in beside it.
"""
