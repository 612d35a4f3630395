"""Issue 25's API items: request bodies against their schema (item 1), the
PTY cwd error (5), one error code for bad query parameters (9), a malformed
Range ignored (10), PTY replay after the shell exited (11), the bound in the
timeout_ms message (12). docs/design/architecture.md#options-one-set-of-rules."""
import asyncio
import json
import os
import time
import urllib.parse

from harness import RunnerTest, slow
from wsutil import recv_until, websockets, ws_url

DAY7 = 7 * 24 * 3600 * 1000


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


class BodySchemas(RunnerTest):
    def post(self, path, body):
        st, _, data = self.r.request("POST", path, json.dumps(body),
                                     {"Content-Type": "application/json"})
        try:
            return st, json.loads(data)
        except ValueError:
            return st, data

    def assert_unknown(self, path, body, field, names=None):
        st, b = self.post(path, body)
        self.assertEqual(st, 400, (path, body, b))
        self.assertEqual(b["code"], "UNKNOWN_FIELD", b)
        self.assertIn("'%s'" % field, b["message"])
        if names:
            self.assertIn("'%s'" % names, b["message"])

    def test_native_timeout_is_not_dropped(self):
        """The issue's case: execd's `timeout` on /v1/tasks ran 1.5 s and
        succeeded; it is refused, naming timeout_ms, and nothing runs."""
        t0 = time.monotonic()
        self.assert_unknown("/v1/tasks", {"task": "sleep 1.5; echo ran-full", "timeout": 200},
                            "timeout", "timeout_ms")
        self.assertLess(time.monotonic() - t0, slow(1.0, cap=1.4))

    def test_native_vocabulary_and_unknown(self):
        self.assert_unknown("/v1/tasks", {"task": "env", "envs": {"A": "1"}}, "envs", "env")
        self.assert_unknown("/v1/tasks", {"task": "true", "command": "id"}, "command", "task")
        self.assert_unknown("/v1/tasks", {"task": "true", "bogus": 1}, "bogus")
        self.assert_unknown("/v1/tasks", {"task": "true", "uid": 1000}, "uid")
        # the known ones still work, a null is absent
        ev = self.r.native({"task": "echo $A", "env": {"A": "v1"}, "timeout_ms": 5000,
                            "cwd": None, "capability": "exec"})
        self.assertEqual(ev[-1]["data"]["status"], "succeeded", ev)
        self.assertIn("v1", "".join(e["data"].get("text", "") for e in ev))
        st, b = self.post("/v1/tasks", {"task": 5})
        self.assertEqual((st, b["code"]), (400, "INVALID_REQUEST_BODY"))

    def test_native_interactive_routes(self):
        ev_id = None
        r = self.r.curl("-H", "Content-Type: application/json", "-d",
                        json.dumps({"task": "sleep 5", "stdin": True}),
                        "--max-time", "1", self.r.url + "/v1/tasks", timeout=1)
        for line in r.stdout.decode().splitlines():
            if line.startswith("data: ") and '"task_id"' in line:
                ev_id = json.loads(line[6:])["task_id"]
        self.assertTrue(ev_id, r.stdout)
        self.assert_unknown("/v1/tasks/%s/resize" % ev_id, {"cols": 5, "rows": 5, "x": 1}, "x")
        self.assert_unknown("/v1/tasks/%s/signal" % ev_id, {"signal": "SIGINT", "sig": 2},
                            "sig")
        self.r.request("DELETE", "/v1/tasks/" + ev_id)

    def test_execd_confusables(self):
        self.assert_unknown("/command", {"command": "true", "timeout_ms": 200}, "timeout_ms",
                            "timeout")
        self.assert_unknown("/command", {"command": "env", "env": {"A": "1"}}, "env", "envs")
        self.assert_unknown("/command", {"command": "true", "task": "id"}, "task", "command")
        st, s = self.post("/session", {})
        self.assertEqual(st, 200, s)
        sid = s["session_id"]
        self.assert_unknown("/session/%s/run" % sid, {"command": "true", "timeout_ms": 5},
                            "timeout_ms", "timeout")
        self.assert_unknown("/pty", {"cwd": self.r.work, "task": "id"}, "task", "command")
        self.assert_unknown("/pty", {"env": {"A": "1"}}, "env")
        # forward compatibility: another unknown field is accepted
        ev = self.r.execd({"command": "echo fine", "someNewExecdField": {"x": 1}})
        self.assertEqual(ev[-1]["type"], "execution_complete", ev)
        st, b = self.post("/command", {"command": "true", "background": "yes"})
        self.assertEqual((st, b["code"]), (400, "INVALID_REQUEST_BODY"))

    def test_item12_timeout_ms_bound_stated(self):
        st, b = self.post("/v1/tasks", {"task": "true", "timeout_ms": DAY7 + 1})
        self.assertEqual(st, 400)
        self.assertIn(str(DAY7), b["message"])
        st, b = self.post("/command", {"command": "true", "timeout": DAY7 + 1})
        self.assertEqual(st, 400)
        self.assertIn(str(DAY7), b["message"])


class QueryAndRange(RunnerTest):
    def setUp(self):
        self.f = os.path.join(self.r.work, "q.txt")
        with open(self.f, "w") as f:
            f.write("l1\nl2\nl3\n")
        os.chmod(self.f, 0o644)

    def code(self, path, headers=None):
        st, _, data = self.r.request("GET", path, headers=headers)
        return st, json.loads(data)["code"] if data.startswith(b"{") else data

    def test_item9_invalid_query_everywhere(self):
        ev = self.r.execd({"command": "echo x"})
        cid = ev[0]["text"]
        p = urllib.parse.quote(self.f)
        d = urllib.parse.quote(self.r.work)
        for path in ("/command/%s/logs?cursor=abc" % cid,
                     "/directories/list?path=%s&depth=abc" % d,
                     "/files/download?path=%s&offset=x&limit=1" % p,
                     "/files/download?path=%s&offset=1&limit=0" % p,
                     "/files/download?path=%s&offset=1" % p,
                     "/files/download?path=relative/x",
                     "/files/info?path=" + urllib.parse.quote("a\0b"),
                     "/files/search?path=%s&pattern=%s" % (d, urllib.parse.quote("[")),
                     "/v1/tasks?state=bogus",
                     "/command?limit=abc"):
            with self.subTest(path=path):
                self.assertEqual(self.code(path), (400, "INVALID_QUERY"))
        self.assertEqual(self.code("/files/download"), (400, "MISSING_QUERY"))

    def test_item10_malformed_range_ignored(self):
        p = "/files/download?path=" + urllib.parse.quote(self.f)
        for rng in ("bytes=abc", "items=0-1", "bytes=9-3", "bytes 0-1", "bytes=0-1,x"):
            with self.subTest(rng):
                st, h, data = self.r.request("GET", p, headers={"Range": rng})
                self.assertEqual((st, data), (200, b"l1\nl2\nl3\n"))
        for rng in ("bytes=100-", "bytes=-0"):
            with self.subTest(rng):
                st, h, _ = self.r.request("GET", p, headers={"Range": rng})
                self.assertEqual(st, 416)
                self.assertEqual(h["content-range"], "bytes */9")


class PtyContract(RunnerTest):
    def test_item5_cwd_the_task_user_cannot_create(self):
        root_only = os.path.join(self.r.work, "root-only")
        os.mkdir(root_only, 0o700)
        bad = os.path.join(root_only, "sub")
        st, b = self.r.json("POST", "/pty", {"cwd": bad})
        self.assertEqual((st, b["code"]), (403, "PERMISSION_DENIED"), b)
        # the same mistake on POST /directories
        st, b2 = self.r.json("POST", "/directories", {bad: {}})
        self.assertEqual((st, b2["code"]), (403, "PERMISSION_DENIED"), b2)
        st, b = self.r.json("POST", "/pty", {"cwd": "/proc/no/such"})
        self.assertIn(st, (403, 404), b)
        self.assertNotEqual(b["code"], "RUNTIME_ERROR")

    def test_item11_replay_after_exit(self):
        st, b = self.r.json("POST", "/pty", {"cwd": self.r.work,
                                             "command": "echo before_exit_marker; exit 3"})
        self.assertEqual(st, 201)
        sid = b["session_id"]

        async def first():
            async with websockets.connect(ws_url(self.r, "/pty/%s/ws" % sid)) as ws:
                await recv_until(ws, lambda k, p: k == "json" and p.get("type") == "exit")
        run(first())
        st, status = self.r.json("GET", "/pty/" + sid)
        off = status["output_offset"]
        self.assertFalse(status["running"])
        self.assertGreater(off, 0)

        async def again():
            async with websockets.connect(ws_url(self.r, "/pty/%s/ws?since=0" % sid)) as ws:
                return await recv_until(ws, lambda k, p: k == "json" and p.get("type")
                                        == "connected")
        frames = run(again())
        replays = [p for k, p in frames if k == "replay"]
        self.assertTrue(replays, frames)
        self.assertEqual(replays[0][0], 0)
        whole = b"".join(p[1] for p in replays)
        self.assertIn(b"before_exit_marker", whole)
        self.assertEqual(len(whole), off)
        self.r.request("DELETE", "/pty/" + sid)


SLOW_SERVER = """import socket, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", %d))
s.listen(8)
while True:
    c, _ = s.accept()
    c.recv(65536)
    time.sleep(0.3)
    c.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: 4\\r\\nConnection: close\\r\\n\\r\\nslow")
    c.close()
"""


class ProxyTimeoutZero(RunnerTest):
    """Item 3: --proxy-timeout-ms 0 is "none", as 0 is for every timeout
    (it gave every proxied request a 504 after a few ms)."""
    runner_args = ("--proxy-timeout-ms", "0")

    def test_item3_zero_is_no_timeout(self):
        import socket
        from harness import free_port
        port = free_port()
        path = os.path.join(self.r.work, "slow_server.py")
        with open(path, "w") as f:
            f.write(SLOW_SERVER % port)
        ev = self.r.execd({"command": "exec python3 " + path, "background": True})
        cid = ev[0]["text"]
        self.addCleanup(self.r.request, "DELETE", "/command?id=" + cid)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        st, _, body = self.r.request("GET", "/proxy/%d/" % port)
        self.assertEqual((st, body), (200, b"slow"))


class IdleTimeoutZero(RunnerTest):
    """Item 3: --idle-timeout-ms 0 is "none": a kept-alive connection stays
    (0 had closed it at once after each response)."""
    runner_args = ("--idle-timeout-ms", "0")

    def test_item3_keepalive_stays(self):
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", self.r.port, timeout=5)
        for _ in range(3):
            c.request("GET", "/ping", headers=self.r.headers())
            r = c.getresponse()
            r.read()
            self.assertEqual(r.status, 200)
            time.sleep(0.7)
        c.close()
