"""/mcp's transport rules by raw HTTP (limits, malformed JSON-RPC, sessions, versions) and GET
/files/grep, the files API's content search (the grep tool's own). The official SDK client's
tests are tests/mcp/."""
import json
import os
import shutil
import socket
import threading
import time
import unittest
from urllib.parse import quote

from harness import POLICY, RUNNER, Runner, RunnerTest, pid_running
import subprocess
import tempfile

# Under valgrind or the sanitizers timings mean nothing.
SLOW = bool(os.environ.get("RUNNER_WRAP")) or "asan" in RUNNER

ACCEPT = "application/json, text/event-stream"


class McpBase(RunnerTest):
    def post(self, msg, sid=None, version=None, headers=None, raw=False):
        h = {"Content-Type": "application/json", "Accept": ACCEPT}
        if sid:
            h["Mcp-Session-Id"] = sid
        if version:
            h["MCP-Protocol-Version"] = version
        h.update(headers or {})
        body = msg if raw else json.dumps(msg)
        st, hd, data = self.r.request("POST", "/mcp", body, h)
        return st, hd, data

    def post_json(self, msg, **kw):
        st, hd, data = self.post(msg, **kw)
        return st, hd, json.loads(data) if data else None

    def init(self, version="2025-11-25"):
        st, hd, b = self.post_json({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                    "params": {"protocolVersion": version, "capabilities": {},
                                               "clientInfo": {"name": "t", "version": "1"}}})
        self.assertEqual(st, 200, b)
        return hd["mcp-session-id"], b

    def call(self, sid, name, args, id_=1, headers=None):
        return self.post_json({"jsonrpc": "2.0", "id": id_, "method": "tools/call",
                               "params": {"name": name, "arguments": args}},
                              sid=sid, headers=dict({"Accept": "application/json"}, **(headers or {})))


class McpTransport(McpBase):
    runner_args = ("--mcp-max-sessions", "3", "--mcp-max-inflight", "2", "--mcp-max-body", "4096")

    def test_negotiation(self):
        for asked, got in (("2025-06-18", "2025-06-18"), ("2025-11-25", "2025-11-25"),
                           ("2024-01-01", "2025-11-25"), ("2026-07-28", "2025-11-25")):
            sid, b = self.init(asked)
            self.assertEqual(b["result"]["protocolVersion"], got)
            self.assertEqual(self.r.request("DELETE", "/mcp", headers={"Mcp-Session-Id": sid})[0],
                             200)
        sid, _ = self.init()
        st, _, b = self.post_json({"jsonrpc": "2.0", "id": 1, "method": "ping"}, sid=sid,
                                  version="1999-01-01")
        self.assertEqual((st, b["error"]["code"]), (400, -32600))
        self.assertIn("MCP-Protocol-Version", b["error"]["message"])
        st, _, b = self.post_json({"jsonrpc": "2.0", "id": 2, "method": "ping"}, sid="0" * 32)
        self.assertEqual(st, 404)
        self.assertEqual(b["error"]["message"], "Session not found")
        st, _, b = self.post_json({"jsonrpc": "2.0", "id": 3, "method": "nope/x"}, sid=sid)
        self.assertEqual((st, b["error"]["code"], b["id"]), (200, -32601, 3))
        st, _, _ = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, sid=sid)
        self.assertEqual(st, 202)
        self.assertEqual(self.r.request("DELETE", "/mcp", headers={"Mcp-Session-Id": sid})[0], 200)
        st, _, _ = self.post({"jsonrpc": "2.0", "id": 4, "method": "ping"}, sid=sid)
        self.assertEqual(st, 404)

    def test_malformed_json_rpc_gets_json_rpc_errors(self):
        sid, _ = self.init()
        cases = [
            ("{", 400, -32700),
            ("", 400, -32700),
            # not a JSON-RPC message (a batch among them): refused by the transport
            ("[]", 400, -32600),
            ('[{"jsonrpc":"2.0","id":1,"method":"ping"}]', 400, -32600),
            ('"str"', 400, -32600),
            ('{"id":1,"method":"ping"}', 400, -32600),
            ('{"jsonrpc":"1.0","id":1,"method":"ping"}', 400, -32600),
            ('{"jsonrpc":"2.0","id":{},"method":"ping"}', 400, -32600),
            ('{"jsonrpc":"2.0","id":1,"method":7}', 400, -32600),
            ('{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}', 200, -32602),
            ('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}', 200, -32602),
            ('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"grep","arguments":3}}', 200, -32602),
            ('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nope"}}', 200, -32602),
            ('{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}', 400, -32700),
            ('{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"progressToken":{}}}}', 200, -32602),
            ('\xff\xfe', 400, -32700),
        ]
        for body, status, code in cases:
            st, _, data = self.post(body, sid=sid, raw=True)
            self.assertEqual(st, status, body)
            b = json.loads(data)
            self.assertEqual((b["jsonrpc"], b["error"]["code"]), ("2.0", code), body)
        # The runner is unharmed.
        st, _, b = self.post_json({"jsonrpc": "2.0", "id": 9, "method": "ping"}, sid=sid)
        self.assertEqual((st, b["result"]), (200, {}))
        self.r.request("DELETE", "/mcp", headers={"Mcp-Session-Id": sid})

    def test_body_limit(self):
        sid, _ = self.init()
        self.addCleanup(self.r.request, "DELETE", "/mcp", headers={"Mcp-Session-Id": sid})
        big = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "write_file", "arguments": {"path": "/tmp/x", "content": "x" * 5000}}}
        st, _, b = self.post_json(big, sid=sid)
        self.assertEqual(st, 413)
        self.assertIn("--mcp-max-body", b["error"]["message"])
        # chunked, without a Content-Length
        s = socket.create_connection(("127.0.0.1", self.r.port))
        s.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Accept: application/json\r\nMcp-Session-Id: " + sid.encode() +
                  b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(3):
            s.sendall(b"800\r\n" + b" " * 0x800 + b"\r\n")
        s.sendall(b"0\r\n\r\n")
        s.settimeout(10)
        self.assertIn(b" 413 ", s.recv(4096).split(b"\r\n")[0] + b" ")
        s.close()

    def test_session_limit(self):
        sids = []
        for _ in range(4):
            st, hd, b = self.post_json({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                        "params": {"protocolVersion": "2025-11-25"}})
            if st != 200:
                break
            sids.append(hd["mcp-session-id"])
        self.assertLessEqual(len(sids), 3)
        self.assertEqual(st, 503)
        self.assertIn("--mcp-max-sessions", b["error"]["message"])
        for s in sids:
            self.r.request("DELETE", "/mcp", headers={"Mcp-Session-Id": s})
        sid, _ = self.init()  # room again
        self.r.request("DELETE", "/mcp", headers={"Mcp-Session-Id": sid})

    def test_inflight_limit_and_delete_kills_the_calls(self):
        sid, _ = self.init()
        pidfile = os.path.join(self.r.work, "inflight.pid")
        results = []

        def long_call(i):
            results.append(self.call(sid, "run_command",
                                     {"command": "sleep 30 & echo $! >> %s; wait" % pidfile},
                                     id_=100 + i))
        ths = [threading.Thread(target=long_call, args=(i,)) for i in range(2)]
        for t in ths:
            t.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if os.path.exists(pidfile) and len(open(pidfile).read().split()) == 2:
                break
            time.sleep(0.05)
        pids = [int(p) for p in open(pidfile).read().split()]
        self.assertEqual(len(pids), 2)
        st, _, b = self.call(sid, "run_command", {"command": "true"}, id_=3)
        self.assertEqual(st, 429)
        self.assertIn("--mcp-max-inflight", b["error"]["message"])
        # Ending the session ends its calls: the JSON-mode waiters get an error, the trees die.
        self.assertEqual(self.r.request("DELETE", "/mcp", headers={"Mcp-Session-Id": sid})[0], 200)
        for t in ths:
            t.join(10)
        self.assertEqual(len(results), 2)
        for st, _, b in results:
            self.assertEqual(st, 200)
            self.assertIn("session ended", b["error"]["message"])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(os.path.exists("/proc/%d" % p) for p in pids):
            time.sleep(0.05)
        self.assertFalse([p for p in pids if os.path.exists("/proc/%d" % p)])

    def test_read_file_pages_within_the_output_bound(self):
        sid, _ = self.init()
        self.addCleanup(self.r.request, "DELETE", "/mcp", headers={"Mcp-Session-Id": sid})
        many = os.path.join(self.r.work, "many.txt")
        with open(many, "w") as f:
            f.write("".join("line %05d of the file\n" % i for i in range(1, 3001)))
        st, _, b = self.call(sid, "read_file", {"path": many})
        t = b["result"]["content"][0]["text"]
        body, note = t.rsplit("[... more lines follow: read on with offset ", 1)
        nxt = int(note.split(" ")[0])
        self.assertLessEqual(len(body.encode()), 16384)
        self.assertEqual(body, "".join("line %05d of the file\n" % i for i in range(1, nxt)))
        st, _, b = self.call(sid, "read_file", {"path": many, "offset": nxt, "limit": 1})
        self.assertTrue(b["result"]["content"][0]["text"].startswith("line %05d of" % nxt))
        one = os.path.join(self.r.work, "oneline.txt")
        with open(one, "w") as f:
            f.write("x" * 40000 + "\nsecond\n")
        st, _, b = self.call(sid, "read_file", {"path": one})
        t = b["result"]["content"][0]["text"]
        self.assertTrue(t.startswith("x" * 16384 + "\n[... line 1 is longer than 16384 bytes"), t[-200:])
        self.assertIn("offset 2", t)
        st, _, b = self.call(sid, "read_file", {"path": one, "offset": 2})
        self.assertEqual(b["result"]["content"][0]["text"], "second\n")

    def test_get_stream_and_accept(self):
        sid, _ = self.init()
        st, _, b = self.r.request("GET", "/mcp", headers={"Accept": "application/json",
                                                          "Mcp-Session-Id": sid})
        self.assertEqual(st, 406)
        st, _, _ = self.r.request("GET", "/mcp", headers={"Accept": "text/event-stream"})
        self.assertEqual(st, 400)
        s = socket.create_connection(("127.0.0.1", self.r.port))
        s.sendall(("GET /mcp HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n"
                   "Mcp-Session-Id: %s\r\n\r\n" % sid).encode())
        s.settimeout(5)
        head = s.recv(4096)
        self.assertIn(b"200 OK", head)
        self.assertIn(b"text/event-stream", head)
        # DELETE of the session ends its stream.
        self.r.request("DELETE", "/mcp", headers={"Mcp-Session-Id": sid})
        rest = b""
        while True:
            k = s.recv(4096)
            if not k:
                break
            rest += k
            if rest.endswith(b"0\r\n\r\n"):
                break
        s.close()
        st, _, b = self.post_json({"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                  headers={"Accept": "image/png"})
        self.assertEqual(st, 406)
        st, _, _ = self.r.request("PUT", "/mcp")
        self.assertEqual(st, 405)


class McpAuth(unittest.TestCase):
    def test_tokens(self):
        r = Runner(token="tok-" + os.urandom(4).hex(), args=("--mcp-allowed-origins",
                                                            "https://ide.example.com"))
        try:
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                               "params": {"protocolVersion": "2025-11-25"}})
            h = {"Content-Type": "application/json", "Accept": ACCEPT}

            def post(extra):
                import http.client
                c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=10)
                c.request("POST", "/mcp", body=body, headers=dict(h, **extra))
                resp = c.getresponse()
                data = resp.read()
                c.close()
                return resp.status, data
            self.assertEqual(post({})[0], 401)
            self.assertEqual(post({"Authorization": "Bearer nope"})[0], 401)
            self.assertEqual(post({"Authorization": "Bearer " + r.token})[0], 200)
            self.assertEqual(post({"X-EXECD-ACCESS-TOKEN": r.token})[0], 200)
            # Bearer is the runner's token on /mcp only.
            import http.client
            c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=10)
            c.request("GET", "/v1/tasks", headers={"Authorization": "Bearer " + r.token})
            self.assertEqual(c.getresponse().status, 401)
            c.close()
            # The allowlist replaces the localhost default.
            tok = {"Authorization": "Bearer " + r.token}
            self.assertEqual(post(dict(tok, Origin="https://ide.example.com"))[0], 200)
            st, data = post(dict(tok, Origin="http://localhost:8080"))
            self.assertEqual(st, 403)
            self.assertEqual(json.loads(data)["error"]["code"], -32000)
        finally:
            r.close()


class McpReset(McpBase):
    """A reset (the pooled profile) ends the previous tenant's MCP sessions and kills the
    commands they run."""
    @classmethod
    def setUpClass(cls):
        cls.roots = tempfile.mkdtemp(prefix="forceai-mcp-reset-")
        cls.addClassCleanup(shutil.rmtree, cls.roots, True)
        os.chmod(cls.roots, 0o777)
        cls.r = Runner(("--allow-reset", "--landlock-roots", cls.roots))

    @classmethod
    def tearDownClass(cls):
        cls.r.close()

    def test_reset_ends_sessions(self):
        sid, _ = self.init()
        pidfile = os.path.join(self.roots, "reset.pid")
        out = {}
        th = threading.Thread(target=lambda: out.setdefault("r", self.call(
            sid, "run_command", {"command": "sleep 30 & echo $! > %s; wait" % pidfile})))
        th.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (os.path.exists(pidfile) and open(pidfile).read().strip()):
            time.sleep(0.05)
        pid = int(open(pidfile).read())
        st, b = self.r.json("POST", "/v1/reset")
        self.assertEqual(st, 200, b)
        th.join(15)
        self.assertFalse(th.is_alive())
        self.assertFalse(pid_running(pid))
        st, _, b = self.post_json({"jsonrpc": "2.0", "id": 5, "method": "ping"}, sid=sid)
        self.assertEqual(st, 404)


class McpDisconnect(McpBase):
    def test_closing_the_stream_kills_the_command(self):
        sid, _ = self.init()
        pidfile = os.path.join(self.r.work, "disc.pid")
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                           "params": {"name": "run_command",
                                      "arguments": {"command": "sleep 30 & echo $! > %s; wait" % pidfile},
                                      "_meta": {"progressToken": 1}}})
        s = socket.create_connection(("127.0.0.1", self.r.port))
        s.sendall(("POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   "Accept: application/json, text/event-stream\r\nMcp-Session-Id: %s\r\n"
                   "Content-Length: %d\r\n\r\n%s" % (sid, len(body), body)).encode())
        s.settimeout(5)
        self.assertIn(b"text/event-stream", s.recv(4096))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (os.path.exists(pidfile) and open(pidfile).read().strip()):
            time.sleep(0.05)
        pid = int(open(pidfile).read())
        s.close()  # the client goes away: MCP reads it as a cancel
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and pid_running(pid):
            time.sleep(0.05)
        self.assertFalse(pid_running(pid))
        self.r.request("DELETE", "/mcp", headers={"Mcp-Session-Id": sid})


class McpServersConfig(unittest.TestCase):
    def test_bad_files_are_usage_errors(self):
        d = tempfile.mkdtemp()
        cases = [("{", "line 1"), ('{"servers": {}}', "mcpServers"),
                 ('{"mcpServers": {"a__b": {"command": "x"}}}', "__"),
                 ('{"mcpServers": {"ok": {"args": []}}}', "command"),
                 ('{"mcpServers": {"ok": {"command": "x", "env": {"1BAD": "v"}}}}', "ok")]
        for i, (text, why) in enumerate(cases):
            p = os.path.join(d, "s%d.json" % i)
            with open(p, "w") as f:
                f.write(text)
            # (the policy given: a missing one would be told first)
            r = subprocess.run([RUNNER, "--mcp-servers", p, "--listen", "127.0.0.1:1",
                                "--seccomp-policy", POLICY],
                               capture_output=True, text=True, timeout=10)
            self.assertEqual(r.returncode, 2, text)
            self.assertIn("--mcp-servers", r.stderr)
            self.assertIn(why, r.stderr, text)
        r = subprocess.run([RUNNER, "--mcp-servers", "/nonexistent.json"], capture_output=True,
                           text=True, timeout=10)
        self.assertEqual(r.returncode, 2)

    def test_report_without_servers(self):
        r = Runner()
        try:
            self.assertEqual(r.json("GET", "/v1/mcp/servers"), (200, {"servers": []}))
        finally:
            r.close()


class FilesGrep(RunnerTest):
    def grep(self, path, pattern, **q):
        qs = "path=%s&pattern=%s" % (quote(path), quote(pattern))
        for k, v in q.items():
            qs += "&%s=%s" % (k, quote(str(v)))
        return self.r.json("GET", "/files/grep?" + qs)

    def setUp(self):
        self.d = os.path.join(self.r.work, "g-%s" % self._testMethodName)
        os.makedirs(os.path.join(self.d, "sub"))
        with open(os.path.join(self.d, "a.txt"), "w") as f:
            f.write("alpha\nbeta\r\nALPHA beta\n")
        with open(os.path.join(self.d, "sub", "b.c"), "w") as f:
            f.write("int beta;\n" + "x" * 2000 + "beta\n")
        with open(os.path.join(self.d, "bin"), "wb") as f:
            f.write(b"beta\0beta\n")
        os.symlink("/etc", os.path.join(self.d, "link"))

    def test_hits_glob_limits(self):
        st, b = self.grep(self.d, "beta")
        self.assertEqual(st, 200, b)
        self.assertEqual([(m["path"][len(self.d):], m["line"]) for m in b["matches"]],
                         [("/a.txt", 2), ("/a.txt", 3), ("/sub/b.c", 1), ("/sub/b.c", 2)])
        self.assertEqual(b["matches"][0]["text"], "beta")  # the CR of a CRLF line is not part
        self.assertEqual(len(b["matches"][3]["text"].encode()), 512)
        self.assertEqual((b["skipped_binary"], b["truncated"]), (1, False))
        st, b = self.grep(self.d, "^int|^ALPHA", glob="*.c")
        self.assertEqual([m["text"] for m in b["matches"]], ["int beta;"])
        st, b = self.grep(self.d, "beta", max_results=2)
        self.assertEqual((len(b["matches"]), b["truncated"]), (2, True))
        st, b = self.grep(os.path.join(self.d, "a.txt"), "^alpha$")
        self.assertEqual([m["line"] for m in b["matches"]], [1])

    def test_errors(self):
        self.assertEqual(self.grep(self.d, "(")[0], 400)
        self.assertEqual(self.grep(self.d, "(a)\\1")[0], 400)
        st, b = self.r.json("GET", "/files/grep?path=" + quote(self.d))
        self.assertEqual((st, b["code"]), (400, "MISSING_QUERY"))
        self.assertEqual(self.grep("/nonexistent", "x")[0], 404)
        self.assertEqual(self.grep(os.path.join(self.d, "link"), "root")[0], 400)
        st, b = self.grep("/proc/self/status", "Uid")
        self.assertGreaterEqual(st, 400)
        # procfs pseudo-files are never read (they would show the runner's own state).
        st, b = self.grep("/proc/sys/kernel", ".")
        self.assertEqual((st, b["matches"], b["files_searched"]), (200, [], 0))

    def test_big_tree_is_sliced(self):
        big = os.path.join(self.d, "big")
        os.mkdir(big)
        for i in range(300):
            with open(os.path.join(big, "f%03d" % i), "w") as f:
                f.write(("line of text %d\n" % i) * 3000)
        out = {}
        th = threading.Thread(target=lambda: out.setdefault("r", self.grep(big, "zzz")))
        th.start()
        worst = 0
        while th.is_alive():
            t0 = time.monotonic()
            self.assertEqual(self.r.request("GET", "/ping")[0], 200)
            worst = max(worst, time.monotonic() - t0)
            time.sleep(0.01)
        th.join()
        st, b = out["r"]
        self.assertEqual((st, b["files_searched"], b["matches"]), (200, 300, []))
        if not SLOW:
            self.assertLess(worst, 0.25)


if __name__ == "__main__":
    unittest.main()
