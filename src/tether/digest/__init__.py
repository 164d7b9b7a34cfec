"""Activity digests: periods and summaries, pure (no store, no daemon).

``periods`` cuts time into the digest's hours, days, ISO weeks and months in one
time zone; ``summary`` turns finished execs into a summary and adds summaries up.
The daemon's ``daemon/digest/service.py`` drives them over the store.
"""
