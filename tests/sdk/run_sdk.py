#!/usr/bin/env python3
"""Starts a real runner (with an access token) and runs OpenSandbox's own
TypeScript SDK tests against it; prints 'N passed, N failed'."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from harness import Runner, client_node  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    r = Runner(token="sdk-test-token")
    try:
        env = dict(os.environ, RUNNER_URL=r.url, RUNNER_TOKEN=r.token, NODE=client_node())
        p = subprocess.run([os.path.join(HERE, "run.sh")], env=env, capture_output=True, text=True,
                           timeout=600)
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
    finally:
        r.close()
    passed = re.search(r"^# pass (\d+)", p.stdout, re.M)
    failed = re.search(r"^# fail (\d+)", p.stdout, re.M)
    n_pass = int(passed.group(1)) if passed else 0
    n_fail = int(failed.group(1)) if failed else 1
    if p.returncode != 0 and n_fail == 0:
        n_fail = 1
    print("%d passed, %d failed" % (n_pass, n_fail))
    sys.exit(0 if n_fail == 0 and n_pass > 0 else 1)


if __name__ == "__main__":
    main()
