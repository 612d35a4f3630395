#!/usr/bin/env python3
"""Runs test suites (directories under tests/ holding test_*.py) and prints
'N passed, N failed' as the last line; exits non-zero on any failure."""
import os
import sys
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
        flat = []

        def walk(t):
            if isinstance(t, unittest.TestSuite):
                for x in t:
                    walk(x)
            else:
                flat.append(t)
        walk(all_tests)
        if pattern:
            # Comma-separated substrings of the test id: any one selects.
            pats = [p for p in pattern.split(",") if p]
            flat = [t for t in flat if any(p in t.id() for p in pats)]
        if memory_only:
            flat = [t for t in flat if asserts_memory(t)]
        all_tests = unittest.TestSuite(flat)
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
