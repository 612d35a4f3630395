#!/usr/bin/env python3
"""Starts a runner with E2B's envd API (--envd-listen) and runs tests/e2b/e2b.test.mjs with the
real `e2b` SDK (pinned) on Node.js >= 20, in debug mode: on 127.0.0.1:49983 (the port the SDK's
debug mode talks to) when it is free, else on a free port named by E2B_SANDBOX_URL (the SDK's
own override); prints 'N passed, N failed'."""
import atexit
import os
import shutil
import socket
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from harness import free_port, run_node_suite  # noqa: E402


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
    port = envd_port()
    work = tempfile.mkdtemp(prefix="forceai-e2b-", dir="/tmp")
    atexit.register(shutil.rmtree, work, True)
    os.chmod(work, 0o755)
    os.chown(work, 1000, 1000)
    env = {"E2B_TEST_DIR": work}
    if port != 49983:
        env["E2B_SANDBOX_URL"] = "http://127.0.0.1:%d" % port
    run_node_suite(os.path.dirname(os.path.abspath(__file__)), "e2b.test.mjs",
                   ("--envd-listen", "127.0.0.1:%d" % port), env, ("--test-concurrency=1",))


if __name__ == "__main__":
    main()
