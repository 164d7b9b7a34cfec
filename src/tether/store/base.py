"""The core store's interface: what the daemon uses of durable intent (category A).

Two backends implement it: ``store/sqlite.py`` (``Store``, the default, embedded) and
``store/postgres.py`` (``PgStore``, psycopg 3, imported only when asked for). Both
keep the same records (msgspec JSON of ``model/records.py``), journal every change
in the transaction that makes it, guard every transition with
``model.states.check_transition`` inside that transaction, and number the journal
with a global ``gseq`` and a per-stream ``seq`` that have no gaps and follow commit
order (so a cursor never skips an event that commits later).

The feature tables (schedules, outbox, retention, digests, cost, ports) are not part
of it: they are SQLite-only and reach the SQLite connection directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from tether.model.records import (
    Event,
    ExecRecord,
    LineageRecord,
    SandboxRecord,
    SandboxSpec,
)
from tether.model.states import ExecState, LineageStatus, SandboxState

#: The journal stream of daemon-wide events (``sandbox`` is None), on both backends.
DAEMON_STREAM = ""


class SchemaTooNew(Exception):
    """The database was migrated by a newer tether than this one."""


@dataclass(frozen=True)
class Page:
    """Which rows of a filtered list to return (``exec.list``, ``lineage.list``): at most
    ``limit`` (all when None) after skipping ``offset``, in creation order or newest
    first. ``query`` keeps rows whose id, name or command (for a lineage: provider and
    worktree) contain it, ignoring ASCII case."""

    limit: int | None = None
    offset: int = 0
    newest_first: bool = False
    query: str | None = None


class CoreStore(Protocol):
    """Sandboxes, execs, lineages, id reservations, the journal and its epoch."""

    @property
    def epoch(self) -> str:
        """A random id made with the store: cursors (``gseq``) hold only within it."""
        ...

    def close(self) -> None: ...

    def schema_version(self) -> int: ...

    def migrate(self) -> None:
        """Apply the missing forward-only migrations; ``SchemaTooNew`` for a newer one."""
        ...

    def reserve_id(self, kind: str, nbytes: int = 6) -> str:
        """A never-used id; reservations outlive deletion."""
        ...

    # the journal
    def append_event(self, sandbox: str | None, type_: str, *, exec_id: str | None = None,
                     state: str | None = None, reason: str | None = None,
                     data: dict[str, Any] | None = None) -> Event: ...

    def events_since(self, *, since: int = 0, sandbox: str | None = None,
                     per_sandbox: bool = False, limit: int = 1000) -> list[Event]: ...

    def max_exec_event_n(self, exec_id: str, types: tuple[str, ...]) -> int: ...

    def last_gseq(self) -> int: ...

    # sandboxes
    def create_sandbox(self, name: str, spec: SandboxSpec) -> tuple[SandboxRecord, Event]: ...

    def get_sandbox(self, ident: str) -> SandboxRecord | None: ...

    def find_sandboxes(self, ref: str) -> list[SandboxRecord]: ...

    def list_sandboxes(self, include_deleted: bool = False) -> list[SandboxRecord]: ...

    def set_sandbox_spec(self, ident: str, spec: SandboxSpec, reason: str,
                         ) -> tuple[SandboxRecord, Event]: ...

    def transition_sandbox(self, ident: str, to: SandboxState, reason: str | None = None,
                           ) -> tuple[SandboxRecord, Event]: ...

    # execs
    def create_exec(self, rec: ExecRecord) -> tuple[ExecRecord, Event]: ...

    def restore(self, sandboxes: list[SandboxRecord], execs: list[ExecRecord],
                data: dict[str, Any]) -> list[Event]: ...

    def get_exec(self, ident: str) -> ExecRecord | None: ...

    def exec_by_request_key(self, key: str) -> ExecRecord | None: ...

    def find_execs(self, ref: str) -> list[ExecRecord]: ...

    def list_execs_of_lineage(self, lineage: str) -> list[ExecRecord]: ...

    def live_exec_named(self, name: str) -> ExecRecord | None: ...

    def list_execs(self, *, sandbox: str | None = None,
                   states: tuple[str, ...] | None = None) -> list[ExecRecord]: ...

    def page_execs(self, page: Page, *, sandbox: str | None = None,
                   states: tuple[str, ...] | None = None) -> tuple[list[ExecRecord], int]:
        """One page of the execs that match, and how many match in all."""
        ...

    def count_execs(self) -> dict[str, int]: ...

    def transition_exec(self, ident: str, to: ExecState, *, reason: str | None = None,
                        data: dict[str, Any] | None = None, **fields: Any,
                        ) -> tuple[ExecRecord, Event]: ...

    # lineages
    def create_lineage(self, rec: LineageRecord) -> tuple[LineageRecord, Event]: ...

    def get_lineage(self, ident: str) -> LineageRecord | None: ...

    def lineage_by_request_key(self, key: str) -> LineageRecord | None: ...

    def find_lineages(self, ref: str) -> list[LineageRecord]: ...

    def list_lineages(self, statuses: tuple[str, ...] | None = None,
                      ) -> list[LineageRecord]: ...

    def page_lineages(self, page: Page, *, statuses: tuple[str, ...] | None = None,
                      ) -> tuple[list[LineageRecord], int]:
        """One page of the lineages that match, and how many match in all."""
        ...

    def update_lineage(self, ident: str, *, status: LineageStatus | None = None,
                       event: str | None = None, reason: str | None = None,
                       data: dict[str, Any] | None = None,
                       event_reason: str | None = None, **fields: Any,
                       ) -> tuple[LineageRecord, Event | None]: ...
