"""Strict YAML in, located nodes out.

PyYAML's safe loader composes the document into nodes that remember their line.
Documents over 1 MiB, anchors and aliases (no "billion laughs"), tags other than
the standard scalar ones, merge keys, duplicate keys, keys that are not strings
and nesting deeper than 64 levels are refused before anything is interpreted.
"""

from __future__ import annotations

import yaml
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from tether.spec.nodes import MAX_DEPTH, Map, Node, Reporter, Scalar, Seq, describe, join

__all__ = ["MAX_SPEC_BYTES", "compose", "text_scalar"]

MAX_SPEC_BYTES = 1 << 20

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


def text_scalar(text: str, line: int | None = None, origin: str | None = None) -> Scalar:
    """Text (from ``--set`` or a param) read the way YAML reads a plain scalar."""
    tag = _RESOLVER.resolve(yaml.ScalarNode, text, (True, False))  # type: ignore[no-untyped-call]
    node = yaml.ScalarNode(str(tag), text)
    try:
        value = _scalar_value(node)
    except ValueError:
        value = text
    return Scalar(value, text, line, literal=False, origin=origin)


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def compose(text: str, report: Reporter) -> Map:
    """The document's top-level mapping (empty for an empty document)."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_SPEC_BYTES:
        report.fail(None, "", f"the spec is {size} bytes; the limit is 1 MiB "
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
        report.fail(None, "", problem, line=line)
    except yaml.reader.ReaderError as e:
        line = text[: int(e.position)].count("\n") + 1
        report.fail(None, "", f"invalid YAML: {e.reason} ({e.character!r})", line=line)
    except yaml.YAMLError as e:
        report.fail(None, "", f"invalid YAML: {e}")
    finally:
        loader.dispose()
    if root is None:
        return Map(1)
    node = _convert(root, "", report)
    if not isinstance(node, Map):
        report.fail(node, "", f"expected a mapping of spec fields at the top level, got "
                    f"{describe(node)}")
    return node


def _convert(node: yaml.Node, path: str, report: Reporter) -> Node:
    line = _line(node)
    if isinstance(node, yaml.ScalarNode):
        try:
            value = _scalar_value(node)
        except ValueError:
            report.fail(None, path, f"YAML tag {node.tag!r} is not supported", line=line)
        return Scalar(value, str(node.value), line, literal=True)
    if isinstance(node, yaml.SequenceNode):
        if node.tag != _TAG + "seq":
            report.fail(None, path, f"YAML tag {node.tag!r} is not supported", line=line)
        seq = Seq(line)
        for i, item in enumerate(node.value):
            seq.items.append(_convert(item, join(path, i), report))
        return seq
    assert isinstance(node, yaml.MappingNode)
    if node.tag != _TAG + "map":
        report.fail(None, path, f"YAML tag {node.tag!r} is not supported", line=line)
    out = Map(line)
    for knode, vnode in node.value:
        kline = _line(knode)
        if not isinstance(knode, yaml.ScalarNode):
            report.fail(None, path, "a key must be a plain string", line=kline)
        if knode.tag == _TAG + "merge":
            report.fail(None, path, "merge keys (<<) are not supported", line=kline)
        try:
            key = _scalar_value(knode)
        except ValueError:
            report.fail(None, path, f"YAML tag {knode.tag!r} is not supported", line=kline)
        if not isinstance(key, str):
            shown = "null" if key is None else str(knode.value)
            report.fail(None, path, f"keys must be strings, got {shown}; quote it",
                        line=kline)
        kpath = join(path, key)
        if key in out.entries:
            report.fail(None, kpath, f"duplicate key (first at line {out.key_lines[key]})",
                        line=kline)
        out.put(key, _convert(vnode, kpath, report), kline)
    return out
