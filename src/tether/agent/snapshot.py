"""Drain snapshots: ``{home}/drain/{lineage}.json``, written at every completed turn.

A snapshot holds what is needed to re-establish the agent's context from the
same turn boundary (as the agent kernel does): lineage and daemon instance ids, when it was
written, the model, cumulative token usage, the conversation messages
reported, and the loop configuration. Deliberately *not* in it: paths that are
regenerated at start, pending images, runtime approvals, process handles.

A turn does not rewrite the whole conversation (that grew quadratically): the
first turn writes the base file atomically and durably (tmp + fsync + rename +
fsync dir); later turns append one line (that turn's new messages and header) to
``{lineage}.turns.jsonl`` and fsync it. When the lines outgrow the base (and at
least :data:`COMPACT_MIN` bytes), or when an attempt is revived from it
(:func:`compact`, so the base alone is whole for whoever reads it then), the base
is rewritten with everything and the lines removed. :func:`read` merges the two:
lines whose turn the base already holds are skipped (a crash between the rewrite
and the removal), a torn last line is ignored, and a turn written twice (a retried
report) counts once, its last version. Older versions are upgraded on read
(:func:`upgrade`), never rewritten in place.

Sizes are bounded, since whoever reports turns may be hostile: one turn carries at most
:data:`MAX_TURN_BYTES` of messages, and a rewritten base keeps the newest messages that
fit in :data:`MAX_CONVERSATION_BYTES` (``dropped`` counts those let go, over the
lineage's life), so the base and its lines together stay under twice that plus a turn.
Nothing of the conversation is kept in the daemon's memory: a rewrite reads it back
from the files, in the worker thread that writes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

from tether.hostio.atomic import atomic_write, fsync_dir, write_all

VERSION = 2
COMPACT_MIN = 64 * 1024  # bytes of lines below which the base is never rewritten
#: The most one turn's messages may take, as JSON (``agent.turn`` refuses more; a
#: provider's hook is cut to fit: :func:`fit_turn`).
MAX_TURN_BYTES = 256 * 1024
#: The most of the conversation a rewritten base keeps, as JSON: the newest messages.
MAX_CONVERSATION_BYTES = 2 * 1024 * 1024
#: What a line carries besides its messages: the header fields it replaces.
_HEADER = ("anchor_id", "written_at", "provider", "provider_session_id", "model", "turn",
           "usage", "loop_config")


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


def turns_path(path: Path) -> Path:
    """The appended turns beside a base snapshot."""
    return path.with_name(path.name.removesuffix(".json") + ".turns.jsonl")


def write(home: Path, snap: dict[str, Any]) -> Path:
    """Rewrite the base with the whole snapshot, then drop the appended lines."""
    path = path_for(home, snap["lineage_id"])
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    atomic_write(str(path), json.dumps(snap, separators=(",", ":")).encode(), durable=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(turns_path(path))  # its turns are in the base now (read skips them anyway)
    return path


def size(messages: Any) -> int:
    """What ``messages`` (or any JSON value) take as JSON, as written."""
    return len(json.dumps(messages, separators=(",", ":")).encode())


def fit_turn(messages: list[dict[str, Any]], limit: int = MAX_TURN_BYTES,
             ) -> list[dict[str, Any]]:
    """``messages`` cut to ``limit`` bytes of JSON (for turns read from a provider's
    transcript, which tether does not choose): the newest whole messages that fit; if
    not even the last one does, its ``content`` cut to its end, marked ``truncated``."""
    out: list[dict[str, Any]] = []
    left = limit - 2
    for m in reversed(messages):
        n = size([m])
        if n + 1 > left:
            if not out:
                out.append(_cut(m, left))
            break
        out.append(m)
        left -= n + 1
    return out[::-1]


def _cut(message: dict[str, Any], limit: int) -> dict[str, Any]:
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content)
    cut = dict(message, content="", truncated=len(text))
    room = max(0, limit - size([cut]) - 64)
    while True:  # characters may take up to six bytes each as JSON
        cut["content"] = text[len(text) - room:] if room else ""
        if size([cut]) + 2 <= limit or room == 0:
            return cut
        room //= 2


def record_turn(home: Path, snap: dict[str, Any], new_messages: list[dict[str, Any]], *,
                full: bool = False, verify: bool = False) -> Path:
    """Make a completed turn durable: one appended line, or the whole base (read back
    from the files, with this turn's messages and the newest that fit) when there is
    none yet, ``full`` is asked or the lines outgrew it. ``verify``: read what is there
    first (once per daemon and lineage) and rewrite it whole if it cannot be read."""
    path = path_for(home, snap["lineage_id"])
    lines = turns_path(path)
    try:
        base_size = os.stat(path).st_size
    except FileNotFoundError:
        full = True
        base_size = 0
    try:
        lines_size = os.stat(lines).st_size
    except FileNotFoundError:
        lines_size = 0
    if verify and not full:
        try:
            read(path)
        except (FileNotFoundError, SnapshotError):
            full = True  # unreadable: what it held is lost; start it again from here
    if full or lines_size > max(base_size, COMPACT_MIN):
        return write(home, _whole(path, snap, new_messages))
    entry = {k: snap[k] for k in _HEADER}
    entry["messages"] = new_messages
    data = json.dumps(entry, separators=(",", ":")).encode() + b"\n"
    fd = os.open(lines, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        end = os.lseek(fd, 0, os.SEEK_END)
        if end and os.pread(fd, 1, end - 1) != b"\n":  # a torn line: cut it off
            end = _last_newline(fd, end)
            os.ftruncate(fd, end)
        write_all(fd, data, end)
        os.fsync(fd)
    finally:
        os.close(fd)
    if lines_size == 0:
        fsync_dir(str(path.parent))
    return path


def _whole(path: Path, snap: dict[str, Any], new: list[dict[str, Any]]) -> dict[str, Any]:
    """The whole snapshot after turn ``snap["turn"]``: the conversation on disk before
    it (none if unreadable), its new messages, and only the newest that fit."""
    try:
        prior = read(path, before=snap["turn"])
    except (FileNotFoundError, SnapshotError):
        prior = {"messages": []}
    if int(prior.get("turn", 0)) >= snap["turn"]:
        new = []  # a retried report: the base already holds this turn (its commit failed)
    kept, dropped = _newest(list(prior.get("messages", [])) + list(new))
    return dict(snap, messages=kept, dropped=int(prior.get("dropped", 0)) + dropped)


def _newest(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The newest messages whose JSON fits in :data:`MAX_CONVERSATION_BYTES`, and how
    many did not."""
    left, keep = MAX_CONVERSATION_BYTES, 0
    for m in reversed(messages):
        left -= size([m]) + 1
        if left < 0:
            break
        keep += 1
    return messages[len(messages) - keep:], len(messages) - keep


def _last_newline(fd: int, end: int) -> int:
    """The offset just past the last newline before ``end`` (0 if there is none)."""
    pos = end
    while pos > 0:
        start = max(0, pos - 65536)
        chunk = os.pread(fd, pos - start, start)
        i = chunk.rfind(b"\n")
        if i >= 0:
            return start + i + 1
        pos = start
    return 0


def compact(home: Path, lineage: str) -> None:
    """Fold the appended lines into the base, so the base alone is whole (before a
    revival hands its path to the agent, which may read the file itself)."""
    path = path_for(home, lineage)
    if not turns_path(path).exists():
        return
    try:
        snap = read(path)
    except (FileNotFoundError, SnapshotError):
        return  # nothing sound to fold into; the next turn writes a whole base
    kept, dropped = _newest(snap["messages"])
    write(home, dict(snap, messages=kept, dropped=int(snap.get("dropped", 0)) + dropped))


def read(path: Path, before: int | None = None) -> dict[str, Any]:
    """Load a snapshot of any known version, upgraded to the current one, with the
    turns appended since its base was written (only those before turn ``before``)."""
    try:
        obj = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as e:
        raise SnapshotError(f"drain snapshot {path} is unreadable: {e}") from None
    if not isinstance(obj, dict):
        raise SnapshotError(f"drain snapshot {path} is not a JSON object")
    snap = upgrade(obj)
    entries = _turns(turns_path(path), int(snap.get("turn", 0)))
    if before is not None:
        entries = [e for e in entries if int(e["turn"]) < before]
    if entries:
        snap["messages"] = list(snap["messages"])
        for entry in entries:
            snap.update({k: entry[k] for k in _HEADER if k in entry})
            snap["messages"].extend(entry.get("messages", []))
    return snap


def _turns(path: Path, after: int) -> list[dict[str, Any]]:
    """The whole lines of turns after ``after``; a turn repeated keeps its last line."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as e:
        raise SnapshotError(f"drain snapshot turns {path} are unreadable: {e}") from None
    out: list[dict[str, Any]] = []
    for raw in data.split(b"\n")[:-1]:  # the part after the last newline is torn
        try:
            entry = json.loads(raw)
            turn = int(entry["turn"])
        except (ValueError, KeyError, TypeError):
            break  # a damaged line: what follows cannot be trusted to follow it
        if turn <= after:
            continue
        while out and int(out[-1]["turn"]) >= turn:
            out.pop()
        out.append(entry)
    return out


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


#: At most this much of the task and of the last answer goes into a continuation prompt.
CONTINUATION_CHARS = 4000


def continuation_prompt(path: Path, task: str | None = None) -> str:
    """The prompt that resumes a headless attempt (``codex exec resume ID PROMPT``,
    ``aider --restore-chat-history --message PROMPT``): the CLI keeps the conversation, so
    this only says that it was interrupted, what the task was (the snapshot's first
    prompt, else ``task``: the original command line's) and what was last said, from the
    drain snapshot. Without a readable snapshot, the task alone."""
    first: str | None = None
    last: str | None = None
    turn = 0
    try:
        snap = read(path)
    except (FileNotFoundError, SnapshotError):
        snap = {}
    for m in snap.get("messages") or []:
        if not isinstance(m, dict) or not isinstance(m.get("content"), str):
            continue
        if m.get("role") == "user" and first is None:
            first = m["content"]
        elif m.get("role") == "assistant":
            last = m["content"]
    if isinstance(snap.get("turn"), int):
        turn = snap["turn"]
    task = first or task
    lines = ["This session was interrupted (its process ended) and has been resumed by "
             "tether. Continue the task where you left off; do not start over, and do not "
             "redo work that is already done."]
    if task:
        lines.append(f"The task: {task[:CONTINUATION_CHARS]}")
    if last and turn:
        lines.append(f"Your last answer (turn {turn}): {last[-CONTINUATION_CHARS:]}")
    return "\n\n".join(lines)
