"""PTY sessions under abuse: a WebSocket client that never reads while its
shell writes without end (the shell blocks, the runner's memory does not
grow, and output flows again once the client reads), and 1,000 (5,000
soak) sessions opened and closed (each starts a confined shell) with no fd,
process or zombie left behind."""
import asyncio
import json
import time
import unittest

from faultlib import (INSTRUMENTED, alive, descendants, fd_count, record, scale, status_kib,
                      wait_for, zombies_below)
from harness import Runner
from wsutil import RawWS, websockets, ws_url

CYCLES = scale(1000, 5000)
RSS_GROWTH_LIMIT_KIB = 16 * 1024


class NeverReads(unittest.TestCase):
    def test_client_that_never_reads(self):
        r = Runner()
        try:
            pid = r.host_pid()
            st, b = r.json("POST", "/pty", {"cwd": r.work})
            sid = b["session_id"]
            base = status_kib(pid, "VmRSS")
            ws = RawWS(r.port, "/pty/%s/ws" % sid)
            self.assertEqual(ws.status, 101)
            # Endless output; the client reads nothing from here on.
            ws.send_frame(2, b"\x00yes 0123456789abcdefghijklmnopqrstuvwxyz\n")
            offsets = []
            for _ in range(8):
                time.sleep(0.5)
                offsets.append(r.json("GET", "/pty/" + sid)[1]["output_offset"])
            # The shell is held back: no progress over the last second and a half.
            self.assertEqual(offsets[-1], offsets[-4], offsets)
            self.assertGreater(offsets[-1], 0)
            shell = descendants(pid)
            states = {p: open("/proc/%d/stat" % p).read().rsplit(")", 1)[1].split()[0]
                      for p in shell}
            self.assertNotIn("R", states.values(), states)  # blocked in write, not spinning
            peak = status_kib(pid, "VmHWM")
            if not INSTRUMENTED:
                self.assertLess(peak - base, RSS_GROWTH_LIMIT_KIB,
                                "runner grew from %d to %d KiB" % (base, peak))
            # The client reads again: output flows again.
            ws.sock.settimeout(10)
            got = 0
            while got < 8 << 20:
                op, payload = ws.recv_frame()
                got += len(payload)
            later = r.json("GET", "/pty/" + sid)[1]["output_offset"]
            self.assertGreater(later, offsets[-1])
            record("pty_never_reads", stalled_at_bytes=offsets[-1], rss_base_kib=base,
                   rss_peak_kib=peak, resumed_bytes=got)
            ws.close()
            self.assertEqual(r.request("DELETE", "/pty/" + sid)[0], 200)
            wait_for(lambda: not alive(shell), 10)
            self.assertEqual(alive(shell), [])
        finally:
            r.close()


class Cycles(unittest.TestCase):
    def test_open_close_cycles(self):
        # Finished shells' records expire after a second, so their spools go.
        r = Runner(["--retain-ms", "1000"])
        try:
            pid = r.host_pid()
            fds0 = fd_count(pid)

            async def cycle(i):
                st, b = r.json("POST", "/pty", {"cwd": r.work})
                assert st == 201, b
                sid = b["session_id"]
                async with websockets.connect(ws_url(r, "/pty/%s/ws%s" % (
                        sid, "?pty=0" if i % 2 else ""))) as ws:
                    while True:
                        f = await asyncio.wait_for(ws.recv(), 20)
                        if isinstance(f, str) and json.loads(f)["type"] == "connected":
                            break
                    if i % 3 == 0:
                        await ws.send(b"\x00exit\n")  # some shells end themselves
                st = r.request("DELETE", "/pty/" + sid)[0]
                assert st == 200, st

            async def all_cycles():
                for i in range(CYCLES):
                    await cycle(i)
            t0 = time.monotonic()
            asyncio.run(all_cycles())
            took = time.monotonic() - t0
            peak_fds = fd_count(pid)
            self.assertTrue(wait_for(lambda: not descendants(pid), 15),
                            "left below the runner: %r" % descendants(pid))
            self.assertEqual(zombies_below(pid), [])
            back = wait_for(lambda: fd_count(pid) <= fds0, 15)
            self.assertTrue(back, "fds %d -> %d" % (fds0, fd_count(pid)))
            self.assertEqual(r.request("GET", "/ping")[0], 200)
            record("pty_cycles", cycles=CYCLES, seconds=round(took, 1),
                   per_cycle_ms=round(took * 1000 / CYCLES, 1), fds_before=fds0,
                   fds_peak=peak_fds, fds_after=fd_count(pid),
                   rss_kib=status_kib(pid, "VmRSS"))
        finally:
            r.close()


if __name__ == "__main__":
    unittest.main()
