"""Bad input: each a 4xx JSON {code, message}; nothing else disturbed."""
import json
import socket
import threading
import time
import unittest

from harness import Runner, RunnerTest, slow


def raw(port, data, timeout=5):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(data)
    out = b""
    try:
        while True:
            c = s.recv(65536)
            if not c:
                break
            out += c
            if b"\r\n\r\n" in out:
                head, _, body = out.partition(b"\r\n\r\n")
                cl = [l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                if cl and len(body) >= int(cl[0].split(b":")[1]):
                    break
    except socket.timeout:
        pass
    s.close()
    return out


def status_of(resp):
    return int(resp.split(b" ", 2)[1]) if resp.startswith(b"HTTP/1.") else None


class BadInput(RunnerTest):
    runner_args = ("--max-body", "4096", "--idle-timeout-ms", "2000")

    def assert_error(self, st, body, status):
        self.assertEqual(st, status, body)
        self.assertIsInstance(body, dict)
        self.assertIsInstance(body.get("code"), str)
        self.assertIsInstance(body.get("message"), str)
        self.assertTrue(body["message"])

    def post(self, path, data):
        st, h, b = self.r.request("POST", path, data, {"Content-Type": "application/json"})
        return st, (json.loads(b) if b else None)

    def tearDown(self):
        # Whatever the bad request was, the runner still serves.
        st, _, _ = self.r.request("GET", "/ping")
        self.assertEqual(st, 200)
        ev = self.r.execd({"command": "echo alive"})
        self.assertEqual(ev[-1]["type"], "execution_complete")

    def test_malformed_json(self):
        for body in ['{"command": ', "not json", "[1,2]", '"str"', "{\"command\": \"a\"} trailing",
                     '{"command":"a","command":"b"}']:
            for path in ("/command", "/v1/tasks", "/session"):
                st, b = self.post(path, body)
                self.assert_error(st, b, 400)

    def test_missing_or_empty_command(self):
        for body in [{}, {"command": ""}, {"command": None}, {"cwd": "/tmp"}]:
            self.assert_error(*self.post("/command", json.dumps(body)), 400)
        for body in [{}, {"task": ""}, {"capability": "exec"}]:
            self.assert_error(*self.post("/v1/tasks", json.dumps(body)), 400)

    def test_wrong_types(self):
        cases = [{"command": 1}, {"command": ["ls"]}, {"command": "true", "timeout": "5"},
                 {"command": "true", "background": "yes"}, {"command": "true", "envs": []},
                 {"command": "true", "envs": {"A": 1}}, {"command": "true", "cwd": 5},
                 {"command": "true", "uid": -1}, {"command": "true", "uid": "x"},
                 {"command": "true", "envs": {"BAD-NAME": "x"}},
                 {"command": "true", "timeout": 1.5}]
        for c in cases:
            self.assert_error(*self.post("/command", json.dumps(c)), 400)
        for c in [{"task": 5}, {"task": "true", "timeout_ms": "1"}, {"task": "true", "env": "x"},
                  {"task": "true", "capability": 3}]:
            self.assert_error(*self.post("/v1/tasks", json.dumps(c)), 400)

    def test_nul_byte(self):
        self.assert_error(*self.post("/command", '{"command": "echo a\\u0000b"}'), 400)
        self.assert_error(*self.post("/v1/tasks", '{"task": "echo a\\u0000b"}'), 400)
        self.assert_error(*self.post("/command", '{"command": "true", "envs": {"A": "x\\u0000"}}'), 400)

    def test_unknown_capability(self):
        self.assert_error(*self.post("/v1/tasks", json.dumps({"task": "true", "capability": "root"})), 400)

    def test_negative_timeout(self):
        self.assert_error(*self.post("/command", json.dumps({"command": "true", "timeout": -1})), 400)
        self.assert_error(*self.post("/v1/tasks", json.dumps({"task": "true", "timeout_ms": -5})), 400)

    def test_cwd_must_exist(self):
        st, h, b = self.r.request("POST", "/command", json.dumps({"command": "true", "cwd": "/nonexistent"}))
        self.assertEqual(st, 400)
        self.assertEqual(h["content-type"], "application/json")
        self.assertIn("cwd", json.loads(b)["message"])
        self.assert_error(*self.post("/command", json.dumps({"command": "true", "cwd": "relative"})), 400)

    def test_root_uid_refused(self):
        self.assert_error(*self.post("/command", json.dumps({"command": "id", "uid": 0})), 403)
        self.assert_error(*self.post("/command", json.dumps({"command": "id", "gid": 5})), 400)

    def test_unknown_ids(self):
        for path in ("/command/status/" + "a" * 32, "/command/status/zzz", "/command/%s/logs" % ("b" * 32),
                     "/v1/tasks/" + "c" * 32, "/v1/tasks/../../etc/passwd", "/v1/tasks/%s/events" % ("d" * 32),
                     "/command/status/" + "A" * 32):
            st, b = self.r.json("GET", path)
            self.assertIn(st, (404,), path)
            self.assertIn("code", b)
        st, b = self.r.json("DELETE", "/command?id=" + "e" * 32)
        self.assert_error(st, b, 404)
        st, b = self.r.json("DELETE", "/command")
        self.assert_error(st, b, 400)
        st, b = self.r.json("DELETE", "/v1/tasks/" + "f" * 32)
        self.assert_error(st, b, 404)

    def test_unknown_route_and_method(self):
        st, b = self.r.json("GET", "/nope")
        self.assert_error(st, b, 404)
        st, b = self.r.json("PUT", "/command", {"command": "true"})
        self.assert_error(st, b, 405)
        st, b = self.r.json("PATCH", "/pty")
        self.assert_error(st, b, 405)
        resp = raw(self.r.port, b"BREW /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertIn(status_of(resp), (400, 405, 501))

    def test_body_too_large(self):
        big = json.dumps({"command": "echo " + "x" * 5000})
        st, b = self.post("/command", big)
        self.assert_error(st, b, 413)

    def test_oversized_headers(self):
        resp = raw(self.r.port, b"GET /ping HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000 + b"\r\n\r\n")
        self.assertIn(status_of(resp), (400, 413, 431))

    def test_slowloris_closed_others_unaffected(self):
        s = socket.create_connection(("127.0.0.1", self.r.port))
        s.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        t0 = time.monotonic()
        # Meanwhile others are served at once.
        for _ in range(5):
            st, _, _ = self.r.request("GET", "/ping", timeout=2)
            self.assertEqual(st, 200)
        s.settimeout(10)
        data = s.recv(100)  # the runner closes the idle connection
        # Closed without a response, or with an HTTP error: never a 200.
        self.assertTrue(data == b"" or (data.startswith(b"HTTP/1.1 4") or data.startswith(b"HTTP/1.1 5")), data)
        elapsed = time.monotonic() - t0
        self.assertLess(elapsed, slow(6), "idle connection held %.1fs" % elapsed)
        self.assertGreater(elapsed, 1.0)
        s.close()


class Auth(RunnerTest):
    runner_kwargs = {"token": "s3cret-token"}

    def test_every_route_needs_the_token(self):
        import http.client
        # GET /ping and GET /ready are execd 1.2's token-free probes (test_execd12).
        for method, path in (("POST", "/ping"), ("POST", "/command"), ("GET", "/metrics"),
                             ("POST", "/v1/tasks"), ("GET", "/v1/hardening"), ("GET", "/nope")):
            for hdrs in ({}, {"X-EXECD-ACCESS-TOKEN": "wrong"}, {"X-EXECD-ACCESS-TOKEN": "s3cret-toke"},
                         {"Authorization": "Bearer s3cret-token"}):
                c = http.client.HTTPConnection("127.0.0.1", self.r.port, timeout=5)
                c.request(method, path, body="{}" if method == "POST" else None, headers=hdrs)
                resp = c.getresponse()
                body = json.loads(resp.read())
                c.close()
                self.assertEqual(resp.status, 401, (method, path, hdrs))
                self.assertIn("X-EXECD-ACCESS-TOKEN", body["error"])
                self.assertEqual(body["code"], "UNAUTHORIZED")
        st, _, _ = self.r.request("GET", "/ping")  # harness sends the token
        self.assertEqual(st, 200)

    def test_token_not_visible_to_tasks(self):
        ev = self.r.execd({"command": "env; cat /proc/1/environ 2>/dev/null; cat /proc/$PPID/environ 2>/dev/null; true"})
        text = json.dumps(ev)
        self.assertNotIn("s3cret-token", text)


class TaskCap(RunnerTest):
    runner_args = ("--max-tasks", "2")

    def test_concurrent_cap_429(self):
        socks = []
        for _ in range(2):
            s = socket.create_connection(("127.0.0.1", self.r.port))
            body = json.dumps({"command": "sleep 3"})
            s.sendall(("POST /command HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
            d = b""
            while b"init" not in d:
                d += s.recv(4096)
            socks.append(s)
        st, b = self.r.json("POST", "/command", {"command": "true"})
        self.assertEqual(st, 429)
        self.assertIn("code", b)
        st, b = self.r.json("POST", "/v1/tasks", {"task": "true"})
        self.assertEqual(st, 429)
        for s in socks:
            s.close()


if __name__ == "__main__":
    unittest.main()
