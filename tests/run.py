#!/usr/bin/env python3
"""Runs test suites (directories under tests/ holding test_*.py) and prints
'N passed, N failed' as the last line; exits non-zero on any failure."""
import os
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))


class TimedResult(unittest.TextTestResult):
    """Records each test's wall time: where a suite's minutes go is printed
    with its summary (tests/README.md keeps the stage budget)."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.times = []

    def startTest(self, test):
        self._t0 = time.monotonic()
        super().startTest(test)

    def stopTest(self, test):
        super().stopTest(test)
        self.times.append((time.monotonic() - self._t0, test.id()))


def asserts_memory(test):
    """The tests whose memory bounds hold only for the plain build
    (harness.rss_is_meaningful, or a class skipped when SANITIZED): make
    check runs the integration suite under ASan and valgrind, and these once
    more against the plain build (TEST_MEMORY_ONLY=1)."""
    import inspect
    marks = ("rss_is_meaningful", "SANITIZED")
    try:
        method = inspect.getsource(getattr(test, test._testMethodName))
        lines, start = inspect.findsource(type(test))
    except (OSError, TypeError, AttributeError):
        return False
    # findsource points at the class line or (3.9+) its first decorator.
    decorators, j = [], start
    while j < len(lines) and lines[j].lstrip().startswith("@"):
        decorators.append(lines[j])
        j += 1
    j = start - 1
    while j >= 0 and lines[j].lstrip().startswith("@"):
        decorators.append(lines[j])
        j -= 1
    return any(m in text for m in marks for text in [method] + decorators)


def flatten(t, out):
    if isinstance(t, unittest.TestSuite):
        for x in t:
            flatten(x, out)
    else:
        out.append(t)
    return out


def modules_of(tests):
    """{module: [tests]}: a module's classes share runners and fixtures, so a
    module is the unit a shard takes."""
    by_module = {}
    for t in flatten(tests, []):
        by_module.setdefault(type(t).__module__, []).append(t)
    return by_module


def run_shards(tests, n):
    """TEST_SHARDS=n: n worker processes at once, each taking the next whole
    module (most tests first) when it is free; the modules' outputs printed
    in order, then one summary. For the suites whose time is the runner's own
    CPU under valgrind or ASan: each worker's runners use a core of their own."""
    by_module = modules_of(tests)
    queue = sorted(by_module, key=lambda m: (-len(by_module[m]), m))
    outputs, running = {}, []
    rc = 0
    while queue or running:
        while queue and len(running) < n:
            mod = queue.pop(0)
            out = tempfile.TemporaryFile(mode="w+")
            env = dict(os.environ, TEST_MODULE=mod, TEST_SHARDS="1")
            running.append((mod, out, subprocess.Popen(
                [sys.executable, os.path.abspath(__file__)] + sys.argv[1:],
                stdout=out, stderr=subprocess.STDOUT, env=env)))
        time.sleep(0.2)
        for job in [j for j in running if j[2].poll() is not None]:
            running.remove(job)
            mod, out, p = job
            rc |= p.returncode
            out.seek(0)
            outputs[mod] = out.read()
            out.close()
    passed = failed = skipped = 0
    times = []
    for mod in sorted(outputs):
        text = outputs[mod]
        sys.stdout.write(text)
        last = [l for l in text.splitlines() if " passed, " in l and " failed" in l]
        if not last:
            failed += 1  # a worker that died before its summary
            continue
        words = last[-1].replace(",", "").split()
        passed += int(words[0])
        failed += int(words[2])
        if "skipped" in words:
            skipped += int(words[4])
    sys.stdout.flush()
    line = "%d passed, %d failed" % (passed, failed)
    if skipped:
        line += ", %d skipped" % skipped
    print("%d modules in %d workers" % (len(outputs), n))
    print(line)
    return 1 if failed or rc else 0


def main():
    suites = sys.argv[1:] or ["unit", "pid1", "integration", "security"]
    loader = unittest.TestLoader()
    all_tests = unittest.TestSuite()
    for s in suites:
        path = os.path.join(HERE, s)
        if os.path.isdir(path):
            all_tests.addTests(loader.discover(path, pattern="test_*.py", top_level_dir=path))
    pattern = os.environ.get("TEST_FILTER")
    memory_only = os.environ.get("TEST_MEMORY_ONLY")
    if pattern or memory_only:
        flat = flatten(all_tests, [])
        if pattern:
            # Comma-separated substrings of the test id: any one selects.
            pats = [p for p in pattern.split(",") if p]
            flat = [t for t in flat if any(p in t.id() for p in pats)]
        if memory_only:
            flat = [t for t in flat if asserts_memory(t)]
        all_tests = unittest.TestSuite(flat)
    shards = int(os.environ.get("TEST_SHARDS") or 1)
    if shards > 1:
        sys.exit(run_shards(all_tests, shards))
    module = os.environ.get("TEST_MODULE")
    if module:
        all_tests = unittest.TestSuite(modules_of(all_tests).get(module, []))
    t0 = time.monotonic()
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout,
                                     resultclass=TimedResult).run(all_tests)
    wall = time.monotonic() - t0
    slow = sorted(result.times, reverse=True)[:int(os.environ.get("TEST_SLOWEST", "10"))]
    if slow:
        print("slowest of %d tests (%.0f s in all):" % (len(result.times), wall))
        for secs, name in slow:
            print("  %6.1f s  %s" % (secs, name))
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    passed = result.testsRun - failed - len(result.skipped)
    line = "%d passed, %d failed" % (passed, failed)
    if result.skipped:
        line += ", %d skipped" % len(result.skipped)
    print(line)
    sys.exit(1 if failed or result.testsRun == 0 else 0)


if __name__ == "__main__":
    main()
