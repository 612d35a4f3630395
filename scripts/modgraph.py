#!/usr/bin/env python3
"""The runner's module graph, derived from its object files; fails on a dependency cycle.

usage: scripts/modgraph.py [--root DIR] [--pure MOD,...] [--order SPEC [--sources DIR]]
                          [--quiet] OBJ.o...

A module is one object file, named by its path under --root without ".o" (build/obj/core/log.o
is core/log). There is an edge A -> B when a symbol A leaves undefined is defined by B (nm).
Prints each module with its level (0: uses no other module; n: uses modules of level < n) and
what it uses, then one summary line. Fails (exit 1), naming the modules and the symbols, when:
  - modules form a cycle (every strongly connected group of more than one module is shown with
    one concrete cycle through it);
  - a module listed by --pure uses a module that is not (the pure library must link alone);
  - with --order, the declared folder order (lowest first, e.g. "core < files http < task"; the
    folders of one step sit side by side) is broken: a module (its folder: the first component of
    its name; a name without one, main, is above every folder) uses, by symbol, a module of a
    folder that is not below its own, or one of its sources (--sources: the tree of .c and .h
    files, runner/) #includes a header of such a folder, headers including headers too. Every
    folder met must be in the order: a new folder is placed there, new files need nothing.
    Symbols are named with the file:line that uses them (nm -l: the objects' debug info).
Exit 2: bad usage, or nm failed.
"""
import re
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


def parse_order(spec):
    """{folder: rank} from "a < b c < d" (commas may separate the folders of a step)."""
    rank = {}
    for i, step in enumerate(spec.split("<")):
        names = step.replace(",", " ").split()
        if not names:
            raise ValueError(f"--order: an empty step in {spec!r}")
        for name in names:
            if name in rank:
                raise ValueError(f"--order: {name} is named twice")
            rank[name] = i
    return rank


def folder_of(name):
    """The folder of a module or header path (core/log -> core); None: top level (main)."""
    return name.split("/", 1)[0] if "/" in name else None


def layer_problem(rank, src, dst):
    """Why folder src may not use folder dst, or None when it may."""
    if src == dst or src is None:
        return None
    for f in (src, dst):
        if f is not None and f not in rank:
            return f"folder {f}/ is not in the declared order (place it in --order)"
    if dst is None:
        return "the top level (main) is above every folder"
    if rank[dst] > rank[src]:
        return f"{dst}/ is above {src}/"
    if rank[dst] == rank[src]:
        return f"{dst}/ and {src}/ sit side by side (neither may use the other)"
    return None


INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def include_edges(srcdir):
    """[(file, line, its folder, included path, that folder)] of every quoted #include."""
    out = []
    for dirpath, dirnames, filenames in os.walk(srcdir):
        dirnames.sort()
        for fn in sorted(filenames):
            if not fn.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, fn)
            rel = os.path.relpath(path, srcdir)
            with open(path, encoding="utf-8", errors="replace") as f:
                for no, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    inc = m.group(1)
                    # "x.h" is beside the file; "dir/x.h" is from the tree's root (-Irunner)
                    target = inc if "/" in inc else os.path.join(os.path.dirname(rel), inc)
                    out.append((rel, no, folder_of(rel), inc, folder_of(target)))
    return out


def symbol_lines(nm, path, syms):
    """{symbol: [file:line, ...]} where the object uses each undefined symbol (nm -l)."""
    try:
        out = subprocess.run([nm, "-l", "-P", "--no-sort", path], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    where = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] in syms and parts[1] in UNDEFINED:
            where.setdefault(parts[0], []).append(parts[-1])
    return where


def layering(graph, rank, objs, root, nm, srcdir):
    """Problems of the folder order, one message each, by symbol and by #include."""
    msgs = []
    path_of = {module_name(p, root): p for p in objs}
    for mod in sorted(graph):
        for dep, syms in graph[mod].items():
            why = layer_problem(rank, folder_of(mod), folder_of(dep))
            if not why:
                continue
            where = symbol_lines(nm, path_of[mod], set(syms))
            for sym in syms:
                at = ", ".join(os.path.relpath(w) if w.startswith("/") else w
                               for w in where.get(sym, [])[:3]) or path_of[mod]
                msgs.append(f"{at}: {mod} uses {dep} ({sym}): {why}")
    if srcdir:
        for rel, no, src, inc, dst in include_edges(srcdir):
            why = layer_problem(rank, src, dst)
            if why:
                msgs.append(f"{os.path.join(srcdir, rel)}:{no}: #include \"{inc}\": {why}")
    return msgs


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
    ap.add_argument("--order", default="", help='folder order, lowest first: "core < files http < api"')
    ap.add_argument("--sources", default="", help="with --order: the source tree whose #includes are checked")
    args = ap.parse_args()
    try:
        rank = parse_order(args.order) if args.order else None
    except ValueError as e:
        print(f"modgraph: {e}", file=sys.stderr)
        return 2
    if args.sources and rank is None:
        print("modgraph: --sources needs --order", file=sys.stderr)
        return 2

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

    layer_msgs = []
    if rank is not None:
        layer_msgs = layering(graph, rank, args.objs, args.root, args.nm, args.sources)
        for m in layer_msgs:
            print(f"modgraph: LAYER {m}")
        problems += len(layer_msgs)

    nedges = sum(len(e) for e in graph.values())
    print(f"modgraph: {len(graph)} modules, {nedges} edges, {max(level.values()) + 1} levels, "
          f"{len(cycles)} cycle{'s' if len(cycles) != 1 else ''}"
          + (f" ({sum(len(c) for c in cycles)} modules in cycles)" if cycles else "")
          + (f", {len(pure)} pure" if pure else "")
          + (f", {len(set(rank.values()))} layers, {len(layer_msgs)} against their order"
             if rank is not None else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
