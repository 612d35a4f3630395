"""The audit trail (docs/design/audit.md): one event for every action through a
door, chained by SHA-256, with no secret in any sink; the verifier names the
first break of a trail edited by hand; a reset closes the tenant's chain and
starts the next one; GET /v1/audit (JSON and a resumable SSE tail)."""
import hashlib
import http.server
import json
import os
import socket
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from harness import RUNNER, Runner, slow
from wsutil import RawWS

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "gateway"))
from test_gateway import TestGateway, text  # noqa: E402

# Made at run time (a secret written in this file would be found by a search
# of the checkout).
TOKEN = "tok-" + os.urandom(12).hex()
KEY = "sk-gw-key-" + os.urandom(12).hex()
ENV_SECRET = "env-value-" + os.urandom(12).hex()


def audit_lines(text):
    """The audit events of a log, in order, as (raw line, parsed)."""
    out = []
    for line in text.splitlines():
        if '"audit":true' not in line:
            continue
        try:
            out.append((line, json.loads(line[line.index("{"):])))
        except ValueError:
            pass
    return out


def verify(path):
    p = subprocess.run([RUNNER, "--verify-audit", path], capture_output=True, text=True,
                       timeout=30)
    return p.returncode, p.stdout + p.stderr


class Upstream(http.server.BaseHTTPRequestHandler):
    """The app a port-proxy request reaches (in the box's network: ours)."""
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = b"hello from the app"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        body = b"got " + str(len(self.rfile.read(n))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


class Otlp(http.server.BaseHTTPRequestHandler):
    """A tiny OpenTelemetry collector: keeps every OTLP/HTTP JSON post."""
    posts = None

    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        self.posts.append((self.path, self.headers.get("Content-Type"), self.rfile.read(n)))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *a):
        pass


class AuditBase(unittest.TestCase):
    extra_args = ()

    @classmethod
    def setUpClass(cls):
        cls.posts = []
        cls.otlp = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), type("H", (Otlp,), {"posts": cls.posts}))
        threading.Thread(target=cls.otlp.serve_forever, daemon=True).start()
        cls.extra_args = tuple(cls.extra_args) + (
            "--otlp-endpoint", "http://127.0.0.1:%d/v1/logs" % cls.otlp.server_address[1])
        cls.gw = TestGateway(key=KEY)
        cls.roots = os.path.realpath(tempfile.mkdtemp(prefix="audit-roots-"))
        os.chmod(cls.roots, 0o777)
        cls.outside = tempfile.mkdtemp(prefix="audit-own-", dir="/var/tmp")
        cls.audit_file = os.path.join(cls.outside, "audit.log")
        cls.r = Runner(["--landlock-roots", cls.roots, "--allow-reset", "--audit-file",
                        cls.audit_file] + list(cls.extra_args), token=TOKEN,
                       env={"FORCEAI_GATEWAY_URL": cls.gw.url, "FORCEAI_GATEWAY_KEY": KEY,
                            "FORCEAI_MODEL": "test-model"})

    @classmethod
    def tearDownClass(cls):
        # A clean SIGTERM shutdown exits 0; under ASan a leak shows here.
        rc = cls.r.stop()
        log = cls.r.logtext()
        cls.r.close()
        cls.gw.close()
        cls.otlp.shutdown()
        if rc != 0:
            raise AssertionError("runner exited %s; log tail:\n%s" % (rc, log[-3000:]))
        shutil.rmtree(cls.roots, True)
        shutil.rmtree(cls.outside, True)

    def trail(self):
        return audit_lines(self.r.logtext())

    def otlp_records(self, n, timeout=10):
        """The OTLP log records received, in order, once there are n."""
        end = time.monotonic() + timeout
        while True:
            recs = []
            for path, ctype, body in list(self.posts):
                self.assertEqual((path, ctype), ("/v1/logs", "application/json"))
                for rl in json.loads(body)["resourceLogs"]:
                    for sl in rl["scopeLogs"]:
                        recs += [(rl["resource"], r) for r in sl["logRecords"]]
            if len(recs) >= n or time.monotonic() > end:
                return recs
            time.sleep(0.1)

    def wait_events(self, n, timeout=15):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            t = self.trail()
            if len(t) >= n:
                return t
            time.sleep(0.02)
        return self.trail()


class AuditDoors(AuditBase):
    def test_every_door_once(self):
        r = self.r
        expect = [("audit", "chain started")]

        def step(events):
            expect.extend(events)
            got = self.wait_events(len(expect))
            time.sleep(0.1)  # nothing more than expected may come
            got = self.trail()
            self.assertEqual([(e["door"], e["what"]) for _, e in got], expect,
                             json.dumps([e for _, e in got], indent=1)[-6000:])
            return [e for _, e in got[-len(events):]]

        # execd: a command, with a secret in its environment (its name only is kept)
        ev = r.execd({"command": "echo hi", "envs": {"MY_SECRET": ENV_SECRET}})
        self.assertTrue(any(e.get("type") == "execution_complete" for e in ev), ev)
        started, ended, req = step([("execd", "task started"), ("execd", "task ended"),
                                    ("execd", "POST /command")])
        self.assertEqual(started["command"], "echo hi")
        self.assertEqual(started["env"], ["MY_SECRET"])
        self.assertEqual(started["uid"], 1000)
        self.assertEqual(started["who"]["client"], "127.0.0.1")
        self.assertEqual(ended["exit_code"], 0)
        self.assertEqual(ended["who"]["task"], started["who"]["task"])
        self.assertEqual(ended["bytes_out"], 3)
        self.assertEqual(req["status"], 200)

        # native: a task; its record links to its events
        ev = r.native({"task": "exit 3"})
        self.assertEqual(ev[-1]["event"], "exit")
        started, ended, _ = step([("native", "task started"), ("native", "task ended"),
                                  ("native", "POST /v1/tasks")])
        self.assertEqual(ended["exit_code"], 3)
        self.assertEqual(ended["outcome"], "failed")
        tid = started["who"]["task"]
        st, rec = r.json("GET", "/v1/tasks/" + tid)
        self.assertEqual(rec["audit"]["url"], "/v1/audit?task=" + tid)
        self.assertEqual(rec["audit"]["first_seq"], started["seq"])
        step([("native", "GET /v1/tasks/*")])

        # files: an upload (its content's SHA-256), a download, a refusal
        data = b"audited content\n"
        boundary = "AuDiT"
        meta = json.dumps({"path": self.roots + "/f.txt"}).encode()
        body = (b"--AuDiT\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n" + meta +
                b"\r\n--AuDiT\r\nContent-Disposition: form-data; name=\"file\"; "
                b"filename=\"f\"\r\n\r\n" + data + b"\r\n--AuDiT--\r\n")
        st, _, _ = r.request("POST", "/files/upload", body,
                             {"Content-Type": "multipart/form-data; boundary=" + boundary})
        self.assertEqual(st, 200)
        (up,) = step([("files", "POST /files/upload")])
        self.assertEqual(up["files"], [{"path": self.roots + "/f.txt", "bytes": len(data),
                                        "sha256": hashlib.sha256(data).hexdigest()}])
        st, _, got = r.request("GET", "/files/download?path=" + self.roots + "/f.txt")
        self.assertEqual((st, got), (200, data))
        (down,) = step([("files", "GET /files/download")])
        self.assertEqual((down["operation"], down["bytes_out"]), ("read", len(data)))
        st, _, _ = r.request("DELETE", "/files?path=/etc/passwd")
        self.assertGreaterEqual(st, 400)
        (ref,) = step([("files", "DELETE /files")])
        self.assertIn(ref["outcome"], ("refused", "invalid", "failed"))
        self.assertEqual(ref["status"], st)

        # a terminal: created, connected, closed (bytes each way, no keystrokes)
        st, p = r.json("POST", "/pty", {})
        self.assertEqual(st, 201, p)
        sid = p.get("session_id") or p.get("id")
        step([("pty", "POST /pty")])
        ws = RawWS(r.port, "/pty/%s/ws" % sid, headers={"X-EXECD-ACCESS-TOKEN": TOKEN})
        self.assertEqual(ws.status, 101)
        ws.recv_frame()
        ws.send_frame(2, b"\x00echo secret-keystrokes\n")
        time.sleep(0.3)
        ws.send_frame(8, b"\x03\xe8")
        ws.wait_close(5)
        ws.close()
        st, _, _ = r.request("DELETE", "/pty/" + sid)
        got = self.wait_events(len(expect) + 5)
        pty = [(e["door"], e["what"]) for _, e in got[len(expect):]]
        self.assertEqual(sorted(pty), sorted([("pty", "task started"), ("pty", "GET /pty/*/ws"),
                                              ("pty", "websocket closed"),
                                              ("pty", "task ended"), ("pty", "DELETE /pty/*")]),
                         pty)
        wsev = [e for _, e in got if e["what"] == "websocket closed"][0]
        self.assertGreater(wsev["bytes_in"], 0)
        self.assertGreater(wsev["bytes_out"], 0)
        self.assertNotIn("secret-keystrokes", "".join(l for l, _ in got))
        expect.extend(pty)

        # the port proxy: an app in the box
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            st, _, b = r.request("GET", "/proxy/%d/hello?app_token=abc" % srv.server_address[1])
            self.assertEqual((st, b), (200, b"hello from the app"))
            (px,) = step([("proxy", "GET /proxy/*/**")])
            st, _, b2 = r.request("POST", "/proxy/%d/up" % srv.server_address[1], b"x" * 70000)
            self.assertEqual((st, b2), (200, b"got 70000"))
            (pxp,) = step([("proxy", "POST /proxy/*/**")])
        finally:
            srv.shutdown()
        self.assertEqual(px["target"], "/proxy/%d/hello" % srv.server_address[1])
        self.assertEqual(px["status"], 200)
        # the body bytes each way (a plain request: counted, never read)
        self.assertEqual((px["bytes_in"], px["bytes_out"]), (0, len(b)))
        self.assertEqual((pxp["bytes_in"], pxp["bytes_out"]), (70000, len(b2)))

        # MCP: a session and a tool call (a file tool: path and content hash)
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        st, hd, b = r.request("POST", "/mcp", json.dumps(
            {"jsonrpc": "2.0", "id": 0, "method": "initialize",
             "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": {"name": "t", "version": "1"}}}), h)
        self.assertEqual(st, 200, b)
        msid = hd["mcp-session-id"]
        (ini,) = step([("mcp", "POST /mcp")])
        self.assertEqual((ini["method"], "session" in ini), ("initialize", False))
        h2 = dict(h, **{"Mcp-Session-Id": msid, "Accept": "application/json"})
        st, _, b = r.request("POST", "/mcp", json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
             "params": {"name": "write_file", "arguments": {"path": self.roots + "/m.txt",
                                                            "content": "via mcp"}}}), h2)
        self.assertEqual(st, 200, b)
        (call,) = step([("mcp", "POST /mcp")])
        self.assertEqual((call["method"], call["tool"], call["path"], call["session"]),
                         ("tools/call", "write_file", self.roots + "/m.txt", msid[:8]))
        self.assertEqual(call["sha256"], hashlib.sha256(b"via mcp").hexdigest())

        # a model call through the proxy (a chat task), and the agent loop's
        self.gw.script(text("hello"))
        cmd = ("curl -sS -H \"Authorization: Bearer $OPENAI_API_KEY\" -H 'Content-Type: "
               "application/json' -d '{\"model\":\"test-model\",\"stream\":true,"
               "\"stream_options\":{\"include_usage\":true},\"messages\":[{\"role\":\"user\","
               "\"content\":\"hi\"}]}' \"$OPENAI_BASE_URL/chat/completions\"; echo "
               "$OPENAI_API_KEY " + KEY)
        ev = r.native({"task": cmd, "capability": "chat"})
        self.assertEqual(ev[-1]["event"], "exit", ev)
        got = step([("native", "task started"), ("model", "model call"), ("native", "task ended"),
                    ("native", "POST /v1/tasks")])
        self.assertEqual(got[1]["status"], 200, (got[1], ev, self.gw.errors))
        self.assertEqual(got[1]["who"]["task"], got[0]["who"]["task"])
        self.assertEqual(got[1]["usage"]["total_tokens"], 15)
        self.assertEqual(got[1]["model"], "test-model")  # the gateway's answer names it
        self.assertEqual(got[2]["usage"]["requests"], 1)
        self.assertIn("***", got[0]["command"])  # the gateway key, masked
        self.gw.script(text("done"))
        ev = r.native({"task": "say done", "capability": "agent"})
        self.assertEqual(ev[-1]["event"], "exit", ev)
        got = step([("agent", "task started"), ("agent", "model call"), ("agent", "task ended"),
                    ("native", "POST /v1/tasks")])
        self.assertEqual(got[1]["status"], 200)

        # refusals: a bad token; runtime init
        st, _, _ = r.request("GET", "/v1/tasks", headers={"X-EXECD-ACCESS-TOKEN": "wrong-" + TOKEN})
        self.assertEqual(st, 401)
        (bad,) = step([("native", "GET /v1/tasks")])
        self.assertEqual((bad["status"], bad["outcome"]), (401, "refused"))
        st, _, _ = r.request("POST", "/internal/init", {})
        step([("init", "POST /internal/init")])

        # checkpoints (issue 38): their own door, each operation one event
        st, ck = r.json("POST", "/v1/checkpoints", {"label": "audited"})
        self.assertEqual(st, 201, ck)
        (cc,) = step([("checkpoint", "POST /v1/checkpoints")])
        self.assertEqual(cc["status"], 201)
        st, rs = r.json("POST", "/v1/checkpoints/%s/restore" % ck["id"], {})
        self.assertEqual(st, 200, rs)
        (cr,) = step([("checkpoint", "POST /v1/checkpoints/*/restore")])
        self.assertEqual(cr["target"], "/v1/checkpoints/%s/restore" % ck["id"])
        # execd's operations and a resumed stream are execd's
        st, _ = r.json("GET", "/execution/instance")
        self.assertEqual(st, 200)
        step([("execd", "GET /execution/instance")])
        st, _, _ = r.request("GET", "/command/nope/resume?after_eid=0")
        self.assertGreaterEqual(st, 400)
        step([("execd", "GET /command/*/resume")])

        # the chain is unbroken in every sink that keeps lines
        log = os.path.join(r.tmp, "saved.log")
        with open(log, "w") as f:
            f.write(r.logtext())
        rc, out = verify(log)
        self.assertEqual(rc, 0, out)
        rc, out = verify(self.audit_file)
        self.assertEqual(rc, 0, out)
        with open(self.audit_file) as f:
            self.assertEqual([json.loads(l)["seq"] for l in f],
                             [e["seq"] for _, e in self.trail()])
        # OpenTelemetry: the same lines, byte for byte, in order, with the resource.
        lines = [l[l.index("{"):] for l, _ in self.trail()]
        recs = self.otlp_records(len(lines))
        self.assertEqual([r["body"]["stringValue"] for _, r in recs][:len(lines)], lines)
        res = {a["key"]: a["value"]["stringValue"] for a in recs[0][0]["attributes"]}
        self.assertEqual(res["service.name"], "forceai-runner")
        attrs = {a["key"]: a["value"] for a in recs[1][1]["attributes"]}
        self.assertEqual(attrs["audit.seq"]["intValue"], "2")
        otlp_log = os.path.join(r.tmp, "otlp.log")
        with open(otlp_log, "w") as f:
            f.write("".join(r["body"]["stringValue"] + "\n" for _, r in recs))
        rc, out = verify(otlp_log)
        self.assertEqual(rc, 0, out)
        # "sent" counts a batch when its POST's answer is back in the runner, which may be
        # a moment after the collector has the records (valgrind: 32 of 35 once).
        deadline = time.monotonic() + slow(5)
        while True:
            st, j = r.json("GET", "/v1/audit?limit=1")
            if j["status"]["otlp"]["sent"] >= len(lines) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(j["status"]["otlp"]["missed"], 0)
        self.assertGreaterEqual(j["status"]["otlp"]["sent"], len(lines))


class AuditSecrets(AuditBase):
    def test_no_secret_in_any_sink(self):
        r = self.r
        # The secrets go everywhere a client can put them.
        r.execd({"command": "echo %s %s" % (KEY, TOKEN), "envs": {"API_KEY": ENV_SECRET}})
        r.native({"task": "echo " + KEY, "env": {"TOKEN": ENV_SECRET}})
        r.request("GET", "/v1/tasks?x=" + TOKEN)
        r.request("GET", "/v1/tasks", headers={"X-EXECD-ACCESS-TOKEN": KEY,
                                               "Cookie": "s=" + ENV_SECRET})
        r.request("GET", "/proxy/1/x?k=" + ENV_SECRET,
                  headers={"Authorization": "Bearer " + ENV_SECRET})
        self.gw.script(text("hi"))
        r.native({"task": "echo $OPENAI_API_KEY; env | grep -c fai-", "capability": "chat"})
        sse = r.curl("-H", "Accept: text/event-stream", "-H", "Last-Event-ID: 0",
                     r.url + "/v1/audit", timeout=2).stdout.decode(errors="replace")
        st, j = r.json("GET", "/v1/audit?limit=10000")
        self.assertEqual(st, 200)
        self.assertGreater(len(j["events"]), 8)
        # The chat task's model token: in its own output, never in the trail.
        ev = r.native({"task": "echo $OPENAI_API_KEY", "capability": "chat"})
        model_tokens = [e["data"]["text"].strip() for e in ev if e.get("event") == "stdout"]
        self.assertTrue(model_tokens and model_tokens[0].startswith("fai-"), ev)
        time.sleep(0.2)
        time.sleep(1.5)  # the OTLP sink sends each second
        sinks = {"stderr": r.logtext(), "GET /v1/audit": json.dumps(j), "SSE": sse,
                 "--audit-file": open(self.audit_file).read(),
                 "OTLP": b"".join(b for _, _, b in self.posts).decode()}
        self.assertIn("echo ***", sinks["OTLP"])
        self.assertIn("data: {", sse)
        for name, text_ in sinks.items():
            for secret in (TOKEN, KEY, ENV_SECRET, model_tokens[0]):
                self.assertNotIn(secret, text_, "%s holds a secret" % name)
        self.assertIn('"env":["API_KEY"]', sinks["--audit-file"])


class AuditTamper(AuditBase):
    def test_verifier_names_the_first_break(self):
        r = self.r
        for i in range(3):
            r.execd({"command": "true"})
        self.wait_events(10)  # the sinks are written 10 ms after the events
        lines = r.logtext().splitlines(keepends=True)
        idx = [i for i, l in enumerate(lines) if '"audit":true' in l]
        self.assertGreaterEqual(len(idx), 8)
        path = os.path.join(r.tmp, "t.log")

        def check(ls):
            with open(path, "w") as f:
                f.writelines(ls)
            return verify(path)

        rc, out = check(lines)
        self.assertEqual(rc, 0, out)
        # A changed field: seq 4's command.
        k = idx[3]
        seq4 = json.loads(lines[k])["seq"]
        edited = list(lines)
        edited[k] = lines[k].replace('"outcome":"ok"', '"outcome":"no"').replace(
            '"status":200', '"status":201').replace('"exit_code":0', '"exit_code":1')
        self.assertNotEqual(edited[k], lines[k])
        rc, out = check(edited)
        self.assertEqual(rc, 1, out)
        self.assertIn("BROKEN at seq %d" % seq4, out)
        self.assertIn("changed", out)
        # A removed line.
        rc, out = check(lines[:k] + lines[k + 1:])
        self.assertEqual(rc, 1, out)
        self.assertIn("BROKEN at seq %d" % seq4, out)
        self.assertIn("removed", out)
        # A reordered pair.
        sw = list(lines)
        sw[idx[3]], sw[idx[4]] = sw[idx[4]], sw[idx[3]]
        rc, out = check(sw)
        self.assertEqual(rc, 1, out)
        self.assertIn("BROKEN at seq %d" % seq4, out)


class AuditRequestFormat(AuditBase):
    """A request's event is written by hand when its strings are plain and by
    jansson otherwise (audit/trail.c, http.c audit_request_text): both must be
    the same bytes a compact, order-keeping serializer writes, keys in the same
    order, and chain as one trail."""

    def test_plain_and_escaped_requests_are_written_alike(self):
        r = self.r
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        dead = socket.socket()
        dead.bind(("127.0.0.1", 0))  # bound, never listening: a refused upstream
        port, dead_port = srv.server_address[1], dead.getsockname()[1]
        try:
            reqs = [("GET", "/proxy/%d/plain" % port),         # by hand, with bytes_out
                    ("GET", "/proxy/%d/q%%22x%%5Cy" % port),   # '"' and '\\': jansson
                    ("POST", "/proxy/%d/up" % port),           # by hand, bytes each way
                    ("GET", "/proxy/%d/x" % dead_port),        # by hand, with an error code
                    ("GET", "/proxy/%d/%%01%%C3%%A9" % dead_port),  # a control byte, UTF-8
                    ("GET", "/files/info?path=/tmp"),          # a query in the target
                    ("GET", "/files/info?path=%22")]
            for m, path in reqs:
                r.request(m, path, b"abc" if m == "POST" else None)
        finally:
            srv.shutdown()
            dead.close()
        want = {"/proxy/%d/plain" % port, '/proxy/%d/q"x\\y' % port, "/proxy/%d/up" % port,
                "/proxy/%d/x" % dead_port, "/proxy/%d/\x01\u00e9" % dead_port,
                "/files/info?path=/tmp", "/files/info?path=%22"}
        end = time.monotonic() + 15
        while time.monotonic() < end:
            got = {e.get("target"): (line, e) for line, e in self.trail()
                   if e.get("target") in want}
            if len(got) == len(want):
                break
            time.sleep(0.05)
        self.assertEqual(set(got), want)
        keys = {}
        for target, (line, e) in got.items():
            # The exact bytes of a compact dump that keeps the order (jansson's
            # JSON_COMPACT | JSON_PRESERVE_ORDER): no space, no other escape.
            redump = json.dumps(e, separators=(",", ":"), ensure_ascii=False)
            self.assertEqual(line[line.index("{"):], redump, target)
            keys.setdefault((e["door"], "code" in e), []).append((target, list(e)))
        for group in keys.values():
            for target, k in group[1:]:
                self.assertEqual(k, group[0][1], (target, group[0][0]))
        ok = got["/proxy/%d/plain" % port][1]
        self.assertEqual((ok["status"], ok["bytes_in"], ok["bytes_out"]),
                         (200, 0, len(b"hello from the app")))
        self.assertEqual(list(ok)[-2:], ["completed", "bytes_out"])
        up = got["/proxy/%d/up" % port][1]
        self.assertEqual((up["bytes_in"], up["bytes_out"]), (3, len(b"got 3")))
        self.wait_events(1)
        path = os.path.join(r.tmp, "fmt.log")
        with open(path, "w") as f:
            f.write(r.logtext())
        rc, out = verify(path)
        self.assertEqual(rc, 0, out)


class AuditReset(AuditBase):
    def test_reset_closes_and_restarts_the_chain(self):
        r = self.r
        r.execd({"command": "echo tenant-one"})
        st, j = r.json("GET", "/v1/audit")
        first_chain = j["chain"]
        self.assertTrue(any(e.get("command") == "echo tenant-one" for e in j["events"]))
        st, ans = r.json("POST", "/v1/reset")
        self.assertEqual(st, 200, ans)
        closed = ans["audit"]
        self.assertEqual(closed["chain"], first_chain)
        # The answer's hash is the closing event's, as every sink has it (the
        # lines reach stderr at the end of the loop's batch: waited for).
        trail = self.trail()
        end = time.monotonic() + 10
        while not any(e["seq"] == closed["last_seq"] + 1 for _, e in trail) and \
                time.monotonic() < end:
            time.sleep(0.02)
            trail = self.trail()
        line, ev = [(l, e) for l, e in trail if e["seq"] == closed["last_seq"]][0]
        self.assertEqual(ev["what"], "chain closed")
        self.assertEqual(hashlib.sha256(line[line.index("{"):].encode()).hexdigest(),
                         closed["last_hash"])
        nxt = [e for _, e in trail if e["seq"] == closed["last_seq"] + 1][0]
        self.assertEqual((nxt["what"], nxt["chain"], nxt["prev"]),
                         ("chain started", first_chain + 1, closed["last_hash"]))
        self.assertTrue(any(l.get("msg") == "audit chain closed" and
                            l.get("last_hash") == closed["last_hash"] for l in r.loglines()))
        # The next tenant sees only its own, from its chain's start.
        r.execd({"command": "echo tenant-two"})
        st, j = r.json("GET", "/v1/audit?since=0")
        self.assertEqual(j["chain"], first_chain + 1)
        self.assertFalse(any("tenant-one" in json.dumps(e) for e in j["events"]))
        self.assertTrue(any(e.get("command") == "echo tenant-two" for e in j["events"]))
        self.assertEqual(j["events"][0]["what"], "chain started")
        self.assertTrue(all(e["chain"] == first_chain + 1 for e in j["events"]))
        # Across the reset the whole trail still verifies.
        log = os.path.join(r.tmp, "all.log")
        with open(log, "w") as f:
            f.write(r.logtext())
        rc, out = verify(log)
        self.assertEqual(rc, 0, out)


class AuditRead(AuditBase):
    extra_args = ("--audit-ring-max", "65536")

    def test_since_task_and_sse_resume(self):
        r = self.r
        r.execd({"command": "true"})
        st, j = r.json("GET", "/v1/audit")
        last = j["last_seq"]
        st, j2 = r.json("GET", "/v1/audit?since=%d" % last)
        self.assertTrue(all(e["seq"] > last for e in j2["events"]))
        st, bad = r.json("GET", "/v1/audit?since=abc")
        self.assertEqual((st, bad["code"]), (400, "INVALID_QUERY"))
        # SSE: resumed after an id with Last-Event-ID, then live.
        s = socket.create_connection(("127.0.0.1", r.port))
        s.sendall(("GET /v1/audit HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n"
                   "X-EXECD-ACCESS-TOKEN: %s\r\nLast-Event-ID: %d\r\n\r\n" % (TOKEN, last))
                  .encode())
        r.execd({"command": "echo live"})
        s.settimeout(10)
        buf = b""
        while b"echo live" not in buf:
            d = s.recv(65536)
            if not d:
                break
            buf += d
        s.close()
        ids = [int(l[4:]) for l in buf.decode().splitlines() if l.startswith("id: ")]
        self.assertTrue(ids and ids[0] == last + 1, buf[:2000])
        self.assertEqual(ids, list(range(ids[0], ids[0] + len(ids))))
        # What fell off the ring is told, not silently skipped.
        for i in range(60):
            r.execd({"command": "echo %s" % ("x" * 2000)})
        st, j = r.json("GET", "/v1/audit?since=0")
        self.assertGreater(j["lost"], 0)
        self.assertGreater(j["events"][0]["seq"], 1)


class AuditOtlpDown(unittest.TestCase):
    def test_a_collector_that_is_down_blocks_nothing(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(1)  # accepts, never answers: a hung collector
        r = Runner(["--otlp-endpoint", "http://127.0.0.1:%d/v1/logs" % s.getsockname()[1]],
                   token=TOKEN)
        try:
            t0 = time.monotonic()
            ev = r.execd({"command": "echo still-served"})
            self.assertTrue(any(e.get("text") == "still-served" for e in ev), ev)
            self.assertLess(time.monotonic() - t0, slow(2))
            time.sleep(6.5)  # one post times out (5 s), the next waits
            t0 = time.monotonic()
            st, j = r.json("GET", "/v1/audit?limit=1")
            self.assertLess(time.monotonic() - t0, slow(0.5))
            self.assertGreaterEqual(j["status"]["otlp"]["failed_posts"], 1, j["status"])
            self.assertEqual(j["status"]["otlp"]["sent"], 0)
            self.assertGreater(j["status"]["otlp"]["behind"], 0)
        finally:
            rc = r.stop()
            r.close()
            s.close()
        self.assertEqual(rc, 0)


class AuditFileRefused(unittest.TestCase):
    def test_audit_file_inside_a_writable_root_is_refused(self):
        d = tempfile.mkdtemp(prefix="audit-root-")
        p = subprocess.run([RUNNER, "--listen", "127.0.0.1:0", "--landlock-roots", d,
                            "--audit-file", d + "/audit.log", "--insecure-no-confine"],
                           capture_output=True, text=True, timeout=20)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("inside a root tasks may write", p.stderr)
        self.assertFalse(os.path.exists(d + "/audit.log"))
        os.rmdir(d)


class AuditOtlpMetrics(unittest.TestCase):
    """The runner's metrics as execd exports them (design/audit.md#secrets-never-enter-it): OTLP/HTTP JSON to
    OTEL_EXPORTER_OTLP_METRICS_ENDPOINT every OTEL_METRIC_EXPORT_INTERVAL ms,
    the box's id and attributes on every post after runtime init, no secret;
    a hung collector blocks nothing and what it missed is counted."""

    ENV = {"OTEL_METRIC_EXPORT_INTERVAL": "300"}

    def metrics_in(self, body):
        """{name: (metric, first data point)} and the resource attributes."""
        doc = json.loads(body)
        out, attrs = {}, {}
        for rm in doc["resourceMetrics"]:
            attrs.update({a["key"]: a["value"]["stringValue"]
                          for a in rm["resource"]["attributes"]})
            for sm in rm["scopeMetrics"]:
                for m in sm["metrics"]:
                    kind = "gauge" if "gauge" in m else "sum"
                    out[m["name"]] = (m, m[kind]["dataPoints"][0])
        return out, attrs

    def test_posts_carry_the_figures_and_the_box(self):
        posts = []
        srv = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), type("H", (Otlp,), {"posts": posts}))
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        env = dict(self.ENV, OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=(
            "http://127.0.0.1:%d/v1/metrics" % srv.server_address[1]))
        r = Runner(["--runtime-init"], token=TOKEN, env=env)
        try:
            st, b = r.json("POST", "/internal/init", {
                "sandboxId": "sb-metered", "generation": 4,
                "telemetry": {"attributes": {"team": "blue"}}})
            self.assertEqual(st, 200, b)
            ev = r.execd({"command": "echo %s" % KEY, "envs": {"API_KEY": ENV_SECRET}})
            self.assertTrue(any(e.get("text") == KEY for e in ev), ev)
            n0 = len(posts)
            end = time.monotonic() + 10
            while len(posts) < n0 + 2 and time.monotonic() < end:
                time.sleep(0.05)
            self.assertGreaterEqual(len(posts) - n0, 2, "posts after init: %d" % len(posts))
            want = {"service.name": "forceai-runner", "sandbox.id": "sb-metered",
                    "sandbox.generation": "4", "team": "blue"}
            for path, ctype, body in posts[n0:]:
                self.assertEqual((path, ctype), ("/v1/metrics", "application/json"))
                ms, attrs = self.metrics_in(body)
                self.assertEqual({k: attrs.get(k) for k in want}, want, attrs)
                self.assertGreater(int(ms["forceai.system.cpu.count"][1]["asInt"]), 0)
                self.assertGreater(int(ms["forceai.system.memory.total_bytes"][1]["asInt"]),
                                   1 << 20)
                used = int(ms["execd.system.memory.usage_bytes"][1]["asInt"])
                self.assertGreater(used, 0)
                self.assertEqual(ms["execd.system.memory.usage_bytes"][0]["unit"], "By")
                cpu = ms["execd.system.cpu.usage"][1]["asDouble"]
                self.assertTrue(0 <= cpu <= 100, cpu)
                emitted, point = ms["forceai.audit.events.emitted"]
                self.assertEqual((emitted["sum"]["aggregationTemporality"],
                                  emitted["sum"]["isMonotonic"]), (2, True))
                self.assertGreater(int(point["asInt"]), 0)
                self.assertTrue(int(point["timeUnixNano"]) > int(point["startTimeUnixNano"]))
            end = time.monotonic() + 3  # the answer is counted once the runner reads it
            while True:
                st, j = r.json("GET", "/metrics")
                self.assertEqual(st, 200)
                if j["otlp_metrics"]["sent"] >= 2 or time.monotonic() > end:
                    break
                time.sleep(0.05)
            self.assertGreaterEqual(j["otlp_metrics"]["sent"], 2, j)
            self.assertEqual(j["otlp_metrics"]["interval_ms"], 300)
            allb = b"".join(b for _, _, b in posts).decode()
            for secret in (TOKEN, KEY, ENV_SECRET):
                self.assertNotIn(secret, allb)
            self.assertNotIn("OTEL_", allb)
        finally:
            rc = r.stop()
            r.close()
            srv.shutdown()
        self.assertEqual(rc, 0)

    def test_a_hung_collector_blocks_nothing_and_is_counted(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(1)  # accepts, never answers
        env = dict(self.ENV, OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=(
            "http://127.0.0.1:%d/v1/metrics" % s.getsockname()[1]))
        r = Runner([], token=TOKEN, env=env)
        try:
            time.sleep(1)  # a post is in flight
            worst = 0
            for _ in range(10):
                t0 = time.monotonic()
                st = r.request("GET", "/ping")[0]
                worst = max(worst, time.monotonic() - t0)
                self.assertEqual(st, 200)
                time.sleep(0.1)
            self.assertLess(worst, 0.5)
            t0 = time.monotonic()
            ev = r.execd({"command": "echo still-served"})
            self.assertTrue(any(e.get("text") == "still-served" for e in ev), ev)
            self.assertLess(time.monotonic() - t0, slow(2))
            time.sleep(5.5)  # the first post times out (5 s)
            st, j = r.json("GET", "/metrics")
            m = j["otlp_metrics"]
            self.assertEqual(m["sent"], 0, m)
            self.assertGreaterEqual(m["failed"], 1, m)
            self.assertGreaterEqual(m["skipped_busy"], 5, m)
        finally:
            rc = r.stop()
            r.close()
            s.close()
        self.assertEqual(rc, 0)

    def test_a_bad_endpoint_or_interval_stops_the_start(self):
        for env, word in (({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "ftp://x/v1/metrics"},
                           "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"),
                          ({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://127.0.0.1:1/",
                            "OTEL_METRIC_EXPORT_INTERVAL": "5s"},
                           "OTEL_METRIC_EXPORT_INTERVAL")):
            p = subprocess.run([RUNNER, "--listen", "127.0.0.1:0", "--insecure-no-confine"],
                               capture_output=True, text=True, timeout=20,
                               env=dict(os.environ, **env))
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(word, p.stderr)


if __name__ == "__main__":
    unittest.main()


class AuditOtlpHead(AuditBase):
    """Each OTLP batch carries the trail's head as of its last record
    (docs/design/audit.md#the-head-a-trail-cut-at-its-end-is-found-out, issue 44): a collector's copy cut at its end
    fails --verify-audit --audit-head with the last head it received."""

    def test_each_batch_names_its_head(self):
        r = self.r
        for _ in range(3):
            r.execd({"command": "true", "cwd": r.work})
        n = len(self.wait_events(7))
        recs = self.otlp_records(n)
        self.assertGreaterEqual(len(recs), n)
        heads = []
        for _, _, body in list(self.posts):
            for rl in json.loads(body)["resourceLogs"]:
                for sl in rl["scopeLogs"]:
                    if not sl["logRecords"]:
                        continue
                    attrs = {a["key"]: a["value"]["stringValue"]
                             for a in sl["scope"].get("attributes", [])}
                    last = sl["logRecords"][-1]["body"]["stringValue"]
                    want = "%d:%s" % (json.loads(last)["seq"],
                                      hashlib.sha256(last.encode()).hexdigest())
                    self.assertEqual(attrs.get("audit.head"), want, attrs)
                    heads.append(want)
        self.assertTrue(heads)
        copy = os.path.join(r.tmp, "collector.log")
        with open(copy, "w") as f:
            f.writelines(rec["body"]["stringValue"] + "\n" for _, rec in recs)
        p = subprocess.run([RUNNER, "--verify-audit", copy, "--audit-head", heads[-1]],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout)
        with open(copy, "w") as f:
            f.writelines(rec["body"]["stringValue"] + "\n" for _, rec in recs[:-1])
        p = subprocess.run([RUNNER, "--verify-audit", copy, "--audit-head", heads[-1]],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn("cut off", p.stdout)


class AuditResource(AuditBase):
    """Runtime init binds the box (design/profiles.md#runtime-init-a-warm-box-bound-to-one-sandbox): its sandbox id, generation and
    telemetry.attributes are said in the chain and on every later OTLP batch;
    a reset unbinds it."""
    extra_args = ("--runtime-init",)

    def test_init_attributes_reach_the_trail_and_otlp(self):
        r = self.r
        st, b = r.json("POST", "/internal/init", {"sandboxId": "sb-audited", "generation": 3,
                                                  "telemetry": {"attributes": {"team": "red"}}})
        self.assertEqual(st, 200, b)
        want = {"sandbox.id": "sb-audited", "sandbox.generation": "3", "team": "red"}
        got = self.wait_events(3)
        rs = [e for _, e in got if e["what"] == "resource set"]
        self.assertEqual(len(rs), 1, got)
        self.assertEqual((rs[0]["door"], rs[0]["resource"]), ("audit", want))
        st, _ = r.json("GET", "/v1/tasks")
        self.assertEqual(st, 200)
        n = len(self.wait_events(len(got) + 1))
        # every OTLP record from the binding on carries the resource
        recs = self.otlp_records(n)
        after = [res for res, rec in recs
                 if json.loads(rec["body"]["stringValue"])["seq"] >= rs[0]["seq"]]
        self.assertTrue(after, recs)
        for res in after:
            attrs = {a["key"]: a["value"]["stringValue"] for a in res["attributes"]}
            self.assertEqual({k: attrs.get(k) for k in want}, want, attrs)
        # a reset unbinds: the next chain names no box
        st, ans = r.json("POST", "/v1/reset")
        self.assertEqual(st, 200, ans)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            started = [e for _, e in self.trail() if e["what"] == "chain started"]
            if len(started) == 2:
                break
            time.sleep(0.05)
        self.assertEqual(len(started), 2)
        self.assertNotIn("resource", started[1])


class AuditModelName(AuditBase):
    """The model of a call is the one the gateway's answer names (the
    response's first parsed event), never text a task put in a body."""

    def call(self, model, content):
        cmd = ("curl -sS -H \"Authorization: Bearer $OPENAI_API_KEY\" -H 'Content-Type: "
               "application/json' -d '{\"model\":\"%s\",\"stream\":true,"
               "\"stream_options\":{\"include_usage\":true},\"messages\":[{\"role\":\"user\","
               "\"content\":\"%s\"}]}' \"$OPENAI_BASE_URL/chat/completions\"" % (model, content))
        ev = self.r.native({"task": cmd, "capability": "chat"})
        self.assertEqual(ev[-1]["event"], "exit", ev)

    def test_task_cannot_spoof_the_model_name(self):
        # The answer's content and the request's text both say another model.
        self.gw.script(text('{\\"model\\":\\"spoofed\\"} model spoofed'))
        self.call("model-one", "\\\"model\\\":\\\"spoofed\\\"")
        self.gw.script(text("second"))
        self.call("model-two", "hi")
        end = time.monotonic() + 10
        while time.monotonic() < end:
            calls = [e for _, e in self.trail() if e["what"] == "model call"]
            if len(calls) == 2:
                break
            time.sleep(0.05)
        self.assertEqual([c.get("model") for c in calls], ["model-one", "model-two"], calls)
