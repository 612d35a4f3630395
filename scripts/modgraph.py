#!/usr/bin/env python3
"""The runner's module graph, derived from its object files; fails on a dependency cycle.

usage: scripts/modgraph.py [--root DIR] [--pure MOD,...] [--quiet] OBJ.o...

A module is one object file, named by its path under --root without ".o" (build/obj/core/util.o
is core/util). There is an edge A -> B when a symbol A leaves undefined is defined by B (nm).
Prints each module with its level (0: uses no other module; n: uses modules of level < n) and
what it uses, then one summary line. Fails (exit 1), naming the modules and the symbols, when:
  - modules form a cycle (every strongly connected group of more than one module is shown with
    one concrete cycle through it);
  - a module listed by --pure uses a module that is not (the pure library must link alone).
Exit 2: bad usage, or nm failed.
"""
import argparse
import os
import subprocess
import sys
from collections import deque

# nm types of a global definition (uppercase, and GNU indirect functions)
DEFINED = set("ABCDGIRSTVW") | {"i", "u"}
# undefined, and weak undefined
UNDEFINED = {"U", "w", "v"}


def symbols(nm, path):
    """(defined, undefined) global symbol sets of one object file."""
    try:
        out = subprocess.run([nm, "-P", "--no-sort", path], check=True, capture_output=True,
                             text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        err = getattr(e, "stderr", "") or str(e)
        sys.exit(f"modgraph: {nm} {path}: {err.strip()}")
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        # "w"/"v" with a value are weak definitions, without one weak references
        if kind in ("w", "v") and len(parts) >= 3:
            defined.add(name)
        elif kind in UNDEFINED:
            undefined.add(name)
        elif kind in DEFINED:
            defined.add(name)
    return defined, undefined


def module_name(path, root):
    rel = os.path.relpath(path, root) if root else path
    return rel[:-2] if rel.endswith(".o") else rel


def build_graph(objs, root, nm):
    """{module: {dep: sorted symbols}}; also reports symbols defined twice."""
    defs, undefs = {}, {}
    for path in objs:
        mod = module_name(path, root)
        defs[mod], undefs[mod] = symbols(nm, path)
    owner = {}
    for mod in sorted(defs):
        for sym in defs[mod]:
            owner.setdefault(sym, mod)
    graph = {}
    for mod in sorted(defs):
        edges = {}
        for sym in undefs[mod]:
            dep = owner.get(sym)
            if dep and dep != mod:
                edges.setdefault(dep, []).append(sym)
        graph[mod] = {d: sorted(s) for d, s in sorted(edges.items())}
    return graph


def sccs(graph):
    """Tarjan's strongly connected components (iterative), each sorted."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                out.append(sorted(comp))
    return out


def shortest_cycle(graph, comp, start):
    """A shortest cycle through start, staying inside comp."""
    members = set(comp)
    prev = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for dep in graph[node]:
            if dep == start:
                path = [node]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if dep in members and dep not in prev:
                prev[dep] = node
                queue.append(dep)
    return [start]


def distinct_cycles(graph, comp):
    """Shortest cycles through each module of comp, without repeats (rotations), shortest first."""
    seen, out = set(), []
    for start in comp:
        cyc = shortest_cycle(graph, comp, start)[:-1]
        i = cyc.index(min(cyc))
        key = tuple(cyc[i:] + cyc[:i])
        if key not in seen:
            seen.add(key)
            out.append(list(key) + [key[0]])
    return sorted(out, key=lambda c: (len(c), c))


def levels(graph, comps):
    """Level of each module: 0 when it uses no other group, else 1 + the highest it uses."""
    group = {m: i for i, c in enumerate(comps) for m in c}
    level = {}
    # Tarjan emits a group after every group it uses: one pass in that order suffices.
    for i, comp in enumerate(comps):
        deps = {group[d] for m in comp for d in graph[m]} - {i}
        level[i] = 1 + max((level[d] for d in deps), default=-1)
    return {m: level[group[m]] for m in graph}


def symlist(syms, limit=4):
    more = len(syms) - limit
    return ", ".join(syms[:limit]) + (f", +{more} more" if more > 0 else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("objs", nargs="+", metavar="OBJ.o")
    ap.add_argument("--root", default="", help="directory the module names are relative to")
    ap.add_argument("--pure", default="", help="comma-separated modules that must use only each other")
    ap.add_argument("--nm", default=os.environ.get("NM", "nm"))
    ap.add_argument("--quiet", action="store_true", help="only problems and the summary")
    args = ap.parse_args()

    graph = build_graph(args.objs, args.root, args.nm)
    comps = sccs(graph)
    cycles = [c for c in comps if len(c) > 1]
    level = levels(graph, comps)
    pure = {m for m in args.pure.replace(" ", ",").split(",") if m}
    unknown = pure - set(graph)
    if unknown:
        print(f"modgraph: --pure names no object: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2

    if not args.quiet:
        width = max(len(m) for m in graph)
        for mod in sorted(graph, key=lambda m: (level[m], m)):
            tag = " [pure]" if mod in pure else ""
            uses = " ".join(graph[mod]) or "-"
            print(f"  L{level[mod]} {mod:<{width}} -> {uses}{tag}")

    problems = 0
    for comp in cycles:
        problems += 1
        print(f"modgraph: CYCLE among {len(comp)} modules: {' '.join(comp)}")
        for cyc in distinct_cycles(graph, comp):
            print(f"  cycle {' -> '.join(cyc)}")
            for a, b in zip(cyc, cyc[1:]):
                print(f"    {a} -> {b}: {symlist(graph[a][b])}")
    for mod in sorted(pure):
        for dep, syms in graph[mod].items():
            if dep not in pure:
                problems += 1
                print(f"modgraph: pure module {mod} uses {dep}, which is not pure: {symlist(syms)}")

    nedges = sum(len(e) for e in graph.values())
    print(f"modgraph: {len(graph)} modules, {nedges} edges, {max(level.values()) + 1} levels, "
          f"{len(cycles)} cycle{'s' if len(cycles) != 1 else ''}"
          + (f" ({sum(len(c) for c in cycles)} modules in cycles)" if cycles else "")
          + (f", {len(pure)} pure" if pure else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
