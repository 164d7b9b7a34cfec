"""Drain snapshots: ``{home}/drain/{lineage}.json``, written at every completed turn.

A snapshot holds what is needed to re-establish the agent's context from the
same turn boundary (as the agent kernel does): lineage and daemon instance ids, when it was
written, the model, cumulative token usage, the conversation messages
reported, and the loop configuration. Deliberately *not* in it: paths that are
regenerated at start, pending images, runtime approvals, process handles.

Writes are atomic and durable (tmp + fsync + rename + fsync dir). Older
versions are upgraded on read (:func:`upgrade`), never rewritten in place.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from tether.hostio.atomic import atomic_write

VERSION = 2


class SnapshotError(Exception):
    pass


def path_for(home: Path, lineage: str) -> Path:
    return home / "drain" / f"{lineage}.json"


def build(*, lineage: str, instance: str, provider: str, model: str | None,
          usage: dict[str, int], messages: list[dict[str, Any]], turn: int,
          provider_session_id: str | None, loop_config: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": VERSION,
        "lineage_id": lineage,
        "anchor_id": instance,  # the daemon instance that wrote it
        "written_at": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        "provider": provider,
        "provider_session_id": provider_session_id,
        "model": model,
        "turn": turn,
        "usage": dict(usage),
        "messages": list(messages),
        "loop_config": dict(loop_config),
    }


def write(home: Path, snap: dict[str, Any]) -> Path:
    path = path_for(home, snap["lineage_id"])
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    atomic_write(str(path), json.dumps(snap, separators=(",", ":")).encode(), durable=True)
    return path


def read(path: Path) -> dict[str, Any]:
    """Load a snapshot of any known version, upgraded to the current one."""
    try:
        obj = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as e:
        raise SnapshotError(f"drain snapshot {path} is unreadable: {e}") from None
    if not isinstance(obj, dict):
        raise SnapshotError(f"drain snapshot {path} is not a JSON object")
    return upgrade(obj)


def upgrade(obj: dict[str, Any]) -> dict[str, Any]:
    version = obj.get("version", 1)
    if version == VERSION:
        return obj
    if version == 1:
        return upgrade_from_v1(obj)
    raise SnapshotError(f"drain snapshot version {version} is newer than this tether "
                        f"({VERSION}); upgrade tether")


def upgrade_from_v1(v1: dict[str, Any]) -> dict[str, Any]:
    """Version 1 kept one token total and a flat config; version 2 splits usage and
    names the loop configuration."""
    tokens = int(v1.get("tokens", 0) or 0)
    config = dict(v1.get("config") or {})
    return {
        "version": VERSION,
        "lineage_id": v1["lineage"],
        "anchor_id": v1.get("daemon"),
        "written_at": v1.get("written_at"),
        "provider": config.pop("provider", "generic"),
        "provider_session_id": v1.get("session_id"),
        "model": v1.get("model"),
        "turn": int(v1.get("turn", len([m for m in v1.get("messages", [])
                                       if m.get("role") == "assistant"]))),
        "usage": {"input_tokens": tokens, "output_tokens": 0, "cache_read_tokens": 0,
                  "cache_creation_tokens": 0},
        "messages": list(v1.get("messages", [])),
        "loop_config": config,
    }
