"""Setup marks (migration 13): the worktrees whose repository ``setup`` script has run.

``setup`` runs once per worktree, before the first lineage's agent. Its mark was a file
in the worktree, which the agent can delete (so that the setup runs again, outside the
sandbox, in a tree it wrote) or plant: it lives in the home now, keyed by the worktree's
real path, device and inode (a worktree removed and made again at the same path is a new
one and runs its setup again).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tether.store.sqlite import Store


class SetupMarks:
    """Composed around the core store by the agent core (``AgentCore.setup_marks``)."""

    def __init__(self, store: Store) -> None:
        self._s = store

    def get(self, tree: str) -> str | None:
        """The lineage whose start ran ``tree``'s setup, or None."""
        row = self._s._db.execute("SELECT lineage FROM setup_marks WHERE tree = ?",
                                  (tree,)).fetchone()
        return None if row is None else str(row[0])

    def put(self, tree: str, lineage: str) -> None:
        with self._s._tx() as db:
            db.execute("INSERT INTO setup_marks VALUES (?, ?, ?) ON CONFLICT(tree) DO "
                       "NOTHING", (tree, lineage, time.time()))
