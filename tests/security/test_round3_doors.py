"""Round three of the runner's doors (issue 36), from the attacker's side: the self endpoint
/proxy/{the runner's own port} (docs/design/build.md#what-opensandboxs-server-runtimes-expect-of-the-image) opened to clients must stay closed to
tasks exactly as the API is (design/security.md#no-api-from-tasks); an operation id or Idempotency-Key reused by another
client, and a resume of an id that is not an execd command (design/wire.md#opensandbox-execd-compatible-api, design/wire.md#native-task-api).

The model: whoever holds the access token is the one client of the box. Two connections with
the same token are the same client: a key one of them chose is the other's too (a retry from
another process is the point of the key). A key can never start a second run, and a request
under a used key that differs from the first is refused (409) without running.

Figures are printed ([figure] lines) and kept in build/security/round3.json."""
import json
import os
import subprocess
import sys
import unittest

import harness
from harness import ROOT, Runner, parse_execd, parse_sse, record_figure

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_round2 import ScratchRoots, clean_exit  # noqa: E402

PY = "/usr/bin/python3"
FIGURES = os.path.join(ROOT, "build", "security", "round3.json")
TOKEN = "round3-%s" % os.urandom(8).hex()


def figure(name, value):
    record_figure(FIGURES, name, value)


# A task's attempts on the runner's port: each answer's status line, or how it failed.
ATTACK = r'''
import json, socket, sys
port, token, marker = int(sys.argv[1]), sys.argv[2], sys.argv[3]

def exchange(data):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=3)
    except OSError as e:
        return "connect: %s" % e
    try:
        s.sendall(data)
        got = s.recv(200)
        return got.split(b"\r\n")[0].decode(errors="replace") if got else "closed"
    except OSError as e:
        return "closed: %s" % e.__class__.__name__
    finally:
        s.close()

def req(method, path, body=None, tok=token):
    b = json.dumps(body).encode() if body is not None else b""
    return (b"%s %s HTTP/1.1\r\nHost: x\r\nX-EXECD-ACCESS-TOKEN: %s\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (method.encode(), path.encode(), tok.encode(), len(b), b))

own = "/proxy/%d" % port
out = {}
for prefix in ("", own, own + own):
    out[prefix + " ping"] = exchange(req("GET", (prefix or "") + "/ping"))
    out[prefix + " ping-no-token"] = exchange(b"GET %s/ping HTTP/1.1\r\nHost: x\r\n\r\n"
                                             % prefix.encode())
    out[prefix + " command"] = exchange(req("POST", prefix + "/command", {
        "command": "touch %s.%d" % (marker, len(prefix))}))
    out[prefix + " operations"] = exchange(req("GET", prefix + "/execution/instance"))
print(json.dumps(out))
'''


class SelfProxyDoors(unittest.TestCase):
    """A task calling /proxy/{own port} is refused exactly as a task calling the API: no
    answer, nothing run; a client outside the tasks gets the API."""

    def test_task_cannot_reach_the_api_through_the_self_endpoint(self):
        r = Runner(token=TOKEN)
        try:
            marker = os.path.join(r.work, "marker")
            attack = os.path.join(r.work, "attack.py")
            with open(attack, "w") as f:
                f.write(ATTACK)
            os.chmod(attack, 0o644)
            ev = r.execd({"command": "%s %s %d %s %s" % (PY, attack, r.port, TOKEN, marker),
                          "timeout": 60000})
            res = json.loads([e["text"] for e in ev if e["type"] == "stdout"][-1])
            figure("task_attempts_through_self_endpoint", res)
            for k, v in res.items():
                with self.subTest(attempt=k):
                    self.assertNotIn("HTTP/1.1", v, "a task got an answer from the API")
            self.assertEqual([f for f in os.listdir(r.work) if f.startswith("marker")], [],
                             "a task's request ran")
            # The client outside: the self endpoint is the API (baseline: 403 FORBIDDEN).
            st, _, d = r.request("POST", "/proxy/%d/command" % r.port,
                                 body={"command": "touch %s.client" % marker})
            self.assertEqual(st, 200, d)
            self.assertTrue(os.path.exists(marker + ".client"))
            # Nested, it is not re-dispatched again (no loop): refused.
            st, _, d = r.request("GET", "/proxy/%d/proxy/%d/ping" % (r.port, r.port))
            self.assertEqual((st, json.loads(d)["code"]), (403, "FORBIDDEN"))
        finally:
            r.stop()
            r.close()


class OperationIdDoors(unittest.TestCase):
    """An operation id or Idempotency-Key chosen by one client, reused by another (same
    token: the same client in this model) never starts a second run; a different request
    under it is 409 and does not run; a key of the previous tenant (after a reset) is refused
    as such, never taken for a new one."""

    def setUp(self):
        self.roots = ScratchRoots()
        self.addCleanup(self.roots.close)
        self.r = Runner(("--allow-reset", "--landlock-roots", self.roots.roots_arg()),
                        token=TOKEN)
        self.addCleanup(self.r.close)
        self.addCleanup(clean_exit, self.r)
        self.count = os.path.join(self.roots.tmp, "count")

    def op_id(self):
        st, inst = self.r.json("GET", "/execution/instance")
        self.assertEqual(st, 200, inst)
        return "%s.%d.%s" % (inst["instance_id"], inst["issued_at"], os.urandom(8).hex())

    def runs(self):
        try:
            with open(self.count) as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def test_operation_id_reused_by_another_client(self):
        oid = self.op_id()
        a = {"operation_id": oid, "command": "echo a >> %s" % self.count}
        st, _, d = self.r.request("POST", "/command/operations", body=a)
        self.assertEqual(st, 200, d)
        first = json.loads(d)
        # B, another connection with the token: the same request attaches, another is refused.
        st, _, d = self.r.request("POST", "/command/operations", body=a)
        self.assertEqual((st, json.loads(d)), (200, first))
        b = {"operation_id": oid, "command": "echo b >> %s" % self.count}
        st, _, d = self.r.request("POST", "/command/operations", body=b)
        self.assertEqual((st, json.loads(d)["code"]), (409, "operation_conflict"), d)
        # execd's own ids are refused on the operation routes of another instance
        st, _, d = self.r.request("POST", "/command/operations",
                                  body=dict(a, operation_id="f" * 32 + oid[32:]))
        self.assertEqual((st, json.loads(d)["code"]), (409, "operation_instance_mismatch"))
        parse_execd(self.r.request("GET", "/command/%s/resume" % first["id"])[2])
        figure("operation_id_reuse_runs", self.runs())
        self.assertEqual(self.runs(), ["a"], "one run, the first request's")
        # Without the token: nothing.
        st, _, _ = self.r.request("GET", "/execution/operation?kind=command",
                                  headers={"X-EXECD-OPERATION-ID": oid,
                                           "X-EXECD-ACCESS-TOKEN": "wrong"})
        self.assertEqual(st, 401)

    def test_idempotency_key_reused_by_another_client(self):
        h = {"Idempotency-Key": "shared-key", "Content-Type": "application/json"}
        a = {"task": "echo a >> %s" % self.count}
        st, _, d1 = self.r.request("POST", "/v1/tasks", body=json.dumps(a), headers=h)
        st2, _, d2 = self.r.request("POST", "/v1/tasks", body=json.dumps(a), headers=h)
        self.assertEqual(parse_sse(d1)[0]["data"]["task_id"], parse_sse(d2)[0]["data"]["task_id"])
        st, _, d = self.r.request("POST", "/v1/tasks", headers=h,
                                  body=json.dumps({"task": "echo b >> %s" % self.count}))
        self.assertEqual((st, json.loads(d)["code"]), (409, "IDEMPOTENCY_KEY_CONFLICT"))
        self.assertEqual(self.runs(), ["a"])

    def test_reset_forgets_the_keys(self):
        oid = self.op_id()
        a = {"operation_id": oid, "command": "echo a >> %s" % self.count}
        self.assertEqual(self.r.request("POST", "/command/operations", body=a)[0], 200)
        h = {"Idempotency-Key": "tenant-key", "Content-Type": "application/json"}
        t1 = parse_sse(self.r.request("POST", "/v1/tasks", body=json.dumps({"task": "true"}),
                                      headers=h)[2])[0]["data"]["task_id"]
        st, _, d = self.r.request("POST", "/v1/reset", timeout=120)
        self.assertEqual(st, 200, d)
        # The next tenant: the old operation id is refused as another instance's ...
        st, _, d = self.r.request("POST", "/command/operations", body=a)
        self.assertEqual((st, json.loads(d)["code"]), (409, "operation_instance_mismatch"), d)
        st, _, d = self.r.request("GET", "/execution/operation?kind=command",
                                  headers={"X-EXECD-OPERATION-ID": oid})
        self.assertEqual((st, json.loads(d)["code"]), (409, "operation_instance_mismatch"), d)
        # ... and a key of the old tenant names nothing of it.
        t2 = parse_sse(self.r.request("POST", "/v1/tasks", body=json.dumps({"task": "true"}),
                                      headers=h)[2])[0]["data"]["task_id"]
        self.assertNotEqual(t1, t2)


class ResumeDoors(unittest.TestCase):
    """GET /command/{id}/resume of anything but an execd command is 404: native tasks, PTY
    shells, ids that are not ids; a resume reads only what /command/{id}/logs already gives
    the same client."""

    def test_resume_of_other_ids(self):
        r = Runner(token=TOKEN)
        try:
            native = parse_sse(r.request("POST", "/v1/tasks",
                                         body={"task": "echo native-secret"})[2])
            tid = native[0]["data"]["task_id"]
            st, pty = r.json("POST", "/pty", {"cwd": r.work})
            self.assertEqual(st, 201, pty)
            ids = {"native": tid, "pty": pty.get("session_id", ""),
                   "not-hex": "zz" * 16, "short": "abc", "dots": "..%2F..%2Fv1%2Fhardening"}
            res = {}
            for name, i in ids.items():
                st, _, d = r.request("GET", "/command/%s/resume?after_eid=0" % i)
                res[name] = st
                self.assertNotIn(b"native-secret", d)
            figure("resume_of_other_ids", res)
            for name, st in res.items():
                with self.subTest(id=name):
                    self.assertEqual(st, 404)
            r.request("DELETE", "/pty/%s" % ids["pty"])
            # The control: an execd command's own id resumes (baseline: no such route, 404).
            cid = r.execd({"command": "echo mine"})[0]["text"]
            ev = parse_execd(r.request("GET", "/command/%s/resume?after_eid=0" % cid)[2])
            self.assertEqual([e.get("text") for e in ev], ["mine", None])
        finally:
            r.stop()
            r.close()


if __name__ == "__main__":
    unittest.main()
