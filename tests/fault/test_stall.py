"""A client that stops reading while its task writes 10 GiB (1 GiB in check):
the runner's RSS stays under 32 MiB, the task blocks in write(), and it goes
on when the client resumes (every byte arrives, in order) or ends when it is
cancelled (DELETE) — the stream then gets its terminal event and the task's
tree is gone."""
import json
import time
import unittest

from faultlib import (INSTRUMENTED, SOAK, ExecdParser, SSEParser, Stream, alive, descendants,
                      record, scale, status_kib, wait_for)
from harness import Runner

GIB = 1 << 30
SIZE = scale(1 * GIB, 10 * GIB)
RSS_LIMIT_KIB = 32 * 1024
PATTERN = b"0123456789abcdefghijklmnopqrstuvwxyz\n"  # what `yes` repeats
TASK = "yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c %d"
STALL_S = 3.0


class Expect:
    """Checks a byte stream against the repeated PATTERN."""

    def __init__(self):
        self.off = 0
        self.big = PATTERN * (2 * 65536 // len(PATTERN) + 4)

    def check(self, data):
        p = len(PATTERN)
        pos = 0
        while pos < len(data):
            n = min(len(data) - pos, 65536)
            s = self.off % p
            if data[pos:pos + n] != self.big[s:s + n]:
                raise AssertionError("output differs at byte %d" % self.off)
            self.off += n
            pos += n


class Stall(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.r = Runner()
        cls.pid = cls.r.host_pid()

    @classmethod
    def tearDownClass(cls):
        cls.r.close()

    def peak_rss(self):
        return status_kib(self.pid, "VmHWM")

    def task_state(self, tid):
        st, body = self.r.json("GET", "/v1/tasks/" + tid)
        self.assertEqual(st, 200, body)
        return body

    def writer_pids(self):
        """The task's processes (below the runner: shim, shell, yes, head)."""
        return descendants(self.pid)

    def stall_and_check_blocked(self, progress):
        """Stop reading; the task must stop too, with memory bounded."""
        time.sleep(1.0)  # the window and the socket buffers fill
        p1 = progress()
        time.sleep(STALL_S)
        p2 = progress()
        self.assertEqual(p1, p2, "the task kept writing while its client did not read")
        return p2

    def test_1_native_resume(self):
        s = Stream(self.r.port, "POST", "/v1/tasks", {"task": TASK % SIZE})
        self.assertEqual(s.read_head(), 200)
        parser, exp = SSEParser(), Expect()
        tid = None
        while tid is None:
            for ev in parser.feed(s.read_some()):
                if ev.get("event") == "started":
                    tid = ev["data"]["task_id"]
        tree = self.writer_pids()
        t0 = time.monotonic()
        # Stall: nobody reads s.sock.
        stalled_at = self.stall_and_check_blocked(
            lambda: self.task_state(tid)["last_event_id"])
        rss_stalled = status_kib(self.pid, "VmRSS")
        # Resume: everything arrives, in order, then the terminal event.
        terminal = None
        t1 = time.monotonic()
        while terminal is None:
            data = s.read_some()
            if not data:
                break
            for ev in parser.feed(data):
                if ev.get("event") == "stdout":
                    exp.check(ev["data"]["text"].encode())
                elif ev.get("event") == "exit":
                    terminal = ev["data"]
        t2 = time.monotonic()
        self.assertEqual(s.read_all(), b"")
        self.assertTrue(s.done, "stream did not end cleanly")
        s.close()
        self.assertIsNotNone(terminal, "no terminal event")
        self.assertEqual(terminal["exit_code"], 0, terminal)
        self.assertEqual(exp.off, SIZE, "bytes lost")
        self.assertEqual(wait_for(lambda: not alive(tree), 5), True, "task tree left behind")
        peak = self.peak_rss()
        if not INSTRUMENTED:
            self.assertLess(peak, RSS_LIMIT_KIB, "runner peak RSS %d KiB" % peak)
        record("stall_resume", bytes=SIZE, stalled_s=round(t1 - t0, 1),
               stalled_at_event=stalled_at, rss_stalled_kib=rss_stalled,
               runner_peak_rss_kib=peak, resume_to_end_s=round(t2 - t1, 1),
               mib_per_s=round(SIZE / (1 << 20) / max(t2 - t1, 1e-3), 1))

    def test_2_execd_cancel(self):
        s = Stream(self.r.port, "POST", "/command", {"command": TASK % SIZE})
        self.assertEqual(s.read_head(), 200)
        parser = ExecdParser()
        cid = None
        while cid is None:
            for ev in parser.feed(s.read_some()):
                if ev["type"] == "init":
                    cid = ev["text"]
        tree = self.writer_pids()
        self.assertTrue(tree)

        def progress():
            st, _, body = self.r.request("GET", "/command/status/" + cid)
            self.assertEqual(st, 200)
            self.assertTrue(json.loads(body)["running"])
            # Logs tail cursor: the output offset the runner has reached.
            st, h, _ = self.r.request("GET", "/command/%s/logs?cursor=%d" % (cid, 1 << 62))
            return int(h["execd-commands-tail-cursor"])

        stalled_at = self.stall_and_check_blocked(progress)
        t0 = time.monotonic()
        st, _, _ = self.r.request("DELETE", "/command?id=" + cid)
        self.assertEqual(st, 200)
        # Resume reading: a prefix of the output, then the terminal event.
        parts = []
        terminal = None
        while terminal is None:
            data = s.read_some()
            if not data:
                break
            for ev in parser.feed(data):
                if ev["type"] in ("stdout", "stderr"):
                    parts.append(ev["text"].encode() + b"\n")
                elif ev["type"] in ("error", "execution_complete"):
                    terminal = ev
        t1 = time.monotonic()
        got = b"".join(parts)
        self.assertEqual(s.read_all(), b"")
        s.close()
        self.assertIsNotNone(terminal, "no terminal event after DELETE")
        self.assertEqual(terminal["type"], "error", terminal)
        # Everything received is the task's output, in order (lines are
        # whole pattern lines; the last one may have been cut by the kill).
        exp = Expect()
        exp.check(got[:len(got) - len(got) % len(PATTERN)])
        self.assertEqual(wait_for(lambda: not alive(tree), 5), True, "task tree left behind")
        st, _, body = self.r.request("GET", "/command/status/" + cid)
        self.assertFalse(json.loads(body)["running"])
        peak = self.peak_rss()
        if not INSTRUMENTED:
            self.assertLess(peak, RSS_LIMIT_KIB, "runner peak RSS %d KiB" % peak)
        record("stall_cancel", stalled_at_offset=stalled_at, received_before_end=len(got),
               cancel_to_terminal_s=round(t1 - t0, 2), runner_peak_rss_kib=peak)


if __name__ == "__main__":
    unittest.main()
