"""Located tree -> :class:`SandboxSpec`, by ``msgspec.convert`` against the records.

Before msgspec sees the tree it is made plain, following the records' fields:
unknown keys are refused (with a suggestion), ``null`` means the field's default,
text from ``--set`` or a param becomes what the field needs (``--set env.PORT=5432``
is the string ``"5432"``, ``--set resources.cpus=2`` the number 2) while values
written in the spec keep the type they were written with (``PORT: 5432`` in
``env`` is an error: quote it), and the shorthands the records name in
``Meta.extra["form"]`` are expanded (sizes, durations, command lines, mounts).
msgspec then checks types and constraints strictly; its ``$.key.path`` is mapped
back to the node, so the error names the file and line and says what was
expected.
"""

from __future__ import annotations

import copy
import math
import re
import shlex
from typing import Any, NoReturn

import msgspec
import msgspec.inspect as mi

from tether.model.records import MountSpec, SandboxSpec
from tether.spec.nodes import (
    Map,
    Node,
    Reporter,
    Scalar,
    Seq,
    describe,
    is_null,
    join,
    locate,
    suggest,
)
from tether.spec.schema import SPEC, Shape, expected, field_shape, fields, shape

__all__ = ["parse_duration", "parse_size", "to_spec"]

_MOUNT = mi.type_info(MountSpec)
assert isinstance(_MOUNT, mi.StructType)
MOUNT_MODES = field_shape(_MOUNT, "mode").choices  # what "SRC:DST:MODE" may end with
_SIZE_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(?:([kmgt])(?:i?b)?|b)?", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d)")
_DURATION_RE = re.compile(rf"(?:{_DURATION_PART.pattern})+")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_ANY = Shape(mi.AnyType(), {}, None)


def parse_size(text: str) -> int | None:
    """``"512m"`` -> 536870912; binary units k, m, g, t (``kb``/``kib`` too); a
    bare number is bytes. ``None`` when it is not a size."""
    m = _SIZE_RE.fullmatch(text.strip())
    if not m:
        return None
    return int(float(m.group(1)) * _SIZE_UNITS[(m.group(2) or "").lower()])


def parse_duration(text: str) -> float | None:
    """``"500ms"``, ``"2s"``, ``"1m"``, ``"1h30m"``, ``"1d"`` or a bare number of
    seconds -> seconds. ``None`` when it is not a duration."""
    s = text.strip().lower()
    try:
        value = float(s)
    except ValueError:
        pass
    else:
        return value if math.isfinite(value) else None
    if not _DURATION_RE.fullmatch(s):
        return None
    return sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(s))


class _Plain:
    """The located tree as the plain values msgspec converts."""

    def __init__(self, report: Reporter) -> None:
        self.report = report

    def struct(self, node: Map, path: str, t: mi.StructType) -> dict[str, object]:
        known = fields(t)
        out: dict[str, object] = {}
        for key, child in node.entries.items():
            kpath = join(path, key)
            field = known.get(key)
            if field is None:
                choices = [*known, *(["params"] if t is SPEC else [])]
                hint = suggest(key, choices) or f"; expected one of: {', '.join(choices)}"
                self.report.fail(child, kpath, f"unknown key{hint}",
                                 line=node.key_lines[key])
            s = field_shape(t, key)
            if is_null(child):
                if field.required and "default_from" not in s.extra:
                    self.report.fail(child, kpath, f"required field is empty{_why(s)}")
                continue  # the field's default
            out[key] = self.value(child, kpath, s)
        for name in known:
            source = field_shape(t, name).extra.get("default_from")
            if source is not None and name not in out and source in out:
                out[name] = out[source]  # the checks resolve it
        return out

    def value(self, node: Node, path: str, s: Shape) -> object:
        if isinstance(node, Map):
            if (struct := s.struct) is not None:
                return self.struct(node, path, struct)
            inner = s.item() if isinstance(s.type, mi.DictType) else None
            return {k: self.value(v, join(path, k), inner or _ANY)
                    for k, v in node.entries.items()}
        if isinstance(node, Seq):
            inner = s.item() if isinstance(s.type, mi.ListType) else None
            return [self.value(v, join(path, i), inner or _ANY)
                    for i, v in enumerate(node.items)]
        assert isinstance(node, Scalar)
        value = node.value
        if not node.literal and s.takes_text():  # null is a default only for a field
            value = node.text
        if isinstance(value, float) and not math.isfinite(value):
            self.report.fail(node, path, f"expected {expected(s)}, got {describe(node)}")
        if isinstance(value, str):
            if "\0" in value:
                self.report.fail(node, path, "contains a NUL character")
            return self.text(node, path, s, value)
        return value

    def text(self, node: Node, path: str, s: Shape, text: str) -> object:
        """A string where the field may take a shorthand (``Meta.extra["form"]``)."""
        form = s.extra.get("form")
        parsed: object = text
        if form == "size":
            parsed = parse_size(text)
        elif form == "duration":
            parsed = parse_duration(text)
        elif form == "shell":
            return ["sh", "-c", text] if text.strip() else []
        elif form == "words":
            try:
                return shlex.split(text)
            except ValueError as e:
                self.report.fail(node, path, f"cannot split {text!r} into words: {e}; write "
                                 "a list instead")
        elif form == "mount":
            parts = text.split(":")
            mode = parts.pop() if len(parts) >= 3 and parts[-1] in MOUNT_MODES else "ro"
            if len(parts) != 2 or not parts[0] or not parts[1]:
                self.report.fail(node, path, f"expected SOURCE:TARGET[:ro|rw], got {text!r}")
            return {"source": parts[0], "target": parts[1], "mode": mode}
        if parsed is None:
            self.report.fail(node, path, f"expected {expected(s)}, got {describe(node)}")
        return parsed


def _why(s: Shape) -> str:
    why = s.extra.get("why")
    return f" ({why})" if why else ""


def to_spec(root: Map, report: Reporter) -> SandboxSpec:
    """Convert the tree (params already substituted); ``runtime`` defaults to
    ``"auto"``, which the daemon resolves."""
    tree = _Plain(report).struct(root, "", SPEC)
    tree.setdefault("runtime", "auto")
    try:
        return msgspec.convert(tree, SandboxSpec, strict=True)
    except msgspec.ValidationError as e:
        _explain(str(e), tree, root, report)


_AT = re.compile(r"(?s)(?P<what>.*) - at `(?P<key>key` in `)?\$(?P<path>[^`]*)`")
_TOKEN = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[\.\.\.\]")


def _tokens(path: str) -> list[str | int | None]:
    """``$.companions[0].env[...]`` -> ``["companions", 0, "env", None]``."""
    return [m.group(1) if m.group(1) is not None else
            int(m.group(2)) if m.group(2) is not None else None
            for m in _TOKEN.finditer(path)]


def _first_bad_entry(tree: dict[str, object], tokens: list[str | int],
                     message: str) -> str:
    """msgspec writes a mapping's entry as ``[...]``: find which one fails, by
    converting with each entry alone until the same error comes back."""
    entries: Any = tree
    for tok in tokens:
        entries = entries[tok]
    for key in list(entries):
        trial: Any = copy.deepcopy(tree)
        holder = trial
        for tok in tokens[:-1]:
            holder = holder[tok]
        holder[tokens[-1]] = {key: entries[key]}
        try:
            msgspec.convert(trial, SandboxSpec, strict=True)
        except msgspec.ValidationError as e:
            if str(e) == message:
                return str(key)
    return ""


def _explain(message: str, tree: dict[str, object], root: Map, report: Reporter) -> NoReturn:
    """Raise msgspec's first error as a located :class:`SpecError`."""
    m = _AT.fullmatch(message)
    if m is None:  # not expected: msgspec always says where
        report.fail(None, "", message)
    is_key = m.group("key") is not None  # `key` in `$.env`: the key itself is at fault
    tokens: list[str | int] = []
    for tok in [*_tokens(m.group("path")), *([None] if is_key else [])]:
        tokens.append(_first_bad_entry(tree, tokens, message) if tok is None else tok)
    node, path, key_line, left = locate(root, tokens)
    s = Shape(SPEC, {}, None)
    for i, tok in enumerate(tokens[:len(tokens) - len(left)]):
        s = _child(s, tok, key=is_key and i == len(tokens) - 1)
    what = m.group("what")
    missing = re.match(r"Object missing required field `([^`]*)`", what)
    if missing:
        field = fields(s.struct).get(missing.group(1)) if s.struct is not None else None
        why = _why(shape(field.type)) if field is not None else ""
        report.fail(node, join(path, missing.group(1)), f"required field is missing{why}")
    line = key_line if is_key else None
    if left:  # inside a shorthand ("src:/dst"): the shorthand as a whole
        what = "Expected `shorthand`, got `str`"
    report.fail(node, path, _problem(what, s, node), line=line)


def _child(s: Shape, tok: str | int, *, key: bool) -> Shape:
    if s.struct is not None and isinstance(tok, str):
        return field_shape(s.struct, tok) if tok in fields(s.struct) else _ANY
    if key and isinstance(s.type, mi.DictType):
        return shape(s.type.key_type)
    return s.item() or _ANY


def _problem(what: str, s: Shape, node: Node) -> str:
    """msgspec's complaint, said in the spec's terms."""
    got = describe(node)
    t = s.type
    if not (what.startswith("Invalid enum value") or re.match(r"Expected `[^`]*`, got", what)):
        unit = s.extra.get("unit", "")
        if isinstance(t, mi.IntType | mi.FloatType) and t.gt is not None:
            return f"must be more than {t.gt:g}{unit}, got {got}"
        if isinstance(t, mi.IntType | mi.FloatType) and t.ge is not None:
            return f"must be {t.ge:g}{unit} or more, got {got}"
        if isinstance(t, mi.ListType) and t.min_length:
            return "must not be empty"
    problem = f"expected {expected(s)}, got {got}"
    if isinstance(t, mi.LiteralType) and isinstance(node, Scalar) and isinstance(node.value, str):
        problem += suggest(node.value, [str(v) for v in s.choices])
    if isinstance(t, mi.StrType) and not s.description and isinstance(node, Scalar) \
            and node.literal:
        if node.value is None:
            problem += '; write "" for an empty string'
        else:
            problem += f'; quote it ("{node.text}") to mean the text'
    return problem
