#!/usr/bin/env python3
"""Starts a runner with E2B's envd API (--envd-listen) and runs tests/e2b/e2b.test.mjs with the
real `e2b` SDK (pinned) on Node.js >= 20, in debug mode: on 127.0.0.1:49983 (the port the SDK's
debug mode talks to) when it is free, else on a free port named by E2B_SANDBOX_URL (the SDK's
own override); prints 'N passed, N failed'."""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from harness import Runner, client_node, free_port  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def envd_port():
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 49983))
        return 49983
    except OSError:
        return free_port()
    finally:
        s.close()


def main():
    setup = subprocess.run([os.path.join(HERE, "setup.sh")], capture_output=True, text=True,
                           timeout=1800)
    if setup.returncode != 0:
        sys.stderr.write(setup.stderr)
        print("0 passed, 1 failed")
        sys.exit(1)
    port = envd_port()
    work = tempfile.mkdtemp(prefix="forceai-e2b-", dir="/tmp")
    os.chmod(work, 0o755)
    os.chown(work, 1000, 1000)
    try:
        r = Runner(("--envd-listen", "127.0.0.1:%d" % port))
    except RuntimeError as e:  # no face to test: a failure, with the runner's words
        sys.stderr.write("%s\n" % e)
        print("0 passed, 1 failed")
        sys.exit(1)
    env = dict(os.environ, RUNNER_URL=r.url, E2B_TEST_DIR=work)
    if port != 49983:
        env["E2B_SANDBOX_URL"] = "http://127.0.0.1:%d" % port
    try:
        p = subprocess.run([client_node(), "--test", "--test-concurrency=1",
                            os.path.join(HERE, "e2b.test.mjs")],
                           cwd=HERE, capture_output=True, text=True, timeout=600, env=env)
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
    finally:
        rc = r.stop()
        r.close()
        shutil.rmtree(work, ignore_errors=True)
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
