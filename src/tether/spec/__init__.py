"""Sandbox specs: strict YAML (or a JSON object) in, a resolved :class:`SandboxSpec` out.

``tether sandbox create -f spec.yaml --set key=value`` reads a file like
``docs/examples/sandbox.yaml``; the CLI's flags arrive as a spec object. Either
way the spec goes through the same steps:

1. **Compose** (:mod:`.yamlfile`) the YAML into nodes that remember their line,
   refusing what is unsafe or ambiguous (or take the object as it is).
2. **Params and overrides** (:mod:`.overrides`): ``--set`` items, then
   ``${params.NAME}`` substitution.
3. **Convert** (:mod:`.convert`) with ``msgspec.convert`` against the records in
   :mod:`tether.model.records`, which are the schema.
4. **Check** (:mod:`.checks`) host paths and rules across fields.

Every error is a :class:`SpecError` whose message names the place (file and
line, the ``--set`` item, or ``spec.`` and the key path for an object), the key
path and what was expected, e.g. ``spec.yaml:12: resources.memory: expected a size
like 512m or 2g (or a number of bytes), got 'lots'``.

Pure: touches the file system only to resolve and check host paths.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from tether.model.records import SandboxSpec
from tether.spec.checks import SYSTEM_TARGETS, Violation, resolve, runtime_constraints
from tether.spec.convert import parse_duration, parse_size, to_spec
from tether.spec.nodes import Map, Reporter, SpecError, from_object
from tether.spec.overrides import Params
from tether.spec.yamlfile import MAX_SPEC_BYTES, compose

__all__ = [
    "MAX_SPEC_BYTES",
    "SYSTEM_TARGETS",
    "SpecError",
    "Violation",
    "load_spec_file",
    "parse_duration",
    "parse_size",
    "parse_spec",
    "parse_spec_object",
    "runtime_constraints",
]


def _finish(root: Map, report: Reporter, overrides: Sequence[str], tether_home: str | None,
            base_dir: str | None) -> SandboxSpec:
    params = Params(report)
    params.read(root)
    params.apply(root, overrides)
    params.substitute(root)
    return resolve(to_spec(root, report), root, report,
                   base_dir=os.path.abspath(base_dir or os.getcwd()), tether_home=tether_home)


def parse_spec(text: str, *, source: str = "<spec>", overrides: Sequence[str] = (),
               tether_home: str | None = None, base_dir: str | None = None) -> SandboxSpec:
    """Parse a YAML sandbox spec into the resolved :class:`SandboxSpec` the store keeps.

    ``source`` names the file in messages; ``overrides`` are ``--set KEY=VALUE``
    items; ``tether_home``, when given, may not be exposed by the workspace or a
    mount; relative host paths are resolved against ``base_dir`` (default: the
    current directory). ``runtime`` is kept as written (``"auto"`` when absent):
    the daemon resolves it. Raises :class:`SpecError`.
    """
    report = Reporter(source)
    return _finish(compose(text, report), report, overrides, tether_home, base_dir)


def parse_spec_object(obj: dict[str, Any], *, root: str = "spec",
                      overrides: Sequence[str] = (), tether_home: str | None = None,
                      base_dir: str | None = None) -> SandboxSpec:
    """:func:`parse_spec` for a spec given as JSON values (the mapping a YAML file
    would hold). Errors name the place as ``root`` and the key path:
    ``spec.resources.memory: expected a size like 512m or 2g ...``."""
    report = Reporter(root, object_root=root)
    try:
        tree = from_object(obj)
    except ValueError as e:
        report.fail(None, "", str(e))
    if not isinstance(tree, Map):
        report.fail(tree, "", "expected a mapping of spec fields at the top level")
    return _finish(tree, report, overrides, tether_home, base_dir)


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
