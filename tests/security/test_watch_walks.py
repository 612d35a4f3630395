"""A recursive directory watch over a big tree, from the task's side (docs/design/interactive.md
"Directory watch"): the task makes the tree, a client watches it, and the task moves a big
tree in and out of the watched one again and again. Adding thousands of inotify watches, or
forgetting them, in one go held the runner's loop for as long as it took (8,080 directories:
a /ping waited about 95 ms; a 4,000-directory tree moved out: a memmove of the table per
directory); the watch now grows on the files layer's slice scheduler and forgets in one pass.
Each test judges the longest wait of a /ping polled back to back, and checks that the walk
still watches the whole tree (an event from its far end)."""
import json
import os
import socket
import threading
import time
import unittest

from harness import RunnerTest, slow


class SseWatch:
    """GET /files/watch as a raw SSE client, read in a thread of its own."""

    def __init__(self, r, path):
        self.sock = socket.create_connection(("127.0.0.1", r.port), timeout=30)
        hdr = "".join("%s: %s\r\n" % kv for kv in r.headers().items())
        self.sock.sendall(("GET /files/watch?path=%s&recursive=true HTTP/1.1\r\nHost: x\r\n%s\r\n"
                           % (path, hdr)).encode())
        self.data, self.lock, self.open = b"", threading.Lock(), True
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        while self.open:
            try:
                d = self.sock.recv(1 << 16)
            except OSError:
                break
            if not d:
                break
            with self.lock:
                self.data += d

    def events(self):
        with self.lock:
            text = self.data.decode("utf-8", "replace")
        return [json.loads(l[6:]) for l in text.split("\n") if l.startswith("data: {")]

    def wait(self, pred, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for e in self.events():
                if pred(e):
                    return e
            time.sleep(0.02)
        return None

    def close(self):
        self.open = False
        self.sock.close()


class PingProbe:
    """GET /ping back to back, a new connection each: the longest wait while it ran."""

    def __init__(self, r):
        self.r, self.waits, self.bad, self.done = r, [], [], threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()
        time.sleep(0.05)

    def _run(self):
        while not self.done.is_set():
            t = time.monotonic()
            st = self.r.request("GET", "/ping")[0]
            (self.waits if st == 200 else self.bad).append(time.monotonic() - t if st == 200 else st)

    def stop(self):
        self.done.set()
        self.thread.join()
        if self.bad:
            raise AssertionError("/ping answered %s" % self.bad[:5])
        return max(self.waits), len(self.waits)


class WatchWalks(RunnerTest):
    def task(self, command, timeout=120):
        ev = self.r.execd({"command": command, "cwd": self.r.work}, timeout=timeout)
        self.assertEqual(ev[-1]["type"], "execution_complete", ev)

    def far_end_seen(self, w, d, timeout):
        """Touch a file in the tree's last directory until the watch reports it: the walk
        reached it (it may still be on its way when the first touch happens)."""
        end = time.monotonic() + timeout
        n = 0
        while time.monotonic() < end:
            n += 1
            name = "%s/d79/e99/far%d" % (d, n)
            self.task("touch " + name)
            if w.wait(lambda e: e.get("type") == "create" and e.get("path") == name, 0.5):
                return True
        return False

    def test_a_big_recursive_watch_does_not_hold_the_loop(self):
        d = os.path.join(self.r.work, "big")
        self.task("mkdir big && cd big && mkdir d{0..79} && mkdir d{0..79}/e{0..99}")
        probe = PingProbe(self.r)
        t0 = time.monotonic()
        w = SseWatch(self.r, d)
        try:
            st = w.wait(lambda e: e.get("type") == "watching", slow(20))
            self.assertIsNotNone(st, w.events()[:5])
            seen = self.far_end_seen(w, d, slow(30))
            took = time.monotonic() - t0
        finally:
            worst, n = probe.stop()
            w.close()
        self.assertTrue(seen, "no event from the tree's last directory: not all of it watched")
        self.assertFalse([e for e in w.events() if e.get("type") == "overflow"], w.events()[:5])
        # The old walk: one /ping waited as long as the 8,080 watches took (about 95 ms here).
        self.assertLess(worst, 0.04, "a /ping waited %.3f s (%d answered in %.2f s)" %
                        (worst, n, took))

    def test_a_tree_moved_in_and_out_again_and_again_does_not_hold_the_loop(self):
        root = os.path.join(self.r.work, "watched")
        self.task("mkdir watched side && cd side && mkdir big big/d{0..39} && "
                  "mkdir big/d{0..39}/e{0..99}")
        w = SseWatch(self.r, root)
        try:
            self.assertIsNotNone(w.wait(lambda e: e.get("type") == "watching", slow(20)))
            probe = PingProbe(self.r)
            t0 = time.monotonic()
            self.task("for i in 1 2 3 4 5 6 7 8; do mv side/big watched/big; sleep 0.1; "
                      "mv watched/big side/big; sleep 0.1; done; mv side/big watched/big")
            # The last move in is watched whole (its far end reports), and nothing of the moves
            # out is left in the runner's count: a task can do this forever.
            seen = False
            end = time.monotonic() + slow(30)
            n = 0
            while not seen and time.monotonic() < end:
                n += 1
                name = "%s/big/d39/e99/far%d" % (root, n)
                self.task("touch " + name)
                seen = w.wait(lambda e: e.get("type") == "create" and e.get("path") == name, 0.5)
            took = time.monotonic() - t0
            worst, count = probe.stop()
        finally:
            w.close()
        self.assertTrue(seen, "the tree moved in last is not watched to its far end")
        # The old code: each move in walked 4,040 directories in one go, each move out a
        # memmove of the table per directory.
        self.assertLess(worst, 0.04, "a /ping waited %.3f s (%d answered in %.2f s)" %
                        (worst, count, took))


if __name__ == "__main__":
    unittest.main()
