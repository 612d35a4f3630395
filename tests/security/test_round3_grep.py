"""Red-team round three, findings 1 and 2 (issue 33), from the attacker's side: content search
(GET /files/grep and the MCP grep tool) ran glibc's/musl's regexec on the event loop, one line
at a time, with nothing bounding a line or what a pattern compiles to.

1. A task plants one long line (1 MiB, 8 MiB) in its workspace; a client greps it with an
   ordinary pattern (TODO.*fixme): regexec is quadratic in the line and held the loop for
   minutes. Now /ping, from another connection meanwhile, answers within 250 ms and the grep
   answers within its budget.
2. Pattern bombs ((a{1,255}){1,255}){1,255} (26 bytes) compiled into all memory (21 GiB, the
   OOM killer took PID 1); (a{1,255}){1,255} held the loop ~5 s per request. Now each is a 400
   naming the bound, fast, and the runner's peak RSS (VmHWM) does not grow.

A baseline runner (RUNNER_BIN=...) must fail these: it is run under RLIMIT_AS (4 GiB) for the
bombs so that it never eats the machine's memory, and every wait on it is bounded."""
import json
import os
import resource
import socket
import threading
import time
import unittest
from urllib.parse import quote

from harness import ROOT, RUNNER, Runner, rss_is_meaningful, record_figure

# Under valgrind or the sanitizers timings mean nothing.
SLOW = bool(os.environ.get("RUNNER_WRAP")) or "asan" in RUNNER
FIGURES = os.path.join(ROOT, "build", "security", "round3_grep.json")
PING_MAX_S = 0.25
GREP_BUDGET_S = 10.0  # FILES_GREP_MAX_MS
CLIENT_TIMEOUT_S = 30.0  # a baseline grep takes minutes: never wait that long
BOMBS = ["(a{1,255}){1,255}", "(.*.*.*.*.*.*){255}", "((a{1,255}){1,255}){1,255}"]


def figure(name, value):
    record_figure(FIGURES, name, value)


class Pinger:
    """GET /ping on a fresh connection every 20 ms from a thread of its own, while a request
    runs; a ping still waiting when it stops counts with the time it has waited."""

    def __init__(self, port):
        self.port, self.lat, self.stop_ev = port, [], threading.Event()
        self.started = None
        self.th = threading.Thread(target=self.run, daemon=True)
        self.th.start()

    def run(self):
        while not self.stop_ev.is_set():
            self.started = t0 = time.monotonic()
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=300)
                s.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
                ok = s.recv(100).startswith(b"HTTP/1.1 200")
                s.close()
            except OSError:
                ok = False
            self.started = None
            self.lat.append(time.monotonic() - t0 if ok else 300.0)
            time.sleep(0.02)

    def stop(self):
        self.stop_ev.set()
        self.th.join(1)
        if self.started is not None:  # the loop still holds it
            self.lat.append(time.monotonic() - self.started)
        return {"pings": len(self.lat), "max_ms": round(max(self.lat or [0]) * 1000, 1)}


def timed(fn):
    t0 = time.monotonic()
    try:
        out = fn()
    except (OSError, ValueError) as e:  # socket.timeout: no answer within CLIENT_TIMEOUT_S
        out = ("no answer", repr(e))
    return out, round(time.monotonic() - t0, 3)


def vm_hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


class GrepAttack(unittest.TestCase):
    """One runner per test (a baseline one may be stuck or dead after an attack)."""
    as_limit = None

    def setUp(self):
        if self.as_limit and not SLOW:
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            resource.setrlimit(resource.RLIMIT_AS, (self.as_limit, hard))
            try:
                self.r = Runner()
            finally:
                resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        else:
            self.r = Runner()
        self.addCleanup(self.r.close)

    def rest_grep(self, path, pattern):
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", self.r.port, timeout=CLIENT_TIMEOUT_S)
        c.request("GET", "/files/grep?path=%s&pattern=%s" % (quote(path), quote(pattern)))
        resp = c.getresponse()
        body = resp.read()
        c.close()
        return resp.status, json.loads(body) if body else None

    def mcp_post(self, msg, sid=None):
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", self.r.port, timeout=CLIENT_TIMEOUT_S)
        h = {"Content-Type": "application/json", "Accept": "application/json"}
        if sid:
            h["Mcp-Session-Id"] = sid
        c.request("POST", "/mcp", json.dumps(msg), h)
        resp = c.getresponse()
        body = resp.read()
        sid = resp.getheader("Mcp-Session-Id") or sid
        c.close()
        return resp.status, sid, json.loads(body) if body else None

    def mcp_grep(self, path, pattern):
        st, sid, b = self.mcp_post({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                    "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                               "clientInfo": {"name": "t", "version": "1"}}})
        self.assertEqual(st, 200, b)
        st, _, b = self.mcp_post({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                  "params": {"name": "grep",
                                             "arguments": {"path": path, "pattern": pattern}}},
                                 sid)
        return st, b

    def plant(self, name, size, tail):
        """The task writes one line of `size` bytes: "TODO TODO ...", then `tail`. Every TODO
        is a start that glibc's regexec scans to the line's end: quadratic."""
        path = os.path.join(self.r.work, name)
        ev = self.r.execd({"command": "{ yes TODO | head -c %d | tr '\\n' ' '; printf %s; } > %s"
                                      " && stat -c %%s %s"
                                      % (size - len(tail), tail, path, path)}, timeout=60)
        out = "".join(e.get("text", "") for e in ev if e.get("type") == "stdout")
        self.assertEqual(out.strip(), str(size), ev)
        return path


class LongLine(GrepAttack):
    """Finding 1: one long line, an ordinary pattern."""

    def attack(self, size, via):
        hit = self.plant("hit-%d" % size, size, "fixme")
        miss = self.plant("miss-%d" % size, size, "zzzzz")
        fig, answers = {}, {}
        for kind, path in (("hit", hit), ("miss", miss)):
            p = Pinger(self.r.port)
            if via == "rest":
                res, secs = timed(lambda: self.rest_grep(path, "TODO.*fixme"))
            else:
                res, secs = timed(lambda: self.mcp_grep(path, "TODO.*fixme"))
            fig[kind] = dict(p.stop(), grep_s=secs, answer=str(res)[:160])
            answers[kind] = res
            if self.r.proc.poll() is not None or res[0] == "no answer":
                break  # a baseline runner: stuck for minutes, or dead
        figure("finding1_%s_%dB" % (via, size), fig)
        for kind, path in (("hit", hit), ("miss", miss)):
            self.assertIn(kind, fig, fig)
            self.assertLess(fig[kind]["grep_s"], GREP_BUDGET_S + 3, fig)
            if not SLOW:
                self.assertLess(fig[kind]["max_ms"], PING_MAX_S * 1000, fig)
            st, b = answers[kind]
            self.assertEqual(st, 200, fig)
            if via == "rest":
                # the hit is found, the miss is not; or the budget ran out and it says so
                found = [m["line"] for m in b["matches"]]
                if b["truncated"]:
                    self.assertIn("took longer than", b["limit"], fig)
                else:
                    self.assertEqual(found, [1] if kind == "hit" else [], fig)
            else:
                self.assertFalse(b["result"].get("isError"), fig)
                text = b["result"]["content"][0]["text"]
                self.assertTrue(text.startswith(path + ":1:TODO") if kind == "hit"
                                else text.startswith("(no matches)"), fig)

    def test_rest_1mib_line(self):
        self.attack(1 << 20, "rest")

    def test_rest_8mib_line(self):
        self.attack(8 << 20, "rest")

    def test_mcp_1mib_line(self):
        self.attack(1 << 20, "mcp")

    def test_mcp_8mib_line(self):
        self.attack(8 << 20, "mcp")

    def test_worst_case_line_meets_the_budget(self):
        """Our engine's worst case: every byte of a random a/b line makes a new DFA state of
        a.{255}c (255 positions to follow), so the search costs the program a byte. The grep
        stops at its 10 s budget inside the one line and says so; the loop never stalls."""
        path = os.path.join(self.r.work, "ab")
        ev = self.r.execd({"command": "python3 -c \"import random, sys; "
                                      "sys.stdout.buffer.write(random.randbytes(%d).translate("
                                      "bytes(b'ab'[i & 1] for i in range(256))))\" > %s"
                                      % (8 << 20, path)}, timeout=60)
        self.assertEqual(os.path.getsize(path), 8 << 20, ev)
        p = Pinger(self.r.port)
        res, secs = timed(lambda: self.rest_grep(path, "a.{255}c"))
        fig = dict(p.stop(), grep_s=secs, answer=str(res)[:300])
        figure("finding1_worst_case_8MiB", fig)
        self.assertLess(secs, GREP_BUDGET_S + 3, fig)
        st, b = res
        self.assertEqual(st, 200, fig)
        self.assertEqual(b["matches"], [], fig)
        if b["truncated"]:
            self.assertIn("took longer than", b["limit"], fig)
        if not SLOW:
            self.assertLess(fig["max_ms"], PING_MAX_S * 1000, fig)


class PatternBomb(GrepAttack):
    """Finding 2: a pattern that compiles into all memory, or seconds of the loop."""
    as_limit = 4 << 30  # a baseline runner fails there instead of eating the machine

    def bombs(self, via):
        path = self.plant("small", 4096, "fixme")
        pid = self.r.host_pid()
        before = vm_hwm_kib(pid)
        fig, answers = {"vm_hwm_kib_before": before}, {}
        for pat in BOMBS:
            p = Pinger(self.r.port)
            if via == "rest":
                res, secs = timed(lambda: self.rest_grep(path, pat))
            else:
                res, secs = timed(lambda: self.mcp_grep(path, pat))
            alive = self.r.proc.poll() is None
            fig[pat] = dict(p.stop(), grep_s=secs, answer=str(res)[:200], runner_alive=alive,
                            vm_hwm_kib=vm_hwm_kib(pid) if alive else None)
            answers[pat] = res
            if not alive or res[0] == "no answer":
                break
        if self.r.proc.poll() is None:
            fig["vm_hwm_growth_kib"] = vm_hwm_kib(pid) - before
        figure("finding2_%s" % via, fig)
        for pat in BOMBS:
            self.assertIn(pat, answers, fig)
            self.assertTrue(fig[pat]["runner_alive"], fig)
            st, b = answers[pat]
            if via == "rest":
                self.assertEqual(st, 400, fig)
                msg = b["message"]
            else:
                self.assertEqual(st, 200, fig)
                self.assertTrue(b["result"].get("isError"), fig)
                msg = b["result"]["content"][0]["text"]
            self.assertIn("too big", msg, fig)
            self.assertIn("4096", msg, fig)  # the bound is named
            if not SLOW:
                self.assertLess(fig[pat]["grep_s"], 1.0, fig)
                self.assertLess(fig[pat]["max_ms"], PING_MAX_S * 1000, fig)
        if rss_is_meaningful():
            # KiB: a grep's DFA cache and buffers, never what a pattern expands to
            self.assertLess(fig["vm_hwm_growth_kib"], 16 << 10, fig)

    def test_rest(self):
        self.bombs("rest")

    def test_mcp(self):
        self.bombs("mcp")


if __name__ == "__main__":
    unittest.main()
