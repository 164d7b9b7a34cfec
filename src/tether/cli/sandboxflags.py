"""The sandbox spec as command-line flags, shared by ``tether sandbox create`` and
``tether run``. Flags become a spec object that the daemon validates with the same
strict parser as a spec file, so a bad flag gets the same precise error (naming
the key path: ``spec.mounts[0].source: ...``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

#: Flags that describe a sandbox (besides a spec file and --set).
SPEC_FLAGS = ("runtime", "image", "workspace", "mounts", "network", "memory", "cpus", "pids",
              "idle_timeout", "ttl", "labels")


def sandbox_flags(*, for_run: bool) -> Callable[[F], F]:
    """Add the spec flags. ``tether run`` gets ``--spec`` (``-f`` stays ``sandbox
    create``'s) and only creates a sandbox when one of them is given."""

    def deco(fn: F) -> F:
        opts = [
            click.option("--runtime", default=None if for_run else "auto",
                         show_default=not for_run,
                         help="auto (bwrap when it works here, else process), bwrap, process "
                              "or docker"),
            click.option("--image", default=None, help="docker: the image of the primary"),
            click.option("--workspace", type=click.Path(exists=True, file_okay=False),
                         help="host directory, read-write inside"),
            click.option("--mount", "mounts", multiple=True, metavar="SRC:DST[:ro|rw]",
                         help="bind a host path (read-only unless :rw)"),
            click.option("--network", type=click.Choice(["none", "private", "host"]),
                         default=None, help="none (loopback only), private (no host, no "
                         "internet) or host"),
            click.option("--memory", default=None, help="docker: memory limit, e.g. 512m"),
            click.option("--cpus", type=float, default=None, help="docker: CPU limit"),
            click.option("--pids", type=int, default=None, help="docker: process limit"),
            click.option("--idle-timeout", type=click.FloatRange(min=0, min_open=True),
                         default=None, help="stop it after SEC seconds without a running exec"),
            click.option("--ttl", type=click.FloatRange(min=0, min_open=True), default=None,
                         help="delete it SEC seconds after creation"),
            click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
                         help="a label on the sandbox (repeatable)"),
            click.option("--set", "sets", multiple=True,
                         help="KEY=VALUE: a spec param or field path"),
        ]
        if for_run:
            opts.append(click.option("--spec", "spec_file",
                                     type=click.Path(exists=True, dir_okay=False),
                                     help="run in a new sandbox from this YAML spec"))
            opts.append(click.option("--keep-sandbox", is_flag=True,
                                     help="keep the new sandbox after the command ends"))
        else:
            opts.append(click.option("-f", "--file", "spec_file",
                                     type=click.Path(exists=True, dir_okay=False),
                                     help="a YAML spec (see docs/examples/sandbox.yaml)"))
        for opt in reversed(opts):
            fn = opt(fn)
        return fn

    return deco


def wants_sandbox(flags: dict[str, Any]) -> bool:
    """True when the flags describe a sandbox (``tether run`` then makes one)."""
    return bool(flags.get("spec_file") or flags.get("sets") or
                any(flags.get(k) not in (None, (), "") for k in SPEC_FLAGS))


def _mount(text: str) -> dict[str, str]:
    parts = text.split(":")
    if len(parts) == 2:
        parts.append("ro")
    if len(parts) != 3 or not parts[0] or not parts[1] or parts[2] not in ("ro", "rw"):
        raise click.BadParameter(f"{text!r} is not SRC:DST[:ro|rw]", param_hint="--mount")
    return {"source": parts[0], "target": parts[1], "mode": parts[2]}


def _pairs(items: tuple[str, ...], hint: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint=hint)
        k, v = item.split("=", 1)
        out[k] = v
    return out


def create_params(name: str, flags: dict[str, Any],
                  env: dict[str, str] | None = None) -> dict[str, Any]:
    """``sandbox.create`` params for these flags: a spec file with ``--set``, or a spec
    object built from the flags."""
    if flags.get("spec_file"):
        given = [k for k in SPEC_FLAGS if flags.get(k) not in (None, (), "", "auto")]
        if given:
            raise click.UsageError("with a spec file, change fields with --set, not "
                                   f"--{given[0].replace('_', '-')}")
        if env:
            raise click.UsageError("with a spec file, set env with --set env.NAME=VALUE")
        path = flags["spec_file"]
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        return {"name": name, "spec": text, "set": list(flags.get("sets") or ()),
                "spec_name": path, "base_dir": os.path.dirname(os.path.abspath(path))}
    doc: dict[str, Any] = {}
    for key in ("runtime", "image", "network", "idle_timeout", "ttl"):
        if flags.get(key) is not None:
            doc[key] = flags[key]
    if flags.get("image") and doc.get("runtime") in (None, "auto"):
        doc["runtime"] = "docker"  # an image means docker
    if flags.get("workspace"):
        doc["workspace"] = os.path.abspath(flags["workspace"])
    if flags.get("mounts"):
        doc["mounts"] = [_mount(m) for m in flags["mounts"]]
    resources = {k: flags[k] for k in ("memory", "cpus", "pids") if flags.get(k) is not None}
    if resources:
        doc["resources"] = resources
    if flags.get("labels"):
        doc["labels"] = _pairs(flags["labels"], "--label")
    if env:
        doc["env"] = env
    return {"name": name, "spec": doc, "set": list(flags.get("sets") or ()),
            "base_dir": os.getcwd()}
