#!/usr/bin/env python3
"""The /mcp suite: the official MCP TypeScript SDK client tests (mcp.test.mjs) against a runner
with an access token, then the MCP conformance suite's server scenarios that need no fixture
tools of its own against a runner without one (the suite sends no token). Node.js 22 and the
pinned packages come from setup.sh (cached outside the clone). Prints each conformance
scenario's checks and 'N passed, N failed' (SDK tests + conformance scenarios)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from harness import Runner  # noqa: E402

# The scenarios whose checks need only what any MCP server has (the others call fixture
# tools, resources and prompts the suite's own reference server defines).
SCENARIOS = ["server-initialize", "ping", "tools-list", "dns-rebinding-protection",
             "server-sse-multiple-streams"]


def servers_file(node, tmp):
    """Two stdio servers behind /mcp: the real filesystem server from npm (rooted in a
    directory of its own) and a hostile one (hostile_server.py)."""
    fs_root = os.path.join(tmp, "fs-root")
    os.mkdir(fs_root)
    os.chmod(tmp, 0o755)
    os.chmod(fs_root, 0o777)
    hostile = os.path.join(tmp, "hostile_server.py")
    shutil.copy(os.path.join(HERE, "hostile_server.py"), hostile)
    os.chmod(hostile, 0o755)
    fs_server = os.path.join(HERE, "node_modules", "@modelcontextprotocol", "server-filesystem",
                             "dist", "index.js")
    cfg = os.path.join(tmp, "mcp-servers.json")
    with open(cfg, "w") as f:
        json.dump({"mcpServers": {
            "fs": {"command": os.path.realpath(node), "args": [os.path.realpath(fs_server), fs_root]},
            "hostile": {"command": "/usr/bin/python3", "args": [hostile],
                        "env": {"HOSTILE_MARK": "1"}}}}, f)
    return cfg, fs_root


def sdk_tests(node):
    tmp = tempfile.mkdtemp(prefix="forceai-mcp-")
    cfg, fs_root = servers_file(node, tmp)
    r = Runner(token="mcp-test-token-" + os.urandom(6).hex(), args=("--mcp-servers", cfg))
    try:
        env = dict(os.environ, RUNNER_URL=r.url, RUNNER_TOKEN=r.token, RUNNER_WORK=r.work,
                   FS_ROOT=fs_root)
        p = subprocess.run([node, "--test", "--test-concurrency=1",
                            os.path.join(HERE, "mcp.test.mjs")],
                           env=env, capture_output=True, text=True, timeout=600, cwd=HERE)
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
        rc = r.stop()
        if rc != 0:
            print("runner exited %s after SIGTERM:\n%s" % (rc, r.logtext()[-3000:]))
    finally:
        r.close()
        shutil.rmtree(tmp, ignore_errors=True)
    passed = re.search(r"^# pass (\d+)", p.stdout, re.M)
    failed = re.search(r"^# fail (\d+)", p.stdout, re.M)
    n_pass = int(passed.group(1)) if passed else 0
    n_fail = int(failed.group(1)) if failed else 1
    if (p.returncode != 0 or rc != 0) and n_fail == 0:
        n_fail = 1
    return n_pass, n_fail


def conformance(node):
    conf = os.path.join(HERE, "node_modules", "@modelcontextprotocol", "conformance", "dist",
                        "index.js")
    r = Runner()
    n_pass = n_fail = 0
    try:
        for sc in SCENARIOS:
            p = subprocess.run([node, conf, "server", "--url", "http://127.0.0.1:%d/mcp" % r.port,
                                "--scenario", sc], capture_output=True, text=True, timeout=180)
            out = re.sub(r"\x1b\[[0-9;]*m", "", p.stdout)
            checks = re.findall(r"\[([\w-]+)\s*\] (SUCCESS|FAILURE|WARNING|INFO)\s+(.*)", out)
            m = re.search(r"Passed: (\d+)/(\d+), (\d+) failed", out)
            ok = p.returncode == 0 and m is not None and m.group(3) == "0"
            print("conformance %-30s %s  %s" % (sc, "PASS" if ok else "FAIL",
                                                m.group(0) if m else "(no summary)"))
            for cid, st, what in checks:
                print("    %-40s %-8s %s" % (cid, st, what))
            if not ok:
                print(out[-2000:], p.stderr[-2000:])
            n_pass += ok
            n_fail += not ok
    finally:
        r.close()
    return n_pass, n_fail


def main():
    node = subprocess.run([os.path.join(HERE, "setup.sh")], capture_output=True, text=True,
                          check=True).stdout.strip().splitlines()[-1]
    a = sdk_tests(node)
    b = conformance(node)
    print("%d passed, %d failed" % (a[0] + b[0], a[1] + b[1]))
    sys.exit(0 if a[1] + b[1] == 0 and a[0] > 0 else 1)


if __name__ == "__main__":
    main()
