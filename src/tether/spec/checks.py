"""What a converted spec must also satisfy: rules across fields, rules on host
paths, and rules on what the spec may say that stored records need not.

Host paths are resolved here (relative to the spec's directory, symlinks
followed, tether's home never exposed) and mount targets normalised, so the spec
the store keeps says exactly what will be mounted. ``env`` names and ``labels``
keys are checked here rather than in the records: the flat ``sandbox.create``
params never checked them, and a record constraint would make such old rows
undecodable.
"""

from __future__ import annotations

import os
import posixpath
from typing import NamedTuple, NoReturn

import msgspec

from tether.egress.policy import BadEntry, parse_entry
from tether.model.records import MountSpec, NetworkPolicy, ResourceSpec, SandboxSpec
from tether.runtime.registry import spec_problems
from tether.spec.nodes import Map, Reporter, is_null, join, locate

__all__ = ["SYSTEM_TARGETS", "Violation", "resolve", "runtime_constraints"]

#: Mount targets that are refused outright.
SYSTEM_TARGETS = frozenset({
    "/", "/proc", "/sys", "/dev", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64",
    "/boot", "/run", "/var/run",
})
#: Mount targets whose every subdirectory is refused as well.
SYSTEM_TREES = ("/proc", "/sys", "/dev")
#: Label keys tether puts on containers and networks itself.
RESERVED_LABEL_PREFIX = "tether."


class Violation(NamedTuple):
    """A rule a spec breaks: ``path`` is the key path the message names; the error
    points at the line of top-level ``key`` (default: the path's own)."""

    path: str
    problem: str
    key: str | None = None


def runtime_constraints(spec: SandboxSpec) -> list[Violation]:
    """What ``spec.runtime`` does not allow: each runtime says (its ``spec_problems``)."""
    return [Violation(p.path, p.problem, p.key) for p in spec_problems(spec)]


def _is_within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


class _Checks:
    def __init__(self, root: Map, report: Reporter, base_dir: str,
                 tether_home: str | None) -> None:
        self.root = root
        self.report = report
        self.base_dir = base_dir
        self.tether_home = os.path.realpath(tether_home) if tether_home else None

    def fail(self, tokens: list[str | int], problem: str, *, key_line: bool = False) -> NoReturn:
        node, path, line, _ = locate(self.root, tokens)  # a shorthand ("src:/dst") as a whole
        self.report.fail(node, path, problem, line=line if key_line else None)

    def host_path(self, tokens: list[str | int], text: str, what: str) -> str:
        if not text:
            self.fail(tokens, f"the {what} is empty")
        raw = os.path.join(self.base_dir, os.path.expanduser(text))
        try:
            real = os.path.realpath(raw, strict=True)
        except OSError as e:
            where = ("" if os.path.isabs(os.path.expanduser(text))
                     else f" (resolved to {os.path.normpath(raw)})")
            if isinstance(e, FileNotFoundError) and not os.path.lexists(raw):
                self.fail(tokens, f"{what} {text!r} does not exist{where}")
            self.fail(tokens, f"{what} {text!r} cannot be resolved{where}: {e.strerror or e}")
        if self.tether_home is not None and (_is_within(real, self.tether_home)
                                             or _is_within(self.tether_home, real)):
            self.fail(tokens, f"{what} {real} would expose tether's own state "
                      f"(tether home {self.tether_home}); mount something else")
        return real

    def target(self, tokens: list[str | int], text: str) -> str:
        if not text.startswith("/"):
            self.fail(tokens, f"the target must be an absolute path inside the sandbox, "
                      f"got {text!r} (relative targets are refused)")
        norm = posixpath.normpath(text)
        if norm.startswith("//"):
            norm = "/" + norm.lstrip("/")
        if norm in SYSTEM_TARGETS or any(_is_within(norm, t) for t in SYSTEM_TREES):
            shown = repr(text) if norm == text else f"{text!r} (that is {norm})"
            self.fail(tokens, f"target {shown} is a system path; mounting over it is refused")
        return norm

    def names(self, tokens: list[str | int], names: dict[str, str], *, env: bool) -> None:
        for name in names:
            where: list[str | int] = [*tokens, name]
            if not name or "\0" in name:
                self.fail(where, "a name must be non-empty text", key_line=True)
            if env and "=" in name:
                self.fail(where, "an environment variable name cannot contain '='",
                          key_line=True)
            if not env and name.startswith(RESERVED_LABEL_PREFIX):
                self.fail(where, f"label keys starting with {RESERVED_LABEL_PREFIX!r} are "
                          "reserved for tether's own", key_line=True)

    def spec(self, spec: SandboxSpec) -> SandboxSpec:
        workspace = target = None
        if spec.workspace is not None:
            workspace = self.host_path(["workspace"], spec.workspace, "workspace")
            if not os.path.isdir(workspace):
                self.fail(["workspace"], f"workspace {workspace} is not a directory")
        if spec.workspace_target is not None:
            if workspace is None:
                self.fail(["workspace_target"], "workspace_target needs a workspace")
            target = self.target(["workspace_target"], spec.workspace_target)
        targets: dict[str, str] = {}
        if workspace is not None:  # by default the same path inside as outside
            targets[target or self.target(["workspace"], workspace)] = "the workspace"
        mounts: list[MountSpec] = []
        for i, mount in enumerate(spec.mounts):
            source = self.host_path(["mounts", i, "source"], mount.source, "mount source")
            node = locate(self.root, ["mounts", i])[0]
            if isinstance(node, Map) and is_null(node.entries.get("target")):
                inside = self.target(["mounts", i, "source"], source)  # the same path inside
            else:
                inside = self.target(["mounts", i, "target"], mount.target)
            if inside in targets:
                self.fail(["mounts", i], f"target {inside} is already used by "
                          f"{targets[inside]}")
            targets[inside] = join("mounts", i)
            mounts.append(MountSpec(source=source, target=inside, mode=mount.mode))
        cert_path = spec.docker_cert_path
        if cert_path is not None:
            cert_path = self.host_path(["docker_cert_path"], cert_path, "docker_cert_path")
            missing = [f for f in ("ca.pem", "cert.pem", "key.pem")
                       if not os.path.isfile(os.path.join(cert_path, f))]
            if missing:
                self.fail(["docker_cert_path"], f"docker_cert_path {cert_path} lacks "
                          f"{', '.join(missing)} (docker's TLS files: ca.pem, cert.pem, "
                          "key.pem)")
        self.names(["env"], spec.env, env=True)
        seen: dict[str, str] = {}
        for i, companion in enumerate(spec.companions):
            self.names(["companions", i, "env"], companion.env, env=True)
            if companion.name in seen:
                self.fail(["companions", i, "name"], f"duplicate companion name "
                          f"{companion.name!r} (also {seen[companion.name]})")
            seen[companion.name] = join("companions", i)
        self.names(["labels"], spec.labels, env=False)
        if isinstance(spec.network, NetworkPolicy):
            for i, text in enumerate(spec.network.allow):
                try:
                    parse_entry(text)
                except BadEntry as e:
                    self.fail(["network", "allow", i], str(e))
        for v in runtime_constraints(spec):
            node, _, key_line, _ = locate(self.root, [v.key or v.path])
            self.report.fail(node, v.path, v.problem, line=key_line)
        resources = None if spec.resources == ResourceSpec() else spec.resources
        return msgspec.structs.replace(spec, workspace=workspace, workspace_target=target,
                                       mounts=mounts, resources=resources,
                                       docker_cert_path=cert_path)


def resolve(spec: SandboxSpec, root: Map, report: Reporter, *, base_dir: str,
            tether_home: str | None) -> SandboxSpec:
    """``spec`` with host paths resolved and targets normalised, after every check;
    errors point into ``root``, the tree it was converted from."""
    return _Checks(root, report, base_dir, tether_home).spec(spec)
