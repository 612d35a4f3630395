"""The port proxy: ANY /proxy/{port}/{path} to a server a task runs in the box
(real servers started as background tasks, real clients), and GET /v1/ports."""
import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import unittest

from harness import Runner, free_port, rss_is_meaningful, slow

HERE = os.path.dirname(os.path.abspath(__file__))
DEBIAN_PYTHON = "/usr/bin/python3"  # has python3-websockets
TOKEN = "proxy-test-token-%d" % os.getpid()
# The servers run as a uid of their own: RLIMIT_NPROC counts every process
# and thread of a uid on the machine, and other suites run many as 1000.
SERVER_UID = 2713


def vm_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def wait_listening(port, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("nothing listens on port %d" % port)


class ProxyTest(unittest.TestCase):
    """One runner (with a token and a model proxy) and the upstream servers,
    each a background task of that runner."""

    @classmethod
    def setUpClass(cls):
        # (vault mode: exec tasks need --exec-network full to serve ports)
        cls.r = Runner(["--proxy-timeout-ms", "1500", "--task-user", "%d:%d" % (SERVER_UID,
                                                                               SERVER_UID),
                        "--exec-network", "full"],
                       token=TOKEN, env={"FORCEAI_GATEWAY_URL": "http://127.0.0.1:9/v1"})
        try:
            cls.start_servers()
        except BaseException:
            cls.r.close()  # tearDownClass does not run after a failed setUpClass
            raise

    @classmethod
    def start_servers(cls):
        cls.pid = cls.r.host_pid()
        cls.model_port = next(l["model_proxy_port"] for l in cls.r.loglines()
                              if l.get("msg") == "ready")
        # The servers run as the task user: their files live in the runner's
        # temporary directory (readable by all).
        cls.script = os.path.join(cls.r.tmp, "proxy_upstreams.py")
        shutil.copy(os.path.join(HERE, "proxy_upstreams.py"), cls.script)
        os.chmod(cls.script, 0o644)
        cls.files = os.path.join(cls.r.work, "files")
        os.makedirs(os.path.join(cls.files, "a dir"))
        cls.blob = os.urandom(5 * 1024 * 1024 + 7)
        with open(os.path.join(cls.files, "a dir", "blob.bin"), "wb") as f:
            f.write(cls.blob)
        os.chmod(cls.files, 0o755)
        os.chmod(os.path.join(cls.files, "a dir"), 0o755)
        os.chmod(os.path.join(cls.files, "a dir", "blob.bin"), 0o644)
        cls.ports = {}
        cls.task_ids = {}
        for mode in ("files", "echo", "ws", "silent", "endless", "trickle", "drop", "garbage",
                     "once"):
            port = free_port()
            if mode == "files":
                cmd = "exec %s -m http.server %d --bind 127.0.0.1 --directory '%s'" % (
                    DEBIAN_PYTHON, port, cls.files)
            else:
                cmd = "exec %s %s %s %d" % (DEBIAN_PYTHON, cls.script, mode, port)
            ev = cls.r.execd({"command": cmd, "background": True})
            assert ev and ev[0]["type"] == "init", ev
            cls.task_ids[mode] = ev[0]["text"]
            cls.ports[mode] = port
        for port in cls.ports.values():
            wait_listening(port)

    @classmethod
    def tearDownClass(cls):
        rc = cls.r.stop()
        log = cls.r.logtext()
        cls.r.close()
        if rc != 0:
            raise AssertionError("runner exited %s; log tail:\n%s" % (rc, log[-4000:]))

    def conn(self, timeout=30):
        return http.client.HTTPConnection("127.0.0.1", self.r.port, timeout=timeout)

    def req(self, method, path, body=None, headers=None, timeout=30):
        c = self.conn(timeout)
        h = {"X-EXECD-ACCESS-TOKEN": TOKEN}
        h.update(headers or {})
        c.request(method, path, body=body, headers=h)
        resp = c.getresponse()
        data = resp.read()
        c.close()
        return resp, data

    def settle_fds(self, base, timeout=5):
        """The runner's fd count comes back to base (connections close
        asynchronously)."""
        deadline = time.monotonic() + timeout
        while fd_count(self.pid) > base and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertLessEqual(fd_count(self.pid), base, "the runner leaks fds")

    # ---- plain HTTP ----

    def test_get_file_byte_exact_and_head(self):
        port = self.ports["files"]
        resp, data = self.req("GET", "/proxy/%d/a%%20dir/blob.bin?x=1&y=%%2F" % port)
        self.assertEqual(resp.status, 200)
        self.assertEqual(len(data), len(self.blob))
        self.assertEqual(hashlib.sha256(data).digest(), hashlib.sha256(self.blob).digest())
        self.assertEqual(resp.getheader("Content-Length"), str(len(self.blob)))
        resp, data = self.req("HEAD", "/proxy/%d/a%%20dir/blob.bin" % port)
        self.assertEqual(resp.status, 200)
        self.assertEqual(data, b"")
        self.assertEqual(resp.getheader("Content-Length"), str(len(self.blob)))
        resp, _ = self.req("GET", "/proxy/%d/a%%20dir/missing" % port)
        self.assertEqual(resp.status, 404)

    def test_target_is_forwarded_as_sent(self):
        port = self.ports["echo"]
        for sent, seen in (("/proxy/%d" % port, "/"), ("/proxy/%d/" % port, "/"),
                           ("/proxy/%d?q=1" % port, "/?q=1"),
                           ("/proxy/%d/a/b%%2Fc?x=%%20&y" % port, "/a/b%2Fc?x=%20&y")):
            resp, data = self.req("GET", sent)
            self.assertEqual((resp.status, data), (200, b"path=" + seen.encode()), sent)

    def test_forwarded_fields_and_hop_by_hop(self):
        port = self.ports["echo"]
        resp, data = self.req("GET", "/proxy/%d/headers" % port, headers={
            "X-Forwarded-For": "203.0.113.7", "Connection": "keep-alive, X-Private",
            "X-Private": "hop", "Keep-Alive": "timeout=9", "X-Kept": "yes",
            "X-Forwarded-Host": "spoofed"})
        self.assertEqual(resp.status, 200)
        got = {}
        for k, v in json.loads(data):
            got.setdefault(k.lower(), []).append(v)
        self.assertEqual(got["x-forwarded-for"], ["203.0.113.7, 127.0.0.1"])
        self.assertEqual(got["x-forwarded-proto"], ["http"])
        self.assertEqual(got["x-kept"], ["yes"])
        self.assertEqual(got["host"], ["127.0.0.1:%d" % self.r.port])
        # The client's Connection field stops here; the upstream connection
        # is kept alive for the pool (HTTP/1.1's default: no field).
        self.assertNotIn("connection", got)
        # The runner's token never reaches a task; hop-by-hop fields stop here.
        for k in ("x-execd-access-token", "x-private", "keep-alive", "x-forwarded-host"):
            self.assertNotIn(k, got)
        self.assertNotIn(TOKEN, data.decode())
        # ... and on the way back.
        self.assertIsNone(resp.getheader("X-Hop"))
        self.assertIsNone(resp.getheader("Keep-Alive"))
        self.assertEqual(resp.msg.get_all("Set-Cookie"), ["a=1", "b=2"])

    # ---- the upstream pool ----

    def test_upstream_connections_are_kept_alive_and_reused(self):
        port = self.ports["echo"]
        peers = []
        for _ in range(5):
            resp, data = self.req("GET", "/proxy/%d/peer" % port)
            self.assertEqual(resp.status, 200)
            peers.append(data)
        self.assertEqual(len(set(peers)), 1, "one upstream connection for 5 requests: %r" % peers)
        # A server that answers Connection: close gets a new connection.
        resp, data = self.req("GET", "/proxy/%d/peer?close" % port)
        self.assertEqual((resp.status, data), (200, peers[0]))
        resp, data = self.req("GET", "/proxy/%d/peer" % port)
        self.assertEqual(resp.status, 200)
        self.assertNotEqual(data, peers[0], "a connection the server closed was reused")

    def test_pool_is_bounded(self):
        port = self.ports["echo"]
        base = fd_count(self.pid)
        errors = []

        def one():
            try:
                resp, _ = self.req("GET", "/proxy/%d/peer?slow" % port)
                if resp.status != 200:
                    errors.append(resp.status)
            except OSError as e:
                errors.append(e)
        threads = [threading.Thread(target=one) for _ in range(48)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        time.sleep(0.2)
        # 48 upstream connections were open at once; at most 32 stay idle.
        self.assertLessEqual(fd_count(self.pid), base + 32)

    def test_pooled_connection_closed_by_the_server(self):
        port = self.ports["once"]
        resp, first = self.req("GET", "/proxy/%d/a" % port)
        self.assertEqual(resp.status, 200)
        # The pooled connection is closed as the next request reaches it: a
        # GET is sent once more, on a new connection ...
        resp, second = self.req("GET", "/proxy/%d/b" % port)
        self.assertEqual(resp.status, 200)
        self.assertNotEqual(second, first)
        # ... a POST is not (it may have had its effect): 502.
        resp, data = self.req("POST", "/proxy/%d/c" % port, body=b"x")
        self.assertEqual(resp.status, 502, data)
        self.assertEqual(json.loads(data)["code"], "BAD_GATEWAY")

    def test_post_streamed_body_echoed(self):
        port = self.ports["echo"]
        body = os.urandom(24 * 1024 * 1024)

        def gen():
            for i in range(0, len(body), 1 << 20):
                yield body[i:i + (1 << 20)]

        # http.client sends a generator chunked.
        for framing, payload in (("length", body), ("chunked", gen())):
            before = vm_kib(self.pid, "VmRSS")
            resp, data = self.req("POST", "/proxy/%d/echo" % port, body=payload, timeout=60)
            self.assertEqual(resp.status, 200, framing)
            self.assertEqual(resp.getheader("X-Seen-Framing"), framing)
            self.assertEqual(resp.getheader("X-Seen-Method"), "POST")
            self.assertEqual(len(data), len(body), framing)
            self.assertTrue(data == body, framing)
            if rss_is_meaningful():
                # 24 MiB each way went through: nothing of it stays.
                self.assertLess(vm_kib(self.pid, "VmRSS") - before, 4096, framing)

    def test_upload_to_a_slow_reader(self):
        # 128 MiB to an upstream that reads slowly: the runner holds the
        # client back (it suspends and resumes it many times) and forwards
        # every byte in order, whatever the framing.
        port = self.ports["echo"]
        size = 128 << 20
        piece = os.urandom(1 << 20)
        want = hashlib.sha256()
        for i in range(size // len(piece)):
            want.update(piece)

        def gen():
            for i in range(size // len(piece)):
                yield piece

        for framing in ("length", "chunked"):
            rss0 = vm_kib(self.pid, "VmRSS")
            c = self.conn(timeout=120)
            h = {"X-EXECD-ACCESS-TOKEN": TOKEN}
            if framing == "length":
                h["Content-Length"] = str(size)
            c.request("PUT", "/proxy/%d/sink?slow" % port, body=gen(), headers=h,
                      encode_chunked=framing == "chunked")
            resp = c.getresponse()
            got = json.loads(resp.read())
            c.close()
            self.assertEqual(resp.status, 200, framing)
            self.assertEqual(got, {"bytes": size, "sha256": want.hexdigest()}, framing)
            if rss_is_meaningful():
                self.assertLess(vm_kib(self.pid, "VmRSS") - rss0, 4096, framing)

    def test_keep_alive_and_statuses(self):
        port = self.ports["echo"]
        c = self.conn()
        h = {"X-EXECD-ACCESS-TOKEN": TOKEN}
        for path, status, body in (("/x", 200, b"path=/x"), ("/status/204", 204, b""),
                                   ("/status/404", 404, b""), ("/y", 200, b"path=/y")):
            c.request("GET", "/proxy/%d%s" % (port, path), headers=h)
            resp = c.getresponse()
            self.assertEqual((resp.status, resp.read()), (status, body), path)
        c.request("PUT", "/proxy/%d/put" % port, body=b"abc", headers=h)
        resp = c.getresponse()
        self.assertEqual((resp.status, resp.read(), resp.getheader("X-Seen-Method")),
                         (200, b"abc", "PUT"))
        c.close()

    def read_events(self, path):
        """(arrival time, sent time) of each event of a streamed response."""
        c = self.conn()
        c.request("GET", path, headers={"X-EXECD-ACCESS-TOKEN": TOKEN})
        resp = c.getresponse()
        self.assertEqual(resp.status, 200)
        self.assertEqual(resp.getheader("Content-Type"), "text/event-stream")
        out, buf = [], b""
        while True:
            chunk = resp.read1(65536)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                out.append((time.time(), float(ev.split()[2])))
        c.close()
        return out

    def test_chunked_and_sse_arrive_as_sent(self):
        port = self.ports["echo"]
        for path in ("/chunked", "/sse-close"):
            events = self.read_events("/proxy/%d%s" % (port, path))
            self.assertEqual(len(events), 5, path)
            # Each event arrives before the next one is sent (they are 300 ms
            # apart), not when the response ends.
            for (arrived, _), (_, next_sent) in zip(events, events[1:]):
                self.assertLess(arrived, next_sent, path)
            self.assertGreater(events[-1][0] - events[0][0], 0.9, path)

    # ---- WebSocket ----

    def test_websocket_echo(self):
        port = self.ports["ws"]
        base = fd_count(self.pid)
        client = r"""
import asyncio, json, os, sys, time, websockets
async def main():
    url, token = sys.argv[1], sys.argv[2]
    async with websockets.connect(url, extra_headers={"X-EXECD-ACCESS-TOKEN": token},
                                  max_size=None) as ws:
        res = {}
        for name, m in (("text", "hello"), ("binary", b"\x00\x01\xff"),
                        ("big", os.urandom(3 * 1024 * 1024))):
            await ws.send(m)
            res[name] = (await ws.recv()) == m
        t = time.monotonic()
        for i in range(100):
            await ws.send(str(i))
            assert await ws.recv() == str(i)
        res["rtt_ms"] = (time.monotonic() - t) * 10
    print(json.dumps(res))
asyncio.run(main())
"""
        out = subprocess.run([DEBIAN_PYTHON, "-c", client,
                              "ws://127.0.0.1:%d/proxy/%d/echo" % (self.r.port, port), TOKEN],
                             capture_output=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr.decode())
        res = json.loads(out.stdout)
        self.assertEqual((res["text"], res["binary"], res["big"]), (True, True, True))
        self.assertLess(res["rtt_ms"], slow(0.05) * 1000)
        self.settle_fds(base)

    def test_upgrade_refused_by_upstream_is_passed_on(self):
        # An upgrade the upstream does not take is an ordinary response.
        port = self.ports["echo"]
        resp, data = self.req("GET", "/proxy/%d/plain" % port,
                              headers={"Connection": "Upgrade", "Upgrade": "websocket"})
        self.assertEqual((resp.status, data), (200, b"path=/plain"))

    # ---- errors ----

    def test_errors(self):
        dead = free_port()
        resp, data = self.req("GET", "/proxy/%d/" % dead)
        self.assertEqual(resp.status, 502)
        self.assertEqual(resp.getheader("Content-Type"), "application/json")
        self.assertEqual(json.loads(data)["code"], "BAD_GATEWAY")
        self.assertIn("message", json.loads(data))
        # The model proxy's port is the runner's own and stays refused; the API's own port is
        # the API itself (test_self_port_is_the_api).
        resp, data = self.req("GET", "/proxy/%d/ping" % self.model_port)
        self.assertEqual(resp.status, 403)
        self.assertEqual(json.loads(data)["code"], "FORBIDDEN")
        resp, data = self.req("GET", "/proxy/%d/proxy/%d/ping" % (self.r.port, self.r.port))
        self.assertEqual(resp.status, 403, "re-dispatched once, never in a loop")
        for bad in ("", "0/x", "65536/x", "99999999999/x", "abc/x", "-1/x", "80a", "%38%30/x"):
            resp, data = self.req("GET", "/proxy/" + bad)
            self.assertEqual(resp.status, 400, bad)
            self.assertEqual(json.loads(data)["code"], "INVALID_PORT", bad)
        # Without the token: 401, as every other route.
        c = self.conn()
        c.request("GET", "/proxy/%d/" % self.ports["echo"])
        self.assertEqual(c.getresponse().status, 401)
        c.close()

    def test_self_port_is_the_api(self):
        """OpenSandbox's server hands out {host}:{port}/proxy/44772 for execd's own port
        (Docker bridge mode): /proxy/{the runner's port}/{path} is the API itself, in the
        request (no socket), with the token checked as for the route it lands on and
        X-EXECD-ACCESS-TOKEN honoured, not stripped (docs/design/build.md#what-opensandboxs-server-runtimes-expect-of-the-image)."""
        own = "/proxy/%d" % self.r.port
        resp, data = self.req("GET", own + "/ping", headers={"X-EXECD-ACCESS-TOKEN": "x"})
        self.assertEqual((resp.status, data), (200, b""), "public as /ping is")
        resp, data = self.req("GET", own + "/v1/hardening")
        self.assertEqual(resp.status, 200, data)
        self.assertIn("confinement_enabled", json.loads(data))
        resp, data = self.req("POST", own + "/command", body=json.dumps({"command": "echo self"}),
                              headers={"Content-Type": "application/json"})
        ev = [json.loads(f) for f in data.split(b"\n\n") if f.strip()]
        self.assertEqual(resp.status, 200, data)
        self.assertEqual([e.get("text") for e in ev if e["type"] == "stdout"], ["self"])
        cid = ev[0]["text"]
        resp, data = self.req("GET", own + "/command/status/" + cid + "?x=1")
        self.assertEqual(json.loads(data)["exit_code"], 0)
        for bad in ({"X-EXECD-ACCESS-TOKEN": "wrong"}, {}):
            c = self.conn()
            c.request("GET", own + "/v1/hardening", headers=bad)
            self.assertEqual(c.getresponse().status, 401, bad)
            c.close()
        resp, data = self.req("GET", own + "/no/such")
        self.assertEqual((resp.status, json.loads(data)["code"]), (404, "NOT_FOUND"))
        self.assertEqual(self.req("GET", own)[0].status, 404)
        # The same connection goes on serving (a kept-alive client of the endpoint).
        c = self.conn()
        for _ in range(3):
            c.request("GET", own + "/ping")
            r = c.getresponse()
            r.read()
            self.assertEqual(r.status, 200)
        c.close()

    def test_sdk_through_the_self_endpoint(self):
        """OpenSandbox's JavaScript SDK suites (tests/sdk), unchanged, with the endpoint the
        server hands out: http://{host}:{port}/proxy/{port}."""
        sdk = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "sdk")
        if not os.path.isdir(os.path.join(sdk, "node_modules")):
            self.skipTest("tests/sdk/node_modules is not installed (python3 tests/sdk/run_sdk.py)")
        from harness import client_node
        env = dict(os.environ, RUNNER_URL="%s/proxy/%d" % (self.r.url, self.r.port),
                   RUNNER_TOKEN=TOKEN, NODE=client_node())
        p = subprocess.run([os.path.join(sdk, "run.sh")], env=env, capture_output=True,
                           text=True, timeout=600)
        passed = re.search(r"^# pass (\d+)", p.stdout, re.M)
        failed = re.search(r"^# fail (\d+)", p.stdout, re.M)
        print("\n[figure] sdk_through_proxy_self: %s passed, %s failed" % (
            passed and passed.group(1), failed and failed.group(1)), flush=True)
        self.assertTrue(passed and int(passed.group(1)) > 0, p.stdout[-3000:] + p.stderr[-2000:])
        self.assertEqual(int(failed.group(1)), 0, p.stdout[-6000:])

    def test_refused_before_the_body_is_read(self):
        # A 502 for a big upload to a dead port comes at once (the body is not
        # read: curl waits for 100 Continue and never sends it).
        dead = free_port()
        t0 = time.monotonic()
        r = self.r.curl("-o", "/dev/null", "-w", "%{http_code} %{size_upload}",
                        "-H", "Expect: 100-continue", "--expect100-timeout", "10",
                        "-X", "POST", "--data-binary", "@-",
                        self.r.url + "/proxy/%d/up" % dead, input=b"x" * (64 << 20))
        code, uploaded = r.stdout.decode().split()
        self.assertEqual(code, "502")
        self.assertLess(int(uploaded), 1 << 20)
        self.assertLess(time.monotonic() - t0, slow(5))

    def ping_ms(self):
        t = time.monotonic()
        resp, _ = self.req("GET", "/ping", timeout=5)
        self.assertEqual(resp.status, 200)
        return (time.monotonic() - t) * 1000

    def test_hostile_upstreams(self):
        import threading
        base = fd_count(self.pid)
        results = {}

        def call(name, path):
            t = time.monotonic()
            try:
                resp, data = self.req("GET", path, timeout=20)
                results[name] = (resp.status, len(data), time.monotonic() - t)
            except http.client.IncompleteRead as e:
                results[name] = ("incomplete", len(e.partial), time.monotonic() - t)
            except (OSError, http.client.HTTPException) as e:
                results[name] = (type(e).__name__, 0, time.monotonic() - t)

        threads = []
        for name in ("silent", "endless", "trickle", "drop", "garbage"):
            for i in range(3):
                th = threading.Thread(target=call, args=("%s%d" % (name, i),
                                                         "/proxy/%d/" % self.ports[name]))
                th.start()
                threads.append(th)
        pings = []
        while any(t.is_alive() for t in threads):
            pings.append(self.ping_ms())
            time.sleep(0.05)
        for th in threads:
            th.join()
        for i in range(3):
            st, n, took = results["silent%d" % i]
            self.assertEqual(st, 504)
            self.assertTrue(1.4 < took < 4, took)
            self.assertEqual(results["endless%d" % i][0], 502)
            st, n, took = results["trickle%d" % i]
            self.assertEqual(st, 504)
            self.assertTrue(1.4 < took < 4, took)
            self.assertEqual(results["drop%d" % i][:2], ("incomplete", 1000))
            self.assertEqual(results["garbage%d" % i][0], 502)
        # The runner kept answering meanwhile.
        self.assertGreater(len(pings), 5)
        self.assertLess(max(pings), 500, pings)
        self.settle_fds(base)

    def test_client_leaving_an_idle_stream(self):
        # The upstream sends a head and a chunk, then nothing: a client that
        # leaves must not keep the upstream connection open.
        base = fd_count(self.pid)
        s = socket.create_connection(("127.0.0.1", self.r.port))
        s.sendall(b"GET /proxy/%d/idle HTTP/1.1\r\nHost: x\r\nX-EXECD-ACCESS-TOKEN: %s\r\n\r\n"
                  % (self.ports["echo"], TOKEN.encode()))
        s.settimeout(10)
        got = b""
        while b"hello" not in got:
            chunk = s.recv(4096)
            self.assertTrue(chunk, "closed before the first chunk: %r" % got)
            got += chunk
        self.assertGreater(fd_count(self.pid), base)
        s.close()
        self.settle_fds(base, timeout=1.0)

    def test_download_with_flat_memory(self):
        # 256 MiB (sparse file) through the proxy, with a pause of the client:
        # the runner holds back the upstream instead of buffering.
        name = os.path.join(self.files, "big.bin")
        with open(name, "wb") as f:
            f.truncate(256 << 20)
        os.chmod(name, 0o644)
        c = self.conn(timeout=60)
        c.request("GET", "/proxy/%d/big.bin" % self.ports["files"],
                  headers={"X-EXECD-ACCESS-TOKEN": TOKEN})
        resp = c.getresponse()
        self.assertEqual(resp.status, 200)
        first = resp.read(1 << 20)
        rss0 = vm_kib(self.pid, "VmRSS")
        time.sleep(1.5)  # not reading
        rss1 = vm_kib(self.pid, "VmRSS")
        total = len(first)
        while True:
            chunk = resp.read(1 << 20)
            if not chunk:
                break
            self.assertEqual(chunk.count(0), len(chunk))
            total += len(chunk)
        c.close()
        self.assertEqual(total, 256 << 20)
        if rss_is_meaningful():
            self.assertLess(rss1 - rss0, 2048)
            self.assertLess(vm_kib(self.pid, "VmHWM"), 32 * 1024)

    def test_many_stalled_downloads_bounded_memory(self):
        # A body of known length streams through a buffer of up to 1 MiB
        # (libmicrohttpd's round per MiB, not per 64 KiB), but only 16 bodies
        # at a time get one: 40 clients that start a large download and stop
        # reading must not cost the runner 40 MiB.
        name = os.path.join(self.files, "stall.bin")
        with open(name, "wb") as f:
            f.truncate(64 << 20)
        os.chmod(name, 0o644)
        rss0 = vm_kib(self.pid, "VmRSS")
        socks = []
        try:
            for _ in range(40):
                s = socket.create_connection(("127.0.0.1", self.r.port))
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
                s.sendall(b"GET /proxy/%d/stall.bin HTTP/1.1\r\nHost: x\r\n"
                          b"X-EXECD-ACCESS-TOKEN: %s\r\n\r\n" % (self.ports["files"],
                                                                  TOKEN.encode()))
                socks.append(s)
                # One at a time: http.server listens with a backlog of 5.
                s.settimeout(30)
                head = s.recv(65536)
                self.assertTrue(head.startswith(b"HTTP/1.1 200"), head[:200])
            time.sleep(2)  # every download stalls with its buffers full
            grown = vm_kib(self.pid, "VmRSS") - rss0
            # Meanwhile the runner answers others at once.
            resp, _ = self.req("GET", "/proxy/%d/a%%20dir/blob.bin" % self.ports["files"])
            self.assertEqual(resp.status, 200)
        finally:
            for s in socks:
                s.close()
        if rss_is_meaningful():
            # 16 MiB of large buffers, 24 bodies of 64 KiB, and slack: 40 MiB
            # (a large buffer each) would fail.
            self.assertLess(grown, 26 * 1024, "runner VmRSS grew %d KiB" % grown)
        os.unlink(name)

    # ---- GET /v1/ports ----

    def test_ports_lists_task_servers(self):
        # Owners are found by a walk of /proc bounded in time (50 ms, design/interactive.md#the-listening-ports): on a slow
        # runner (valgrind, a loaded machine) a walk may end before it reached a server's pid.
        # The owners must be found within a few calls.
        for _ in range(20):
            st, body = self.r.json("GET", "/v1/ports")
            self.assertEqual(st, 200)
            found = {p["port"]: p for p in body["ports"] if p.get("task_id")}
            if all(self.ports[m] in found for m in ("files", "echo", "ws")):
                break
            time.sleep(0.2)
        by_port = {}
        for p in body["ports"]:
            by_port.setdefault(p["port"], []).append(p)
        for mode in ("files", "echo", "ws"):
            entries = by_port.get(self.ports[mode])
            self.assertTrue(entries, mode)
            e = entries[0]
            self.assertEqual(e["address"], "127.0.0.1")
            self.assertEqual(e["family"], "ipv4")
            self.assertEqual(e["uid"], SERVER_UID)
            self.assertEqual(e.get("task_id"), self.task_ids[mode], e)
            self.assertIn("python3", e.get("process", ""))
        own = by_port[self.r.port][0]
        self.assertTrue(own.get("runner"))
        self.assertNotIn("task_id", own)
        self.assertTrue(by_port[self.model_port][0].get("runner"))
        self.assertFalse(body["truncated"])


class PortsOwnerHostileComm(unittest.TestCase):
    """A task names its process (prctl PR_SET_NAME) to look like
    /proc/PID/stat fields ("a) S 1 1 1 (b": the parent would read as 1 to a
    parser that stops at the first ')'). GET /v1/ports still finds the listener's task through its parent
    chain (core/procfs reads the fields after the last ')')."""

    def test_listener_with_a_stat_like_comm_keeps_its_task(self):
        r = Runner()
        try:
            port = free_port()
            prog = ("import os,socket,time\n"
                    "if os.fork() == 0:\n"
                    "    import ctypes; ctypes.CDLL(None).prctl(15, b'a) S 1 1 1 (b', 0, 0, 0)\n"
                    "    s = socket.socket(); s.bind(('127.0.0.1', %d)); s.listen(1)\n"
                    "    time.sleep(120); os._exit(0)\n"
                    "time.sleep(120)\n" % port)
            ev = r.execd({"command": "%s -c \"$P\"" % DEBIAN_PYTHON, "envs": {"P": prog},
                          "background": True})
            self.assertTrue(ev and ev[0]["type"] == "init", ev)
            task_id = ev[0]["text"]
            wait_listening(port)
            for _ in range(20):
                st, body = r.json("GET", "/v1/ports")
                self.assertEqual(st, 200)
                entries = [p for p in body["ports"] if p["port"] == port]
                self.assertTrue(entries, body)
                # The owner walk has a time budget: a loaded machine (ASan,
                # valgrind) may end it before the listener; ask again then.
                if not body["owners_partial"]:
                    break
                time.sleep(0.2)
            self.assertEqual(entries[0].get("process"), "a) S 1 1 1 (b", entries[0])
            self.assertEqual(entries[0].get("task_id"), task_id, entries[0])
        finally:
            r.close()


class ProxyShutdown(unittest.TestCase):
    """SIGTERM with proxied connections open to servers outside the runner's
    tasks (nothing ends them but the runner): an upgraded WebSocket, a
    response stream idle upstream, a request waiting for a head. The runner
    cuts them and exits 0 (under ASan: without leaks) soon after its grace."""

    def test_sigterm_with_open_proxied_connections(self):
        servers, socks = [], []
        r = Runner(["--grace-ms", "1000"])
        try:
            ports = {}
            for mode in ("ws", "echo", "silent"):
                ports[mode] = free_port()
                servers.append(subprocess.Popen(
                    [DEBIAN_PYTHON, os.path.join(HERE, "proxy_upstreams.py"), mode,
                     str(ports[mode])], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            for port in ports.values():
                wait_listening(port)

            def send(req, expect):
                s = socket.create_connection(("127.0.0.1", r.port), timeout=10)
                s.sendall(req)
                got = b""
                while expect and expect not in got:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    got += chunk
                self.assertIn(expect, got)
                socks.append(s)

            send(b"GET /proxy/%d/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
                 b"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                 b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n" % ports["ws"],
                 b"101 Switching Protocols")
            send(b"GET /proxy/%d/idle HTTP/1.1\r\nHost: x\r\n\r\n" % ports["echo"], b"hello")
            send(b"GET /proxy/%d/ HTTP/1.1\r\nHost: x\r\n\r\n" % ports["silent"], b"")
            time.sleep(0.3)
            t0 = time.monotonic()
            rc = r.stop(timeout=10)
            took = time.monotonic() - t0
            self.assertEqual(rc, 0, r.logtext()[-3000:])
            self.assertLess(took, slow(4))
            for s in socks:  # each was closed by the runner
                s.settimeout(5)
                try:
                    while s.recv(65536):
                        pass
                except ConnectionResetError:
                    pass
        finally:
            for s in socks:
                s.close()
            for p in servers:
                p.kill()
                p.wait()
            r.close()


if __name__ == "__main__":
    unittest.main()


class PortsOwnerWalk(unittest.TestCase):
    """GET /v1/ports walks every fd of every process on the loop: a task that
    makes itself expensive to walk (200 processes x 4,000 fds) must not
    stall the runner through it (the walk has a 50 ms budget)."""

    def test_walk_is_bounded(self):
        r = Runner()
        try:
            prog = ("import os,time\n"
                    "for i in range(200):\n"
                    "    if os.fork() == 0:\n"
                    "        fds = [os.open('/dev/null', os.O_RDONLY) for _ in range(4000)]\n"
                    "        time.sleep(120); os._exit(0)\n"
                    "open(%r, 'w').close(); time.sleep(120)\n" % os.path.join(r.work, "ready"))
            st, _, _ = r.request("POST", "/command", {"command": "python3 -c \"$P\"",
                                                      "envs": {"P": prog}, "background": True})
            self.assertEqual(st, 200)
            deadline = time.monotonic() + 60
            while not os.path.exists(os.path.join(r.work, "ready")):
                self.assertLess(time.monotonic(), deadline, "the fd hog did not start")
                time.sleep(0.2)
            time.sleep(2)  # the children open their fds
            t0 = time.monotonic()
            st, body = r.json("GET", "/v1/ports")
            took = time.monotonic() - t0
            self.assertEqual(st, 200)
            self.assertIsInstance(body["owners_partial"], bool)
            self.assertLess(took, slow(0.5), "GET /v1/ports took %.2f s" % took)
        finally:
            r.close()
