"""Fail on any import cycle between modules of tether (run by `make lint`).

import-linter's contracts say which package may import which; they do not see a cycle inside
one package, nor between two packages no contract names. This check builds the module graph
with grimp (import-linter's own graph library) and prints every strongly connected component,
with one concrete cycle through it, so the import to cut is on screen.

Every import counts as an edge: module-level, function-level and those under
`if TYPE_CHECKING:`. A type-only import still makes a reader (and mypy) walk both modules to
understand either, which is the coupling this check exists to stop.

Usage: python .ci/import_cycles.py [package]   (default: tether; exit 1 on any cycle)
"""

from __future__ import annotations

import sys

import grimp


def components(graph: grimp.ImportGraph) -> list[list[str]]:
    """Tarjan's strongly connected components of size > 1 (iterative: no recursion limit)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in modules:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    members.append(top)
                    if top == node:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return sorted(found, key=lambda c: (-len(c), c))


def witness(graph: grimp.ImportGraph, members: list[str]) -> list[str]:
    """One shortest cycle through the component's first module, as a readable chain."""
    inside = set(members)
    start = members[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph.find_modules_directly_imported_by(node)):
                if child not in inside:
                    continue
                if child == start:
                    chain = [start]
                    while node != start:
                        chain.append(node)
                        node = previous[node]
                    return [start, *reversed(chain[1:]), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return members


def main(argv: list[str]) -> int:
    package = argv[1] if len(argv) > 1 else "tether"
    graph = grimp.build_graph(package, cache_dir=None)
    found = components(graph)
    for members in found:
        print(f"cycle of {len(members)} modules:")
        for module in members:
            print(f"  {module}")
        print("  e.g. " + " -> ".join(witness(graph, members)))
    if found:
        print(f"{len(found)} import cycle(s) in {package}: cut one import in each (see above)")
        return 1
    print(f"no import cycles in {package} ({len(graph.modules)} modules)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
