"""1,000 clients (200 in check) that disconnect abruptly at random points of a
streamed task: before the request is complete, right after the head, in the
middle of the stream (reading or stalled), with a reset or a FIN. Afterwards
the runner still serves, every task ran to completion with all of its output
retained (no lost output), its fds are back to the baseline and its memory
within a stated bound, and no zombie is left."""
import json
import random
import socket
import threading
import time
import unittest

from faultlib import (INSTRUMENTED, Stream, fd_count, record, request_bytes, rst_close, scale,
                      status_kib, wait_for, zombies_below)
from harness import Runner

CLIENTS = scale(200, 1000)
CONCURRENCY = 24
RSS_GROWTH_LIMIT_KIB = 16 * 1024  # VmRSS after vs. before
RETAIN_MS = 8000                  # finished records expire (and free their fds) after this

# Tasks: a fast one (output arrives faster than most clients read) and a
# slow one (output over ~1 s); both print numbered lines we can check.
FAST_LINES = 20000
SLOW_LINES = 200
FAST = "seq 1 %d" % FAST_LINES
SLOW = "for i in $(seq 1 %d); do echo $i; case $i in *0) sleep 0.05;; esac; done" % SLOW_LINES


def expected(cmd):
    n = FAST_LINES if cmd == FAST else SLOW_LINES
    return "".join("%d\n" % i for i in range(1, n + 1)).encode()


class Disconnects(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.r = Runner(["--max-tasks", "128", "--retain-count", "4096", "--retain-ms",
                        str(RETAIN_MS)])
        cls.pid = cls.r.host_pid()

    @classmethod
    def tearDownClass(cls):
        cls.r.close()

    def one_client(self, i, rng, results):
        """One client; returns (api, task id or None, cmd, how it left)."""
        api = "execd" if i % 2 == 0 else "native"
        cmd = FAST if rng.random() < 0.5 else SLOW
        path, body = ("/command", {"command": cmd}) if api == "execd" else \
            ("/v1/tasks", {"task": cmd})
        req = request_bytes("POST", path, body)
        how = rng.choice(["partial_request", "after_head", "mid_stream", "mid_stream",
                          "stalled", "near_end"])
        abort = rng.random() < 0.7  # reset (RST) or orderly FIN
        tid = None
        if how == "partial_request":
            s = socket.create_connection(("127.0.0.1", self.r.port), timeout=30)
            s.sendall(req[:rng.randrange(1, len(req))])
            rst_close(s) if abort else s.close()
            results.append((api, None, cmd, how))
            return
        st = Stream(self.r.port, "POST", path, body, timeout=60)
        try:
            self.assertEqual(st.read_head(), 200)
            if how != "after_head":
                # Read until the task id is known, then to the chosen point.
                target = {"mid_stream": rng.randrange(1, 60000), "stalled": 1,
                          "near_end": int(len(expected(cmd)) * 1.3)}[how]
                got = b""
                while len(got) < target or tid is None:
                    piece = st.read_some()
                    if not piece:
                        break
                    got += piece
                    if tid is None:
                        tid = self.find_id(api, got)
                if how == "stalled":
                    time.sleep(rng.uniform(0.1, 1.0))  # not reading: the pipe pauses
        except (EOFError, OSError):
            pass
        st.close(abortive=abort)
        if tid:
            # The task runs on without its client; all its output is kept.
            done = wait_for(lambda: self.output_of(api, tid)[0], 60, 0.1)
            if not done:
                raise AssertionError("task %s (%s) never finished" % (tid, how))
            _, code, out = self.output_of(api, tid)
            if code != 0 or out != expected(cmd):
                raise AssertionError("task %s (%s, %s): exit %s, %d of %d output bytes" % (
                    tid, api, how, code, len(out or b""), len(expected(cmd))))
        results.append((api, tid, cmd, how))

    @staticmethod
    def find_id(api, data):
        if api == "execd":
            frame = data.split(b"\n\n", 1)
            if len(frame) == 2:
                return json.loads(frame[0])["text"]
        else:
            for line in data.split(b"\n"):
                if line.startswith(b"data: ") and b"task_id" in line:
                    return json.loads(line[6:])["task_id"]
        return None

    def output_of(self, api, tid):
        """(finished, exit code, the task's whole output) from the runner's records."""
        if api == "execd":
            st, _, body = self.r.request("GET", "/command/status/" + tid)
            self.assertEqual(st, 200, body)
            s = json.loads(body)
            if s["running"]:
                return False, None, None
            st, _, out = self.r.request("GET", "/command/%s/logs" % tid)
            return True, s["exit_code"], out
        st, _, body = self.r.request("GET", "/v1/tasks/" + tid)
        self.assertEqual(st, 200, body)
        s = json.loads(body)
        if s["running"]:
            return False, None, None
        ev = Stream(self.r.port, "GET", "/v1/tasks/%s/events" % tid)
        ev.read_head()
        data = ev.read_all()
        ev.close()
        out = b""
        for block in data.split(b"\n\n"):
            if b"event: stdout" in block:
                d = json.loads(block.split(b"data: ", 1)[1])
                out += d["text"].encode()
        return True, s["exit_code"], out

    def test_abrupt_disconnects(self):
        self.assertEqual(self.r.request("GET", "/ping")[0], 200)
        fds0 = fd_count(self.pid)
        rss0 = status_kib(self.pid, "VmRSS")
        rng = random.Random(8)
        results, errors = [], []
        t0 = time.monotonic()
        todo = list(range(CLIENTS))
        lock = threading.Lock()

        def worker(seed):
            wrng = random.Random(seed)
            while True:
                with lock:
                    if not todo:
                        return
                    i = todo.pop()
                try:
                    self.one_client(i, wrng, results)
                except Exception as e:  # reported by the main thread
                    errors.append("client %d: %r" % (i, e))

        threads = [threading.Thread(target=worker, args=(rng.random(),))
                   for _ in range(CONCURRENCY)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        t_clients = time.monotonic() - t0
        self.assertEqual(len(results), CLIENTS)
        # The runner still serves, at once.
        self.assertEqual(self.r.request("GET", "/ping", timeout=5)[0], 200)
        peak_fds = fd_count(self.pid)

        self.assertEqual(errors, [])
        checked = sum(1 for r in results if r[1])
        # Then every task must be gone: nothing running, nothing left over.
        self.assertEqual(wait_for(lambda: not zombies_below(self.pid), 10), True, "zombies")
        # Finished records expire; their spool fds must go with them.
        fds_ok = wait_for(lambda: fd_count(self.pid) <= fds0, RETAIN_MS / 1000 + 30, 0.5)
        fds1 = fd_count(self.pid)
        rss1 = status_kib(self.pid, "VmRSS")
        peak = status_kib(self.pid, "VmHWM")
        self.assertTrue(fds_ok, "runner fds %d, baseline %d" % (fds1, fds0))
        if not INSTRUMENTED:
            self.assertLess(rss1 - rss0, RSS_GROWTH_LIMIT_KIB,
                            "RSS grew from %d to %d KiB" % (rss0, rss1))
        ev = self.r.execd({"command": "echo still-serving"})
        self.assertEqual(ev[-1]["type"], "execution_complete")
        hows = {}
        for r in results:
            hows[r[3]] = hows.get(r[3], 0) + 1
        record("disconnects", clients=CLIENTS, concurrency=CONCURRENCY,
               clients_s=round(t_clients, 1), outputs_checked=checked, ways=hows,
               fds_baseline=fds0, fds_peak_seen=peak_fds, fds_after=fds1, rss_before_kib=rss0,
               rss_after_kib=rss1, rss_peak_kib=peak)


if __name__ == "__main__":
    unittest.main()
