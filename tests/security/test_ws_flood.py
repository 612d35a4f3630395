"""WebSocket ping flood (issue 19, finding 7), from the attacker's side: an
authenticated client opens a PTY session's WebSocket, sends pings (control
frames, {"type":"ping"} messages, unknown message types that are answered
with an error frame) as fast as the socket takes them, and never reads.

Every reply the runner queues counts against the connection's output window;
once the window is full the runner stops reading that client, so TCP pushes
back on the sender instead of the runner buffering the replies. The test
measures the runner's peak RSS during the flood (sampled VmRSS and VmHWM)
and asserts that (a) it stays within a bound far below what the flood would
cost if replies were buffered, (b) the client was pushed back (it could not
send everything), (c) the runner still answers /ping promptly and the
connection still works once the client reads.

Before the fix (wslay queueing each pong with no window check) 48 MiB of
control pings grew the runner by ~60 MiB and every byte was accepted."""
import os
import socket
import struct
import sys
import threading
import time
import unittest

import harness
from harness import ROOT, Runner

sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from wsutil import RawWS  # noqa: E402

FIGURES = os.path.join(ROOT, "build", "security", "ws_flood.json")
FLOOD_BYTES = 48 << 20
# The output window (stream-window, 1 MiB by default) plus the input buffer,
# one message in the decoder, allocator slack: well under this.
MAX_GROWTH_KIB = 16 << 10


def figure(name, value):
    harness.record_figure(FIGURES, name, value)


def masked(opcode, payload):
    key = b"\x11\x22\x33\x44"
    n = len(payload)
    assert n < 126
    body = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return struct.pack("!BB", 0x80 | opcode, 0x80 | n) + key + body


def vm(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


class PingFlood(unittest.TestCase):
    def flood(self, name, frame):
        r = Runner()
        try:
            st, body = r.json("POST", "/pty", {"cwd": r.work})
            self.assertEqual(st, 201, body)
            sid = body["session_id"]
            ws = RawWS(r.port, "/pty/%s/ws" % sid, headers=r.headers())
            self.assertEqual(ws.status, 101, ws.head)
            pid = r.runner_pid()
            time.sleep(0.3)
            base = vm(pid, "VmRSS")
            peak = [base]
            done = threading.Event()

            def sample():
                while not done.is_set():
                    try:
                        peak[0] = max(peak[0], vm(pid, "VmRSS"))
                    except OSError:
                        return
                    time.sleep(0.02)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            blob = frame * ((1 << 20) // len(frame))
            sent = 0
            pushed_back = False
            ws.sock.settimeout(2)
            t0 = time.monotonic()
            try:
                while sent < FLOOD_BYTES:
                    ws.sock.sendall(blob)
                    sent += len(blob)
            except socket.timeout:
                pushed_back = True
            except (BrokenPipeError, ConnectionResetError):
                pass
            secs = time.monotonic() - t0
            time.sleep(0.5)
            done.set()
            sampler.join()
            hwm = vm(pid, "VmHWM")
            t1 = time.monotonic()
            st = r.request("GET", "/ping", timeout=10)[0]
            ping_ms = (time.monotonic() - t1) * 1000
            growth = peak[0] - base
            figure("ws_flood_" + name, {
                "sent_mib": round(sent / 1048576, 1), "pushed_back": pushed_back,
                "secs": round(secs, 2), "rss_before_kib": base,
                "rss_peak_kib": peak[0], "growth_kib": growth, "vm_hwm_kib": hwm,
                "ping_ms_after": round(ping_ms, 1)})
            self.assertEqual(st, 200)
            self.assertLess(ping_ms, 1000)
            self.assertLess(growth, MAX_GROWTH_KIB,
                            "%s flood grew the runner by %d KiB" % (name, growth))
            self.assertTrue(pushed_back,
                            "the runner read all %d MiB of %s without pushing back"
                            % (sent >> 20, name))
            # The connection is still alive: reading drains the replies, and
            # the runner resumes reading the client.
            ws.sock.settimeout(10)
            got = 0
            while got < 256:
                op, _ = ws.recv_frame()
                got += 1
            ws.close()
            r.request("DELETE", "/pty/%s" % sid)
        finally:
            r.stop()

    def test_control_ping_flood(self):
        self.flood("control_ping", masked(0x9, b"p" * 125))

    def test_json_ping_flood(self):
        self.flood("json_ping", masked(0x1, b'{"type":"ping"}'))

    def test_error_reply_flood(self):
        self.flood("error_reply", masked(0x1, b'{"type":"no-such-type"}'))


if __name__ == "__main__":
    unittest.main()
