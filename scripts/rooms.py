#!/usr/bin/env python3
"""The rooms of runner/ (`make rooms`, docs/design/architecture.md#dependencies-flow-one-way): checks of what a file may hold that
the module graph (scripts/modgraph.py) does not see.

  - api/ is routes: a file of runner/api/ schedules nothing on the event loop (loop_timer_*,
    loop_watch_*, loop_defer). Work that lives on the loop past its request is an engine's and
    belongs on the floor that owns it (pty/, mcp/, watch/, metrics/, ...).
  - A route file holds no state of its own: no file-scope variable that is not const (a table of
    routes is const; sessions, registries and counters are an engine's, below api/).
  - Rooms stay readable: no source file over 800 lines (MAX_FILE_LINES) and no function body over
    80 lines (MAX_FUNCTION_LINES). A declarative table is a const array, not a function, so it is
    not counted.
  - A project header is included with quotes: `#include <core/log.h>` (a path whose first
    component is a folder of the source root) is refused, since -Irunner finds it either way
    and the include check of modgraph.py reads only the quoted form.

Usage: rooms.py --sources runner [FILE...]   (no FILE: every .c and .h under --sources)
Exit 1 with one line per finding (file:line: what), else 0 and a summary line.
"""
import argparse
import os
import re
import sys

LOOP_CALL = re.compile(r"\b(loop_timer_\w+|loop_watch_\w+|loop_defer)\s*\(")
ANGLE_INCLUDE = re.compile(r"^\s*#\s*include\s*<([^>]+)>")
# A file-scope definition: starts at column 0, is not a function (no "(" before "=" or ";"),
# not a type, not extern, not const.
FILE_SCOPE_VAR = re.compile(r"^(?:static\s+)?(?!typedef|extern|struct\s+\w+\s*\{|enum|union|return)"
                            r"[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*(?:=|;)")
# The head of a function definition: an identifier and "(" at column 0 or after a type, not ending
# in ";" (a declaration); its body opens with "{" at column 0 and closes with "}" at column 0
# (the committed .clang-format's layout).
FUNC_HEAD = re.compile(r"^[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\(")
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 80
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def strip_comments(text):
    """Comments blanked, newlines kept (so line numbers hold)."""
    return COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def check_sizes(rel, lines):
    """Files over MAX_FILE_LINES and function bodies over MAX_FUNCTION_LINES."""
    problems = []
    n = len(lines) - (1 if lines and lines[-1] == "" else 0)
    if n > MAX_FILE_LINES:
        problems.append(f"{rel}: {n} lines (more than {MAX_FILE_LINES}): split it by duty")
    if not rel.endswith(".c"):
        return problems
    head = None
    start = None
    for no, line in enumerate(lines, 1):
        m = FUNC_HEAD.match(line)
        if m and not line.rstrip().endswith(";") and "=" not in line.split("(")[0]:
            head = (no, m.group(1))
        elif line.startswith("{") and head:
            start = head
        elif line.startswith("}") and start:
            length = no - start[0] + 1
            if length > MAX_FUNCTION_LINES:
                problems.append(f"{rel}:{start[0]}: function {start[1]} is {length} lines (more "
                                f"than {MAX_FUNCTION_LINES}): name its steps")
            head = start = None
        elif line.rstrip().endswith(";") and not start and not line.startswith((" ", "\t")):
            head = None
    return problems


def route_state(rel, text):
    """File-scope variables of a route file that are not const."""
    problems = []
    depth = 0
    for no, line in enumerate(text.split("\n"), 1):
        if depth == 0 and "const" not in line.split("=")[0]:
            m = FILE_SCOPE_VAR.match(line)
            if m and "(" not in line.split("=")[0]:
                problems.append(f"{rel}:{no}: a route file keeps state ({m.group(1)}): api/ is "
                                "routes, the state belongs to an engine below it")
        depth += line.count("{") - line.count("}")
    return problems


def check_file(path, root, folders):
    rel = os.path.relpath(path, root)
    problems = []
    with open(path, encoding="utf-8", errors="replace") as f:
        raw = f.read()
    text = strip_comments(raw)
    problems += check_sizes(rel, text.split("\n"))
    if rel.startswith("api" + os.sep) and rel.endswith(".c"):
        problems += route_state(rel, text)
    for no, line in enumerate(text.split("\n"), 1):
        m = ANGLE_INCLUDE.match(line)
        if m and m.group(1).split("/")[0] in folders and "/" in m.group(1):
            problems.append(f"{rel}:{no}: project header <{m.group(1)}> included with angle "
                            "brackets (write \"%s\")" % m.group(1))
        if rel.startswith("api" + os.sep) and rel.endswith(".c"):
            m = LOOP_CALL.search(line)
            if m:
                problems.append(f"{rel}:{no}: a route file schedules on the loop "
                                f"({m.group(1)}): api/ is routes, the engine belongs below it")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sources", required=True)
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    root = a.sources
    folders = {d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))}
    files = a.files
    if not files:
        for d in sorted(folders):
            for n in sorted(os.listdir(os.path.join(root, d))):
                if n.endswith((".c", ".h")):
                    files.append(os.path.join(root, d, n))
        files += [os.path.join(root, n) for n in sorted(os.listdir(root))
                  if n.endswith((".c", ".h"))]
    problems = []
    for f in files:
        problems += check_file(f, root, folders)
    for p in problems:
        print(p)
    print(f"rooms: {len(files)} files, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
