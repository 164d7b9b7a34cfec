"""Params and ``--set`` overrides, applied to the located tree before conversion.

Each ``--set KEY=VALUE`` either names a param (``NAME`` or ``params.NAME``) and
replaces its default, or is a field path (``resources.memory=1g``,
``env.FOO=bar``, ``companions[0].image=...``, ``companions.db.required=false``)
that replaces or adds that field; the paths follow the records' fields. Then
``${params.NAME}`` (or ``${NAME}``) inside any string value is replaced by the
param's value and ``$${...}`` is a literal ``${...}``. A value that is exactly one
reference takes the param's value as text read the way the field needs it
(``cpus: ${params.cpus}`` with default ``2`` is the number 2); a reference inside
a longer string is text interpolation. Param values are not substituted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NoReturn

import msgspec.inspect as mi

from tether.spec.nodes import (
    Map,
    Node,
    Reporter,
    Scalar,
    Seq,
    SpecError,
    describe,
    is_null,
    join,
    suggest,
)
from tether.spec.schema import SPEC, Shape, fields, shape
from tether.spec.yamlfile import text_scalar

__all__ = ["Params"]

PARAM_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Param:
    __slots__ = ("has_value", "name", "note", "text")

    def __init__(self, name: str, text: str, has_value: bool, note: str | None) -> None:
        self.name = name
        self.text = text
        self.has_value = has_value
        self.note = note


def _set_error(origin: str, key: str, problem: str) -> NoReturn:
    raise SpecError(f"{origin}: {key}: {problem}", path=key, source=origin, problem=problem)


def _item_name(node: Node) -> str | None:
    if isinstance(node, Map):
        name = node.entries.get("name")
        if isinstance(name, Scalar):
            return name.text
    return None


class Params:
    """The spec's declared params, as ``--set`` leaves them."""

    def __init__(self, report: Reporter) -> None:
        self.report = report
        self.params: dict[str, _Param] = {}

    def read(self, root: Map) -> None:
        """Take the declarations (and defaults) under ``params:`` out of the tree."""
        node = root.entries.pop("params", None)
        root.key_lines.pop("params", None)
        if is_null(node):
            return
        assert node is not None
        if not isinstance(node, Map):
            self.report.fail(node, "params", f"expected a mapping of name: default, got "
                             f"{describe(node)}")
        for name, value in node.entries.items():
            path = join("params", name)
            line = node.key_lines[name]
            if not PARAM_NAME_RE.fullmatch(name):
                self.report.fail(value, path, "a param name is letters, digits and _, not "
                                 "starting with a digit", line=line)
            if not isinstance(value, Scalar):
                self.report.fail(value, path, f"expected a scalar default (string, number or "
                                 f"boolean; null for none), got {describe(value)}")
            self.params[name] = _Param(name, value.text, value.value is not None, None)

    def apply(self, root: Map, overrides: Sequence[str]) -> None:
        """Apply ``--set`` items in order (a later one wins)."""
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
                _set_error(origin, key, f"unknown param{suggest(pname, self.params)}"
                           f"; the spec declares: {', '.join(self.params) or 'none'}")
            self._set_path(root, key, text_scalar(value, origin=origin), origin)

    def _set_path(self, root: Map, key: str, value: Scalar, origin: str) -> None:
        tokens: list[str | int] = []
        for part in key.split("."):
            m = re.fullmatch(r"([^\[\]]*)((?:\[\d+\])*)", part)
            if not m or not (m.group(1) or m.group(2)):
                _set_error(origin, key, "malformed key; write a param name or a field "
                           "path like resources.memory, env.NAME or companions[0].image")
            if m.group(1):
                tokens.append(m.group(1))
            tokens += [int(n) for n in re.findall(r"\d+", m.group(2))]
        node: Node = root
        at = Shape(SPEC, {}, None)
        path = ""
        for i, tok in enumerate(tokens):
            last = i == len(tokens) - 1
            if isinstance(at.type, mi.DictType):
                assert isinstance(node, Map)
                node.put(".".join(str(t) for t in tokens[i:]), value, None)
                return
            if (struct := at.struct) is not None:
                assert isinstance(node, Map)
                known = fields(struct)
                if not isinstance(tok, str) or tok not in known:
                    extra = ""
                    choices = list(known)
                    if struct is SPEC:
                        choices += list(self.params)
                        extra = (f"; --set takes a param name (params: "
                                 f"{', '.join(self.params) or 'none'}) or a spec field path")
                    _set_error(origin, join(path, tok), f"unknown key"
                               f"{suggest(str(tok), choices)}{extra}")
                path = join(path, tok)
                sub = shape(known[tok].type)
                if not last and sub.is_leaf():
                    _set_error(origin, key, f"{path} is a single value; it has no field "
                               f"{tokens[i + 1]!r}")
                if last:
                    node.put(tok, value, None)
                    return
                is_list = isinstance(sub.type, mi.ListType)
                child = node.entries.get(tok)
                if child is None or is_null(child):
                    if is_list:
                        _set_error(origin, key, f"{path} has no items to set")
                    child = Map(None, origin)
                    node.put(tok, child, None)
                elif not isinstance(child, Seq if is_list else Map):
                    _set_error(origin, key, f"{path} is {describe(child)} in the spec")
                node, at = child, sub
                continue
            item = at.item()
            assert item is not None and item.struct is not None and isinstance(node, Seq)
            if isinstance(tok, int):
                if tok >= len(node.items):
                    _set_error(origin, key, f"{path} has {len(node.items)} item(s); "
                               f"there is no {join(path, tok)}")
                index = tok
            elif "name" in fields(item.struct):
                names = [_item_name(it) for it in node.items]
                if tok not in names:
                    known_names = ", ".join(n for n in names if n) or "none"
                    _set_error(origin, key, f"no item named {tok!r} in {path} "
                               f"(names: {known_names}){suggest(tok, filter(None, names))}")
                index = names.index(tok)
            else:
                _set_error(origin, key, f"{path} items are addressed by index, e.g. "
                           f"{path}[0]")
            path = join(path, index)
            if last:
                node.items[index] = value
                return
            child = node.items[index]
            if not isinstance(child, Map):
                _set_error(origin, key, f"{path} is {describe(child)} in the spec, "
                           "not a mapping")
            node, at = child, item

    def substitute(self, node: Node, path: str = "") -> Node:
        """Replace ``${...}`` references in every string value under ``node``."""
        if isinstance(node, Map):
            for key, value in node.entries.items():
                node.entries[key] = self.substitute(value, join(path, key))
            return node
        if isinstance(node, Seq):
            node.items = [self.substitute(v, join(path, i)) for i, v in enumerate(node.items)]
            return node
        assert isinstance(node, Scalar)
        if not isinstance(node.value, str) or "${" not in node.value:
            return node
        text = node.value
        whole = re.fullmatch(r"\$\{([^}]*)\}", text)
        if whole:
            param = self._param(node, path, whole.group(1))
            out = text_scalar(param.text, node.line, node.origin)
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
                self.report.fail(node, path, f"unterminated ${{ in {text!r}; write $${{ for "
                                 "a literal ${")
            parts.append(self._param(node, path, text[m.end():end]).text)
            refs.append("${" + text[m.end():end] + "}")
            pos = end + 1
        parts.append(text[pos:])
        if not refs:  # only $${ escapes: still the string the spec says
            return Scalar("".join(parts), "".join(parts), node.line, literal=node.literal,
                          origin=node.origin)
        out = text_scalar("".join(parts), node.line, node.origin)
        out.note = "from " + ", ".join(refs)
        return out

    def _param(self, node: Node, path: str, ref: str) -> _Param:
        name = ref[len("params."):] if ref.startswith("params.") else ref
        if not PARAM_NAME_RE.fullmatch(name):
            self.report.fail(node, path, f"bad reference ${{{ref}}}: expected "
                             "${params.NAME} or ${NAME}; write $${...} for a literal ${...}")
        param = self.params.get(name)
        if param is None:
            declared = ", ".join(self.params) or "none"
            self.report.fail(node, path, f"unknown param {name!r} in ${{{ref}}}"
                             f"{suggest(name, self.params)}; declare it under params "
                             f"(declared: {declared}), or write $${{...}} for a literal "
                             "${...}")
        if not param.has_value:
            self.report.fail(node, path, f"param {name!r} has no default; pass --set "
                             f"{name}=VALUE")
        return param
