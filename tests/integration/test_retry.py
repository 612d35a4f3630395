"""Commands that survive a retry and a dropped connection, on both APIs (docs/design/wire.md#opensandbox-execd-compatible-api,
design/wire.md#native-task-api): execd's operations (GET /execution/instance, POST /command/operations, GET
/execution/operation), event ids and GET /command/{id}/resume?after_eid=N; Idempotency-Key on
POST /v1/tasks with Last-Event-ID; and connections killed at random points of a long command,
after which every line arrives exactly once, in order, from a command that ran once. Also a
refusal on the head seen by a client that is still sending its body (design/wire.md#endpoint-and-http-layer).

Figures are printed ([figure] lines) and kept in build/integration/retry.json."""
import http.client
import json
import os
import random
import socket
import struct
import subprocess
import time
import unittest

from harness import ROOT, Runner, RunnerTest, client_node, parse_execd, parse_sse, record_figure, slow

TOKEN = "retry-test-token-%d" % os.getpid()
FIGURES = os.path.join(ROOT, "build", "integration", "retry.json")


def figure(name, value):
    record_figure(FIGURES, name, value)


def hard_close(conn):
    """Drop a client connection the way a network does: RST, nothing said."""
    s = conn.sock
    if s is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def frames(data, sep=b"\n\n"):
    """The complete frames of a stream cut anywhere (a partial last one is dropped)."""
    parts = data.split(sep)
    return [p for p in parts[:-1] if p.strip()]


class Refused(unittest.TestCase):
    """design/wire.md#endpoint-and-http-layer: a 401 decided on the head of an upload reaches the client still sending it
    (libmicrohttpd alone answers and closes unread: the client gets EPIPE or a reset)."""

    @classmethod
    def setUpClass(cls):
        cls.r = Runner(token=TOKEN)

    @classmethod
    def tearDownClass(cls):
        cls.r.stop()
        cls.r.close()

    def test_python_streaming_upload_sees_401(self):
        size = 4 << 20
        seen, errors = 0, []
        for _ in range(10):
            c = http.client.HTTPConnection("127.0.0.1", self.r.port, timeout=20)
            body = (b"x" * 65536 for _ in range(size // 65536))  # streamed, not one write
            try:
                c.request("POST", "/files/upload", body=body,
                          headers={"X-EXECD-ACCESS-TOKEN": "wrong", "Content-Length": str(size),
                                   "Content-Type": "application/octet-stream"})
                resp = c.getresponse()
                seen += resp.status == 401
                json.loads(resp.read())
            except OSError as e:
                errors.append(e.__class__.__name__)
            finally:
                c.close()
        figure("refused_upload_python_401_of_10", seen)
        self.assertEqual(seen, 10, "errors instead of the 401: %s" % errors)
        self.assertEqual(self.r.request("GET", "/ping")[0], 200)

    def test_node_fetch_upload_sees_401(self):
        script = r"""
const url = process.argv[process.argv.length - 1];
const body = new Uint8Array(4 << 20);
let seen = 0; const errs = [];
for (let i = 0; i < 10; i++) {
  try {
    const r = await fetch(url + "/files/upload", {method: "POST", body,
      headers: {"X-EXECD-ACCESS-TOKEN": "wrong", "Content-Type": "application/octet-stream"}});
    if (r.status === 401) seen++;
    await r.text();
  } catch (e) { errs.push(String(e.cause && e.cause.code || e)); }
}
console.log(JSON.stringify({seen, errs}));
"""
        p = subprocess.run([client_node(), "--input-type=module", "-e", script, self.r.url],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        res = json.loads(p.stdout.strip().splitlines()[-1])
        figure("refused_upload_node_fetch_401_of_10", res)
        self.assertEqual(res["seen"], 10, res)

    def test_refused_route_drains_and_keeps_the_connection(self):
        # A 404 for a 2 MiB body: answered after the body, and the connection serves the next
        # request (the body was read, not left in the socket).
        c = http.client.HTTPConnection("127.0.0.1", self.r.port, timeout=20)
        c.request("POST", "/no/such/route", body=b"y" * (2 << 20), headers=self.r.headers())
        resp = c.getresponse()
        self.assertEqual(resp.status, 404)
        resp.read()
        c.request("GET", "/ping", headers=self.r.headers())
        self.assertEqual(c.getresponse().status, 200)
        c.close()

    def test_drain_is_bounded(self):
        # A chunked body past the bound (16 MiB) is not read forever: the connection is closed.
        s = socket.create_connection(("127.0.0.1", self.r.port), timeout=20)
        s.sendall(b"POST /files/upload HTTP/1.1\r\nHost: x\r\nX-EXECD-ACCESS-TOKEN: wrong\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n%s\r\n" % (1 << 20, b"z" * (1 << 20))
        t0 = time.monotonic()
        sent = 0
        try:
            for _ in range(64):
                s.sendall(chunk)
                sent += 1
        except OSError:
            pass
        s.close()
        figure("refused_chunked_body_mib_sent_before_close", sent)
        self.assertLess(sent, 64, "a 64 MiB refused body was read whole")
        self.assertLess(time.monotonic() - t0, slow(15))
        self.assertEqual(self.r.request("GET", "/ping")[0], 200)


class ExecdEvents(RunnerTest):
    """Event ids on /command's stream and GET /command/{id}/resume (OpenSandbox PR #583)."""
    runner_kwargs = {"token": TOKEN}

    def test_ids_are_byte_offsets_at_every_width(self):
        # An id is 1 + the offset of its line's newline (docs/api.md), printed by the
        # stream's own digit writer: every width from one digit to eight is crossed
        # (lines of 2, 10 and 1,000 bytes).
        cmd = ("for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo x; done; "
               "yes yyyyyyyyy | head -n 200; yes \"$(printf '%0999d' 0)\" | head -n 20000")
        ev = self.r.execd({"command": cmd}, timeout=300)
        lines = [e for e in ev if e["type"] == "stdout"]
        self.assertEqual(len(lines), 12 + 200 + 20000)
        off, want = 0, []
        for e in lines:
            off += len(e["text"]) + 1
            want.append(off)  # the byte after the line and its newline
        got = [e["eid"] for e in lines]
        self.assertEqual(got[0], want[0], "the first id")
        self.assertEqual(got, want)
        self.assertEqual(len(str(got[-1])), 8)

    def test_ids_and_resume_after_each(self):
        ev = self.r.execd({"command": "printf 'a\\nbb\\n\\nccc'; echo err >&2; exit 3"})
        cid = ev[0]["text"]
        self.assertNotIn("eid", ev[0], "init has no id")
        ids = [e["eid"] for e in ev[1:]]
        self.assertEqual(ids, sorted(set(ids)), "ids strictly increase")
        self.assertEqual(ev[-1]["type"], "error")
        for e in ev:
            self.assertEqual(list(e)[-1], "timestamp", "every event ends with its timestamp")
        body = ev[1:]
        for after in [0] + ids:
            with self.subTest(after_eid=after):
                st, _, d = self.r.request("GET", "/command/%s/resume?after_eid=%d" % (cid, after))
                self.assertEqual(st, 200)
                got = [{k: v for k, v in e.items() if k != "timestamp"} for e in parse_execd(d)]
                want = [{k: v for k, v in e.items() if k != "timestamp"} for e in body
                        if e["eid"] > after]
                self.assertEqual(got, want)
        st, _, d = self.r.request("GET", "/command/%s/resume" % cid)
        self.assertEqual(len(parse_execd(d)), len(body), "no after_eid: from the start")

    def test_resume_errors(self):
        cid = self.r.execd({"command": "true"})[0]["text"]
        for q in ("-1", "x", "1.5"):
            st, _, d = self.r.request("GET", "/command/%s/resume?after_eid=%s" % (cid, q))
            self.assertEqual((st, json.loads(d)["code"]), (400, "INVALID_QUERY"), q)
        st, _, d = self.r.request("GET", "/command/%s/resume" % ("0" * 32))
        self.assertEqual((st, json.loads(d)["code"]), (404, "NOT_FOUND"))
        # a native task is not an execd command
        tid = parse_sse(self.r.request("POST", "/v1/tasks", body={"task": "true"})[2])[0]
        st, _, _ = self.r.request("GET", "/command/%s/resume" % tid["data"]["task_id"])
        self.assertEqual(st, 404)

    def test_resume_goes_live(self):
        ev_first = []
        c = http.client.HTTPConnection("127.0.0.1", self.r.port, timeout=30)
        c.request("POST", "/command", body=json.dumps(
            {"command": "for i in 1 2 3 4 5; do echo n$i; sleep 0.2; done"}),
            headers=self.r.headers({"Content-Type": "application/json"}))
        resp = c.getresponse()
        buf = b""
        while len(frames(buf)) < 2:
            buf += resp.read1(4096)
        ev_first = [json.loads(f) for f in frames(buf)]
        hard_close(c)
        cid, last = ev_first[0]["text"], ev_first[1]["eid"]
        st, _, d = self.r.request("GET", "/command/%s/resume?after_eid=%d" % (cid, last))
        rest = parse_execd(d)
        texts = [e["text"] for e in ev_first[1:] + rest if e["type"] == "stdout"]
        self.assertEqual(texts, ["n1", "n2", "n3", "n4", "n5"])
        self.assertEqual(rest[-1]["type"], "execution_complete")


class NativeIdempotency(RunnerTest):
    """Idempotency-Key on POST /v1/tasks (design/wire.md#native-task-api)."""
    runner_kwargs = {"token": TOKEN}

    def post(self, body, key, extra=None):
        h = {"Idempotency-Key": key, "Content-Type": "application/json"}
        h.update(extra or {})
        return self.r.request("POST", "/v1/tasks", body=json.dumps(body), headers=h)

    def test_retry_attaches(self):
        count = os.path.join(self.r.work, "native-count")
        body = {"task": "echo run >> %s; echo out" % count, "timeout_ms": 60000}
        st, _, d1 = self.post(body, "key-1")
        st2, _, d2 = self.post(dict(reversed(list(body.items()))), "key-1")  # field order
        self.assertEqual((st, st2), (200, 200))
        e1, e2 = parse_sse(d1), parse_sse(d2)
        self.assertEqual(e1[0]["data"]["task_id"], e2[0]["data"]["task_id"])
        self.assertEqual([(e["id"], e["event"]) for e in e1], [(e["id"], e["event"]) for e in e2])
        with open(count) as f:
            self.assertEqual(f.read(), "run\n", "the task ran once")
        # a cursor on the retry
        st, _, d3 = self.post(body, "key-1", {"Last-Event-ID": e1[0]["id"]})
        self.assertEqual([e["id"] for e in parse_sse(d3)], [e["id"] for e in e1[1:]])
        # another key is another task
        _, _, d4 = self.post(body, "key-2")
        self.assertNotEqual(parse_sse(d4)[0]["data"]["task_id"], e1[0]["data"]["task_id"])

    def test_conflict_and_bad_keys(self):
        _, _, d = self.post({"task": "true"}, "key-c")
        tid = parse_sse(d)[0]["data"]["task_id"]
        st, _, d = self.post({"task": "false"}, "key-c")
        err = json.loads(d)
        self.assertEqual((st, err["code"]), (409, "IDEMPOTENCY_KEY_CONFLICT"))
        self.assertIn(tid, err["message"])
        for bad in ("a b", "x" * 256):
            st, _, d = self.post({"task": "true"}, bad)
            self.assertEqual((st, json.loads(d)["code"]), (400, "INVALID_REQUEST_BODY"), bad)


class Operations(RunnerTest):
    """execd's caller-bound creation, as OpenSandbox PR #1771 shapes it."""
    runner_kwargs = {"token": TOKEN}

    def op_id(self, token=None):
        st, inst = self.r.json("GET", "/execution/instance")
        self.assertEqual(st, 200)
        return "%s.%d.%s" % (inst["instance_id"], inst["issued_at"],
                             token or "t" + os.urandom(6).hex())

    def test_instance(self):
        st, h, d = self.r.request("GET", "/execution/instance")
        inst = json.loads(d)
        self.assertEqual(st, 200)
        self.assertEqual(h.get("cache-control"), "no-store")
        self.assertRegex(inst["instance_id"], "^[0-9a-f]{32}$")
        self.assertEqual(inst["retention_seconds"], 900, "--retain-ms, 15 min by default")
        self.assertLessEqual(abs(inst["issued_at"] - time.time()), 5)
        self.assertGreater(inst["capacity"], 0)

    def test_create_retry_lookup_conflict(self):
        count = os.path.join(self.r.work, "op-count")
        oid = self.op_id()
        body = {"operation_id": oid, "command": "echo ran >> %s; seq 3" % count}
        st, h, d = self.r.request("POST", "/command/operations", body=body)
        op = json.loads(d)
        self.assertEqual(st, 200, d)
        self.assertEqual(h.get("cache-control"), "no-store")
        self.assertEqual((op["kind"], op["state"]), ("command", "created"))
        self.assertRegex(op["id"], "^[0-9a-f]{32}$")
        st, _, d = self.r.request("POST", "/command/operations", body=dict(reversed(list(
            body.items()))))
        self.assertEqual((st, json.loads(d)), (200, op), "a retry: the same command")
        st, _, d = self.r.request("GET", "/execution/operation?kind=command",
                                  headers={"X-EXECD-OPERATION-ID": oid})
        self.assertEqual((st, json.loads(d)), (200, op))
        st, _, d = self.r.request("POST", "/command/operations", body=dict(body, command="true"))
        self.assertEqual((st, json.loads(d)["code"]), (409, "operation_conflict"))
        ev = parse_execd(self.r.request("GET", "/command/%s/resume" % op["id"])[2])
        self.assertEqual([e.get("text") for e in ev], ["1", "2", "3", None])
        st, _, d = self.r.request("GET", "/command/status/%s" % op["id"])
        self.assertEqual(json.loads(d)["exit_code"], 0)
        with open(count) as f:
            self.assertEqual(f.read(), "ran\n")

    def test_refusals(self):
        inst = self.r.json("GET", "/execution/instance")[1]
        good = self.op_id()
        cases = [
            ({"operation_id": good, "command": "true", "extra": 1}, 400, "UNKNOWN_FIELD"),
            ({"command": "true"}, 400, "INVALID_REQUEST_BODY"),
            ({"operation_id": "", "command": "true"}, 400, "invalid_operation_id"),
            ({"operation_id": "abc", "command": "true"}, 400, "invalid_operation_id"),
            ({"operation_id": good[:-len(good.split(".")[2])] + "short", "command": "true"}, 400,
             "invalid_operation_id"),
            ({"operation_id": "%s.%d.abcdefgh" % (inst["instance_id"], inst["issued_at"] + 3600),
              "command": "true"}, 400, "invalid_operation_id"),
            ({"operation_id": "%s.0123.abcdefgh" % inst["instance_id"], "command": "true"}, 400,
             "invalid_operation_id"),
            ({"operation_id": "0" * 32 + ".1.abcdefgh", "command": "true"}, 409,
             "operation_instance_mismatch"),
            ({"operation_id": "%s.1.abcdefgh" % inst["instance_id"], "command": "true"}, 410,
             "operation_expired"),
        ]
        for body, status, code in cases:
            with self.subTest(body=body):
                st, _, d = self.r.request("POST", "/command/operations", body=body)
                self.assertEqual((st, json.loads(d)["code"]), (status, code), d)
        for kind, oid, status, code in [
                ("command", self.op_id(), 404, "operation_not_found"),
                ("pty", self.op_id(), 404, "operation_not_found"),
                ("shell", good, 400, "invalid_operation_kind"),
                (None, good, 400, "invalid_operation_kind"),
                ("command", None, 400, "invalid_operation_id")]:
            with self.subTest(kind=kind, oid=oid):
                path = "/execution/operation" + ("?kind=" + kind if kind else "")
                st, _, d = self.r.request("GET", path, headers={"X-EXECD-OPERATION-ID": oid}
                                          if oid else {})
                self.assertEqual((st, json.loads(d)["code"]), (status, code), d)


class OperationWindow(RunnerTest):
    """A command created under an operation id outlives --retain-count for its window, so a
    retry within it never runs a second command; at most --retain-count such at once."""
    runner_args = ("--retain-count", "2")
    runner_kwargs = {"token": TOKEN}

    def test_kept_past_retain_count_and_capacity(self):
        inst = self.r.json("GET", "/execution/instance")[1]
        self.assertEqual(inst["capacity"], 2)
        count = os.path.join(self.r.work, "window-count")
        ids = ["%s.%d.win%d-%s" % (inst["instance_id"], inst["issued_at"], i,
                                   os.urandom(4).hex()) for i in range(3)]
        body = {"operation_id": ids[0], "command": "echo ran >> %s" % count}
        st, _, d = self.r.request("POST", "/command/operations", body=body)
        self.assertEqual(st, 200, d)
        first = json.loads(d)
        others = [self.r.execd({"command": "true"})[0]["text"] for _ in range(6)]
        time.sleep(1.5)  # a tick of the record sweep
        # the sweep ran: an older record without an id is gone
        self.assertEqual(self.r.request("GET", "/command/status/" + others[0])[0], 404)
        st, _, d = self.r.request("POST", "/command/operations", body=body)
        self.assertEqual((st, json.loads(d)), (200, first))
        with open(count) as f:
            self.assertEqual(f.read(), "ran\n")
        st, _, d = self.r.request("POST", "/command/operations",
                                  body={"operation_id": ids[1], "command": "true"})
        self.assertEqual(st, 200, d)
        st, _, d = self.r.request("POST", "/command/operations",
                                  body={"operation_id": ids[2], "command": "true"})
        self.assertEqual((st, json.loads(d)["code"]), (503, "operation_capacity_exceeded"))


LONG = ("echo run >> {count}; i=0; while [ $i -lt {n} ]; do i=$((i+1)); echo line-$i; "
        "[ $((i % 7)) -eq 0 ] && echo err-$i >&2; sleep 0.002; done")


class ConnectionKills(RunnerTest):
    """A long command's stream cut at random points, the client reconnecting each time: every
    line arrives exactly once, in order, and the command ran once."""
    runner_kwargs = {"token": TOKEN}
    N = 400
    ROUNDS = 3

    def expected(self):
        out = ["line-%d" % i for i in range(1, self.N + 1)]
        err = ["err-%d" % i for i in range(1, self.N + 1) if i % 7 == 0]
        return out, err

    def open(self, method, path, body=None, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.r.port, timeout=30)
        h = self.r.headers({"Content-Type": "application/json"})
        h.update(headers or {})
        c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
        return c, c.getresponse()

    def read_until_cut(self, resp, rng, sep):
        """Read up to a random number of bytes; (data, ended) - ended: the stream finished."""
        want = rng.randint(1, 6000)
        data = b""
        while len(data) < want:
            b = resp.read1(want - len(data))
            if not b:
                return data, True
            data += b
        return data, False

    def test_execd_operations_and_resume(self):
        rng = random.Random(1234)
        kills_total = 0
        for rnd in range(self.ROUNDS):
            count = os.path.join(self.r.work, "execd-count-%d" % rnd)
            inst = self.r.json("GET", "/execution/instance")[1]
            body = {"operation_id": "%s.%d.round%d-%s" % (inst["instance_id"], inst["issued_at"],
                                                         rnd, os.urandom(4).hex()),
                    "command": LONG.format(count=count, n=self.N)}
            # The creation itself is retried: the first answer is never read.
            c = http.client.HTTPConnection("127.0.0.1", self.r.port, timeout=30)
            c.request("POST", "/command/operations", body=json.dumps(body),
                      headers=self.r.headers({"Content-Type": "application/json"}))
            hard_close(c)
            st, _, d = self.r.request("POST", "/command/operations", body=body)
            self.assertEqual(st, 200, d)
            cid = json.loads(d)["id"]
            got, last, ended = [], 0, False
            while not ended:
                c, resp = self.open("GET", "/command/%s/resume?after_eid=%d" % (cid, last))
                self.assertEqual(resp.status, 200)
                data, ended = self.read_until_cut(resp, rng, b"\n\n")
                for f in frames(data):
                    e = json.loads(f)
                    if "eid" in e:
                        self.assertGreater(e["eid"], last, "an event came twice")
                        last = e["eid"]
                        got.append(e)
                if not ended:
                    hard_close(c)
                    kills_total += 1
                else:
                    c.close()
                ended = ended or (got and got[-1]["type"] in ("execution_complete", "error"))
            out, err = self.expected()
            self.assertEqual([e["text"] for e in got if e["type"] == "stdout"], out)
            self.assertEqual([e["text"] for e in got if e["type"] == "stderr"], err)
            self.assertEqual(got[-1]["type"], "execution_complete")
            full = parse_execd(self.r.request("GET", "/command/%s/resume" % cid)[2])
            self.assertEqual([e["eid"] for e in got], [e["eid"] for e in full], "in order")
            diag = "command %s: %s; work dir: %s" % (
                cid, self.r.request("GET", "/command/status/%s" % cid)[2],
                sorted(os.listdir(self.r.work)))
            self.assertTrue(os.path.exists(count), diag)
            with open(count) as f:
                self.assertEqual(f.read(), "run\n", "the command ran once")
        figure("execd_random_kills", kills_total)
        self.assertGreater(kills_total, 10)

    def test_native_idempotency_key_and_last_event_id(self):
        rng = random.Random(4321)
        kills_total = 0
        for rnd in range(self.ROUNDS):
            count = os.path.join(self.r.work, "native-count-%d" % rnd)
            body = {"task": LONG.format(count=count, n=self.N), "timeout_ms": 120000}
            key = "native-%d-%s" % (rnd, os.urandom(4).hex())
            out, err, last, ended, task_id = b"", b"", None, False, None
            while not ended:
                h = {"Idempotency-Key": key}
                if last is not None:
                    h["Last-Event-ID"] = last
                c, resp = self.open("POST", "/v1/tasks", body, h)
                self.assertEqual(resp.status, 200)
                data, ended = self.read_until_cut(resp, rng, b"\n\n")
                for ev in parse_sse(b"\n\n".join(frames(data)) + b"\n\n"):
                    if last is not None:
                        self.assertGreater(int(ev["id"]), int(last), "an event came twice")
                    last = ev["id"]
                    if ev["event"] == "started":
                        self.assertIn(task_id, (None, ev["data"]["task_id"]))
                        task_id = ev["data"]["task_id"]
                    elif ev["event"] == "stdout":
                        out += ev["data"]["text"].encode()
                    elif ev["event"] == "stderr":
                        err += ev["data"]["text"].encode()
                    elif ev["event"] == "exit":
                        ended = True
                if not ended:
                    hard_close(c)
                    kills_total += 1
                else:
                    c.close()
            want_out, want_err = self.expected()
            self.assertEqual(out.decode().splitlines(), want_out)
            self.assertEqual(err.decode().splitlines(), want_err)
            with open(count) as f:
                self.assertEqual(f.read(), "run\n", "the task ran once")
        figure("native_random_kills", kills_total)
        self.assertGreater(kills_total, 10)


if __name__ == "__main__":
    unittest.main()
