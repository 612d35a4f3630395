"""Red-team round three (issue 37), from the attacker's side: the audit trail
(docs/design/audit.md) must hold against the tasks it records. A task tries to
read, rewrite or remove the --audit-file, to reach GET /v1/audit, and to
flood the trail (a connection storm against the API, each refusal an event);
a client holding the token runs 10,000 short commands and 100,000 small
requests through the port proxy. The runner's RSS, /ping latency and the
counted drops are reported (build/figures/round3_audit.json)."""
import http.client
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

from harness import RUNNER, Runner, record_figure, rss_is_meaningful

TOKEN = "round3-audit-token-" + os.urandom(6).hex()
FIGURES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))), "build", "figures", "round3_audit.json")


def audit_events(text):
    out = []
    for line in text.splitlines():
        if '"audit":true' in line:
            try:
                out.append(json.loads(line[line.index("{"):]))
            except ValueError:
                pass
    return out


class FastUpstream:
    """A loopback HTTP/1.1 app that answers each request head with an empty 200, keep-alive."""
    REPLY = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"

    def __init__(self):
        import asyncio
        import socket
        self.loop = asyncio.new_event_loop()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        reply = self.REPLY

        class Proto(asyncio.Protocol):
            def connection_made(self, tr):
                self.tr, self.buf = tr, b""

            def data_received(self, data):
                self.buf += data
                n = self.buf.count(b"\r\n\r\n")
                if n:
                    self.buf = self.buf[self.buf.rindex(b"\r\n\r\n") + 4:]
                    self.tr.write(reply * n)

        self.server = self.loop.run_until_complete(
            self.loop.create_server(Proto, sock=sock, backlog=128))
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def close(self):
        def stop():
            self.server.close()
            self.loop.stop()
        self.loop.call_soon_threadsafe(stop)
        self.thread.join(5)


def verify(path):
    p = subprocess.run([RUNNER, "--verify-audit", path], capture_output=True, text=True,
                       timeout=60)
    return p.returncode, p.stdout


def stdout_text(events):
    return "".join(e.get("text", "") + "\n" for e in events if e.get("type") == "stdout")


class Pinger:
    """GET /ping every 20 ms from a thread: the loop's latency under a flood."""

    def __init__(self, r):
        self.r, self.samples, self.failed, self.stop = r, [], 0, False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop:
            t0 = time.monotonic()
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.r.port, timeout=10)
                c.request("GET", "/ping")
                c.getresponse().read()
                c.close()
                self.samples.append((time.monotonic() - t0) * 1000)
            except OSError:
                self.failed += 1
            time.sleep(0.02)

    def done(self):
        self.stop = True
        self.t.join(15)
        s = sorted(self.samples) or [0]
        return {"n": len(self.samples), "failed": self.failed,
                "p50_ms": round(s[len(s) // 2], 2), "p99_ms": round(s[int(len(s) * 0.99)], 2),
                "max_ms": round(s[-1], 2)}


class AuditFromTasks(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.own = tempfile.mkdtemp(prefix="audit-own-", dir="/var/tmp")  # not a writable root
        os.chmod(cls.own, 0o755)
        cls.audit_file = os.path.join(cls.own, "audit.log")
        cls.r = Runner(["--audit-file", cls.audit_file, "--audit-rate", "200"], token=TOKEN)

    @classmethod
    def tearDownClass(cls):
        rc = cls.r.stop()
        cls.r.close()
        shutil.rmtree(cls.own, True)
        if rc != 0:
            raise AssertionError("runner exited %s after SIGTERM" % rc)

    def task(self, cmd, timeout=120):
        return self.r.execd({"command": cmd, "cwd": self.r.work}, timeout=timeout)

    def test_task_cannot_read_write_or_remove_the_trail(self):
        before = open(self.audit_file).read()
        probe = r'''
import os, sys
p = sys.argv[1]
for what, fn in (("read", lambda: open(p).read(1)), ("append", lambda: open(p, "a").write("x")),
                 ("truncate", lambda: open(p, "w")), ("unlink", lambda: os.unlink(p)),
                 ("rename", lambda: os.rename(p, p + ".x")),
                 ("symlink-swap", lambda: os.symlink("/tmp/mine", os.path.dirname(p) + "/evil"))):
    try:
        fn(); print(what, "OK")
    except OSError as e:
        print(what, "refused", e.errno)
# The runner's descriptor of it, through /proc (the runner is not dumpable).
import glob
for fd in glob.glob("/proc/1/fd/*") + glob.glob("/proc/%s/fd/*" % sys.argv[2]):
    try:
        if os.readlink(fd) == p:
            open(fd, "a").write("forged"); print("proc-fd OK")
    except OSError:
        pass
print("proc-fd done")
'''
        path = os.path.join(self.r.work, "probe.py")
        with open(path, "w") as f:
            f.write(probe)
        pid = self.r.runner_pid()
        out = stdout_text(self.task("python3 %s %s %d" % (path, self.audit_file, pid)))
        self.assertIn("proc-fd done", out, out)
        self.assertNotIn(" OK", out, out)
        after = open(self.audit_file).read()
        self.assertTrue(after.startswith(before), "the trail was rewritten")
        self.assertNotIn("forged", after)
        rc, v = verify(self.audit_file)
        self.assertEqual(rc, 0, v)

    def test_task_cannot_reach_the_trail_api(self):
        # Even with the token (a task that learnt it) the API refuses its connection.
        cmd = ("curl -sS -m 5 -H 'X-EXECD-ACCESS-TOKEN: %s' http://127.0.0.1:%d/v1/audit; "
               "echo rc=$?" % (TOKEN, self.r.port))
        out = stdout_text(self.task(cmd))
        self.assertNotIn('"events"', out)
        self.assertNotIn("rc=0", out, out)
        time.sleep(0.3)
        refused = [e for e in audit_events(self.r.logtext())
                   if e["what"] == "connection refused" and e["who"].get("uid") == 1000]
        self.assertTrue(refused, "the task's attempt is not in the trail")
        self.assertEqual(refused[-1]["reason"], "a task's connection")

    def test_task_connection_flood_is_bounded(self):
        """A task connects to the API 20,000 times: each refusal is an event; the
        trail keeps --audit-rate of them a second and counts the rest."""
        r = self.r
        rss0 = r.rss_kib()
        ping = Pinger(r)
        flood = ("python3 -c \"import socket,time\nn=0\nt=time.time()\nwhile n<20000 and "
                 "time.time()-t<60:\n  s=socket.socket()\n  try:\n    s.connect(('127.0.0.1',%d))\n"
                 "    s.recv(1)\n  except OSError: pass\n  s.close(); n+=1\nprint('tries',n)\"" %
                 r.port)
        t0 = time.monotonic()
        out = stdout_text(self.task(flood, timeout=120))
        secs = time.monotonic() - t0
        time.sleep(2.5)  # the marker goes out once the flood has passed
        lat = ping.done()
        rss1 = r.rss_kib()
        st, j = r.json("GET", "/v1/audit?limit=10000")
        self.assertEqual(st, 200)
        events = audit_events(r.logtext())
        markers = [e for e in events if e["what"] == "events dropped"]
        dropped = sum(e["count"] for e in markers)
        refused = sum(1 for e in events if e["what"] == "connection refused")
        fig = {"tries": out.strip(), "seconds": round(secs, 1), "events_kept": refused,
               "dropped_counted": dropped, "status_dropped": j["status"]["dropped"],
               "markers": len(markers),
               "rss_kib_before": rss0, "rss_kib_after": rss1, "ping": lat}
        record_figure(FIGURES, "task_connection_flood", fig)
        self.assertTrue(markers, fig)
        # While the flood lasts, a marker at most once a second (one before
        # every kept event would double the trail's work under a flood).
        self.assertLessEqual(len(markers), secs + 3, fig)
        self.assertEqual(dropped, j["status"]["dropped"], fig)
        self.assertGreater(refused + dropped, 15000, fig)
        if rss_is_meaningful():
            self.assertLess(rss1 - rss0, 32 * 1024, fig)
        self.assertLess(lat["p99_ms"], 500, fig)
        self.assertEqual(lat["failed"], 0, fig)
        log = os.path.join(r.tmp, "flood.log")
        with open(log, "w") as f:
            f.write(r.logtext())
        rc, v = verify(log)
        self.assertEqual(rc, 0, v)
        rc, v = verify(self.audit_file)
        self.assertEqual(rc, 0, v)


class ClientFloods(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.r = Runner(token=TOKEN)

    @classmethod
    def tearDownClass(cls):
        cls.r.close()

    def test_10000_short_commands(self):
        """10,000 `true` through the execd API (4 clients, keep-alive, at most 90 s)."""
        r = self.r
        rss0 = r.rss_kib()
        ping = Pinger(r)
        done = [0]
        lock = threading.Lock()
        deadline = time.monotonic() + 90

        def client():
            c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=30)
            body = json.dumps({"command": "true"})
            while time.monotonic() < deadline:
                with lock:
                    if done[0] >= 10000:
                        return
                    done[0] += 1
                c.request("POST", "/command", body, {"X-EXECD-ACCESS-TOKEN": TOKEN,
                                                     "Content-Type": "application/json"})
                resp = c.getresponse()
                data = resp.read()
                assert b"execution_complete" in data, data[-300:]

        t0 = time.monotonic()
        ts = [threading.Thread(target=client) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        secs = time.monotonic() - t0
        time.sleep(2)
        lat = ping.done()
        rss1 = r.rss_kib()
        st, j = r.json("GET", "/v1/audit?limit=1")
        status = (j or {}).get("status") or {"dropped": 0, "ring": {"bytes": 0}}  # none: no trail
        events = audit_events(r.logtext())
        started = sum(1 for e in events if e["what"] == "task started")
        fig = {"commands": done[0], "seconds": round(secs, 1),
               "per_s": round(done[0] / secs, 1), "task_started_events": started,
               "dropped": status["dropped"], "ring_bytes": status["ring"]["bytes"],
               "rss_kib_before": rss0, "rss_kib_after": rss1, "ping": lat}
        record_figure(FIGURES, "client_10000_commands", fig)
        self.assertGreaterEqual(done[0], 2000, fig)
        # Every command is in the trail: the client's events are never dropped
        # by the rate bound (issue 44; before, a count in a marker was enough).
        self.assertGreaterEqual(started, done[0], fig)
        self.assertEqual(status["dropped"], 0, fig)
        self.assertLessEqual(status["ring"]["bytes"], 8 << 20, fig)
        if rss_is_meaningful():
            self.assertLess(rss1 - rss0, 64 * 1024, fig)
        log = os.path.join(r.tmp, "cmds.log")
        with open(log, "w") as f:
            f.write(r.logtext())
        rc, v = verify(log)
        self.assertEqual(rc, 0, v)

    def test_100000_proxy_requests(self):
        """Up to 100,000 small GETs through /proxy/{port} (curl, 4 keep-alive clients,
        at most 60 s) to an app in the box."""
        r = self.r
        # The upstream answers every request with an empty 200 from an asyncio protocol:
        # http.server's ~1,600 requests a second made this test the stage's slowest (60 s).
        srv = FastUpstream()
        rss0 = r.rss_kib()
        ping = Pinger(r)
        st0, j0 = r.json("GET", "/v1/audit?limit=1")
        s0 = (j0 or {}).get("status") or {"emitted": 0, "dropped": 0}  # none: no trail
        t0 = time.monotonic()
        url = "http://127.0.0.1:%d/proxy/%d/s?[1-25000]" % (r.port, srv.port)
        procs = [subprocess.Popen(["curl", "-s", "-m", "60", "-H", "X-EXECD-ACCESS-TOKEN: " + TOKEN,
                                   "-w", "%{http_code}\\n", "-o", "/dev/null", url],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                 for _ in range(4)]
        codes = []
        for p in procs:
            out, _ = p.communicate(timeout=90)
            codes += out.split()
        secs = time.monotonic() - t0
        srv.close()
        time.sleep(2)
        lat = ping.done()
        rss1 = r.rss_kib()
        st, j = r.json("GET", "/v1/audit?limit=1")
        s1 = (j or {}).get("status") or {"emitted": 0, "dropped": 0}
        ok = sum(1 for c in codes if c == b"200")
        proxied = s1["emitted"] - s0["emitted"]
        fig = {"requests": len(codes), "ok": ok, "seconds": round(secs, 1),
               "per_s": round(len(codes) / secs, 1), "events_emitted": proxied,
               "dropped": s1["dropped"] - s0["dropped"],
               "rss_kib_before": rss0, "rss_kib_after": rss1, "ping": lat}
        record_figure(FIGURES, "client_100000_proxy_requests", fig)
        self.assertGreater(ok, 1000, fig)
        self.assertGreaterEqual(proxied + fig["dropped"], ok, fig)
        if rss_is_meaningful():
            self.assertLess(rss1 - rss0, 64 * 1024, fig)
        self.assertLess(lat["p99_ms"], 1000, fig)


if __name__ == "__main__":
    unittest.main()
