"""Red-team round three (issue 33), /mcp, from the attacker's side: an MCP client holding the
token, and a stdio MCP server of the image (--mcp-servers) gone bad.

- A run_command call with a progressToken answered as SSE, whose client reads slowly or not at
  all: the command's output must wait in its spool (the task paused, as a native stream's is),
  not pile up in the runner as progress events; once read it is all there, in order.
- A stdio server that stops reading its stdin and writes server->client requests and
  list_changed in a loop: the runner's own writes to it (a -32601 answer each, a tools/list each)
  obey the input's high mark; past it the server is killed as stalled, said in the log and to
  the client, and started again by the next call.
- A POST /mcp whose body is JSON but not a JSON-RPC message is a 400 with a JSON-RPC error.

Each memory figure is the runner's peak RSS (VmHWM) growth; the attack stops early once the
runner passes RSS_CAP_KIB, so the previous code cannot eat the machine. Under ASan or valgrind
the RSS bounds are not checked (the figures mean nothing there) but everything else is."""
import hashlib
import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from harness import Runner, assert_clean_exit, rss_is_meaningful

RSS = rss_is_meaningful()

HERE = os.path.dirname(os.path.abspath(__file__))
HOSTILE = os.path.join(os.path.dirname(HERE), "mcp", "hostile_server.py")

ACCEPT_SSE = "application/json, text/event-stream"
GROWTH_LIMIT_KIB = 32 * 1024  # the runner's peak RSS may grow this much under each attack
GET_GROWTH_LIMIT_KIB = 1024  # ... and this much for notifications to an unread GET stream
RSS_CAP_KIB = 256 * 1024      # the attack stops here (the old code passes it in seconds)


def status_kib(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


clean_exit = assert_clean_exit


class McpClient:
    """Raw HTTP against /mcp: one session."""

    def __init__(self, r):
        self.r = r
        st, hd, b = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                               "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                          "clientInfo": {"name": "attacker", "version": "1"}}})
        assert st == 200, b
        self.sid = hd["mcp-session-id"]

    def post(self, msg, raw=False, sid=None, accept="application/json", timeout=30):
        h = {"Content-Type": "application/json", "Accept": accept}
        if sid or getattr(self, "sid", None):
            h["Mcp-Session-Id"] = sid or self.sid
        st, hd, data = self.r.request("POST", "/mcp", msg if raw else json.dumps(msg), h,
                                      timeout=timeout)
        return st, hd, json.loads(data) if data.strip() else None

    def call(self, name, args, id_=1, timeout=30):
        return self.post({"jsonrpc": "2.0", "id": id_, "method": "tools/call",
                          "params": {"name": name, "arguments": args}}, timeout=timeout)

    def open_progress(self, command, id_=7):
        """A run_command call with a progressToken, answered as an event stream; the response
        (headers read, body not) is returned unread."""
        c = http.client.HTTPConnection("127.0.0.1", self.r.port, timeout=120)
        body = json.dumps({"jsonrpc": "2.0", "id": id_, "method": "tools/call",
                           "params": {"name": "run_command", "arguments": {"command": command},
                                      "_meta": {"progressToken": "tok"}}})
        c.request("POST", "/mcp", body=body,
                  headers=self.r.headers({"Content-Type": "application/json",
                                          "Accept": ACCEPT_SSE, "Mcp-Session-Id": self.sid}))
        resp = c.getresponse()
        assert resp.status == 200, resp.status
        assert resp.getheader("Content-Type") == "text/event-stream"
        return c, resp


class SseReader:
    """The events of a call's stream: each progress message's text is hashed in order."""

    def __init__(self, resp):
        self.resp = resp
        self.pending = b""
        self.sha = hashlib.sha256()
        self.bytes = 0
        self.progress = 0
        self.result = None
        self.bad = []

    def read(self, n):
        data = self.resp.read1(n) if hasattr(self.resp, "read1") else self.resp.read(n)
        if not data:
            return False
        self.pending += data
        while b"\n\n" in self.pending:
            ev, self.pending = self.pending.split(b"\n\n", 1)
            for line in ev.split(b"\n"):
                if line.startswith(b"data: "):
                    self.event(json.loads(line[6:]))
        return True

    def event(self, m):
        if m.get("method") == "notifications/progress":
            p = m["params"]
            text = p["message"].encode()
            self.sha.update(text)
            self.bytes += len(text)
            if p["progress"] != self.bytes or p["progress"] <= self.progress:
                self.bad.append((p["progress"], self.bytes))
            self.progress = p["progress"]
        elif "result" in m or "error" in m:
            self.result = m


class Peak:
    """Samples the runner's VmRSS in a thread; stop() gives the peak RSS (VmHWM) growth."""

    def __init__(self, pid):
        self.pid = pid
        self.base = status_kib(pid, "VmHWM")
        self.capped = threading.Event()
        self.done = threading.Event()
        self.th = threading.Thread(target=self.run, daemon=True)
        self.th.start()

    def run(self):
        while not self.done.is_set():
            if RSS and status_kib(self.pid, "VmRSS") > RSS_CAP_KIB:
                self.capped.set()
            self.done.wait(0.1)

    def growth(self):
        return status_kib(self.pid, "VmHWM") - self.base

    def stop(self):
        self.done.set()
        self.th.join()
        return self.growth()


class McpProgressWindow(unittest.TestCase):
    """Finding 3: MCP progress was an unbounded buffer."""

    def setUp(self):
        self.r = Runner()
        self.addCleanup(self.r.close)
        self.addCleanup(clean_exit, self.r)
        self.mcp = McpClient(self.r)
        self.pid = self.r.host_pid()

    def test_client_that_does_not_read_pauses_the_command(self):
        conn, resp = self.mcp.open_progress("yes forceai-round3-progress")
        peak = Peak(self.pid)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 10 and not peak.capped.is_set():
            time.sleep(0.2)  # not a byte read
        growth = peak.stop()
        held = time.monotonic() - t0
        print("\n[figure] progress, client not reading for %.1f s: runner peak RSS +%d KiB"
              % (held, growth), flush=True)
        self.assertFalse(peak.capped.is_set(), "the runner passed %d KiB" % RSS_CAP_KIB)
        if RSS:
            self.assertLess(growth, GROWTH_LIMIT_KIB)
        # The stream still works: what it sends now is the command's output, in order.
        sse = SseReader(resp)
        while sse.bytes < 4 << 20:
            self.assertTrue(sse.read(65536))
        self.assertEqual(sse.bad, [])
        conn.close()  # a cancel: the command is killed

    def test_slow_reader_gets_all_the_output_in_order(self):
        n = 25_000_000 if RSS else 2_500_000  # seq 1..n: 213 MB (19 MB under ASan)
        want = hashlib.sha256()
        p = subprocess.Popen(["seq", "1", str(n)], stdout=subprocess.PIPE)
        total = 0
        for chunk in iter(lambda: p.stdout.read(1 << 20), b""):
            want.update(chunk)
            total += len(chunk)
        p.wait()
        conn, resp = self.mcp.open_progress("seq 1 %d" % n)
        self.addCleanup(conn.close)
        peak = Peak(self.pid)
        sse = SseReader(resp)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 5 and not peak.capped.is_set():
            sse.read(4096)  # ~80 KB/s for 5 s
            time.sleep(0.05)
        slow_growth = peak.growth()
        while sse.result is None and not peak.capped.is_set():
            if not sse.read(1 << 20):
                break
        growth = peak.stop()
        print("\n[figure] progress, %d MB read slowly for 5 s then at full speed in %.1f s: "
              "runner peak RSS +%d KiB while slow, +%d KiB in all"
              % (total // 1000000, time.monotonic() - t0, slow_growth, growth), flush=True)
        self.assertFalse(peak.capped.is_set(), "the runner passed %d KiB" % RSS_CAP_KIB)
        if RSS:
            self.assertLess(growth, GROWTH_LIMIT_KIB)
        self.assertIsNotNone(sse.result)
        res = sse.result["result"]
        self.assertEqual(res["structuredContent"]["exit_code"], 0, res)
        self.assertEqual(sse.bad, [])
        self.assertEqual(sse.bytes, total)
        self.assertEqual(sse.sha.hexdigest(), want.hexdigest())


class McpServerStdinFlood(unittest.TestCase):
    """Finding 4: a stdio server that does not read its stdin made the runner queue its own
    answers to it without bound."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="forceai-round3-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        os.chmod(self.tmp, 0o755)
        server = os.path.join(self.tmp, "hostile_server.py")
        shutil.copy(HOSTILE, server)
        os.chmod(server, 0o755)
        cfg = os.path.join(self.tmp, "servers.json")
        with open(cfg, "w") as f:
            json.dump({"mcpServers": {"hostile": {"command": "/usr/bin/python3",
                                                  "args": [server]}}}, f)
        self.r = Runner(("--mcp-servers", cfg))
        self.addCleanup(self.r.close)
        self.addCleanup(clean_exit, self.r)
        self.mcp = McpClient(self.r)
        self.pid = self.r.host_pid()

    def server(self):
        st, b = self.r.json("GET", "/v1/mcp/servers")
        return b["servers"][0]

    def test_server_that_stops_reading_is_killed_as_stalled(self):
        st, _, b = self.mcp.call("hostile__echo", {"text": "up"})
        self.assertEqual(b["result"]["content"][0]["text"], "up", b)
        peak = Peak(self.pid)
        out = {}

        def spam():
            try:
                out["r"] = self.mcp.call("hostile__spam", {}, id_=2, timeout=25)
            except OSError as e:
                out["e"] = e
        th = threading.Thread(target=spam, daemon=True)
        th.start()
        t0 = time.monotonic()
        while th.is_alive() and time.monotonic() - t0 < 20 and not peak.capped.is_set():
            time.sleep(0.1)
        took = time.monotonic() - t0
        growth = peak.stop()
        print("\n[figure] stdio server flooding requests, not reading: runner peak RSS +%d KiB "
              "in %.1f s (call %s)" % (growth, took, "answered" if "r" in out else "pending"),
              flush=True)
        self.assertFalse(peak.capped.is_set(), "the runner passed %d KiB" % RSS_CAP_KIB)
        if RSS:
            self.assertLess(growth, GROWTH_LIMIT_KIB)
        self.assertIn("r", out, "the call was not ended")
        st, _, b = out["r"]
        self.assertEqual(st, 200)
        res = b["result"]
        self.assertTrue(res["isError"], res)
        self.assertIn("stalled", res["content"][0]["text"])
        self.assertIn("stdin", res["content"][0]["text"])
        s = self.server()
        self.assertEqual(s["state"], "failed", s)
        self.assertIn("stalled", s["last_error"])
        stopped = [l for l in self.r.loglines() if l.get("msg") == "mcp server stopped"]
        self.assertTrue(stopped and "stalled" in stopped[-1].get("reason", ""), stopped)
        # The next call starts it again.
        st, _, b = self.mcp.call("hostile__echo", {"text": "again"})
        self.assertEqual(b["result"]["content"][0]["text"], "again", b)
        s = self.server()
        self.assertEqual((s["state"], s["starts"]), ("ready", 2), s)


    def test_parallel_large_calls_are_not_a_stall(self):
        """The high mark leaves room for calls in parallel: two of 400 KB at once to a server
        that reads are answered, and it is not restarted."""
        st, _, b = self.mcp.call("hostile__echo", {"text": "up"})
        self.assertEqual(b["result"]["content"][0]["text"], "up", b)
        res = {}

        def go(i):
            res[i] = self.mcp.call("hostile__echo", {"text": str(i) * 400000}, id_=10 + i)
        ths = [threading.Thread(target=go, args=(i,)) for i in range(2)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        for i in range(2):
            st, _, b = res[i]
            self.assertEqual(b["result"]["content"][0]["text"], str(i) * 400000,
                             b["result"]["content"][0]["text"][:200])
        s = self.server()
        self.assertEqual((s["state"], s["starts"]), ("ready", 1), s)

    def test_unread_get_stream_gets_no_pile_of_list_changed(self):
        """A server that changes its list again after each tools/list, while the client's GET
        stream is not read: one list_changed waits for it, not one per change."""
        c = http.client.HTTPConnection("127.0.0.1", self.r.port, timeout=60)
        self.addCleanup(c.close)
        # A small receive window, so that what is not read stays on the runner's side.
        c.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.sock.settimeout(60)
        c.sock.connect(("127.0.0.1", self.r.port))
        c.request("GET", "/mcp", headers=self.r.headers({"Accept": "text/event-stream",
                                                          "Mcp-Session-Id": self.mcp.sid}))
        resp = c.getresponse()
        self.assertEqual(resp.status, 200)
        peak = Peak(self.pid)
        st, _, b = self.mcp.call("hostile__churn", {"seconds": 10}, timeout=60)
        growth = peak.stop()
        lists = int(b["result"]["content"][0]["text"].split()[0])
        print("\n[figure] %d list changes to an unread GET stream in 10 s: runner peak RSS "
              "+%d KiB" % (lists, growth), flush=True)
        self.assertGreater(lists, 1000)
        if RSS:
            self.assertLess(growth, GET_GROWTH_LIMIT_KIB)
        # What waits is a list_changed; the stream still works.
        data = resp.read1(65536)
        self.assertIn(b"notifications/tools/list_changed", data)


class McpNotAMessage(unittest.TestCase):
    """Extra: a body that is JSON but no JSON-RPC message (or a notification that cannot be
    taken) is refused by the transport (400), as the official SDK's server does; bad params of
    a well-formed request stay its error response (200)."""

    def setUp(self):
        self.r = Runner()
        self.addCleanup(self.r.close)
        self.addCleanup(clean_exit, self.r)
        self.mcp = McpClient(self.r)

    def test_each_shape_is_a_400_with_a_json_rpc_error(self):
        cases = [
            ('"a string"', -32600), ("42", -32600), ("null", -32600), ("true", -32600),
            ("[]", -32600),
            ('[{"jsonrpc":"2.0","id":1,"method":"ping"}]', -32600),  # a batch
            ('[{"jsonrpc":"2.0","method":"notifications/initialized"}]', -32600),
            ('{"id":1,"method":"ping"}', -32600),
            ('{"jsonrpc":"2.0"}', -32600),
            ('{"jsonrpc":"2.0","id":1,"method":7}', -32600),
            ('{"jsonrpc":"2.0","id":[1],"method":"ping"}', -32600),
            # a notification that cannot be taken: it gets no response, so the transport's 400
            ('{"jsonrpc":"2.0","method":"notifications/x","params":[1]}', -32602),
            ("{", -32700), ("", -32700), ("nul", -32700),
        ]
        got = []
        for body, code in cases:
            for sid in (None, "stateless"):
                kw = {"raw": True}
                if sid:
                    st, _, b = self.post_stateless(body)
                else:
                    st, _, b = self.mcp.post(body, **kw)
                got.append((body, sid, st, b and b.get("error", {}).get("code")))
        bad = [g for g, (body, code) in zip(got, [c for c in cases for _ in (0, 1)])
               if g[2:] != (400, code)]
        self.assertEqual(bad, [])
        # Bad params of a well-formed request: its error response.
        st, _, b = self.mcp.post({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                  "params": {}})
        self.assertEqual((st, b["error"]["code"], b["id"]), (200, -32602, 3))
        st, _, b = self.mcp.post({"jsonrpc": "2.0", "id": 4, "method": "ping"})
        self.assertEqual((st, b["result"]), (200, {}))

    def post_stateless(self, body):
        st, hd, data = self.r.request("POST", "/mcp", body, {
            "Content-Type": "application/json", "Accept": "application/json",
            "MCP-Protocol-Version": "2026-07-28"})
        return st, hd, json.loads(data) if data.strip() else None


if __name__ == "__main__":
    unittest.main()
