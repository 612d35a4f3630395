"""What the files-API attack tests share (tests/security/test_files_attacks.py,
tests/fault/test_files_race.py): a swapper run as a task, and a /ping
latency sampler."""
import http.client
import os
import threading
import time

# The swapper: exchanges two names with renameat2(RENAME_EXCHANGE) as fast
# as it can until a stop file appears (or a deadline), then writes how many
# swaps it made. Plain Python: glibc has renameat2.
SWAPPER = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
a, b, stop, out, secs = sys.argv[1:6]
a, b = a.encode(), b.encode()
n, end = 0, time.monotonic() + float(secs)
open(out + ".started", "w").close()
while True:
    for _ in range(500):
        if libc.renameat2(-100, a, -100, b, 2) != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
    n += 500
    if os.path.exists(stop) or time.monotonic() > end:
        break
with open(out, "w") as f:
    f.write(str(n))
"""


class Pinger:
    """GET /ping in a loop on its own connection each time; latencies in ms
    (a timeout counts as its full length)."""

    def __init__(self, r, period=0.01, timeout=10):
        self.r, self.period, self.timeout = r, period, timeout
        self.lat, self.bad = [], []
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.r.port, timeout=self.timeout)
                c.request("GET", "/ping", headers=self.r.headers())
                st = c.getresponse().status
                c.close()
                if st != 200:
                    self.bad.append(st)
            except OSError as e:
                self.bad.append(repr(e))
            self.lat.append((time.monotonic() - t0) * 1000)
            self.stop.wait(self.period)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.t.join(self.timeout + 5)

    def figures(self):
        v = sorted(self.lat)
        if not v:
            return {"pings": 0}
        return {"pings": len(v), "p50_ms": round(v[len(v) // 2], 1),
                "p99_ms": round(v[min(len(v) - 1, int(len(v) * 0.99))], 1),
                "max_ms": round(v[-1], 1)}


def start_swapper(r, name, a, b, secs=50):
    """A background task swapping a and b with RENAME_EXCHANGE until
    stop_swapper(); returns (stop file, count file)."""
    script = os.path.join(r.work, "swapper.py")
    if not os.path.exists(script):
        with open(script, "w") as f:
            f.write(SWAPPER)
        os.chmod(script, 0o644)
    stop = os.path.join(r.work, name + ".stop")
    out = os.path.join(r.work, name + ".count")
    ev = r.execd({"command": "exec python3 %s %s %s %s %s %d" % (script, a, b, stop, out, secs),
                  "cwd": r.work, "background": True})
    assert ev and ev[0].get("type") == "init", ev
    deadline = time.monotonic() + 10
    while not os.path.exists(out + ".started"):
        if time.monotonic() > deadline:
            raise AssertionError("the swapper did not start")
        time.sleep(0.02)
    return stop, out


def stop_swapper(stop, out):
    """Stop it; the number of swaps it made (None if it never reported)."""
    open(stop, "w").close()
    deadline = time.monotonic() + 10
    while not os.path.exists(out):
        if time.monotonic() > deadline:
            return None
        time.sleep(0.02)
    time.sleep(0.05)
    with open(out) as f:
        return int(f.read() or 0)
