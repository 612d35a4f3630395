#!/usr/bin/env python3
"""Keystroke round trip through a PTY session (issue 13), standalone.

One byte typed, until its echo comes back, side by side in the same run
(interleaved, so load on the machine hits both alike):

  ws      the runner's PTY WebSocket (GET /pty/{id}/ws) with `cat` on the
          terminal: a masked binary frame 0x00+byte from a plain-socket
          client, until the 0x01 frame holding the terminal's echo
  script  util-linux `script` running `cat` on a pty of its own: the byte
          written to script's stdin pipe, until it comes back on its stdout
          (a local relay process, the closest thing to the runner's job)
  pty     a bare pty pair: the byte written to the master, until the line
          discipline's echo is read back (no relay at all)

The echo is the terminal's own (ECHO in canonical mode), so every path
measures transport, not the program. Reports p50/p90/p99 in microseconds
and the ratios ws/script and ws/pty.

  python3 tests/bench/pty_bench.py [--runner build/forceai-runner] [--quick]
                                   [-n 2000] [--json out.json]

Exit status 1 when a measurement could not be made correctly."""
import argparse
import json
import os
import pty
import select
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "tests", "lib")]

import harness  # noqa: E402
from wsutil import RawWS  # noqa: E402


class BenchError(Exception):
    pass


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def read_until(fd_read, want, timeout=5):
    """Read from a file descriptor until `want` (bytes) was seen."""
    got = b""
    deadline = time.perf_counter() + timeout
    while want not in got:
        left = deadline - time.perf_counter()
        if left <= 0 or not select.select([fd_read], [], [], left)[0]:
            raise BenchError("no echo of %r (got %r)" % (want, got[-40:]))
        got += os.read(fd_read, 4096)
    return got


class WsPath:
    def __init__(self, runner):
        st, b = runner.json("POST", "/pty", {"cwd": runner.work, "command": "exec cat"})
        if st != 201:
            raise BenchError("POST /pty: %s %s" % (st, b))
        self.ws = RawWS(runner.port, "/pty/%s/ws" % b["session_id"])
        if self.ws.status != 101:
            raise BenchError("handshake: %s" % self.ws.head)
        self.ws.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:  # up to the connected frame
            op, payload = self.ws.recv_frame()
            if op == 1 and json.loads(payload)["type"] == "connected":
                break

    def once(self, ch):
        t0 = time.perf_counter()
        self.ws.send_frame(2, b"\x00" + ch)
        got = b""
        while ch not in got:
            op, payload = self.ws.recv_frame()
            if op == 2 and payload[:1] == b"\x01":
                got += payload[1:]
        return time.perf_counter() - t0

    def close(self):
        self.ws.close()


class ScriptPath:
    def __init__(self):
        self.p = subprocess.Popen(["script", "-q", "-c", "exec cat", "/dev/null"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        time.sleep(0.3)
        # script's own terminal is the pipe: it only relays.
        self.once(b"#")

    def once(self, ch):
        t0 = time.perf_counter()
        self.p.stdin.write(ch)
        read_until(self.p.stdout.fileno(), ch)
        return time.perf_counter() - t0

    def close(self):
        self.p.kill()
        self.p.wait()


class PtyPath:
    def __init__(self):
        self.m, self.s = pty.openpty()
        self.p = subprocess.Popen(["cat"], stdin=self.s, stdout=self.s, stderr=self.s,
                                  start_new_session=True)

    def once(self, ch):
        t0 = time.perf_counter()
        os.write(self.m, ch)
        read_until(self.m, ch)
        return time.perf_counter() - t0

    def close(self):
        self.p.kill()
        self.p.wait()
        os.close(self.m)
        os.close(self.s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runner", default=os.path.join(ROOT, "build", "forceai-runner"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("-n", type=int, default=None)
    ap.add_argument("--json")
    a = ap.parse_args()
    n = a.n or (100 if a.quick else 2000)
    harness.RUNNER = a.runner
    res = {"params": {"n": n, "quick": a.quick, "runner": a.runner},
           "loadavg_before": os.getloadavg()}
    r = None
    paths = {}
    try:
        r = harness.Runner()
        paths = {"ws": WsPath(r), "script": ScriptPath(), "pty": PtyPath()}
        samples = {k: [] for k in paths}
        letters = b"abcdefghijklmnopqrstuvwxyz"
        for name, p in paths.items():  # warm-up
            for i in range(20):
                p.once(letters[i % 26:i % 26 + 1])
        for i in range(n):
            ch = letters[i % 26:i % 26 + 1]
            order = list(paths.items())
            if i % 2:
                order.reverse()
            for name, p in order:
                samples[name].append(p.once(ch) * 1e6)
            if i % 60 == 59:  # keep cat's line short: the line discipline's buffer
                for p in paths.values():
                    p.once(b"\n")
        for name, v in samples.items():
            res[name] = {"p50_us": statistics.median(v), "p90_us": pct(v, 90),
                         "p99_us": pct(v, 99), "n": len(v)}
        res["ratio_ws_script_p50"] = res["ws"]["p50_us"] / res["script"]["p50_us"]
        res["ratio_ws_pty_p50"] = res["ws"]["p50_us"] / res["pty"]["p50_us"]
        res["rss_kib"] = r.rss_kib()
    except (BenchError, OSError, EOFError) as e:
        print("pty_bench: FAILED: %s" % e, file=sys.stderr)
        return 1
    finally:
        for p in paths.values():
            try:
                p.close()
            except OSError:
                pass
        if r:
            r.close()
    res["loadavg_after"] = os.getloadavg()
    print("keystroke round trip, %d keystrokes each, interleaved (load %.1f):" %
          (n, res["loadavg_before"][0]))
    for name in ("ws", "script", "pty"):
        x = res[name]
        print("  %-7s p50 %7.1f us  p90 %7.1f us  p99 %7.1f us" %
              (name, x["p50_us"], x["p90_us"], x["p99_us"]))
    print("  ratio  ws/script %.2fx   ws/pty %.2fx" % (res["ratio_ws_script_p50"],
                                                      res["ratio_ws_pty_p50"]))
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
