"""Located values: a spec as a tree that remembers where each value came from.

Every later step (overrides, conversion, checks) works on this tree so that an
error can name the file and line, or the ``--set`` item, of the value at fault.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import NoReturn

__all__ = ["Map", "Node", "Reporter", "Scalar", "Seq", "SpecError", "describe", "from_object",
           "is_null", "join", "locate", "suggest"]

MAX_DEPTH = 64


class SpecError(Exception):
    """A spec that cannot be used. ``str(err)`` is the whole message for people.

    ``path`` is the key path (``companions[1].health.interval``; ``""`` for the
    document as a whole), ``line`` the 1-based line in the file when the problem
    is in the file (``None`` for a ``--set`` item, a spec object or the file as a
    whole), ``source`` the file name (or the ``--set`` item) and ``problem`` the
    message without the place.
    """

    def __init__(self, message: str, *, path: str = "", line: int | None = None,
                 source: str = "<spec>", problem: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line
        self.source = source
        self.problem = problem or message

    def __str__(self) -> str:
        return self.message


class Node:
    """A located value. ``line`` is 1-based (None when it did not come from a
    file); ``origin`` is the ``--set`` item it came from; ``note`` explains a
    substitution ("from ${params.mem}")."""

    __slots__ = ("line", "note", "origin")

    def __init__(self, line: int | None, origin: str | None = None) -> None:
        self.line = line
        self.origin = origin
        self.note: str | None = None


class Scalar(Node):
    """``value`` is what YAML makes of the text; ``text`` the text itself.
    ``literal`` is true for a scalar written in the spec (its type is what the user
    wrote) and false for text from ``--set`` or a param, read as the field needs."""

    __slots__ = ("literal", "text", "value")

    def __init__(self, value: object, text: str, line: int | None, *, literal: bool,
                 origin: str | None = None) -> None:
        super().__init__(line, origin)
        self.value = value
        self.text = text
        self.literal = literal


class Map(Node):
    __slots__ = ("entries", "key_lines")

    def __init__(self, line: int | None, origin: str | None = None) -> None:
        super().__init__(line, origin)
        self.entries: dict[str, Node] = {}
        self.key_lines: dict[str, int | None] = {}

    def put(self, key: str, value: Node, key_line: int | None) -> None:
        self.entries[key] = value
        self.key_lines[key] = key_line


class Seq(Node):
    __slots__ = ("items",)

    def __init__(self, line: int | None, origin: str | None = None) -> None:
        super().__init__(line, origin)
        self.items: list[Node] = []


_SIMPLE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def join(path: str, key: str | int) -> str:
    """``resources`` + ``memory`` -> ``resources.memory``; odd keys are quoted
    (``env['A=B']``), indexes bracketed (``mounts[0]``)."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if not _SIMPLE_KEY.fullmatch(key):
        return f"{path}[{key!r}]"
    return f"{path}.{key}" if path else key


def suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def describe(node: Node) -> str:
    """What the user wrote, for "got ..." (``'lots'``, ``the number 1.5``)."""
    if isinstance(node, Map):
        return "a mapping"
    if isinstance(node, Seq):
        return "a list"
    assert isinstance(node, Scalar)
    value = node.value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {node.text}"
    if isinstance(value, int | float):
        return f"the number {node.text}"
    return repr(value)


def is_null(node: Node | None) -> bool:
    """Absent, ``null`` in the spec, or an empty ``--set`` value: the field's default."""
    return node is None or (isinstance(node, Scalar) and node.value is None)


def from_object(value: object, depth: int = 0) -> Node:
    """A spec given as JSON values (``sandbox.create``'s object form): every value
    is literal, as it would be written in a file, but has no line."""
    if depth > MAX_DEPTH:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, dict):
        out = Map(None)
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"keys must be strings, got {key!r}")
            out.put(key, from_object(item, depth + 1), None)
        return out
    if isinstance(value, list):
        seq = Seq(None)
        seq.items = [from_object(item, depth + 1) for item in value]
        return seq
    if value is None or isinstance(value, bool):
        text = {None: "null", True: "true", False: "false"}[value]
    elif isinstance(value, int | float | str):
        text = value if isinstance(value, str) else repr(value)
    else:
        raise ValueError(f"unsupported value {value!r}")
    return Scalar(value, text, None, literal=True)


class Reporter:
    """Turns a problem at a node into a :class:`SpecError` that names the place:
    ``file:line``, the ``--set`` item, or (for a spec object, ``object_root``) the
    key path under it (``spec.resources.memory``)."""

    def __init__(self, source: str, *, object_root: str | None = None) -> None:
        self.source = source
        self.object_root = object_root

    def fail(self, node: Node | None, path: str, problem: str, *,
             line: int | None = None) -> NoReturn:
        if line is None and node is not None:
            line = node.line
        origin = node.origin if node is not None else None
        if node is not None and node.note:
            problem = f"{problem} ({node.note})"
        if line is not None:
            where = f"{self.source}:{line}"
            source = self.source
        elif origin is not None:
            where = source = origin
        elif self.object_root is not None:
            source = self.object_root
            message = f"{self.object_root}.{path}" if path else self.object_root
            raise SpecError(f"{message}: {problem}", path=path, source=source,
                            problem=problem)
        else:
            where = source = self.source
        message = f"{where}: {path}: {problem}" if path else f"{where}: {problem}"
        raise SpecError(message, path=path, line=line, source=source, problem=problem)


def locate(root: Node, tokens: list[str | int]) -> tuple[Node, str, int | None, list[str | int]]:
    """Follow a key path as far as the tree goes: the deepest node, its path, the
    line of its key (when it is a mapping entry written in a file) and the tokens
    left over (a missing field, or a field inside a shorthand like ``"src:/dst"``)."""
    node, path, key_line = root, "", None
    for i, tok in enumerate(tokens):
        if isinstance(node, Map) and isinstance(tok, str) and tok in node.entries:
            key_line = node.key_lines[tok]
            node = node.entries[tok]
        elif isinstance(node, Seq) and isinstance(tok, int) and tok < len(node.items):
            node, key_line = node.items[tok], None
        else:
            return node, path, key_line, tokens[i:]
        path = join(path, tok)
    return node, path, key_line, []
