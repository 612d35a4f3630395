"""The runner's own doors, closed to its tasks (issue 12): findings 1, 3, 5, 6
and 9, bounded identities, private session memfds and the per-task network
policy. Each attack runs the way an agent's code would run it: as a task
(uid 1000, confined) started through the runner's own API, against the
runner's own sockets, with Debian's python3 (/usr/bin/python3).

Where an attack cannot run as a task any more once finding 1 is fixed (a
task cannot reach the API at all), the reproducer is the request a client
outside the task would send (the NUL in the token header, identities):
those doors must hold for every client.

Figures (latencies, RSS) are printed and kept in build/security/doors.json."""
import base64
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
import unittest

import harness
from harness import ROOT, Runner, parse_sse, record_figure

sys.path.insert(0, os.path.join(ROOT, "tests", "gateway"))
from test_gateway import TestGateway, text  # noqa: E402

PY = "/usr/bin/python3"
FIGURES = os.path.join(ROOT, "build", "security", "doors.json")


def figure(name, value):
    record_figure(FIGURES, name, value)


def stdout_of(events):
    return "\n".join(e["text"] for e in events if e["type"] == "stdout")


def native_out(events):
    b = b""
    for e in events:
        if e.get("event") == "stdout":
            d = e["data"]
            b += d["text"].encode() if "text" in d else base64.b64decode(d["data_b64"])
    return b


def script(r, name, body):
    """A script in the runner's work dir, readable by tasks."""
    path = os.path.join(r.work, name)
    with open(path, "w") as f:
        f.write(body)
    os.chmod(path, 0o644)
    return path


def own_address():
    """A non-loopback address of this machine (the box's own), or None."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))  # no packet is sent
        a = s.getsockname()[0]
        return None if a.startswith("127.") else a
    except OSError:
        return None
    finally:
        s.close()


def vm(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return None


def runner_on(listen_host, **kw):
    """A Runner listening on listen_host (the harness picks 127.0.0.1)."""
    port = harness.free_port()
    orig = harness.free_port
    harness.free_port = lambda: port
    try:
        args = list(kw.pop("args", ())) + ["--listen", "%s:%d" % (listen_host, port)]
        return Runner(args=args, **kw)
    finally:
        harness.free_port = orig


# ---------------------------------------------------------------------------
# 1. A task drives the runner's API.

ATTACK_API = r'''
import json, socket, sys, time
port, token, marker = int(sys.argv[1]), sys.argv[2], sys.argv[3]
addrs = sys.argv[4:]

def exchange(addr, data, close_at_once=False):
    try:
        s = socket.create_connection((addr, port), timeout=3)
    except OSError as e:
        return "connect: %s" % e
    try:
        s.sendall(data)
        if close_at_once:
            s.close()
            return "sent"
        got = s.recv(200)
        return got.split(b"\r\n")[0].decode(errors="replace") if got else "closed"
    except OSError as e:
        return "closed: %s" % e.__class__.__name__
    finally:
        s.close()

def req(method, path, body=None):
    b = json.dumps(body).encode() if body is not None else b""
    return (b"%s %s HTTP/1.1\r\nHost: x\r\nX-EXECD-ACCESS-TOKEN: %s\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (method.encode(), path.encode(), token.encode(), len(b), b))

out = {}
for a in addrs:
    out[a + " ping"] = exchange(a, req("GET", "/ping"))
    # execd 1.2's probes need no token; tasks still get no answer.
    out[a + " ping-no-token"] = exchange(a, b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
    out[a + " ready-no-token"] = exchange(a, b"GET /ready HTTP/1.1\r\nHost: x\r\n\r\n")
    out[a + " shadow"] = exchange(a, req("POST", "/command", {
        "command": "head -c 4 /etc/shadow > %s.%s" % (marker, a), "uid": 1000, "gid": 42}))
    out[a + " chat"] = exchange(a, req("POST", "/v1/tasks", {"task": "true", "capability": "chat"}))
    # Fire and forget: the whole request, then close before the runner
    # even accepts (the socket is gone by then: no owner to ask about).
    out[a + " forget"] = exchange(a, req("POST", "/command", {
        "command": "touch %s.forget.%s" % (marker, a)}), close_at_once=True)
time.sleep(1)
print(json.dumps(out))
'''

MAIN_CHILD = r'''
import socket, sys, time
port, token, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
for i in range(200):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=3)
        s.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nX-EXECD-ACCESS-TOKEN: %s\r\n\r\n" % token.encode())
        line = s.recv(100).split(b"\r\n")[0].decode()
        s.close()
        break
    except OSError as e:
        line = "error %s" % e
        time.sleep(0.05)
open(out, "w").write(line)
time.sleep(600)
'''


class ApiFromTasks(unittest.TestCase):
    """Finding 1: from inside a task, the API is closed, token or not, over
    loopback and over the box's own address; the main child (`-- CMD`, root)
    and clients that are not tasks keep working."""

    def test_task_cannot_use_the_api(self):
        token = "doors-" + os.urandom(8).hex()
        port = harness.free_port()
        tmp = "/tmp/forceai-doors-main-%d" % os.getpid()
        os.makedirs(tmp, exist_ok=True)
        main_py = os.path.join(tmp, "main.py")
        main_out = os.path.join(tmp, "main.out")
        with open(main_py, "w") as f:
            f.write(MAIN_CHILD)
        orig = harness.free_port
        harness.free_port = lambda: port
        try:
            r = Runner(args=["--listen", "0.0.0.0:%d" % port], token=token,
                       main=[PY, main_py, str(port), token, main_out])
        finally:
            harness.free_port = orig
        try:
            addrs = ["127.0.0.1", "127.0.0.2"] + ([own_address()] if own_address() else [])
            marker = os.path.join(r.work, "marker")
            attack = script(r, "attack_api.py", ATTACK_API)
            ev = r.execd({"command": "%s %s %d %s %s %s" % (PY, attack, port, token, marker,
                                                            " ".join(addrs)),
                          "timeout": 60000})
            res = json.loads(stdout_of(ev).splitlines()[-1])
            figure("finding1_task_attempts", res)
            for k, v in res.items():
                with self.subTest(attempt=k):
                    self.assertNotIn("HTTP/1.1", v, "a task got an answer from the API")
            self.assertEqual([f for f in os.listdir(r.work) if f.startswith("marker")], [],
                             "a task's request ran")
            # Not tasks: this client (root) and the main child (root).
            self.assertEqual(r.request("GET", "/ping")[0], 200)
            deadline = time.monotonic() + 10
            while not os.path.exists(main_out) and time.monotonic() < deadline:
                time.sleep(0.05)
            with open(main_out) as f:
                self.assertEqual(f.read(), "HTTP/1.1 200 OK")
            refused = [l for l in r.loglines() if l.get("msg") == "connections refused or closed"]
            h = r.json("GET", "/v1/hardening")[1]
            self.assertIn("1000", h["api_connections"]["in_box_connections"]["refused_uids"])
        finally:
            r.stop()
            r.close()
            subprocess.run(["rm", "-rf", tmp])
        self.assertTrue(refused, "no refusal logged")


# ---------------------------------------------------------------------------
# 3. Connection exhaustion from inside.

HOLD = r'''
import socket, sys, time
port, n, secs = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
head = b"GET /ping HTTP/1.1\r\nHost: x\r\n"
slots = [None] * n
opened = refused = 0
end = time.monotonic() + secs
while time.monotonic() < end:
    t0 = time.monotonic()
    for i in range(n):
        s = slots[i]
        if s is not None:
            try:
                s.send(b"X-Slow-%d: %d\r\n" % (i, int(t0)))  # one header line every 3 s
                continue
            except OSError:
                refused += 1
                s.close()
        try:
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            time.sleep(0)
            s.setblocking(True)
            s.settimeout(0.5)
            s.send(head)
            s.setblocking(False)
            slots[i] = s
            opened += 1
        except OSError:
            slots[i] = None
            refused += 1
    alive = 0
    for s in slots:
        if s is None:
            continue
        try:
            if s.recv(1, socket.MSG_PEEK) == b"":
                continue
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
    print("alive %d opened %d refused %d" % (alive, opened, refused), flush=True)
    time.sleep(max(0, 3 - (time.monotonic() - t0)))
'''


def ping_latencies(port, token, secs, every=0.1):
    """GET /ping on a fresh connection every `every` s for `secs` s; each
    latency in s (a failure or timeout counts as 5 s)."""
    out = []
    end = time.monotonic() + secs
    while time.monotonic() < end:
        t0 = time.monotonic()
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n%s\r\n" %
                      (b"X-EXECD-ACCESS-TOKEN: %s\r\n" % token.encode() if token else b""))
            ok = s.recv(100).startswith(b"HTTP/1.1 200")
            s.close()
            out.append(time.monotonic() - t0 if ok else 5.0)
        except OSError:
            out.append(5.0)
        time.sleep(max(0, every - (time.monotonic() - t0)))
    return out


class ConnectionFlood(unittest.TestCase):
    """Finding 3: a task holding 1,100 half-open connections (a header line
    every 3 s) to the API; the runner started with `ulimit -n 1024`. /ping
    keeps answering: its worst and median latency are measured."""

    def test_ping_answers_under_a_task_held_flood(self):
        token = "flood-" + os.urandom(6).hex()
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
        try:
            r = Runner(token=token)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        try:
            hold = script(r, "hold.py", HOLD)
            base = ping_latencies(r.port, token, 2)
            res = {}

            def attack():
                res["ev"] = r.execd({"command": "%s %s %d 1100 14" % (PY, hold, r.port),
                                     "timeout": 60000}, timeout=90)
            t = threading.Thread(target=attack)
            t.start()
            time.sleep(4)  # the flood is up
            lat = ping_latencies(r.port, token, 8)  # ~80 pings, all while the flood holds
            t.join(60)
            fds = len(os.listdir("/proc/%d/fd" % r.host_pid()))
            flood = stdout_of(res.get("ev", [])).splitlines()
            fig = {"pings": len(lat), "worst_ms": round(max(lat) * 1000, 1),
                   "median_ms": round(statistics.median(lat) * 1000, 2),
                   "failed": sum(1 for x in lat if x >= 5.0),
                   "baseline_median_ms": round(statistics.median(base) * 1000, 2),
                   "attacker_last": flood[-1] if flood else None, "runner_fds_after": fds}
            figure("finding3_ping_under_1100_task_connections", fig)
            self.assertEqual(fig["failed"], 0, fig)
            self.assertLess(fig["worst_ms"], 1000, fig)
            self.assertLess(fig["median_ms"], 100, fig)
            self.assertEqual(r.proc.poll(), None, "the runner died")
            errs = [l for l in r.loglines() if "Too many open files" in json.dumps(l)]
            self.assertEqual(errs, [])
        finally:
            r.close()

    def test_model_proxy_answers_under_a_flood(self):
        """The model proxy, flooded by an exec task of another uid (tasks of
        one uid share its per-client limit): a chat task still completes."""
        gw = TestGateway()
        # vault mode would deny the exec attacker IP sockets: allow them
        r = Runner(["--exec-network", "full"], env={"FORCEAI_GATEWAY_URL": gw.url})
        try:
            pport = [l for l in r.loglines() if l.get("msg") == "ready"][0]["model_proxy_port"]
            hold = script(r, "hold.py", HOLD)
            res = {}

            def attack():
                res["ev"] = r.execd({"command": "%s %s %d 1100 16" % (PY, hold, pport),
                                     "uid": 2000, "gid": 2000, "timeout": 60000}, timeout=90)
            t = threading.Thread(target=attack)
            t.start()
            time.sleep(5)
            chat_ms = []
            for i in range(5):
                gw.script(text("hello %d" % i, frag=100))
                t0 = time.monotonic()
                ev = r.native({"task": "curl -sS -m 10 -H \"Authorization: Bearer $OPENAI_API_KEY\" "
                                       "-H 'Content-Type: application/json' -d '{\"model\":\"m\",\"stream\":true,"
                                       "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}' "
                                       "\"$OPENAI_BASE_URL/chat/completions\"",
                               "capability": "chat"}, timeout=30)
                chat_ms.append(round((time.monotonic() - t0) * 1000, 1))
                self.assertIn(b"hello %d" % i, native_out(ev), ev)
            lat = ping_latencies(r.port, None, 3)
            t.join(60)
            flood = stdout_of(res.get("ev", [])).splitlines()
            fig = {"chat_ms": chat_ms, "ping_worst_ms": round(max(lat) * 1000, 1),
                   "attacker_last": flood[-1] if flood else None}
            figure("finding3_model_proxy_under_1100_task_connections", fig)
            self.assertLess(max(lat), 1.0, fig)
        finally:
            r.close()
            gw.close()


# ---------------------------------------------------------------------------
# 5. The model proxy buffers request bodies.

class Sink:
    """A gateway that reads request bodies and throws them away (counting),
    and never answers: the worst upstream for memory."""

    def __init__(self):
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(512)
        self.port = self.srv.getsockname()[1]
        self.received = 0
        self.lock = threading.Lock()
        self.conns = []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self.drain, args=(c,), daemon=True).start()

    def drain(self, c):
        while True:
            try:
                b = c.recv(1 << 16)
            except OSError:
                return
            if not b:
                return
            with self.lock:
                self.received += len(b)

    def close(self):
        self.srv.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass


STALL = r'''
import os, socket, sys, threading, time
n, size = int(sys.argv[1]), int(sys.argv[2])
host, port = os.environ["OPENAI_BASE_URL"].split("//")[1].split("/")[0].split(":")
key = os.environ["OPENAI_API_KEY"]
chunk = b"x" * 65536
sent = [0] * n
answers = []
def one(i):
    s = socket.create_connection((host, int(port)))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (key.encode(), size))
    left = size - 1  # one byte short: the body never completes
    s.settimeout(0.2)
    end = time.monotonic() + 40
    while left and time.monotonic() < end:
        try:
            k = s.send(chunk[:min(left, len(chunk))])
            left -= k
            sent[i] += k
        except socket.timeout:
            try:
                a = s.recv(100)
                if a:
                    answers.append(a.split(b"\r\n")[0])
                    break
            except socket.timeout:
                pass
        except OSError:
            answers.append(b"closed by the proxy")
            break
    time.sleep(600)
for i in range(n):
    threading.Thread(target=one, args=(i,), daemon=True).start()
last = -1
while True:
    time.sleep(1)
    total = sum(sent)
    print("sent %d answers %s" % (total, sorted(set(answers))), flush=True)
    if total == last:
        open(sys.argv[3], "w").write("%d %d\n" % (total, len(answers)))
    last = total
'''


class ProxyMemory(unittest.TestCase):
    """Finding 5: a chat task opens 100 proxy connections, each with a body
    one byte short of 8 MiB, and stalls. The runner's peak RSS stays bounded
    (the bodies stream on to the gateway, or wait in the kernel, not here)."""

    def test_stalled_bodies_do_not_grow_the_runner(self):
        sink = Sink()
        r = Runner(env={"FORCEAI_GATEWAY_URL": "http://127.0.0.1:%d/v1" % sink.port})
        try:
            pid = r.host_pid()
            stall = script(r, "stall.py", STALL)
            done = os.path.join(r.work, "stall.done")
            rss0 = vm(pid, "VmRSS")
            res = {}

            def attack():
                res["ev"] = r.native({"task": "%s %s 100 %d %s" % (PY, stall, 8 << 20, done),
                                      "capability": "chat", "timeout_ms": 55000}, timeout=70)
            t = threading.Thread(target=attack)
            t.start()
            deadline = time.monotonic() + 50
            while not os.path.exists(done) and time.monotonic() < deadline:
                time.sleep(0.5)
            peak = vm(pid, "VmHWM")
            rss = vm(pid, "VmRSS")
            with open(done) as f:
                sent, answered = (int(x) for x in f.read().split())
            fig = {"rss_before_kib": rss0, "rss_stalled_kib": rss, "peak_kib": peak,
                   "task_sent_bytes": sent, "answered_early": answered,
                   "gateway_received_bytes": sink.received}
            figure("finding5_proxy_100_stalled_8MiB_bodies", fig)
            if harness.rss_is_meaningful():
                self.assertLess(peak - rss0, 64 * 1024, fig)
            # Streamed: what the task sent went on to the gateway (a
            # request the runner refused early was answered instead).
            self.assertGreater(sink.received, 8 << 20, fig)
        finally:
            r.close()
            sink.close()


# ---------------------------------------------------------------------------
# 6. A readable token file is the token.

class SecretFiles(unittest.TestCase):
    """Finding 6: a token or gateway-key file tasks could read stops the
    runner at start (exit 2, a message naming the file, its mode and the
    fix); owner-only files start, and a task cannot read them."""

    def setUp(self):
        self.d = "/tmp/forceai-doors-secrets-%d" % os.getpid()
        os.makedirs(self.d, exist_ok=True)
        os.chmod(self.d, 0o755)

    def tearDown(self):
        subprocess.run(["rm", "-rf", self.d])

    def secret(self, name, value, mode, uid=0, gid=0):
        p = os.path.join(self.d, name)
        with open(p, "w") as f:
            f.write(value + "\n")
        os.chown(p, uid, gid)
        os.chmod(p, mode)
        return p

    def start(self, args, env=None):
        r = Runner(args=args, env=env, ready=False)
        try:
            rc = r.proc.wait(5)
        except subprocess.TimeoutExpired:
            rc = None
        return r, rc

    def test_readable_secret_files_are_refused(self):
        cases = [
            ("token-file", "tok", 0o644, 0, 0, "0644"),
            ("token-file", "tok", 0o640, 0, 1000, "group 1000"),
            ("token-file", "tok", 0o400, 1000, 0, "uid 1000"),
            ("token-file", "tok", 0o660, 0, 0, "writable by its group"),
            ("gateway-key-file", "sk-x", 0o644, 0, 0, "0644"),
        ]
        for opt, val, mode, uid, gid, why in cases:
            with self.subTest(opt=opt, mode=oct(mode), uid=uid, gid=gid):
                p = self.secret("s-%o-%d-%d" % (mode, uid, gid), val, mode, uid, gid)
                env = {"FORCEAI_GATEWAY_URL": "http://127.0.0.1:9/v1"} if "key" in opt else None
                r, rc = self.start(["--" + opt, p], env)
                log = r.logtext()
                r.close()
                self.assertEqual(rc, 2, log)
                self.assertIn(p, log)
                self.assertIn(why, log)
                self.assertIn("chmod 0400", log)
                self.assertIn("defaultMode: 0400", log)

    def test_task_cannot_read_owner_only_secrets(self):
        token = "tok-" + os.urandom(8).hex()
        key = "sk-" + os.urandom(8).hex()
        tp = self.secret("token", token, 0o400)
        kp = self.secret("key", key, 0o440, 0, 999)  # group 999: no task has it
        r = Runner(args=["--token-file", tp, "--gateway-key-file", kp], token=token,
                   env={"FORCEAI_GATEWAY_URL": "http://127.0.0.1:9/v1"})
        try:
            cmd = ("tr '\\0' ' ' < /proc/%d/cmdline; echo; cat %s %s 2>&1; "
                   "for f in /proc/%d/fd/*; do cat $f 2>/dev/null; done; true"
                   % (r.host_pid(), tp, kp, r.host_pid()))
            ev = r.execd({"command": cmd})
            out = json.dumps(ev)
            self.assertIn(tp, out)  # the task can find the path...
            self.assertIn("Permission denied", out)  # ...but not read it
            self.assertNotIn(token, out)
            self.assertNotIn(key, out)
        finally:
            r.close()


# ---------------------------------------------------------------------------
# 9. A NUL in the token header authenticates.

def raw(port, data, timeout=5):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        return s.recv(300).split(b"\r\n")[0]
    finally:
        s.close()


class NulInHeaders(unittest.TestCase):
    """Finding 9: libmicrohttpd cuts a header value at a NUL; a token
    followed by a NUL and anything else must not pass. (From a client that
    is not a task: a task's connection is refused before this point.)"""

    def test_nul_in_token_header_is_refused(self):
        token = "nul-" + os.urandom(6).hex()
        r = Runner(token=token)
        try:
            t = token.encode()
            # A route that needs the token (GET /ping and /ready do not: execd 1.2).
            head = b"GET /v1/hardening HTTP/1.1\r\nHost: x\r\n"
            cases = {
                b"X-EXECD-ACCESS-TOKEN: " + t + b"\r\n": b"200",
                b"X-EXECD-ACCESS-TOKEN: " + t + b"\x00junk\r\n": b"400",
                b"X-EXECD-ACCESS-TOKEN: " + t + b"\x00\r\n": b"400",
                b"X-EXECD-ACCESS-TOKEN: " + t + b"\x00\x00\x00\n": b"400",
                b"X-EXECD-ACCESS-TOKEN: " + t + b"\x00X-Other: 1\r\nAccept: */*\r\n": b"400",
                b"Accept: a\x00b\r\nX-EXECD-ACCESS-TOKEN: " + t + b"\r\n": b"400",
                b"X-EXECD-ACCESS-TOKEN: " + t + b"junk\r\n": b"401",
                b"X-EXECD-ACCESS-TOKEN: " + t + b"\r\nAccept: */*\r\n": b"200",
            }
            for hdr, want in cases.items():
                with self.subTest(header=hdr):
                    line = raw(r.port, head + hdr + b"\r\n")
                    self.assertIn(b" " + want + b" ", line + b" ")
        finally:
            r.close()


# ---------------------------------------------------------------------------
# Identities are bounded.

class Identities(unittest.TestCase):
    """uid/gid in requests: the task user's own, or --task-id-range (default
    1000-4294967294) without 65534; never a system group (gid 42 = shadow
    reads /etc/shadow)."""

    def test_system_groups_and_nobody_are_refused(self):
        r = Runner()
        try:
            for body in ({"uid": 1000, "gid": 42}, {"uid": 42}, {"uid": 65534},
                         {"uid": 1000, "gid": 65534}, {"uid": 2000, "gid": 999}):
                with self.subTest(**body):
                    body = dict(body, command="head -c 4 /etc/shadow; id")
                    st, h, data = r.request("POST", "/command", body)
                    self.assertEqual(st, 403, data)
            ev = r.execd({"command": "id -u; id -g", "uid": 2000, "gid": 2000})
            self.assertEqual(stdout_of(ev), "2000\n2000")
            ev = r.execd({"command": "id -u; id -g"})
            self.assertEqual(stdout_of(ev), "1000\n1000")
            h = r.json("GET", "/v1/hardening")[1]
            self.assertIn("65534", h["task_identities"]["uids"])
            self.assertIn("never", h["task_identities"]["system_groups"])
        finally:
            r.close()

    def test_configured_range(self):
        r = Runner(args=["--task-id-range", "2000-2999"])
        try:
            self.assertEqual(r.request("POST", "/command", {"command": "id", "uid": 3000})[0], 403)
            self.assertEqual(r.request("POST", "/command", {"command": "id", "uid": 1500})[0], 403)
            ev = r.execd({"command": "id -u", "uid": 2500, "gid": 2500})
            self.assertEqual(stdout_of(ev), "2500")
            ev = r.execd({"command": "id -u", "uid": 1000})  # the task user's own
            self.assertEqual(stdout_of(ev), "1000")
        finally:
            r.close()
        for bad in ("0-100", "2000-1000", "x"):
            r = Runner(args=["--task-id-range", bad], ready=False)
            self.assertEqual(r.proc.wait(10), 2, bad)
            r.close()


# ---------------------------------------------------------------------------
# Session memfds are not world-accessible.

class SessionMemfd(unittest.TestCase):
    """A session's saved `export -p` lives in a memfd the runner keeps and
    the next run inherits as fd 3. It is 0600 and the runner's: whoever gets
    at it through a path (/proc/PID/fd/N) instead of the inherited fd is
    refused, e.g. the files API led by a task-planted link to /proc/self
    (the runner's own fds; finding 7's route to another session's state)."""

    def test_session_state_is_not_world_accessible(self):
        r = Runner()
        try:
            secret = "s3cr3t-" + os.urandom(6).hex()
            sid = r.json("POST", "/session", {})[1]["session_id"]
            run = "/session/%s/run" % sid
            r.execd({"command": "export SESSION_SECRET=%s" % secret}, path=run)
            ev = r.execd({"command": "stat -L -c '%a %u' /proc/self/fd/3 /proc/self/fd/4; "
                                     "echo $SESSION_SECRET"}, path=run)
            self.assertEqual(stdout_of(ev), "600 0\n600 0\n" + secret)
            # The task plants the link; a client follows it.
            r.execd({"command": "ln -s /proc/self %s/self" % r.work})
            seen = []
            for n in range(3, 160):
                st, _, data = r.request("GET", "/files/download?path=%s/self/fd/%d" % (r.work, n))
                if st == 200:
                    seen.append(n)
                self.assertNotIn(secret.encode(), data, "fd %d of the runner gave it away" % n)
            ev = r.execd({"command": "echo $SESSION_SECRET"}, path=run)
            self.assertEqual(stdout_of(ev), secret)  # the session still carries it
        finally:
            r.close()


# ---------------------------------------------------------------------------
# Optional per-task network policy.

NET_PROBE = r'''
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
out = []
for fam in (socket.AF_INET, socket.AF_INET6):
    try:
        socket.socket(fam, socket.SOCK_STREAM).close()
        out.append("ip%d:ok" % (4 if fam == socket.AF_INET else 6))
    except OSError as e:
        out.append("ip%d:%s" % (4 if fam == socket.AF_INET else 6, e.errno))
try:
    socket.create_connection((host, port), timeout=2).close()
    out.append("gateway:reached")
except OSError as e:
    out.append("gateway:%s" % e.errno)
a, b = socket.socketpair(socket.AF_UNIX)
a.send(b"u"); out.append("unix:" + b.recv(1).decode())
print(" ".join(out))
'''


def ip6_here():
    """What socket(AF_INET6) gives without a policy on this machine."""
    try:
        socket.socket(socket.AF_INET6, socket.SOCK_STREAM).close()
        return "ok"
    except OSError as e:
        return str(e.errno)


class NetworkNone(unittest.TestCase):
    """`"network": "none"` (and --exec-network none as the default for exec
    tasks): no IP socket at all, so an exec task cannot reach the gateway
    even where an egress proxy would add the key; AF_UNIX still works."""

    @classmethod
    def setUpClass(cls):
        cls.gw = TestGateway()

    @classmethod
    def tearDownClass(cls):
        cls.gw.close()

    def probe(self, r, **kw):
        p = script(r, "net.py", NET_PROBE)
        body = {"command": "%s %s 127.0.0.1 %d" % (PY, p, self.gw.port)}
        body.update(kw)
        return stdout_of(r.execd(body))

    def test_vault_mode_defaults_exec_to_none(self):
        """No gateway key (vault mode: a sidecar adds it), so whoever reaches
        the gateway is authenticated: exec tasks get no IP sockets unless
        --exec-network full is given (test_per_task_none)."""
        r = Runner(env={"FORCEAI_GATEWAY_URL": self.gw.url})
        try:
            self.assertEqual(self.probe(r), "ip4:13 ip6:13 gateway:13 unix:u")
            self.assertEqual(self.probe(r, network="full"),
                             "ip4:ok ip6:%s gateway:reached unix:u" % ip6_here())
            h = r.json("GET", "/v1/hardening")[1]
            self.assertEqual(h["network"]["exec_default"], "none")
            self.assertIn("vault mode", h["network"]["exec_default_why"])
        finally:
            r.close()

    def test_per_task_none(self):
        r = Runner(args=["--exec-network", "full"], env={"FORCEAI_GATEWAY_URL": self.gw.url})
        try:
            self.assertEqual(self.probe(r), "ip4:ok ip6:%s gateway:reached unix:u" % ip6_here())
            self.assertEqual(self.probe(r, network="none"), "ip4:13 ip6:13 gateway:13 unix:u")
            p = script(r, "net.py", NET_PROBE)
            ev = r.native({"task": "%s %s 127.0.0.1 %d" % (PY, p, self.gw.port),
                           "network": "none"})
            self.assertEqual(native_out(ev), b"ip4:13 ip6:13 gateway:13 unix:u\n")
            self.assertEqual(ev[0]["data"]["network"], "none")
            st, _, data = r.request("POST", "/v1/tasks", {"task": "true", "capability": "chat",
                                                          "network": "none"})
            self.assertEqual(st, 400, data)
            st, _, data = r.request("POST", "/command", {"command": "true", "network": "some"})
            self.assertEqual(st, 400, data)
        finally:
            r.close()

    def test_runner_default_none_for_exec(self):
        r = Runner(args=["--exec-network", "none"], env={"FORCEAI_GATEWAY_URL": self.gw.url})
        try:
            self.assertEqual(self.probe(r), "ip4:13 ip6:13 gateway:13 unix:u")
            self.assertEqual(self.probe(r, network="full"), "ip4:ok ip6:%s gateway:reached unix:u" % ip6_here())
            h = r.json("GET", "/v1/hardening")[1]
            self.assertEqual(h["network"]["exec_default"], "none")
            # A chat task still reaches its proxy (and only through it).
            self.gw.script(text("still talking", frag=100))
            ev = r.native({"task": "curl -sS -m 10 -H \"Authorization: Bearer $OPENAI_API_KEY\" "
                                   "-H 'Content-Type: application/json' -d '{\"model\":\"m\",\"stream\":true,"
                                   "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}' "
                                   "\"$OPENAI_BASE_URL/chat/completions\"",
                           "capability": "chat"})
            self.assertIn(b"still talking", native_out(ev))
        finally:
            r.close()


if __name__ == "__main__":
    unittest.main()
