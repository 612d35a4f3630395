#!/usr/bin/env python3
"""Starts a runner with E2B's code-interpreter API on 127.0.0.1:49999 (the port the SDK's
debug mode talks to) and runs tests/code/code.test.mjs with the real @e2b/code-interpreter
client on Node.js >= 20; prints 'N passed, N failed'."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from harness import run_node_suite  # noqa: E402

if __name__ == "__main__":
    run_node_suite(os.path.dirname(os.path.abspath(__file__)), "code.test.mjs",
                   ("--code-interpreter-listen", "127.0.0.1:49999"))
