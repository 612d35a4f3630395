"""SIGTERM to the runner with 50 tasks streaming (half execd, half native;
half of them ignore SIGTERM so the grace period's SIGKILL is needed): every
stream receives its terminal event and ends cleanly, every task tree is
gone, and the runner exits within grace + 1 s."""
import signal
import threading
import time
import unittest

from faultlib import ExecdParser, SSEParser, Stream, alive, descendants, record, wait_for
from harness import Runner

TASKS = 50
GRACE_MS = 2000
POLITE = "while :; do echo tick; sleep 0.1; done"
STUBBORN = "trap '' TERM; while :; do echo tick; sleep 0.1; done"


class SigtermWithStreams(unittest.TestCase):
    def test_sigterm_50_streams(self):
        r = Runner(["--grace-ms", str(GRACE_MS), "--max-tasks", "64"])
        try:
            pid = r.host_pid()
            streams = []
            for i in range(TASKS):
                cmd = STUBBORN if i % 4 >= 2 else POLITE
                if i % 2 == 0:
                    s = Stream(r.port, "POST", "/command", {"command": cmd}, timeout=30)
                    s.parser = ExecdParser()
                else:
                    s = Stream(r.port, "POST", "/v1/tasks", {"task": cmd}, timeout=30)
                    s.parser = SSEParser()
                s.api = "execd" if i % 2 == 0 else "native"
                self.assertEqual(s.read_head(), 200)
                streams.append(s)
            # Every task has printed (so it is running, and streaming).
            for s in streams:
                s.events = []
                while not any(self.is_output(s, e) for e in s.events):
                    data = s.read_some()
                    self.assertTrue(data, "stream ended before any output: %s" % s.events)
                    s.events += s.parser.feed(data)
            tree = descendants(pid)
            self.assertGreaterEqual(len(tree), 2 * TASKS)  # shims + shells (+ sleeps)
            results = {}

            def drain(i, s):
                try:
                    while True:
                        data = s.read_some()
                        if not data:
                            break
                        s.events += s.parser.feed(data)
                    results[i] = ("ok" if s.done else "cut", s.events[-1])
                except Exception as e:  # noqa: BLE001 - reported below
                    results[i] = ("error %r" % e, s.events[-1] if s.events else None)

            threads = [threading.Thread(target=drain, args=(i, s)) for i, s in enumerate(streams)]
            for t in threads:
                t.start()
            t0 = time.monotonic()
            r.signal_runner(signal.SIGTERM)
            r.proc.wait(timeout=GRACE_MS / 1000 + 10)
            dt = time.monotonic() - t0
            for t in threads:
                t.join(10)
            self.assertEqual(r.proc.returncode, 0, r.logtext()[-2000:])
            self.assertLess(dt, GRACE_MS / 1000 + 1, "exit took %.2fs" % dt)
            self.assertEqual(len(results), TASKS)
            statuses = {}
            for i, (how, last) in sorted(results.items()):
                self.assertEqual(how, "ok", "stream %d: %s, last event %s" % (i, how, last))
                # Polite tasks die of the SIGTERM, stubborn ones of the
                # SIGKILL at the end of the grace period; nothing else.
                want = "SIGKILL" if i % 4 >= 2 else "SIGTERM"
                if streams[i].api == "execd":
                    self.assertEqual(last["type"], "error", last)  # killed: non-zero
                    kind = last["error"]["traceback"][0]
                    self.assertEqual(kind, "signal: " + want, last)
                else:
                    self.assertEqual(last.get("event"), "exit", last)
                    self.assertEqual(last["data"]["status"], "killed", last)
                    kind = last["data"].get("signal_name", str(last["data"]["exit_code"]))
                    self.assertEqual(kind, want, last)
                statuses[streams[i].api + " " + kind] = statuses.get(streams[i].api + " " + kind,
                                                                     0) + 1
            left = wait_for(lambda: not alive(tree), 2)
            self.assertTrue(left, "task processes left: %s" % alive(tree))
            record("sigterm", tasks=TASKS, grace_ms=GRACE_MS, exit_after_s=round(dt, 2),
                   terminal_events=statuses, processes_before=len(tree))
        finally:
            r.close()

    @staticmethod
    def is_output(s, e):
        return (e.get("type") == "stdout") if s.api == "execd" else (e.get("event") == "stdout")


if __name__ == "__main__":
    unittest.main()
