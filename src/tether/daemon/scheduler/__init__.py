"""Scheduled jobs: fire times committed before their execs (docs/STATE.md, "Schedules").

``timing`` says when a job fires; ``service`` commits fire times, starts and settles
runs. The run states live in :mod:`tether.model.schedule`, because the store guards
them in the transaction that writes them.
"""

from tether.daemon.scheduler.service import Scheduler

__all__ = ["Scheduler"]
