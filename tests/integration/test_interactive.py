"""Interactive tasks in the native API (stdin kept open and streamed with
backpressure, a terminal, resize, signals to the process group, the task
list) and execd's command inventory (GET /command, wire compatible with
components/execd/pkg/web/controller/command_inventory_test.go)."""
import hashlib
import json
import os
import socket
import subprocess
import threading
import time
import unittest

from harness import RunnerTest, parse_sse, rss_is_meaningful


class Stream:
    """POST /v1/tasks and keep reading its SSE stream on a raw socket."""

    def __init__(self, runner, body):
        self.sock = socket.create_connection(("127.0.0.1", runner.port), timeout=30)
        data = json.dumps(body)
        self.sock.sendall(("POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: "
                           "application/json\r\nContent-Length: %d\r\n\r\n%s"
                           % (len(data), data)).encode())
        self.f = self.sock.makefile("rb")
        status = self.f.readline()
        assert b" 200 " in status, status
        while self.f.readline() not in (b"\r\n", b""):
            pass
        self.pending = b""
        self.events = []
        started = self.next_event()
        assert started["event"] == "started", started
        self.id = started["data"]["task_id"]

    def next_event(self, deadline=None):
        """The next event; keep-alive comments are skipped, but not past the
        deadline (monotonic), so a task that never ends fails the test."""
        while True:
            if deadline is not None and time.monotonic() > deadline:
                raise AssertionError("no event before the deadline; output %r" % self.output())
            while b"\n\n" not in self.pending:
                size = int(self.f.readline().split(b";")[0], 16)
                if size == 0:
                    raise EOFError("stream ended")
                self.pending += self.f.read(size)
                self.f.read(2)
            block, _, self.pending = self.pending.partition(b"\n\n")
            evs = parse_sse(block + b"\n\n")  # empty for a keep-alive comment
            if evs:
                self.events.append(evs[0])
                return evs[0]

    def until_exit(self, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() > deadline:
                raise AssertionError("no exit event; output %r" % self.output())
            ev = self.next_event(deadline)
            if ev["event"] == "exit":
                return ev["data"]

    def output(self):
        out = b""
        for e in self.events:
            if e["event"] in ("stdout", "stderr"):
                d = e["data"]
                out += d["text"].encode() if "text" in d else __import__("base64").b64decode(
                    d["data_b64"])
        return out

    def wait_output(self, text, timeout=10):
        deadline = time.monotonic() + timeout
        self.sock.settimeout(timeout)
        while text.encode() not in self.output():
            if time.monotonic() > deadline:
                raise AssertionError("no %r in %r" % (text, self.output()))
            self.next_event(deadline)

    def close(self):
        self.sock.close()


def proc_state(pid):
    """The state letter in /proc/PID/stat ('' once it is gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
    except OSError:
        return ""
    return st[st.rindex(")") + 2]


def wait_state(pid, pred, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred(proc_state(pid)):
            return True
        time.sleep(0.01)
    return False


class NativeInteractive(RunnerTest):
    def start(self, body):
        s = Stream(self.r, body)
        self.addCleanup(s.close)
        return s

    def post(self, path, body):
        return self.r.json("POST", path, body)

    def test_stdin_pipe(self):
        s = self.start({"task": "cat; echo CAT_DONE", "stdin": True})
        st, b = self.r.json("POST", "/v1/tasks/%s/stdin" % s.id, "hello\n")
        self.assertEqual((st, b), (200, {"id": s.id, "written": 6}))
        s.wait_output("hello\n")
        st, _, _ = self.r.request("POST", "/v1/tasks/%s/stdin" % s.id, b"world \xff\n")
        self.assertEqual(st, 200)
        st, b = self.r.json("DELETE", "/v1/tasks/%s/stdin" % s.id)
        self.assertEqual((st, b), (200, {"id": s.id, "stdin": "closed"}))
        ex = s.until_exit()
        self.assertEqual(ex["exit_code"], 0)
        self.assertEqual(s.output(), b"hello\nworld \xff\nCAT_DONE\n")
        # after EOF, and once finished: 409
        st, b = self.r.json("POST", "/v1/tasks/%s/stdin" % s.id, "late")
        self.assertEqual((st, b["code"]), (409, "STDIN_CLOSED"))

    def test_stdin_errors(self):
        s = self.start({"task": "sleep 5"})
        st, b = self.r.json("POST", "/v1/tasks/%s/stdin" % s.id, "x")
        self.assertEqual((st, b["code"]), (409, "STDIN_NOT_OPEN"))
        st, b = self.r.json("DELETE", "/v1/tasks/%s/stdin" % s.id)
        self.assertEqual((st, b["code"]), (409, "STDIN_NOT_OPEN"))
        st, b = self.r.json("POST", "/v1/tasks/%s/stdin" % ("0" * 32), "x")
        self.assertEqual(st, 404)
        st, b = self.post("/v1/tasks", {"task": "true", "stdin": "yes"})
        self.assertEqual(st, 400)
        st, b = self.post("/v1/tasks", {"task": "true", "tty": {"cols": 0}})
        self.assertEqual(st, 400)
        self.r.request("DELETE", "/v1/tasks/" + s.id)

    def test_stdin_streamed_with_backpressure(self):
        """32 MiB through stdin to a task that reads slowly at first: the upload
        waits for the task (no whole-body buffering), every byte arrives."""
        s = self.start({"task": "sleep 2; sha256sum | cut -c1-64", "stdin": True})
        blob = os.urandom(32 << 20)
        base = self.r.rss_kib()
        t0 = time.monotonic()
        peak = [base]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                try:
                    peak[0] = max(peak[0], self.r.rss_kib())
                except OSError:
                    pass
                time.sleep(0.05)
        th = threading.Thread(target=sample)
        th.start()
        r = subprocess.run(["curl", "-sS", "--max-time", "60", "-H", "Expect:",
                            "--data-binary", "@-", "-H", "Transfer-Encoding: chunked",
                            "%s/v1/tasks/%s/stdin" % (self.r.url, s.id)],
                           input=blob, capture_output=True)
        took = time.monotonic() - t0
        stop.set()
        th.join()
        self.assertEqual(json.loads(r.stdout), {"id": s.id, "written": len(blob)})
        self.assertGreater(took, 1.5)  # it waited for the task to read
        self.r.request("DELETE", "/v1/tasks/%s/stdin" % s.id)
        self.assertEqual(s.until_exit()["exit_code"], 0)
        self.assertEqual(s.output().decode().strip(), hashlib.sha256(blob).hexdigest())
        if rss_is_meaningful():
            self.assertLess(peak[0] - base, 8 * 1024, "runner RSS grew by %d KiB" %
                            (peak[0] - base))

    def test_tty_task_and_resize(self):
        s = self.start({"task": "test -t 0 && test -t 1 && echo IS_$((1+1))TTY; stty size; "
                                "read x; stty size; echo GOT_$x",
                        "tty": {"cols": 100, "rows": 30}})
        s.wait_output("30 100\r\n")
        self.assertIn(b"IS_2TTY", s.output())
        st, b = self.post("/v1/tasks/%s/resize" % s.id, {"cols": 50, "rows": 20})
        self.assertEqual((st, b), (200, {"id": s.id, "cols": 50, "rows": 20}))
        st, _ = self.r.json("POST", "/v1/tasks/%s/stdin" % s.id, "go\n")
        self.assertEqual(st, 200)
        s.wait_output("GOT_go")
        self.assertIn(b"20 50\r\n", s.output())
        self.assertEqual(s.until_exit()["exit_code"], 0)
        st, b = self.post("/v1/tasks/%s/resize" % s.id, {"cols": 0, "rows": 20})
        self.assertEqual(st, 400)
        s2 = self.start({"task": "sleep 5", "stdin": True})
        st, b = self.post("/v1/tasks/%s/resize" % s2.id, {"cols": 10, "rows": 10})
        self.assertEqual((st, b["code"]), (409, "NOT_A_TERMINAL"))
        self.r.request("DELETE", "/v1/tasks/" + s2.id)

    def test_a_terminal_keeps_the_dynamic_bash(self):
        # Its line editing and terminfo are the shared bash's (docs/design/tasks.md
        # "The task shell"); only commands without a terminal run the static one.
        s = self.start({"task": "readlink /proc/$$/exe; true", "tty": {}})
        self.assertEqual(s.until_exit()["exit_code"], 0)
        self.assertEqual(s.output().decode().strip(), "/usr/bin/bash")

    def test_tty_ctrl_c_and_eof(self):
        s = self.start({"task": "cat; echo CAT_ENDED_$((2+2))", "tty": {}})
        self.r.request("POST", "/v1/tasks/%s/stdin" % s.id, b"abc")
        st, _ = self.r.json("DELETE", "/v1/tasks/%s/stdin" % s.id)  # ^D ^D: line, then EOF
        self.assertEqual(st, 200)
        s.wait_output("CAT_ENDED_4")
        self.assertEqual(s.until_exit()["exit_code"], 0)
        s = self.start({"task": "sleep 30", "tty": {}})
        time.sleep(0.3)
        self.r.request("POST", "/v1/tasks/%s/stdin" % s.id, b"\x03")
        ex = s.until_exit()
        self.assertEqual((ex["exit_code"], ex.get("signal_name")), (130, "SIGINT"))

    def test_signals(self):
        s = self.start({"task": "trap 'echo GOT_USR1' USR1; echo ready $$; "
                                "while :; do sleep 0.05; done"})
        s.wait_output("ready")
        s.wait_output("\n")
        import re
        shell = int(re.search(rb"ready (\d+)", s.output()).group(1))
        st, b = self.post("/v1/tasks/%s/signal" % s.id, {"signal": "SIGUSR1"})
        self.assertEqual((st, b), (200, {"id": s.id, "signal": "SIGUSR1"}))
        s.wait_output("GOT_USR1")
        for bad in ("SIGSEGV", "BOGUS", "", 9, None):
            st, b = self.post("/v1/tasks/%s/signal" % s.id, {"signal": bad})
            self.assertEqual((st, b["code"]), (400, "INVALID_SIGNAL"), bad)
        # STOP/CONT: the task stops making progress, then goes on. Each
        # signal is delivered asynchronously (the shim forwards it to the
        # group): the test waits for the shell's state to change before it
        # sends the next one, rather than racing three signals.
        st, _ = self.post("/v1/tasks/%s/signal" % s.id, {"signal": "STOP"})
        self.assertEqual(st, 200)
        self.assertTrue(wait_state(shell, lambda c: c == "T"), "STOP did not stop the shell")
        st, _ = self.post("/v1/tasks/%s/signal" % s.id, {"signal": "SIGCONT"})
        self.assertEqual(st, 200)
        self.assertTrue(wait_state(shell, lambda c: c != "T"), "CONT did not resume it")
        # the whole process group: both background sleeps die with the shell
        st, _ = self.post("/v1/tasks/%s/signal" % s.id, {"signal": "SIGTERM"})
        ex = s.until_exit()
        self.assertEqual(ex["exit_code"], 143)
        st, b = self.post("/v1/tasks/%s/signal" % s.id, {"signal": "SIGTERM"})
        self.assertEqual((st, b["code"]), (409, "TASK_NOT_RUNNING"))

        # the whole process group gets it: a background subshell too
        s = self.start({"task": "(trap 'echo CHILD_GOT_USR2; exit 0' USR2; "
                                "while :; do sleep 0.05; done) & "
                                "trap 'echo PARENT_GOT_USR2' USR2; echo started; wait; wait"})
        s.wait_output("started")
        time.sleep(0.3)
        self.post("/v1/tasks/%s/signal" % s.id, {"signal": "USR2"})
        s.wait_output("CHILD_GOT_USR2")
        s.wait_output("PARENT_GOT_USR2")
        self.assertEqual(s.until_exit()["exit_code"], 0)

    def test_list(self):
        done = self.r.native({"task": "echo done"})
        done_id = done[0]["data"]["task_id"]
        s = self.start({"task": "sleep 30"})
        st, b = self.r.json("GET", "/v1/tasks")
        self.assertEqual(st, 200)
        byid = {t["id"]: t for t in b["tasks"]}
        self.assertEqual(byid[s.id]["state"], "running")
        self.assertEqual(byid[s.id]["command"], "sleep 30")
        self.assertIsInstance(byid[s.id]["pid"], int)
        self.assertIsNone(byid[s.id]["exit"])
        self.assertIsNone(byid[s.id]["finished_at"])
        self.assertEqual(byid[done_id]["state"], "finished")
        self.assertEqual(byid[done_id]["exit"], {"exit_code": 0, "status": "succeeded"})
        self.assertGreaterEqual(byid[done_id]["finished_at"], byid[done_id]["started_at"])
        st, b = self.r.json("GET", "/v1/tasks?state=running")
        ids = [t["id"] for t in b["tasks"]]
        self.assertIn(s.id, ids)
        self.assertNotIn(done_id, ids)
        st, b = self.r.json("GET", "/v1/tasks?state=finished")
        ids = [t["id"] for t in b["tasks"]]
        self.assertIn(done_id, ids)
        self.assertNotIn(s.id, ids)
        for q in ("?state=bogus", "?foo=1", "?state=running&x=y"):
            st, b = self.r.json("GET", "/v1/tasks" + q)
            self.assertEqual((st, b["code"]), (400, "INVALID_QUERY"), q)
        self.r.request("DELETE", "/v1/tasks/" + s.id)


class CommandInventory(RunnerTest):
    def get(self, query=""):
        st, h, data = self.r.request("GET", "/command" + query)
        self.assertEqual(h.get("cache-control"), "no-store", query)
        return st, json.loads(data)

    def test_inventory(self):
        ids = []
        for i in range(3):
            ev = self.r.execd({"command": "exit %d" % i})
            ids.append(ev[0]["text"])
            time.sleep(0.01)
        bg = self.r.execd({"command": "sleep 30", "background": True})[0]["text"]
        st, b = self.get()
        self.assertEqual(st, 200)
        self.assertEqual(b["pagination"], {"limit": 50})
        sessions = [c["session"] for c in b["commands"]]
        self.assertEqual(sessions[:4], [bg] + ids[::-1])  # newest first
        running = b["commands"][0]
        self.assertEqual(set(running), {"session", "running", "background", "started_at"})
        self.assertTrue(running["running"] and running["background"])
        term = b["commands"][1]
        self.assertEqual(term["exit_code"], 2)
        self.assertEqual(term["error"], "exit status 2")
        self.assertFalse(term["running"] or term["background"])
        self.assertRegex(term["started_at"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        self.assertIn("finished_at", term)
        ok = b["commands"][3]
        self.assertEqual(ok["exit_code"], 0)
        self.assertNotIn("error", ok)
        st, b = self.get("?running=true")
        self.assertEqual([c["session"] for c in b["commands"]], [bg])
        st, b = self.get("?running=false&limit=2")
        self.assertEqual([c["session"] for c in b["commands"]], ids[::-1][:2])
        nxt = b["pagination"]["nextCursor"]
        self.assertEqual(b["pagination"]["limit"], 2)
        st, b = self.get("?running=false&limit=2&cursor=" + nxt)
        self.assertEqual([c["session"] for c in b["commands"]][:1], ids[:1])
        # a cursor belongs to its filter
        st, b = self.get("?running=true&cursor=" + nxt)
        self.assertEqual((st, b["code"], b["message"]), (400, "INVALID_QUERY", "invalid cursor"))
        # sessions, native tasks and PTY shells are not commands
        self.r.native({"task": "true"})
        st, b = self.get("?limit=100")
        self.assertEqual(len(b["commands"]), 4)
        self.r.request("DELETE", "/command?id=" + bg)

    def test_invalid_queries(self):
        cases = {
            "?unknown=value": "invalid query parameter",
            "?limit=1&limit=2": "invalid query parameter",
            "?running=true&running=false": "invalid query parameter",
            "?cursor=one&cursor=two": "invalid query parameter",
            "?running=": "invalid query parameter",
            "?limit=": "invalid query parameter",
            "?running=%20": "invalid query parameter",
            "?running=TRUE": "invalid query parameter",
            "?limit=0": "invalid query parameter",
            "?limit=101": "invalid query parameter",
            "?limit=-1": "invalid query parameter",
            "?limit=1e1": "invalid query parameter",
            "?&running=true": "invalid query parameter",
            "?running=true&": "invalid query parameter",
            "?&&": "invalid query parameter",
            "?running=true&&limit=25": "invalid query parameter",
            "?running=%zz": "invalid query parameter",
            "?cursor=": "invalid cursor",
            "?cursor": "invalid cursor",
            "?cursor=&running=": "invalid cursor",
            "?running=&cursor=": "invalid cursor",
            "?&&cursor=": "invalid cursor",
            "?cursor=opaque": "invalid cursor",
        }
        for q, msg in cases.items():
            st, b = self.get(q)
            self.assertEqual((st, b["code"]), (400, "INVALID_QUERY"), q)
            self.assertTrue(b["message"].startswith(msg), (q, b["message"]))
        st, b = self.get("?limit=100&running=false")
        self.assertEqual(st, 200)
        self.assertEqual(b["pagination"]["limit"], 100)


if __name__ == "__main__":
    unittest.main()
