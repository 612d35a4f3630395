#!/usr/bin/env python3
"""References to the design documents, checked and rewritten.

The one form a reference takes (docs/design.md, "References to the design"):

    design/<concern>.md#<anchor>     a section of a concern's file (docs/design/)
    design/<concern>.md              a whole concern
    design.md#<anchor>               a section of the front page

optionally prefixed by `docs/`; <anchor> is the heading's GitHub anchor
(lower case, punctuation dropped, spaces as '-'). In Markdown the same target
is written as a relative link, `[Title](design/tasks.md#backpressure)`.

  design_refs.py --check [PATH...]
      every reference resolves to an existing file and heading; no old-style
      numbered reference (`design §4.4`, `design.md §4`, `§4.4`) is left.
      Exit 1 listing file:line of each problem.
  design_refs.py --rewrite MAPFILE [--dry-run] [PATH...]
      old-style numbered references rewritten to the form above with
      MAPFILE (scripts/design_refs.map: old number, target, title).

A `§` after `RFC NNNN` or after another document's name (`performance.md §2`)
is not the design's and is left alone, as is the rest of a list it starts.
A file that holds the marker SKIP (a fixture of old references) is skipped.
"""
import os
import re
import sys

SKIP = "design-refs: " + "skip this file"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
SCAN = ["runner", "tests", "docs", "scripts", "mk", "Makefile", "README.md", "image"]
EXTS = (".c", ".h", ".py", ".md", ".sh", ".mk", ".js", ".txt", ".json", ".yaml", ".yml",
        "Makefile", "Containerfile")

SECT = re.compile(r"§ ?(\d+(?:\.\d+)*)")
# the new form, outside Markdown links (paths relative to docs/)
NEW = re.compile(r"(?<![\w/.-])(?:docs/)?(design(?:/[a-z0-9-]+)?\.md)(?:#([\w-]+))?")
LINK = re.compile(r"\]\(([^)\s#]*\.md)(?:#([^)\s]*))?\)")
# what may stand between two references of one list, or a reference and what it
# follows, across a line break inside a comment (` * `, `# `, `// `)
GAP = r"(?:\s*\n\s*(?:\*|#|//)?)?\s*"
CONNECT = re.compile(r"^(?:,|\s+and|,\s*and|\s*-|\s*/|,?\s+or)?" + GAP + "$")
FOREIGN = re.compile(r"(?:RFC \d+|(?<!design)\.md\)?|POSIX|spec)" + GAP + "$", re.I)


def slug(title):
    t = title.strip().lower()
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")


def anchors_of(path):
    """The GitHub anchors of a Markdown file's headings (code fences skipped)."""
    out, seen, fence = set(), {}, False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                fence = not fence
            if fence:
                continue
            m = re.match(r"^#{1,6} (.*)$", line.rstrip("\n"))
            if m:
                a = slug(m.group(1))
                if a in seen:
                    seen[a] += 1
                    a = "%s-%d" % (a, seen[a])
                else:
                    seen[a] = 0
                out.add(a)
    return out


_anchor_cache = {}


def resolves(target_path, anchor):
    if not os.path.isfile(target_path):
        return False
    if not anchor:
        return True
    if target_path not in _anchor_cache:
        _anchor_cache[target_path] = anchors_of(target_path)
    return anchor in _anchor_cache[target_path]


def files(paths):
    for p in paths or SCAN:
        p = os.path.join(ROOT, p) if not os.path.isabs(p) else p
        found = [p] if os.path.isfile(p) else []
        for d, dirs, fs in os.walk(p):
            dirs[:] = [x for x in dirs if x not in (".git", "build", "node_modules", "__pycache__")]
            found += [os.path.join(d, f) for f in sorted(fs) if f.endswith(EXTS) or f in EXTS]
        for f in found:
            try:
                with open(f, encoding="utf-8") as fh:
                    if SKIP in fh.read():
                        continue
            except (UnicodeDecodeError, OSError):
                continue
            yield f


def old_refs(text):
    """(start, end, number) of every numbered § that cites the design."""
    out, prev_end, prev_foreign = [], None, False
    for m in SECT.finditer(text):
        before = text[max(0, m.start() - 40):m.start()]
        between = text[prev_end:m.start()] if prev_end is not None else None
        if FOREIGN.search(before):
            foreign = True
        elif between is not None and CONNECT.match(between):
            foreign = prev_foreign
        else:
            foreign = False
        prev_end, prev_foreign = m.end(), foreign
        if not foreign:
            out.append((m.start(), m.end(), m.group(1)))
    return out


def lineno(text, pos):
    return text.count("\n", 0, pos) + 1


def check(paths):
    problems = []
    for path in files(paths):
        rel = os.path.relpath(path, ROOT)
        try:
            text = open(path, encoding="utf-8").read()
        except UnicodeDecodeError:
            continue
        if rel == "scripts/design_refs.py":
            continue
        for s, e, num in old_refs(text):
            problems.append("%s:%d: old-style design reference §%s" % (rel, lineno(text, s), num))
        for m in NEW.finditer(text):
            if text[max(0, m.start() - 2):m.start()] == "](" or (
                    m.group(1) == "design.md" and not m.group(2)):
                continue
            if not resolves(os.path.join(DOCS, m.group(1)), m.group(2)):
                problems.append("%s:%d: %s does not resolve" % (rel, lineno(text, m.start()),
                                                              m.group(0)))
        if path.endswith(".md"):
            for m in LINK.finditer(text):
                target = os.path.normpath(os.path.join(os.path.dirname(path), m.group(1)))
                if "://" in m.group(1) or not target.startswith(DOCS + os.sep + "design"):
                    continue
                if not resolves(target, m.group(2)):
                    problems.append("%s:%d: link %s%s does not resolve" % (
                        rel, lineno(text, m.start()), m.group(1),
                        "#" + m.group(2) if m.group(2) else ""))
    for p in problems:
        print(p)
    sys.stdout.flush()
    if problems:
        print("design_refs: %d reference(s) do not resolve (the form: docs/design.md, "
              "\"References to the design\")" % len(problems), file=sys.stderr)
        return 1
    return 0


def load_map(path):
    mp = {}
    for line in open(path, encoding="utf-8"):
        if not line.strip() or line.startswith("#"):
            continue
        num, target, title = line.rstrip("\n").split("\t")[:3]
        mp[num] = (target, title)
    return mp


MD_LINK_OLD = re.compile(r"\[(?:docs/)?design(?:\.md)? ((?:§ ?\d+(?:\.\d+)*(?:,?\s*(?:and\s+)?)?)+)\]"
                         r"\([^)\s]*design\.md(?:#[^)]*)?\)", re.I)
PREFIX = re.compile(r"(?:(docs/)?design(?:\.md)?,?\s)$", re.I)
SUFFIX = re.compile(r"^ of the design(?: document)?")


def rewrite_text(text, path, mp, unresolved):
    md = path.endswith(".md")
    here = os.path.dirname(path)

    def md_link(num, keep):
        target, title = mp[num]
        rel = os.path.relpath(os.path.join(DOCS, target.split("#")[0]), here)
        frag = "#" + target.split("#", 1)[1] if "#" in target else ""
        return "[%s](%s%s)" % (title, rel, frag)

    count = 0
    if md:
        def sub_link(m):
            nonlocal count
            nums = re.findall(r"§ ?(\d+(?:\.\d+)*)", m.group(1))
            if any(n not in mp for n in nums):
                unresolved.extend(n for n in nums if n not in mp)
                return m.group(0)
            count += len(nums)
            return ", ".join(md_link(n, True) for n in nums)
        text = MD_LINK_OLD.sub(sub_link, text)
    out, last = [], 0
    for s, e, num in old_refs(text):
        if num not in mp:
            unresolved.append("%s:%d: §%s" % (os.path.relpath(path, ROOT), lineno(text, s), num))
            continue
        target, title = mp[num]
        pm = PREFIX.search(text[last:s])
        start = s - len(pm.group(0)) if pm else s
        docs_prefix = pm.group(1) or "" if pm else ""
        sm = SUFFIX.match(text[e:])
        end = e + (len(sm.group(0)) if sm else 0)
        if md:
            rep = md_link(num, False)
        else:
            rep = docs_prefix + target
        out.append(text[last:start])
        out.append(rep)
        last = end
        count += 1
    out.append(text[last:])
    return "".join(out), count


def rewrite(mapfile, paths, dry):
    mp = load_map(mapfile)
    total, unresolved = 0, []
    for path in files(paths):
        rel = os.path.relpath(path, ROOT)
        if rel == "scripts/design_refs.py":
            continue
        try:
            text = open(path, encoding="utf-8").read()
        except UnicodeDecodeError:
            continue
        new, n = rewrite_text(text, path, mp, unresolved)
        if n:
            total += n
            print("%s: %d" % (rel, n))
            if not dry:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)
    for u in unresolved:
        print("no mapping: %s" % u, file=sys.stderr)
    print("%s %d reference(s)%s" % ("would rewrite" if dry else "rewrote", total,
                                    ", %d without a mapping" % len(unresolved) if unresolved else ""))
    return 1 if unresolved else 0


def main(argv):
    if argv[:1] == ["--check"]:
        return check(argv[1:])
    if argv[:1] == ["--rewrite"] and len(argv) >= 2:
        rest = argv[2:]
        dry = "--dry-run" in rest
        rest = [a for a in rest if a != "--dry-run"]
        return rewrite(argv[1], rest, dry)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
