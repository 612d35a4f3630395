#!/usr/bin/env python3
"""The rooms of runner/ (`make rooms`, docs/design.md §2.3): checks of what a file may hold that
the module graph (scripts/modgraph.py) does not see.

  - api/ is routes: a file of runner/api/ schedules nothing on the event loop (loop_timer_*,
    loop_watch_*, loop_defer). Work that lives on the loop past its request is an engine's and
    belongs on the floor that owns it (pty/, mcp/, watch/, metrics/, ...).
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
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def strip_comments(text):
    """Comments blanked, newlines kept (so line numbers hold)."""
    return COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def check_file(path, root, folders):
    rel = os.path.relpath(path, root)
    problems = []
    with open(path, encoding="utf-8", errors="replace") as f:
        text = strip_comments(f.read())
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
