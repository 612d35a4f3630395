#!/usr/bin/env python3
"""Starts a runner with E2B's code-interpreter API on 127.0.0.1:49999 (the port the SDK's
debug mode talks to) and runs tests/code/code.test.mjs with the real @e2b/code-interpreter
client on Node.js >= 20; prints 'N passed, N failed'."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from harness import Runner, client_node  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    setup = subprocess.run([os.path.join(HERE, "setup.sh")], capture_output=True, text=True,
                           timeout=1800)
    if setup.returncode != 0:
        sys.stderr.write(setup.stderr)
        print("0 passed, 1 failed")
        sys.exit(1)
    r = Runner(("--code-interpreter-listen", "127.0.0.1:49999"))
    try:
        p = subprocess.run([client_node(), "--test", os.path.join(HERE, "code.test.mjs")],
                           cwd=HERE, capture_output=True, text=True, timeout=600)
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
    finally:
        rc = r.stop()
        r.close()
    passed = re.search(r"^# pass (\d+)", p.stdout, re.M)
    failed = re.search(r"^# fail (\d+)", p.stdout, re.M)
    n_pass = int(passed.group(1)) if passed else 0
    n_fail = int(failed.group(1)) if failed else 1
    if (p.returncode != 0 or rc != 0) and n_fail == 0:
        n_fail = 1
    print("%d passed, %d failed" % (n_pass, n_fail))
    sys.exit(0 if n_fail == 0 and n_pass > 0 else 1)


if __name__ == "__main__":
    main()
