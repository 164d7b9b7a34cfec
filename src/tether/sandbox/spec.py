"""Sandbox spec files: strict YAML in, a resolved :class:`SandboxSpec` out.

``tether sandbox create -f spec.yaml --set key=value`` reads a file like
``docs/examples/sandbox.yaml``. Parsing happens in four steps:

1. **Compose** the YAML with PyYAML's safe loader into nodes that remember their
   line. Documents over 1 MiB, anchors and aliases (no "billion laughs"), tags
   other than the standard scalar ones, duplicate keys and nesting deeper than
   64 levels are refused before anything is interpreted.
2. **Overrides.** Each ``--set KEY=VALUE`` either names a param (``NAME`` or
   ``params.NAME``) and replaces its default, or is a field path
   (``resources.memory=1g``, ``env.FOO=bar``, ``companions[0].image=...``,
   ``companions.db.required=false``) that replaces or adds that field. A key that
   is neither is an error naming it.
3. **Params.** ``${params.NAME}`` (or ``${NAME}``) inside any string value is
   replaced by the param's value; ``$${...}`` is a literal ``${...}``. A value
   that is exactly one reference takes the param's value as if written there
   (``cpus: ${params.cpus}`` with default ``2`` is the number 2); a reference
   inside a longer string is text interpolation. Param values are not
   themselves substituted.
4. **Validate** every field strictly. Values written in the file are taken with
   the type YAML gives them: ``PORT: 5432`` in ``env`` is an error (quote it),
   never silently ``"5432"``. Values that come from ``--set`` or a param are
   text, read the way the field needs it (``--set env.PORT=5432`` is the string
   ``"5432"``, ``--set resources.cpus=2`` the number 2).

Every error is a :class:`SpecError` whose message names the place (file and
line, or the ``--set`` item), the key path and what was expected, e.g.
``spec.yaml:12: resources.memory: expected a size like 512m or 2g, got 'lots'``.

Pure: touches the file system only to resolve and check host paths.
"""

from __future__ import annotations

import difflib
import math
import os
import posixpath
import re
import shlex
from collections.abc import Iterable, Sequence
from typing import NoReturn

import yaml
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from tether.model.records import (
    CompanionSpec,
    HealthCheckSpec,
    MountSpec,
    ResourceSpec,
    SandboxSpec,
)

__all__ = [
    "COMPANION_NAME_RE",
    "MAX_SPEC_BYTES",
    "NETWORKS",
    "RUNTIMES",
    "SYSTEM_TARGETS",
    "SpecError",
    "load_spec_file",
    "parse_duration",
    "parse_size",
    "parse_spec",
]

MAX_SPEC_BYTES = 1 << 20
MAX_DEPTH = 64
RUNTIMES = ("auto", "process", "bwrap", "docker")
NETWORKS = ("none", "private", "host")
RESTART_POLICIES = ("never", "always")
MOUNT_MODES = ("ro", "rw")
COMPANION_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
PARAM_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Mount targets that are refused outright.
SYSTEM_TARGETS = frozenset({
    "/", "/proc", "/sys", "/dev", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64",
    "/boot", "/run", "/var/run",
})
#: Mount targets whose every subdirectory is refused as well.
SYSTEM_TREES = ("/proc", "/sys", "/dev")
#: Label keys tether puts on containers and networks itself.
RESERVED_LABEL_PREFIX = "tether."


class SpecError(Exception):
    """A spec that cannot be used. ``str(err)`` is the whole message for people.

    ``path`` is the key path (``companions[1].health.interval``; ``""`` for the
    document as a whole), ``line`` the 1-based line in the file when the problem
    is in the file (``None`` for a ``--set`` item or the file as a whole),
    ``source`` the file name (or the ``--set`` item) and ``problem`` the message
    without the place.
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


# --------------------------------------------------------------------------- nodes


class _Node:
    """A located value. ``line`` is 1-based (None when it did not come from the
    file); ``origin`` is the ``--set`` item it came from; ``note`` explains a
    substitution ("from ${params.mem}")."""

    __slots__ = ("line", "note", "origin")

    def __init__(self, line: int | None, origin: str | None = None) -> None:
        self.line = line
        self.origin = origin
        self.note: str | None = None


class _Scalar(_Node):
    """``value`` is what YAML makes of the text; ``text`` the text itself.
    ``literal`` is true for a scalar written in the file (its YAML type is what
    the user wrote) and false for text from ``--set`` or a param."""

    __slots__ = ("literal", "text", "value")

    def __init__(self, value: object, text: str, line: int | None, *, literal: bool,
                 origin: str | None = None) -> None:
        super().__init__(line, origin)
        self.value = value
        self.text = text
        self.literal = literal


class _Map(_Node):
    __slots__ = ("entries", "key_lines")

    def __init__(self, line: int | None, origin: str | None = None) -> None:
        super().__init__(line, origin)
        self.entries: dict[str, _Node] = {}
        self.key_lines: dict[str, int | None] = {}

    def put(self, key: str, value: _Node, key_line: int | None) -> None:
        self.entries[key] = value
        self.key_lines[key] = key_line


class _Seq(_Node):
    __slots__ = ("items",)

    def __init__(self, line: int | None, origin: str | None = None) -> None:
        super().__init__(line, origin)
        self.items: list[_Node] = []


# ---------------------------------------------------------------------- YAML -> nodes

_TAG = "tag:yaml.org,2002:"
_CONSTRUCTOR = SafeConstructor()
_RESOLVER = Resolver()


class _Refused(yaml.MarkedYAMLError):
    pass


class _Loader(yaml.SafeLoader):
    """The safe loader, refusing anchors, aliases and deep nesting."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Refused(None, None, "anchors and aliases (&name, *name) are not supported; "
                           "write the value out", event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(None, None, f"nested more than {MAX_DEPTH} levels deep",
                               event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _scalar_value(node: yaml.ScalarNode) -> object:
    """What a scalar node means, by its (resolved) tag; ValueError for other tags."""
    tag = node.tag
    if tag == _TAG + "str":
        return node.value
    if tag == _TAG + "null":
        return None
    if tag == _TAG + "bool":
        return _CONSTRUCTOR.construct_yaml_bool(node)
    if tag == _TAG + "int":
        return _CONSTRUCTOR.construct_yaml_int(node)
    if tag == _TAG + "float":
        return _CONSTRUCTOR.construct_yaml_float(node)
    if tag in (_TAG + "timestamp", _TAG + "merge", _TAG + "value"):
        return node.value  # a date, "<<" or "=" to YAML; here it is text
    raise ValueError(tag)


def _text_scalar(text: str, line: int | None = None, origin: str | None = None) -> _Scalar:
    """Text (from ``--set`` or a param) read the way YAML reads a plain scalar."""
    tag = _RESOLVER.resolve(yaml.ScalarNode, text, (True, False))  # type: ignore[no-untyped-call]
    node = yaml.ScalarNode(str(tag), text)
    try:
        value = _scalar_value(node)
    except ValueError:
        value = text
    return _Scalar(value, text, line, literal=False, origin=origin)


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


# ------------------------------------------------------------------------- helpers


_SIMPLE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if not _SIMPLE_KEY.fullmatch(key):
        return f"{path}[{key!r}]"
    return f"{path}.{key}" if path else key


def _suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _describe(node: _Node) -> str:
    if isinstance(node, _Map):
        return "a mapping"
    if isinstance(node, _Seq):
        return "a list"
    assert isinstance(node, _Scalar)
    value = node.value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {node.text}"
    if isinstance(value, int | float):
        return f"the number {node.text}"
    return repr(value)


def _is_null(node: _Node | None) -> bool:
    """Absent, ``null`` in the file, or an empty ``--set`` value: the field's default."""
    return node is None or (isinstance(node, _Scalar) and node.value is None)


def _is_within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


# -------------------------------------------------------------------------- schema


class _Leaf:
    pass


class _Free:
    """A mapping of arbitrary string keys to strings (env, labels)."""


class _Obj:
    def __init__(self, **fields: object) -> None:
        self.fields = fields


class _List:
    def __init__(self, item: object, *, by_name: bool = False) -> None:
        self.item = item
        self.by_name = by_name


_LEAF = _Leaf()
_FREE = _Free()
_HEALTH = _Obj(command=_LEAF, interval=_LEAF, timeout=_LEAF, retries=_LEAF,
               start_period=_LEAF)
_MOUNT = _Obj(source=_LEAF, target=_LEAF, mode=_LEAF)
_COMPANION = _Obj(name=_LEAF, image=_LEAF, env=_FREE, command=_LEAF, health=_HEALTH,
                  required=_LEAF)
_RESOURCES = _Obj(memory=_LEAF, cpus=_LEAF, pids=_LEAF)
_TOP = _Obj(runtime=_LEAF, workspace=_LEAF, workspace_target=_LEAF, image=_LEAF,
            mounts=_List(_MOUNT), env=_FREE, network=_LEAF, resources=_RESOURCES,
            companions=_List(_COMPANION, by_name=True), idle_timeout=_LEAF, ttl=_LEAF,
            labels=_FREE, params=_FREE, restart=_LEAF)


# ------------------------------------------------------------------------- parsing

_SIZE_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(?:([kmgt])(?:i?b)?|b)?", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d)")
_DURATION_RE = re.compile(rf"(?:{_DURATION_PART.pattern})+")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


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


class _Param:
    __slots__ = ("has_value", "name", "note", "text")

    def __init__(self, name: str, text: str, has_value: bool, note: str | None) -> None:
        self.name = name
        self.text = text
        self.has_value = has_value
        self.note = note


class _Parser:
    def __init__(self, source: str, base_dir: str, tether_home: str | None) -> None:
        self.source = source
        self.base_dir = base_dir
        self.tether_home = os.path.realpath(tether_home) if tether_home else None
        self.params: dict[str, _Param] = {}

    # ----------------------------------------------------------------- errors

    def fail(self, node: _Node | None, path: str, problem: str, *,
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
        else:
            where = source = self.source
        message = f"{where}: {path}: {problem}" if path else f"{where}: {problem}"
        raise SpecError(message, path=path, line=line, source=source, problem=problem)

    # ---------------------------------------------------------- YAML -> nodes

    def compose(self, text: str) -> _Map:
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_SPEC_BYTES:
            self.fail(None, "", f"the spec is {size} bytes; the limit is 1 MiB "
                      f"({MAX_SPEC_BYTES} bytes)")
        loader = _Loader(text)
        try:
            root = loader.get_single_node()
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            line = int(mark.line) + 1 if mark is not None else None
            if isinstance(e, _Refused):
                problem = str(e.problem)
            else:
                problem = "invalid YAML: " + ", ".join(p for p in (e.context, e.problem) if p)
            self.fail(None, "", problem, line=line)
        except yaml.reader.ReaderError as e:
            line = text[: int(e.position)].count("\n") + 1
            self.fail(None, "", f"invalid YAML: {e.reason} ({e.character!r})", line=line)
        except yaml.YAMLError as e:
            self.fail(None, "", f"invalid YAML: {e}")
        finally:
            loader.dispose()
        if root is None:
            return _Map(1)
        node = self.convert(root, "")
        if not isinstance(node, _Map):
            self.fail(node, "", f"expected a mapping of spec fields at the top level, got "
                      f"{_describe(node)}")
        return node

    def convert(self, node: yaml.Node, path: str) -> _Node:
        line = _line(node)
        if isinstance(node, yaml.ScalarNode):
            try:
                value = _scalar_value(node)
            except ValueError:
                self.fail(None, path, f"YAML tag {node.tag!r} is not supported", line=line)
            return _Scalar(value, str(node.value), line, literal=True)
        if isinstance(node, yaml.SequenceNode):
            if node.tag != _TAG + "seq":
                self.fail(None, path, f"YAML tag {node.tag!r} is not supported", line=line)
            seq = _Seq(line)
            for i, item in enumerate(node.value):
                seq.items.append(self.convert(item, _join(path, i)))
            return seq
        assert isinstance(node, yaml.MappingNode)
        if node.tag != _TAG + "map":
            self.fail(None, path, f"YAML tag {node.tag!r} is not supported", line=line)
        out = _Map(line)
        for knode, vnode in node.value:
            kline = _line(knode)
            if not isinstance(knode, yaml.ScalarNode):
                self.fail(None, path, "a key must be a plain string", line=kline)
            if knode.tag == _TAG + "merge":
                self.fail(None, path, "merge keys (<<) are not supported", line=kline)
            try:
                key = _scalar_value(knode)
            except ValueError:
                self.fail(None, path, f"YAML tag {knode.tag!r} is not supported", line=kline)
            if not isinstance(key, str):
                shown = "null" if key is None else str(knode.value)
                self.fail(None, path, f"keys must be strings, got {shown}; quote it",
                          line=kline)
            kpath = _join(path, key)
            if key in out.entries:
                self.fail(None, kpath, f"duplicate key (first at line {out.key_lines[key]})",
                          line=kline)
            out.put(key, self.convert(vnode, kpath), kline)
        return out

    # ---------------------------------------------------------------- params

    def read_params(self, root: _Map) -> None:
        node = root.entries.get("params")
        if _is_null(node):
            return
        assert node is not None
        if not isinstance(node, _Map):
            self.fail(node, "params", f"expected a mapping of name: default, got "
                      f"{_describe(node)}")
        for name, value in node.entries.items():
            path = _join("params", name)
            line = node.key_lines[name]
            if not PARAM_NAME_RE.fullmatch(name):
                self.fail(value, path, "a param name is letters, digits and _, not starting "
                          "with a digit", line=line)
            if not isinstance(value, _Scalar):
                self.fail(value, path, f"expected a scalar default (string, number or "
                          f"boolean; null for none), got {_describe(value)}")
            self.params[name] = _Param(name, value.text, value.value is not None, None)

    def apply_overrides(self, root: _Map, overrides: Sequence[str]) -> None:
        for item in overrides:
            origin = f"--set {item}"
            key, eq, value = item.partition("=")
            key = key.strip()
            if not eq or not key:
                raise SpecError(f"{origin}: expected KEY=VALUE", source=origin,
                                problem="expected KEY=VALUE")
            pname = key[len("params."):] if key.startswith("params.") else key
            if pname in self.params:
                self.params[pname] = _Param(pname, value, True, f"set by {origin}")
                continue
            if key.startswith("params."):
                self._set_error(origin, key, f"unknown param{_suggest(pname, self.params)}"
                                f"; the file declares: {', '.join(self.params) or 'none'}")
            self._set_path(root, key, _text_scalar(value, origin=origin), origin)

    def _set_error(self, origin: str, key: str, problem: str) -> NoReturn:
        raise SpecError(f"{origin}: {key}: {problem}", path=key, source=origin,
                        problem=problem)

    def _set_path(self, root: _Map, key: str, value: _Scalar, origin: str) -> None:
        tokens: list[str | int] = []
        for part in key.split("."):
            m = re.fullmatch(r"([^\[\]]*)((?:\[\d+\])*)", part)
            if not m or not (m.group(1) or m.group(2)):
                self._set_error(origin, key, "malformed key; write a param name or a field "
                                "path like resources.memory, env.NAME or companions[0].image")
            if m.group(1):
                tokens.append(m.group(1))
            tokens += [int(n) for n in re.findall(r"\d+", m.group(2))]
        node: _Node = root
        schema: object = _TOP
        path = ""
        for i, tok in enumerate(tokens):
            last = i == len(tokens) - 1
            if isinstance(schema, _Free):
                assert isinstance(node, _Map)
                name = ".".join(str(t) for t in tokens[i:])
                node.put(name, value, None)
                return
            if isinstance(schema, _Obj):
                assert isinstance(node, _Map)
                fields = [f for f in schema.fields if not (schema is _TOP and f == "params")]
                if not isinstance(tok, str) or tok not in fields:
                    shown = _join(path, tok)
                    extra = ""
                    if schema is _TOP:
                        choices = [*fields, *self.params]
                        params = ", ".join(self.params) or "none"
                        extra = (f"; --set takes a param name (params: {params}) or a "
                                 "spec field path")
                    else:
                        choices = fields
                    self._set_error(origin, shown, f"unknown key"
                                    f"{_suggest(str(tok), choices)}{extra}")
                path = _join(path, tok)
                sub = schema.fields[tok]
                if not last and isinstance(sub, _Leaf):
                    self._set_error(origin, key, f"{path} is a single value; it has no "
                                    f"field {tokens[i + 1]!r}")
                if last:
                    node.put(tok, value, None)
                    return
                child = node.entries.get(tok)
                if child is None or _is_null(child):
                    if isinstance(sub, _List):
                        self._set_error(origin, key, f"{path} has no items to set")
                    child = _Map(None, origin)
                    node.put(tok, child, None)
                elif not isinstance(child, _Seq if isinstance(sub, _List) else _Map):
                    self._set_error(origin, key, f"{path} is {_describe(child)} in the file")
                node, schema = child, sub
                continue
            assert isinstance(schema, _List) and isinstance(node, _Seq)
            if isinstance(tok, int):
                if tok >= len(node.items):
                    self._set_error(origin, key, f"{path} has {len(node.items)} item(s); "
                                    f"there is no {_join(path, tok)}")
                index = tok
            elif schema.by_name:
                names = [_item_name(it) for it in node.items]
                if tok not in names:
                    known = ", ".join(n for n in names if n) or "none"
                    self._set_error(origin, key, f"no item named {tok!r} in {path} "
                                    f"(names: {known}){_suggest(tok, filter(None, names))}")
                index = names.index(tok)
            else:
                self._set_error(origin, key, f"{path} items are addressed by index, e.g. "
                                f"{path}[0]")
            path = _join(path, index)
            if last:
                node.items[index] = value
                return
            child = node.items[index]
            if not isinstance(child, _Map):
                self._set_error(origin, key, f"{path} is {_describe(child)} in the file, "
                                "not a mapping")
            node, schema = child, schema.item

    def substitute(self, node: _Node, path: str) -> _Node:
        if isinstance(node, _Map):
            for key, value in node.entries.items():
                if path == "" and key == "params":
                    continue
                node.entries[key] = self.substitute(value, _join(path, key))
            return node
        if isinstance(node, _Seq):
            node.items = [self.substitute(v, _join(path, i)) for i, v in enumerate(node.items)]
            return node
        assert isinstance(node, _Scalar)
        if not isinstance(node.value, str) or "${" not in node.value:
            return node
        text = node.value
        whole = re.fullmatch(r"\$\{([^}]*)\}", text)
        if whole:
            param = self._param(node, path, whole.group(1))
            out = _text_scalar(param.text, node.line, node.origin)
            out.note = f"from ${{{whole.group(1)}}}" + (f", {param.note}" if param.note else "")
            return out
        parts: list[str] = []
        refs: list[str] = []
        pos = 0
        for m in re.finditer(r"\$?\$\{", text):
            if m.start() < pos:
                continue
            parts.append(text[pos:m.start()])
            if m.group(0) == "$${":
                parts.append("${")
                pos = m.end()
                continue
            end = text.find("}", m.end())
            if end < 0:
                self.fail(node, path, f"unterminated ${{ in {text!r}; write $${{ for a "
                          "literal ${")
            parts.append(self._param(node, path, text[m.end():end]).text)
            refs.append("${" + text[m.end():end] + "}")
            pos = end + 1
        parts.append(text[pos:])
        if not refs:  # only $${ escapes: still the string the file says
            return _Scalar("".join(parts), "".join(parts), node.line, literal=node.literal,
                           origin=node.origin)
        out = _text_scalar("".join(parts), node.line, node.origin)
        out.note = "from " + ", ".join(refs)
        return out

    def _param(self, node: _Node, path: str, ref: str) -> _Param:
        name = ref[len("params."):] if ref.startswith("params.") else ref
        if not PARAM_NAME_RE.fullmatch(name):
            self.fail(node, path, f"bad reference ${{{ref}}}: expected ${{params.NAME}} or "
                      "${NAME}; write $${...} for a literal ${...}")
        param = self.params.get(name)
        if param is None:
            declared = ", ".join(self.params) or "none"
            self.fail(node, path, f"unknown param {name!r} in ${{{ref}}}"
                      f"{_suggest(name, self.params)}; declare it under params "
                      f"(declared: {declared}), or write $${{...}} for a literal ${{...}}")
        if not param.has_value:
            self.fail(node, path, f"param {name!r} has no default; pass --set {name}=VALUE")
        return param

    # ------------------------------------------------------------ validation

    def keys(self, node: _Map, path: str, schema: _Obj) -> None:
        for key in node.entries:
            if key not in schema.fields:
                fields = list(schema.fields)
                hint = _suggest(key, fields) or f"; expected one of: {', '.join(fields)}"
                self.fail(node.entries[key], _join(path, key), f"unknown key{hint}",
                          line=node.key_lines[key])

    def mapping(self, node: _Node, path: str, what: str) -> _Map:
        if not isinstance(node, _Map):
            self.fail(node, path, f"expected {what}, got {_describe(node)}")
        return node

    def required(self, node: _Map, path: str, key: str, why: str) -> _Node:
        value = node.entries.get(key)
        if value is None:
            self.fail(node, _join(path, key), f"required field is missing ({why})")
        if _is_null(value):
            self.fail(value, _join(path, key), f"required field is empty ({why})")
        return value

    def string(self, node: _Node, path: str, *, empty: bool = True) -> str:
        if not isinstance(node, _Scalar):
            self.fail(node, path, f"expected a string, got {_describe(node)}")
        if isinstance(node.value, str):
            value = node.value
        elif not node.literal:
            value = node.text
        elif node.value is None:
            self.fail(node, path, "expected a string, got null; write \"\" for an empty string")
        else:
            self.fail(node, path, f"expected a string, got {_describe(node)}; quote it "
                      f"(\"{node.text}\") to mean the text")
        if "\0" in value:
            self.fail(node, path, "contains a NUL character")
        if not empty and not value.strip():
            self.fail(node, path, "must not be empty")
        return value

    def enum(self, node: _Node, path: str, choices: Sequence[str]) -> str:
        text: str | None = None
        if isinstance(node, _Scalar):
            if isinstance(node.value, str):
                text = node.value
            elif not node.literal:
                text = node.text
        if text is None:
            self.fail(node, path, f"expected one of {', '.join(choices)}, got "
                      f"{_describe(node)}")
        if text not in choices:
            self.fail(node, path, f"expected one of {', '.join(choices)}, got {text!r}"
                      f"{_suggest(text, choices)}")
        return text

    def boolean(self, node: _Node, path: str) -> bool:
        if not (isinstance(node, _Scalar) and isinstance(node.value, bool)):
            self.fail(node, path, f"expected true or false, got {_describe(node)}")
        return node.value

    def number(self, node: _Node, path: str, *, integer: bool, what: str) -> float:
        value = node.value if isinstance(node, _Scalar) else None
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or (integer and not isinstance(value, int))):
            self.fail(node, path, f"expected {what}, got {_describe(node)}")
        if not math.isfinite(value) or value <= 0:
            self.fail(node, path, f"expected {what}, got {_describe(node)}")
        return value

    def size(self, node: _Node, path: str) -> int:
        expected = "expected a size like 512m or 2g (or a number of bytes)"
        value: int | None = None
        if isinstance(node, _Scalar):
            if isinstance(node.value, int) and not isinstance(node.value, bool):
                value = node.value
            elif isinstance(node.value, str):
                value = parse_size(node.value)
        if value is None:
            self.fail(node, path, f"{expected}, got {_describe(node)}")
        if value <= 0:
            self.fail(node, path, f"must be more than 0 bytes, got {_describe(node)}")
        return value

    def duration(self, node: _Node, path: str, *, zero: bool = False) -> float:
        expected = "expected a duration like 500ms, 30s, 5m or 1h (or a number of seconds)"
        value: float | None = None
        if isinstance(node, _Scalar):
            if isinstance(node.value, int | float) and not isinstance(node.value, bool):
                value = float(node.value)
            elif isinstance(node.value, str):
                value = parse_duration(node.value)
        if value is None or not math.isfinite(value):
            self.fail(node, path, f"{expected}, got {_describe(node)}")
        if value < 0 or (value == 0 and not zero):
            self.fail(node, path, f"must be {'0 or more' if zero else 'more than 0'}, got "
                      f"{_describe(node)}")
        return value

    def str_map(self, node: _Node, path: str, *, env: bool) -> dict[str, str]:
        if _is_null(node):
            return {}
        m = self.mapping(node, path, "a mapping of NAME: value")
        out: dict[str, str] = {}
        for key, value in m.entries.items():
            kpath = _join(path, key)
            line = m.key_lines[key]
            if not key or "\0" in key:
                self.fail(value, kpath, "a name must be non-empty text", line=line)
            if env and "=" in key:
                self.fail(value, kpath, "an environment variable name cannot contain '='",
                          line=line)
            if not env and key.startswith(RESERVED_LABEL_PREFIX):
                self.fail(value, kpath, f"label keys starting with {RESERVED_LABEL_PREFIX!r} "
                          "are reserved for tether's own", line=line)
            out[key] = self.string(value, kpath)
        return out

    def command(self, node: _Node, path: str, *, shell: bool) -> list[str]:
        if isinstance(node, _Seq):
            argv = [self.string(item, _join(path, i)) for i, item in enumerate(node.items)]
        elif isinstance(node, _Scalar) and (isinstance(node.value, str) or not node.literal):
            text = self.string(node, path)
            if shell:
                argv = ["sh", "-c", text] if text.strip() else []
            else:
                try:
                    argv = shlex.split(text)
                except ValueError as e:
                    self.fail(node, path, f"cannot split {text!r} into words: {e}; write "
                              "a list instead")
        else:
            self.fail(node, path, f"expected a command (a list of strings, or a string), got "
                      f"{_describe(node)}")
        if not argv:
            self.fail(node, path, "the command is empty")
        return argv

    def image(self, node: _Node, path: str) -> str:
        value = self.string(node, path, empty=False)
        if any(c.isspace() for c in value):
            self.fail(node, path, f"an image reference has no spaces, got {value!r}")
        return value

    # ------------------------------------------------------------- host paths

    def host_path(self, node: _Node, path: str, text: str, what: str) -> str:
        if not text:
            self.fail(node, path, f"the {what} is empty")
        raw = os.path.join(self.base_dir, os.path.expanduser(text))
        try:
            real = os.path.realpath(raw, strict=True)
        except OSError as e:
            where = ("" if os.path.isabs(os.path.expanduser(text))
                     else f" (resolved to {os.path.normpath(raw)})")
            if isinstance(e, FileNotFoundError) and not os.path.lexists(raw):
                self.fail(node, path, f"{what} {text!r} does not exist{where}")
            self.fail(node, path, f"{what} {text!r} cannot be resolved{where}: "
                      f"{e.strerror or e}")
        if self.tether_home is not None and (_is_within(real, self.tether_home)
                                             or _is_within(self.tether_home, real)):
            self.fail(node, path, f"{what} {real} would expose tether's own state "
                      f"(tether home {self.tether_home}); mount something else")
        return real

    def target(self, node: _Node, path: str, text: str) -> str:
        if not text.startswith("/"):
            self.fail(node, path, f"the target must be an absolute path inside the sandbox, "
                      f"got {text!r} (relative targets are refused)")
        norm = posixpath.normpath(text)
        if norm.startswith("//"):
            norm = "/" + norm.lstrip("/")
        if norm in SYSTEM_TARGETS or any(_is_within(norm, t) for t in SYSTEM_TREES):
            shown = repr(text) if norm == text else f"{text!r} (that is {norm})"
            self.fail(node, path, f"target {shown} is a system path; mounting over it is "
                      "refused")
        return norm

    # ----------------------------------------------------------------- fields

    def mount(self, node: _Node, path: str) -> MountSpec:
        if isinstance(node, _Scalar) and (isinstance(node.value, str) or not node.literal):
            text = self.string(node, path)
            parts = text.split(":")
            mode = "ro"
            if len(parts) >= 3 and parts[-1] in MOUNT_MODES:
                mode = parts.pop()
            if len(parts) != 2 or not parts[0] or not parts[1]:
                self.fail(node, path, f"expected SOURCE:TARGET[:ro|rw], got {text!r}")
            source = self.host_path(node, path, parts[0], "mount source")
            return MountSpec(source=source, target=self.target(node, path, parts[1]), mode=mode)
        if not isinstance(node, _Map):
            self.fail(node, path, f"expected a mount ({{source, target, mode}} or "
                      f"\"SOURCE:TARGET[:ro|rw]\"), got {_describe(node)}")
        self.keys(node, path, _MOUNT)
        snode = self.required(node, path, "source", "the host path to mount")
        spath = _join(path, "source")
        source = self.host_path(snode, spath, self.string(snode, spath), "mount source")
        tnode = node.entries.get("target")
        if tnode is None or _is_null(tnode):  # the same path inside as outside
            target = self.target(snode, spath, source)
        else:
            tpath = _join(path, "target")
            target = self.target(tnode, tpath, self.string(tnode, tpath))
        mnode = node.entries.get("mode")
        mode = "ro"
        if mnode is not None and not _is_null(mnode):
            mode = self.enum(mnode, _join(path, "mode"), MOUNT_MODES)
        return MountSpec(source=source, target=target, mode=mode)

    def resources(self, node: _Node) -> ResourceSpec | None:
        if _is_null(node):
            return None
        m = self.mapping(node, "resources", "a mapping of memory, cpus and pids")
        self.keys(m, "resources", _RESOURCES)
        out = ResourceSpec()
        if not _is_null(v := m.entries.get("memory")):
            assert v is not None
            out.memory = self.size(v, "resources.memory")
        if not _is_null(v := m.entries.get("cpus")):
            assert v is not None
            out.cpus = float(self.number(v, "resources.cpus", integer=False,
                                         what="a number of CPUs more than 0, like 1.5"))
        if not _is_null(v := m.entries.get("pids")):
            assert v is not None
            out.pids = int(self.number(v, "resources.pids", integer=True,
                                       what="a whole number of processes more than 0"))
        if out.memory is None and out.cpus is None and out.pids is None:
            return None
        return out

    def health(self, node: _Node, path: str) -> HealthCheckSpec | None:
        if _is_null(node):
            return None
        m = self.mapping(node, path, "a health check mapping (command, interval, timeout, "
                         "retries, start_period)")
        self.keys(m, path, _HEALTH)
        cnode = self.required(m, path, "command", "what to run; healthy when it exits 0")
        out = HealthCheckSpec(command=self.command(cnode, _join(path, "command"), shell=True))
        for key in ("interval", "timeout", "start_period"):
            if not _is_null(v := m.entries.get(key)):
                assert v is not None
                setattr(out, key, self.duration(v, _join(path, key),
                                                zero=key == "start_period"))
        if not _is_null(v := m.entries.get("retries")):
            assert v is not None
            out.retries = int(self.number(v, _join(path, "retries"), integer=True,
                                          what="a whole number of retries more than 0"))
        return out

    def companion(self, node: _Node, path: str) -> CompanionSpec:
        m = self.mapping(node, path, "a companion mapping (name, image, ...)")
        self.keys(m, path, _COMPANION)
        why = "every companion needs a name and an image"
        nnode = self.required(m, path, "name", why)
        name = self.string(nnode, _join(path, "name"))
        if not COMPANION_NAME_RE.fullmatch(name):
            self.fail(nnode, _join(path, "name"), f"expected a name of lowercase letters, "
                      f"digits, '_', '.' and '-' (starting with a letter or digit, at most 63 "
                      f"characters), got {name!r}")
        inode = self.required(m, path, "image", why)
        out = CompanionSpec(name=name, image=self.image(inode, _join(path, "image")))
        if not _is_null(v := m.entries.get("env")):
            assert v is not None
            out.env = self.str_map(v, _join(path, "env"), env=True)
        if not _is_null(v := m.entries.get("command")):
            assert v is not None
            out.command = self.command(v, _join(path, "command"), shell=False)
        if not _is_null(v := m.entries.get("health")):
            assert v is not None
            out.health = self.health(v, _join(path, "health"))
        if not _is_null(v := m.entries.get("required")):
            assert v is not None
            out.required = self.boolean(v, _join(path, "required"))
        return out

    def spec(self, root: _Map) -> SandboxSpec:
        self.keys(root, "", _TOP)
        e = root.entries

        def get(key: str) -> _Node | None:
            v = e.get(key)
            return None if _is_null(v) else v

        out = SandboxSpec(runtime="auto")
        if (v := get("runtime")) is not None:
            out.runtime = self.enum(v, "runtime", RUNTIMES)
        if (v := get("image")) is not None:
            if out.runtime != "docker":
                self.fail(v, "image", f"an image is only used by runtime: docker (runtime is "
                          f"{out.runtime!r})")
            out.image = self.image(v, "image")
        elif out.runtime == "docker":
            self.fail(e["runtime"], "image", "required field is missing (runtime: docker "
                      "needs an image)")
        targets: dict[str, str] = {}
        if (v := get("workspace")) is not None:
            out.workspace = self.host_path(v, "workspace", self.string(v, "workspace"),
                                           "workspace")
            if not os.path.isdir(out.workspace):
                self.fail(v, "workspace", f"workspace {out.workspace} is not a directory")
        if (v := get("workspace_target")) is not None:
            if out.workspace is None:
                self.fail(v, "workspace_target", "workspace_target needs a workspace")
            out.workspace_target = self.target(v, "workspace_target",
                                               self.string(v, "workspace_target"))
        if out.workspace is not None:
            if out.workspace_target is None:  # the same path inside as outside
                wnode = e["workspace"]
                targets[self.target(wnode, "workspace", out.workspace)] = "the workspace"
            else:
                targets[out.workspace_target] = "the workspace"
        if (v := get("mounts")) is not None:
            if not isinstance(v, _Seq):
                self.fail(v, "mounts", f"expected a list of mounts, got {_describe(v)}")
            for i, item in enumerate(v.items):
                mpath = _join("mounts", i)
                mount = self.mount(item, mpath)
                if mount.target in targets:
                    self.fail(item, mpath, f"target {mount.target} is already used by "
                              f"{targets[mount.target]}")
                targets[mount.target] = mpath
                out.mounts.append(mount)
        if (v := get("env")) is not None:
            out.env = self.str_map(v, "env", env=True)
        if (v := get("network")) is not None:
            out.network = self.enum(v, "network", NETWORKS)
        if (v := get("resources")) is not None:
            out.resources = self.resources(v)
        if (v := get("companions")) is not None:
            if not isinstance(v, _Seq):
                self.fail(v, "companions", f"expected a list of companions, got "
                          f"{_describe(v)}")
            if v.items and out.runtime != "docker":
                self.fail(v, "companions", f"companions need runtime: docker (runtime is "
                          f"{out.runtime!r})", line=root.key_lines["companions"])
            seen: dict[str, str] = {}
            for i, item in enumerate(v.items):
                cpath = _join("companions", i)
                companion = self.companion(item, cpath)
                if companion.name in seen:
                    assert isinstance(item, _Map)
                    self.fail(item.entries["name"], _join(cpath, "name"),
                              f"duplicate companion name {companion.name!r} (also "
                              f"{seen[companion.name]})")
                seen[companion.name] = cpath
                out.companions.append(companion)
            if out.companions and out.network == "none":
                self.fail(get("network"), "network", "network: none cuts the sandbox off "
                          "from its companions; use private")
        for key in ("idle_timeout", "ttl"):
            if (v := get(key)) is not None:
                setattr(out, key, self.duration(v, key))
        if (v := get("labels")) is not None:
            out.labels = self.str_map(v, "labels", env=False)
        if (v := get("restart")) is not None:
            out.restart = self.enum(v, "restart", RESTART_POLICIES)
            if out.restart != "never" and out.runtime != "docker":
                self.fail(v, "restart", f"restart needs runtime: docker (runtime is "
                          f"{out.runtime!r}); other runtimes have no long-lived container")
        return out


def _item_name(node: _Node) -> str | None:
    if isinstance(node, _Map):
        name = node.entries.get("name")
        if isinstance(name, _Scalar):
            return name.text
    return None


# ---------------------------------------------------------------------- public API


def parse_spec(text: str, *, source: str = "<spec>", overrides: Sequence[str] = (),
               tether_home: str | None = None, base_dir: str | None = None) -> SandboxSpec:
    """Parse a YAML sandbox spec into the resolved :class:`SandboxSpec` the store keeps.

    ``source`` names the file in messages; ``overrides`` are ``--set KEY=VALUE``
    items; ``tether_home``, when given, may not be exposed by the workspace or a
    mount; relative host paths are resolved against ``base_dir`` (default: the
    current directory). ``runtime`` is kept as written (``"auto"`` when absent):
    the daemon resolves it. Raises :class:`SpecError`.
    """
    parser = _Parser(source, os.path.abspath(base_dir or os.getcwd()), tether_home)
    root = parser.compose(text)
    parser.read_params(root)
    parser.apply_overrides(root, overrides)
    parser.substitute(root, "")
    return parser.spec(root)


def load_spec_file(path: str | os.PathLike[str], overrides: Sequence[str] = (),
                   tether_home: str | None = None) -> SandboxSpec:
    """:func:`parse_spec` on a file; relative host paths are relative to its directory."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            data = f.read(MAX_SPEC_BYTES + 1)
    except OSError as e:
        problem = f"cannot read the spec: {e.strerror or e}"
        raise SpecError(f"{name}: {problem}", source=name, problem=problem) from None
    if len(data) > MAX_SPEC_BYTES:
        problem = f"the spec is over 1 MiB ({MAX_SPEC_BYTES} bytes)"
        raise SpecError(f"{name}: {problem}", source=name, problem=problem)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        problem = "the spec is not UTF-8 text"
        raise SpecError(f"{name}:{line}: {problem}", line=line, source=name,
                        problem=problem) from None
    return parse_spec(text, source=name, overrides=overrides, tether_home=tether_home,
                      base_dir=os.path.dirname(os.path.abspath(name)))
