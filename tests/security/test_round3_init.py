"""Red-team round three (issue 36): runtime init and lifecycle hooks from
the attacker's side.

- A task (uid 1000, confined, started through the API) calls POST
  /internal/init to bind the box to its own token hash: the connection gate
  (docs/design/security.md#no-api-from-tasks) gives it no answer and the slot stays free for the
  control plane.
- A second init (a client outside the box racing the control plane, or a
  replay) after the control plane's: 409, and the binding (sandbox, token)
  does not change.
- A wrong token against the hash: the raw hash itself, its hex, a prefix, an
  empty header; each 401.
- A hook that never ends: a preStart past its timeout is killed (its whole
  tree) and the box reports it; a periodic hook that never ends is never
  started twice.

Figures go to build/security/round3_init.json."""
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

from harness import ROOT, Runner, record_figure

PY = "/usr/bin/python3"
FIGURES = os.path.join(ROOT, "build", "security", "round3_init.json")

ATTACK_INIT = r'''
import hashlib, json, socket, sys
port = int(sys.argv[1])
body = json.dumps({"sandboxId": "attacker", "generation": 99,
                   "accessTokenHash": "sha256:" + hashlib.sha256(b"attacker").hexdigest()}).encode()
out = {}
for addr in ("127.0.0.1", "127.0.0.2"):
    try:
        s = socket.create_connection((addr, port), timeout=3)
        s.sendall(b"POST /internal/init HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        got = s.recv(200)
        out[addr] = got.split(b"\r\n")[0].decode(errors="replace") if got else "closed"
        s.close()
    except OSError as e:
        out[addr] = "error: %s" % e.__class__.__name__
print(json.dumps(out))
'''


def th(tok):
    return "sha256:" + hashlib.sha256(tok.encode()).hexdigest()


def procs_with(marker):
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


class RuntimeInitAttacks(unittest.TestCase):
    def setUp(self):
        # A warm pooled box. Its writable roots are a scratch directory: a
        # reset must never touch the host's /tmp.
        roots = tempfile.mkdtemp(prefix="forceai-r3-roots-")
        os.chmod(roots, 0o1777)
        self.addCleanup(shutil.rmtree, roots, True)
        self.r = Runner(["--runtime-init", "--allow-reset", "--landlock-roots", roots])

    def tearDown(self):
        rc = self.r.stop()
        log = self.r.logtext()
        self.r.close()
        if rc != 0:
            raise AssertionError("runner exited %s:\n%s" % (rc, log[-3000:]))

    def bind(self, sandbox="cp", gen=1, tok=None):
        tok = tok or "cp-" + os.urandom(10).hex()
        st, b = self.r.json("POST", "/internal/init", {"sandboxId": sandbox, "generation": gen,
                                                       "accessTokenHash": th(tok)})
        self.assertEqual(st, 200, b)
        return tok

    def test_a_task_cannot_call_internal_init(self):
        # A task can only run once the box is bound; it then tries to take
        # the box over by a second binding of its own (after a reset the slot
        # is open again: the task's connection must still get nothing).
        tok = self.bind()
        self.r.token = tok
        path = os.path.join(self.r.work, "attack_init.py")
        with open(path, "w") as f:
            f.write(ATTACK_INIT)
        os.chmod(path, 0o644)
        ev = self.r.execd({"command": "%s %s %d" % (PY, path, self.r.port), "timeout": 30000})
        res = json.loads([e["text"] for e in ev if e.get("type") == "stdout"][-1])
        record_figure(FIGURES, "task_calls_internal_init", res)
        for addr, line in res.items():
            self.assertNotIn("HTTP/1.1", line, "%s: a task got an answer: %s" % (addr, line))
        st, b = self.r.json("GET", "/ready")
        self.assertEqual(b["sandboxId"], "cp")
        # Reset reopens the slot; a task started before it is gone, and the
        # gate still refuses any task connection: only the control plane binds.
        self.assertEqual(self.r.json("POST", "/v1/reset")[0], 200)
        self.r.token = None
        self.bind(sandbox="cp-2", gen=2)
        self.assertEqual(self.r.json("GET", "/ready")[1]["sandboxId"], "cp-2")

    def test_a_second_init_cannot_rebind(self):
        tok = self.bind(sandbox="victim")
        evil = "evil-" + os.urandom(8).hex()
        t0 = time.monotonic()
        codes = []
        for body in ({"sandboxId": "evil", "generation": 2, "accessTokenHash": th(evil)},
                     {"sandboxId": "evil", "generation": 1000000, "accessTokenHash": th(evil),
                      "envs": {"LD_PRELOAD": "/tmp/x.so"}},
                     {"sandboxId": "victim", "generation": 1}):
            st, b = self.r.json("POST", "/internal/init", body,
                                headers={"X-EXECD-ACCESS-TOKEN": evil})
            codes.append((st, b.get("code")))
        record_figure(FIGURES, "second_init", {"answers": codes,
                                               "ms": round((time.monotonic() - t0) * 1000, 1)})
        self.assertEqual(codes, [(409, "ALREADY_INITIALIZED")] * 3)
        self.assertEqual(self.r.json("GET", "/ready")[1]["sandboxId"], "victim")
        self.r.token = evil
        self.assertEqual(self.r.request("GET", "/metrics")[0], 401)
        self.r.token = tok
        self.assertEqual(self.r.request("GET", "/metrics")[0], 200)

    def test_wrong_tokens_against_the_hash(self):
        tok = self.bind()
        h = th(tok)
        wrong = ["", " ", tok[:-1], tok + " ", tok.upper(), h, h[len("sha256:"):],
                 hashlib.sha256(h.encode()).hexdigest(), "x" * 4096]
        answers = {}
        for w in wrong:
            st = self.r.request("GET", "/metrics", headers={"X-EXECD-ACCESS-TOKEN": w})[0]
            answers[w[:24]] = st
        # The MCP Bearer path uses the same check.
        st = self.r.request("POST", "/mcp", b"{}", headers={"Authorization": "Bearer " + h})[0]
        answers["bearer-hash"] = st
        record_figure(FIGURES, "wrong_tokens", answers)
        self.assertEqual(set(answers.values()), {401}, answers)
        self.r.token = tok
        self.assertEqual(self.r.request("GET", "/metrics")[0], 200)


class HookAttacks(unittest.TestCase):
    def run_box(self, lifecycle):
        self.r = Runner([], env={"OPEN_SANDBOX_LIFECYCLE": json.dumps(lifecycle)})
        return self.r

    def tearDown(self):
        rc = self.r.stop()
        self.r.close()
        self.assertEqual(rc, 0)

    def test_a_prestart_that_never_ends(self):
        marker = "r3-pre-%s" % os.urandom(4).hex()
        # It also leaves a daemon behind (setsid): the whole tree goes.
        cmd = ("setsid %s -c 'import time; time.sleep(1000)' %s-child & "
               "exec %s -c 'import time; time.sleep(1000)' %s" % (PY, marker, PY, marker))
        t0 = time.monotonic()
        r = self.run_box({"preStart": {"command": cmd, "timeoutSeconds": 1}})
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and r.json("GET", "/ready")[1].get("status") != "failed":
            time.sleep(0.05)
        took = time.monotonic() - t0
        st, b = r.json("GET", "/ready")
        left = procs_with(marker)
        deadline = time.monotonic() + 5
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = procs_with(marker)
        record_figure(FIGURES, "prestart_never_ends", {"failed_after_s": round(took, 2),
                                                       "processes_left": len(left)})
        self.assertEqual((st, b["code"]), (503, "PRESTART_FAILED"), b)
        self.assertIn("timed out", b["message"])
        self.assertLess(took, 8)
        self.assertEqual(left, [])
        st, b = r.json("POST", "/command", {"command": "true"})
        self.assertEqual((st, b["code"]), (503, "PRESTART_FAILED"))

    def test_a_periodic_hook_that_never_ends_runs_once(self):
        marker = "r3-per-%s" % os.urandom(4).hex()
        r = self.run_box({"periodic": [{"name": "stuck", "intervalSeconds": 1, "timeoutSeconds": 300,
                                        "command": [PY, "-c", "import time; time.sleep(1000)",
                                                    marker]}]})
        time.sleep(4.2)
        n = len(procs_with(marker))
        per = r.json("GET", "/ready")[1]["lifecycle"]["periodic"][0]
        record_figure(FIGURES, "periodic_never_ends", {"processes": n, "runs": per["runs"],
                                                       "skipped": per["skipped"]})
        self.assertEqual(n, 1)
        self.assertEqual(per["runs"], 1)
        self.assertGreaterEqual(per["skipped"], 2)


if __name__ == "__main__":
    unittest.main()
