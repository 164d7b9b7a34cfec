"""The spec's schema, read from the records in :mod:`tether.model.records`.

``msgspec.inspect`` gives the field tree, the constraints and the ``Meta``
descriptions, so overrides, conversion and error messages all follow the records
and nothing here repeats a field.
"""

from __future__ import annotations

import typing
from typing import Any, Literal, TypeVar

import msgspec
import msgspec.inspect as mi

from tether.model.records import SandboxSpec

__all__ = ["SPEC", "Shape", "expected", "field_shape", "fields", "shape"]

def _spec_type() -> mi.StructType:
    t = mi.type_info(SandboxSpec)
    assert isinstance(t, mi.StructType)
    return t


SPEC = _spec_type()


class Shape:
    """A field's type with the wrapping taken off: ``type`` is the core type
    (``None`` allowed or not), ``extra`` the merged ``Meta.extra`` and
    ``description`` what an error says was expected."""

    __slots__ = ("choices", "description", "extra", "type")

    def __init__(self, t: mi.Type, extra: dict[str, Any], description: str | None) -> None:
        self.type = t
        self.extra = extra
        self.description = description
        # A Literal's values in the order the record declares them (inspect sorts them).
        literal = _member(t, mi.LiteralType)
        self.choices: tuple[object, ...] = literal.values if literal is not None else ()

    @property
    def struct(self) -> mi.StructType | None:
        """The struct, or the struct a union of words and one struct may be written as
        (``network: host`` or ``network: {allow: [...]}``)."""
        return _member(self.type, mi.StructType)

    def item(self) -> Shape | None:
        """The item shape of a list or the value shape of a mapping."""
        if isinstance(self.type, mi.ListType):
            return shape(self.type.item_type)
        if isinstance(self.type, mi.DictType):
            return shape(self.type.value_type)
        return None

    def takes_text(self) -> bool:
        """Whether text is what the field wants (so ``--set X=5`` is the string "5")."""
        t = self.type
        return (isinstance(t, mi.StrType) or "form" in self.extra
                or (bool(self.choices) and all(isinstance(v, str) for v in self.choices)))

    def is_leaf(self) -> bool:
        """A single value for ``--set``: neither a mapping nor a list of mappings."""
        item = self.item() if isinstance(self.type, mi.ListType) else None
        return not (self.struct is not None or isinstance(self.type, mi.DictType)
                    or (item is not None and item.struct is not None))


T = TypeVar("T", bound=mi.Type)


def _member(t: mi.Type, kind: type[T]) -> T | None:
    """``t`` if it is a ``kind``, or its one ``kind`` member if it is a union of a Literal
    and a struct; else None."""
    if isinstance(t, kind):
        return t
    if isinstance(t, mi.UnionType):
        found = [x for x in t.types if isinstance(x, kind)]
        if len(found) == 1 and all(isinstance(x, mi.LiteralType | mi.StructType)
                                   for x in t.types):
            return found[0]
    return None


def shape(t: mi.Type) -> Shape:
    extra: dict[str, Any] = {}
    description: str | None = None
    while True:
        if isinstance(t, mi.UnionType):
            rest = [x for x in t.types if not isinstance(x, mi.NoneType)]
            if len(rest) != 1:
                return Shape(t, extra, description)
            t = rest[0]
        elif isinstance(t, mi.Metadata):
            extra = {**(t.extra or {}), **extra}
            description = description or (t.extra_json_schema or {}).get("description")
            t = t.type
        else:
            return Shape(t, extra, description)


def fields(t: mi.StructType) -> dict[str, mi.Field]:
    """The fields a spec may write (by encoded name)."""
    return {f.encode_name: f for f in t.fields if not shape(f.type).extra.get("not_in_spec")}


def _literal(py: Any) -> tuple[object, ...]:
    if typing.get_origin(py) is Literal:
        return typing.get_args(py)
    for arg in typing.get_args(py):
        if found := _literal(arg):
            return found
    return ()


def field_shape(t: mi.StructType, name: str) -> Shape:
    """The shape of a field of ``t`` (by its encoded name)."""
    field = fields(t)[name]
    out = shape(field.type)
    if out.choices:
        py = {f.encode_name: f.type for f in msgspec.structs.fields(t.cls)}[name]
        out.choices = _literal(py) or out.choices
    return out


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def expected(s: Shape) -> str:
    """What a value of this shape looks like, for "expected ..., got ..."."""
    if s.description:
        return s.description
    t = s.type
    if s.choices:
        return "one of " + ", ".join(str(v) for v in s.choices)
    if isinstance(t, mi.StrType):
        return "a string"
    if isinstance(t, mi.BoolType):
        return "true or false"
    if isinstance(t, mi.IntType):
        return "a whole number"
    if isinstance(t, mi.FloatType):
        return "a number"
    if isinstance(t, mi.DictType):
        return "a mapping of NAME: value"
    if isinstance(t, mi.ListType):
        return "a list"
    if isinstance(t, mi.StructType):
        return f"a mapping of {_and(list(fields(t)))}"
    return "a different value"
