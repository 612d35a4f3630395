#!/usr/bin/env python3
"""The coding-agent image (docs/design/model.md#images): built offline by
image/coding-agent.sh (Debian 12 + Node.js by debootstrap, the Codex CLI from
npm with the pinned lockfile), run as a real container; an agent task with
"engine": "codex" inside it calls a tool and answers, through the runner's
model proxy, against the scripted gateway on the host.

    python3 tests/container/test_coding_agent.py     (root, podman; after `make static`)

Environment: IMAGE_ENGINE (podman), CA_IMAGE (localhost/forceai-runtime-runner-ct:coding-agent),
CA_REUSE=1 (do not rebuild an existing image)."""
import json
import os
import socket
import subprocess
import sys
import time
import unittest
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "engines"))
from gateways import Gateway, rtext, rtool  # noqa: E402

ENGINE = os.environ.get("IMAGE_ENGINE", "podman")
REPO = os.environ.get("CA_IMAGE_REPO", "localhost/forceai-runtime-runner-ct")
IMAGE = REPO + ":coding-agent"
KEY = "sk-ca-" + os.urandom(6).hex()
TOKEN = "ca-" + os.urandom(8).hex()
CAPS = "SETUID,SETGID,SETPCAP,CHOWN,KILL,DAC_OVERRIDE,FOWNER,FSETID"


def eng(*args, timeout=600):
    return subprocess.run([ENGINE] + list(args), capture_output=True, text=True, timeout=timeout)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class CodingAgentImage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        have = eng("image", "exists", IMAGE).returncode == 0
        if not (have and os.environ.get("CA_REUSE")):
            env = dict(os.environ, ENGINE=ENGINE, IMAGE=REPO, AGENT="codex",
                       NODE_BASE="localhost/forceai-base-node-ct:bookworm",
                       BUILD_FLAGS="--network none --layers=false")
            r = subprocess.run([os.path.join(ROOT, "image", "coding-agent.sh")], cwd=ROOT,
                               env=env, capture_output=True, text=True, timeout=1800)
            if r.returncode != 0:
                raise RuntimeError("image/coding-agent.sh failed:\n" + r.stderr[-3000:])
            cls.build_log = r.stderr
        cls.gw = Gateway(KEY)
        cls.port = free_port()
        cls.name = "forceai-ca-test-%d" % os.getpid()
        # The host's network: the runner listens on a loopback port and its
        # model proxy reaches the scripted gateway on the host's loopback.
        r = eng("run", "-d", "--name", cls.name, "--network", "host",
                "--cap-drop", "ALL", "--cap-add", CAPS,
                "-e", "EXECD_ACCESS_TOKEN=" + TOKEN,
                "-e", "FORCEAI_GATEWAY_URL=" + cls.gw.url,
                "-e", "FORCEAI_GATEWAY_KEY=" + KEY,
                "-e", "FORCEAI_MODEL=test-model",
                IMAGE, "--listen", "127.0.0.1:%d" % cls.port, timeout=120)
        if r.returncode != 0:
            raise RuntimeError("podman run failed: " + r.stderr)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if cls.get("/ping")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)

    @classmethod
    def tearDownClass(cls):
        if not os.environ.get("CA_KEEP"):
            eng("rm", "-f", "-t", "1", cls.name, timeout=120)
        cls.gw.close()

    @classmethod
    def get(cls, path):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (cls.port, path),
                                     headers={"X-EXECD-ACCESS-TOKEN": TOKEN})
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")

    def test_engines_listed(self):
        st, body = self.get("/v1/agent/engines")
        e = {x["name"]: x for x in body["engines"]}
        self.assertTrue(e["codex"]["available"], e["codex"])
        self.assertEqual(e["codex"]["version"], "0.171.0")
        self.assertEqual(e["codex"]["source"], "--agent-engine")
        self.assertFalse(e["claude-code"]["available"])  # AGENT=codex: one CLI

    def test_codex_task_in_the_image(self):
        self.gw.script(rtool("echo in-image-$((6*7)) && id -un"), rtext("It printed in-image-42."))
        body = json.dumps({"task": "run the tool", "capability": "agent", "engine": "codex"})
        r = subprocess.run(["curl", "-sS", "-N", "--max-time", "180",
                            "-H", "X-EXECD-ACCESS-TOKEN: " + TOKEN,
                            "-H", "Content-Type: application/json", "-d", body,
                            "http://127.0.0.1:%d/v1/tasks" % self.port],
                           capture_output=True, text=True, timeout=200)
        ev = []
        for frame in r.stdout.split("\n\n"):
            lines = dict(l.split(": ", 1) for l in frame.split("\n") if ": " in l)
            if "event" in lines:
                ev.append((lines["event"], json.loads(lines["data"])))
        names = [n for n, _ in ev if n not in ("engine.event", "usage")]
        self.assertEqual(names[0], "started", r.stdout[-2000:])
        self.assertEqual(ev[-1][0], "exit", ev[-1])
        self.assertEqual(ev[-1][1]["status"], "succeeded", ev[-1])
        self.assertEqual(ev[-1][1]["answer"], "It printed in-image-42.")
        out = "".join(d.get("text", "") for n, d in ev if n == "tool.result")
        self.assertIn("in-image-42", out)
        self.assertIn("agent", out)  # the task user of the image
        self.assertEqual(self.gw.errors, [])


if __name__ == "__main__":
    res = unittest.main(verbosity=2, exit=False).result
    bad = len(res.failures) + len(res.errors)
    print("%d passed, %d failed" % (res.testsRun - bad, bad))
    sys.exit(1 if bad or not res.testsRun else 0)
