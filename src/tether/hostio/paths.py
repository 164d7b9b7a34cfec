"""Predicates on real paths (callers resolve them first): pure string work, no I/O."""

from __future__ import annotations


def is_within(path: str, root: str) -> bool:
    """True when real path ``path`` is ``root`` or inside it."""
    return (path.rstrip("/") + "/").startswith(root.rstrip("/") + "/")


def paths_overlap(path: str, other: str) -> bool:
    """True when one of two real paths is, or is inside, the other."""
    return is_within(path, other) or is_within(other, path)
