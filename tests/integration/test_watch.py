"""GET /files/watch (issue 23): a directory's changes as server-sent events,
watched from a client outside the box while a task creates, writes,
renames, chmods and deletes files; recursive watches; the paths rules of the
files API's reads (no procfs, no magic links, only what the task user may
read); the end of the stream when the directory goes away; and a flood (a
task creating 100,000 files) with the runner's RSS and the loop's worst
/ping measured while the client reads, and an overflow event, not unbounded
memory, when the client does not read."""
import json
import os
import shutil
import socket
import threading
import time
import unittest

import harness
from harness import RunnerTest

# The flood at full size where the figures mean something (the plain build);
# under ASan or valgrind a smaller one still exercises every path.
FLOOD = 100000 if harness.rss_is_meaningful() else 10000

FIGURES = os.path.join(os.path.dirname(__file__), "..", "..", "build", "integration", "watch.json")


def figure(name, value):
    harness.record_figure(FIGURES, name, value)


class Watch:
    """An SSE client over a raw socket: events as they come."""

    def __init__(self, r, path, recursive=False, rcvbuf=None):
        self.sock = socket.socket()
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(15)
        self.sock.connect(("127.0.0.1", r.port))
        q = "/files/watch?path=%s%s" % (path, "&recursive=true" if recursive else "")
        hdr = "".join("%s: %s\r\n" % kv for kv in r.headers().items())
        self.sock.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n" % (q, hdr)).encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            d = self.sock.recv(65536)
            if not d:
                break
            self.buf += d
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        self.status = int(head.split()[1]) if head else 0
        self.head = head
        self.raw = b""  # the body after the head (chunked)
        self.events = []
        self._dechunk()

    def _dechunk(self):
        # chunked transfer: size line, data, CRLF
        while True:
            i = self.buf.find(b"\r\n")
            if i < 0:
                return
            size = int(self.buf[:i].split(b";")[0] or b"0", 16)
            if len(self.buf) < i + 2 + size + 2:
                return
            self.raw += self.buf[i + 2:i + 2 + size]
            self.buf = self.buf[i + 2 + size + 2:]
            if size == 0:
                self.raw += b"\0END"
                return
        
    def _parse(self):
        while b"\n\n" in self.raw:
            block, _, self.raw = self.raw.partition(b"\n\n")
            ev = {}
            for line in block.decode().split("\n"):
                if line.startswith("data: "):
                    ev = json.loads(line[6:])
            if ev:
                self.events.append(ev)

    def body(self):
        """Status != 200: the JSON error body (read to its Content-Length:
        the connection stays open, a read past the body would wait out the
        socket's timeout)."""
        m = b""
        want = None
        for line in self.head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                want = int(v.strip())
        while want is None or len(self.buf) + len(m) < want:
            try:
                d = self.sock.recv(65536)
            except socket.timeout:
                break
            if not d:
                break
            m += d
            if m.rstrip().endswith(b"}"):
                break
        data = self.buf + m
        i = data.find(b"{")
        return json.loads(data[i:data.rfind(b"}") + 1])

    def until(self, pred, timeout=15):
        end = time.monotonic() + timeout
        seen = 0
        while True:
            self._parse()
            for e in self.events[seen:]:
                if pred(e):
                    return e
            seen = len(self.events)
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError("no such event; got %r" % self.events[-30:])
            self.sock.settimeout(left)
            try:
                d = self.sock.recv(65536)
            except socket.timeout:
                continue
            if not d:
                self._parse()
                raise AssertionError("stream ended; got %r" % self.events[-30:])
            self.buf += d
            self._dechunk()

    def pump_in_background(self):
        """Read (and parse) continuously in a thread of its own: a client that
        keeps up as fast as it can while the test waits for a task."""
        self.lock = threading.Lock()
        self.pumping = True

        def run():
            self.sock.settimeout(1)
            while self.pumping:
                try:
                    d = self.sock.recv(1 << 20)
                except socket.timeout:
                    continue
                except OSError:
                    break
                if not d:
                    break
                with self.lock:
                    self.buf += d
                    self._dechunk()
                    self._parse()
            self.pumping = False

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def seen(self, pred, timeout):
        """With pump_in_background: wait until an event matches."""
        end = time.monotonic() + timeout
        checked = 0
        while time.monotonic() < end:
            with self.lock:
                new = self.events[checked:]
                checked = len(self.events)
            for e in new:
                if pred(e):
                    return e
            if not self.pumping:
                return None
            time.sleep(0.05)
        return None

    def stop(self):
        self.pumping = False
        self.thread.join()

    def close(self):
        self.sock.close()


class DirectoryWatch(RunnerTest):
    def task(self, command):
        ev = self.r.execd({"command": command, "cwd": self.r.work})
        self.assertEqual(ev[-1]["type"], "execution_complete", ev)
        return ev

    def mkdir(self, name):
        d = os.path.join(self.r.work, name)
        os.mkdir(d)
        os.chown(d, 1000, 1000)
        return d

    def test_events_from_a_task(self):
        d = self.mkdir("w1")
        w = Watch(self.r, d)
        self.assertEqual(w.status, 200, w.head)
        w.until(lambda e: e["type"] == "watching")
        self.task("cd %s && echo one > a && echo two >> a && mv a b && chmod 600 b && "
                  "mkdir sub && rm b" % d)
        w.until(lambda e: e["type"] == "create" and e["path"] == d + "/a" and not e["is_dir"])
        w.until(lambda e: e["type"] == "write" and e["path"] == d + "/a")
        ren = w.until(lambda e: e["type"] == "rename")
        self.assertEqual((ren["path"], ren["old_path"]), (d + "/b", d + "/a"))
        w.until(lambda e: e["type"] == "chmod" and e["path"] == d + "/b")
        w.until(lambda e: e["type"] == "create" and e["path"] == d + "/sub" and e["is_dir"])
        rm = w.until(lambda e: e["type"] == "remove" and e["path"] == d + "/b")
        self.assertIsInstance(rm["time"], int)
        # The directory goes away: a remove of it, then the end.
        shutil.rmtree(d)
        w.until(lambda e: e["type"] == "end")
        w.close()

    def test_recursive(self):
        d = self.mkdir("w2")
        os.makedirs(os.path.join(d, "x", "y"))
        for p in ("x", "x/y"):
            os.chown(os.path.join(d, p), 1000, 1000)
        w = Watch(self.r, d, recursive=True)
        self.assertEqual(w.status, 200)
        st = w.until(lambda e: e["type"] == "watching")
        self.assertEqual(st["dirs"], 3)
        self.task("cd %s && touch x/y/deep && mkdir -p new/inner && sleep 0.3 && "
                  "touch new/inner/f && mv x z && touch z/y/after" % d)
        w.until(lambda e: e["type"] == "create" and e["path"] == d + "/x/y/deep")
        w.until(lambda e: e["type"] == "create" and e["path"] == d + "/new/inner/f")
        w.until(lambda e: e["type"] == "rename" and e.get("old_path") == d + "/x")
        # After the rename, the subtree's names follow.
        w.until(lambda e: e["type"] == "create" and e["path"] == d + "/z/y/after")
        w.close()
        # Not recursive: nothing from below the first level.
        w = Watch(self.r, d)
        w.until(lambda e: e["type"] == "watching")
        self.task("touch %s/z/y/ignored %s/top" % (d, d))
        w.until(lambda e: e["type"] == "create" and e["path"] == d + "/top")
        self.assertFalse([e for e in w.events if e.get("path", "").endswith("ignored")])
        w.close()

    def test_paths_checked_like_reads(self):
        private = os.path.join(self.r.work, "root-only")
        os.mkdir(private, 0o700)
        for path, code in ((private, "PERMISSION_DENIED"),
                           ("/proc/self", "PERMISSION_DENIED"),
                           ("/proc/self/cwd", None),
                           (os.path.join(self.r.work, "missing"), "FILE_NOT_FOUND"),
                           ("relative/path", "INVALID_QUERY")):
            w = Watch(self.r, path)
            with self.subTest(path=path):
                self.assertNotEqual(w.status, 200, path)
                b = w.body()
                if code:
                    self.assertEqual(b["code"], code, b)
            w.close()
        f = os.path.join(self.r.work, "plainfile")
        open(f, "w").close()
        w = Watch(self.r, f)
        self.assertEqual((w.status, w.body()["code"]), (400, "INVALID_FILE"))
        w.close()
        w = Watch(self.r, self.r.work + "&recursive=maybe")
        self.assertEqual(w.status, 400)
        w.close()

    def test_flood_100k_files(self):
        d = self.mkdir("flood")
        pid = self.r.host_pid()
        base = self.r.rss_kib(pid)
        # A client that reads, and one that never does (small buffer).
        reader = Watch(self.r, d)
        reader.until(lambda e: e["type"] == "watching")
        reader.pump_in_background()
        stuck = Watch(self.r, d, rcvbuf=4096)
        peak = [base]
        pings = []
        done = threading.Event()

        def sample():
            while not done.is_set():
                try:
                    peak[0] = max(peak[0], self.r.rss_kib(pid))
                except OSError:
                    return
                t0 = time.monotonic()
                st = self.r.request("GET", "/ping", timeout=10)[0]
                pings.append((time.monotonic() - t0) * 1000 if st == 200 else 1e9)
                time.sleep(0.05)

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        t0 = time.monotonic()
        self.task("cd %s && /usr/bin/python3 -c \"\n"
                  "import os\n"
                  "for i in range(%d):\n"
                  "    os.close(os.open('f%%d' %% i, os.O_CREAT | os.O_WRONLY, 0o644))\n\"" % (d, FLOOD))
        secs = time.monotonic() - t0
        # The reader sees the last file (or an overflow, then the last).
        try:
            # The reader catches up: a marker made after the flood reaches it
            # (made again until it does: one made while its queue was full
            # is dropped, and counted in an overflow event).
            for i in range(30):
                mark = os.path.join(d, "marker%d" % i)
                open(mark, "w").close()
                if reader.seen(lambda e, m=mark: e.get("path") == m, timeout=3):
                    break
                self.assertTrue(reader.pumping, "the runner ended the reading client's stream")
            else:
                self.fail("the reader never caught up")
            reader.stop()
        finally:
            done.set()
            th.join()
        creates = sum(1 for e in reader.events if e["type"] == "create")
        overflows = [e for e in reader.events if e["type"] == "overflow"]
        worst = max(pings)
        figure("watch_flood_%d" % FLOOD, {
            "task_secs": round(secs, 1), "rss_before_kib": base, "rss_peak_kib": peak[0],
            "growth_kib": peak[0] - base, "ping_worst_ms": round(worst, 1),
            "ping_median_ms": round(sorted(pings)[len(pings) // 2], 2), "pings": len(pings),
            "reader_creates": creates, "reader_overflows": len(overflows)})
        if harness.rss_is_meaningful():
            self.assertLess(peak[0] - base, 16 << 10, "the flood grew the runner too much")
            self.assertLess(worst, 500, "the loop stalled under the flood")
        # Every file is reported, or what was lost is counted.
        lost = sum(e.get("dropped", 0) for e in overflows)
        self.assertTrue(creates >= FLOOD or lost, (creates, overflows[:3]))
        # The client that never read: its queue stayed bounded (the RSS
        # above); reading now it finds an overflow count, or the runner has
        # already cut it (no progress for the idle timeout, 15 s).
        stuck.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        last = d + "/f%d" % (FLOOD - 1)
        try:
            ev = stuck.until(lambda e: e["type"] == "overflow" or e.get("path") == last,
                             timeout=60)
            if ev["type"] == "overflow":
                outcome = {"overflow_dropped": ev.get("dropped")}
                self.assertGreater(ev.get("dropped", 0), 0, ev)
            else:  # everything fit in its queue and socket buffers: nothing lost
                outcome = {"all_delivered": len(stuck.events)}
        except AssertionError as e:
            self.assertIn("stream ended", str(e))
            outcome = {"cut_after_events": len(stuck.events)}
        figure("watch_flood_stuck_client", outcome)
        reader.close()
        stuck.close()
        shutil.rmtree(d)


if __name__ == "__main__":
    unittest.main()
