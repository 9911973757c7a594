#!/usr/bin/env python3
"""The crate's import graph between its modules, measured from the source.

A module is a folder or file directly under src/ (place/ counts as its two
places, place/local and place/hosted). An edge A -> B is any `crate::B`
path (in a `use` or inline) in a file of A, comments aside. Prints the
modules, the edges, the import levels (the longest chain of imports under
each module) and every cycle. Exit status 1 when there is a cycle, or when
a place imports another place.

    python3 scripts/import_graph.py [src]
"""
import re
import sys
from pathlib import Path

SPLIT = {"place"}  # folders whose sub-folders are modules of their own


def module_of(rel: Path) -> str:
    parts = list(rel.with_suffix("").parts)
    if parts[0] in SPLIT and len(parts) > 2:
        return f"{parts[0]}/{parts[1]}"
    if parts[0] in SPLIT and len(parts) == 2 and parts[1] != "mod":
        return f"{parts[0]}/{parts[1]}"
    return parts[0]


def target_of(path: str) -> str:
    parts = path.split("::")
    if parts[0] in SPLIT and len(parts) > 1 and parts[1][:1].islower():
        return f"{parts[0]}/{parts[1]}"
    return parts[0]


def main() -> int:
    src = Path(sys.argv[1] if len(sys.argv) > 1 else "src")
    edges: dict[str, set[str]] = {}
    for f in sorted(src.rglob("*.rs")):
        rel = f.relative_to(src)
        if rel.parts[0] in ("main.rs", "lib.rs"):
            continue
        m = module_of(rel)
        edges.setdefault(m, set())
        text = "\n".join(line.split("//")[0] for line in f.read_text().splitlines())
        # `use crate::{a, b::c}` and `crate::a::b` alike.
        for group in re.findall(r"crate::\{([^}]*)\}", text):
            for item in group.split(","):
                item = item.strip()
                if item:
                    edges[m].add(target_of(item))
        for path in re.findall(r"crate::([a-z_][a-z_0-9]*(?:::[A-Za-z_][A-Za-z_0-9]*)?)", text):
            edges[m].add(target_of(path))
    for m in edges:
        edges[m].discard(m)
        edges[m] = {t for t in edges[m] if t in edges}

    # Strongly connected components (Tarjan), for the cycles and the levels.
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    comp_of = {v: i for i, c in enumerate(comps) for v in c}
    level: dict[int, int] = {}
    # Tarjan yields components in reverse topological order: dependencies first.
    for i, c in enumerate(comps):
        below = [level[comp_of[w]] for v in c for w in edges[v] if comp_of[w] != i]
        level[i] = 1 + max(below, default=0)
    cycles = [c for c in comps if len(c) > 1]
    n_edges = sum(len(t) for t in edges.values())
    print(f"{len(edges)} modules, {n_edges} import edges, {max(level.values())} levels, "
          f"{len(cycles)} cycle(s)")
    for lv in range(max(level.values()), 0, -1):
        names = [v for v in sorted(edges) if level[comp_of[v]] == lv]
        print(f"  level {lv}: {', '.join(names)}")
    for c in cycles:
        print(f"  cycle: {' <-> '.join(c)}")
    # A place carries effects out where it is; what two places share lives
    # below them (`attempt`, `contract`), so a third place imports no other.
    # (`place/views` is the places' shared read model, not a place.)
    places = [m for m in edges if m.startswith("place/") and m != "place/views"]
    crossing = [(a, b) for a in places for b in sorted(edges[a]) if b in places]
    for a, b in crossing:
        print(f"  a place imports another: {a} -> {b}")
    return 1 if cycles or crossing else 0


if __name__ == "__main__":
    sys.exit(main())
