"""Code contexts from the attacker's side (issue 35, docs/design/audit.md#secrets-never-enter-it): a
context that reads another context's variables (its interpreter's memory,
environment, descriptors), an ordinary task that reaches into an interpreter
(its /proc/PID/fd, mem, its protocol pipes), a cell flooding output or
sending a huge rich result (the runner's RSS stays bounded), a cell's
process count bounded by the task rlimits (measured without a fork bomb:
the machine's uid-1000 process limit is shared), reset with busy contexts."""
import http.client
import json
import os
import shutil
import tempfile
import threading
import time
import unittest

from harness import Runner, parse_execd, record_figure, rss_is_meaningful

FIGURES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))), "build", "figures", "round3_code.json")
TOKEN = "round3-code-" + os.urandom(6).hex()

# Run in a context or a task: every way into the other interpreter it can find.
PROBE = r'''
import os, json
me = os.getpid()
out = {}
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == me:
        continue
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            cmd = f.read()
    except OSError:
        continue
    if b"FORCEAI_CODE_DRIVER" not in cmd:
        continue
    res = {}
    for what in ("environ", "mem", "maps"):
        try:
            with open("/proc/%s/%s" % (pid, what), "rb") as f:
                res[what] = "read %d bytes" % len(f.read(4096))
        except OSError as e:
            res[what] = "denied: " + e.strerror
    try:
        fds = os.listdir("/proc/%s/fd" % pid)
        res["fd"] = "listed %d" % len(fds)
        opened = []
        for fd in fds:
            try:
                os.close(os.open("/proc/%s/fd/%s" % (pid, fd), os.O_RDWR | os.O_NONBLOCK))
                opened.append(fd)
            except OSError:
                pass
        res["fd_opened"] = opened
    except OSError as e:
        res["fd"] = "denied: " + e.strerror
    out[pid] = res
print("PROBE" + json.dumps(out))
'''


def stream(port, path, body, read=True, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, body=json.dumps(body),
              headers={"Content-Type": "application/json", "X-EXECD-ACCESS-TOKEN": TOKEN})
    r = c.getresponse()
    if not read:
        return c, r
    data = r.read()
    c.close()
    return r.status, (parse_execd(data) if r.status == 200 else json.loads(data))


def probe_result(events):
    text = "".join(e.get("text", "") for e in events if e["type"] == "stdout")
    line = [l for l in text.splitlines() if l.startswith("PROBE")]
    assert line, events
    return json.loads(line[0][5:])


class CodeAttacks(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.r = Runner(("--code-output-max", str(1 << 40)), token=TOKEN)

    @classmethod
    def tearDownClass(cls):
        cls.r.stop()
        cls.r.close()

    def ctx(self):
        st, c = self.r.json("POST", "/code/context", {"language": "python"})
        self.assertEqual(st, 200, c)
        return c

    def run_in(self, cid, code):
        st, ev = stream(self.r.port, "/code", {"context": {"id": cid}, "code": code})
        self.assertEqual(st, 200, ev)
        return ev

    def assert_sealed(self, found, victim_pid):
        self.assertIn(str(victim_pid), found, "the probe did not see the victim: %s" % found)
        res = found[str(victim_pid)]
        for what in ("environ", "mem", "maps"):
            self.assertTrue(res[what].startswith("denied"), (what, res))
        self.assertEqual(res.get("fd_opened", []), [], res)

    def victim(self):
        v = self.ctx()
        ev = self.run_in(v["id"], "secret = 'victim-secret-%s'\nimport os\nos.getpid()"
                         % os.urandom(4).hex())
        pid = int([e for e in ev if e["type"] == "result"][0]["results"]["text/plain"])
        return v, pid

    def test_a_context_cannot_read_another(self):
        v, pid = self.victim()
        a = self.ctx()
        found = probe_result(self.run_in(a["id"], PROBE))
        print("context -> context:", found)
        self.assert_sealed(found, pid)
        # Nor can it name the other's variables: separate processes.
        ev = self.run_in(a["id"], "secret")
        self.assertEqual([e for e in ev if e["type"] == "error"][0]["error"]["ename"],
                         "NameError")

    def test_a_task_cannot_reach_an_interpreter(self):
        v, pid = self.victim()
        path = os.path.join(self.r.work, "probe.py")
        with open(path, "w") as f:
            f.write(PROBE)
        os.chmod(path, 0o644)
        st, ev = stream(self.r.port, "/command", {"command": "python3 " + path})
        found = probe_result(ev)
        print("task -> context:", found)
        self.assert_sealed(found, pid)

    def test_a_flooding_cell_does_not_grow_the_runner(self):
        if not rss_is_meaningful():
            self.skipTest("RSS is meaningless under ASan/valgrind")
        c = self.ctx()
        self.run_in(c["id"], "1")
        rss0 = self.r.rss_kib()
        # A client that reads nothing while the cell prints without end.
        conn, resp = stream(self.r.port, "/code", {"context": {"id": c["id"]},
                                                   "code": "while True:\n    print('x' * 65536)"},
                            read=False)
        time.sleep(4)
        rss1 = self.r.rss_kib()
        # Then it reads 200 MB of it, as fast as it can.
        got = 0
        t0 = time.monotonic()
        while got < 200 << 20:
            chunk = resp.read1(1 << 20)
            if not chunk:
                break
            got += len(chunk)
        rate = got / (time.monotonic() - t0) / 1e6
        rss2 = self.r.rss_kib()
        conn.close()
        record_figure(FIGURES, "flood_rss_growth_kib", max(rss1, rss2) - rss0)
        print("runner RSS %d KiB, after 4 s unread %d, after reading %d MB at %.0f MB/s: %d" %
              (rss0, rss1, got >> 20, rate, rss2))
        self.assertLess(max(rss1, rss2) - rss0, 32 * 1024)
        self.assertGreaterEqual(got, 200 << 20)

    def test_a_huge_result_is_dropped(self):
        if not rss_is_meaningful():
            self.skipTest("RSS is meaningless under ASan/valgrind")
        c = self.ctx()
        rss0 = self.r.rss_kib()
        ev = self.run_in(c["id"], "from IPython.display import display\n"
                         "display({'text/plain': 'x' * 300_000_000}, raw=True)\n'after'")
        rss1 = self.r.rss_kib()
        record_figure(FIGURES, "huge_result_rss_growth_kib", rss1 - rss0)
        print("a 300 MB result: runner RSS %d -> %d KiB" % (rss0, rss1))
        self.assertIn("--code-result-max", json.dumps(ev))
        self.assertEqual([e for e in ev if e["type"] == "result"][-1]["results"]["text/plain"],
                         "'after'")
        self.assertLess(rss1 - rss0, 40 * 1024)

    def test_a_cell_has_the_task_rlimits(self):
        """A fork bomb in a cell is bounded like one in any task. Measured
        without running one (RLIMIT_NPROC counts the whole machine's uid
        1000): the interpreter's limits are a task's, and a bounded burst of
        children is reaped with the cell."""
        c = self.ctx()
        ev = self.run_in(c["id"], "open('/proc/self/limits').read()")
        ctx_limits = [e for e in ev if e["type"] == "result"][0]["results"]["text/plain"]
        st, ev = stream(self.r.port, "/command", {"command": "cat /proc/self/limits"})
        task_limits = "\n".join(e.get("text", "") for e in ev if e["type"] == "stdout")
        for name in ("Max processes", "Max open files", "Max file size", "Max address space"):
            want = [l for l in task_limits.splitlines() if l.startswith(name)]
            self.assertTrue(want, task_limits)
            self.assertIn(" ".join(want[0].split()), " ".join(ctx_limits.replace("\\n", "\n")
                                                               .split()))
        ev = self.run_in(c["id"], "import subprocess\n"
                         "ps = [subprocess.Popen(['sleep', '60']) for _ in range(20)]\n"
                         "len(ps)")
        st, lst = self.r.json("GET", "/v1/tasks")
        pid = [x["pid"] for x in lst["tasks"] if x["id"] == c["task_id"]][0]
        st, _, _ = self.r.request("DELETE", "/code/contexts/" + c["id"])
        self.assertEqual(st, 200)
        deadline = time.monotonic() + 5
        left = None
        while time.monotonic() < deadline:
            left = [p for p in os.listdir("/proc") if p.isdigit() and self.child_of(p, pid)]
            if not left and not os.path.exists("/proc/%d" % pid):
                break
            time.sleep(0.05)
        self.assertEqual(left, [])

    @staticmethod
    def child_of(p, pid):
        try:
            with open("/proc/%s/stat" % p) as f:
                st = f.read()
            return int(st[st.rindex(")") + 2:].split()[1]) == pid
        except (OSError, ValueError):
            return False


class CodeResetBusy(unittest.TestCase):
    def test_reset_with_busy_contexts(self):
        roots = tempfile.mkdtemp(prefix="forceai-code-reset-")
        os.chmod(roots, 0o777)
        r = Runner(("--allow-reset", "--landlock-roots", roots), token=TOKEN)
        try:
            pids, threads = [], []
            for code in ("while True:\n    pass", "while True:\n    print('y' * 1000)",
                         "import time\ntime.sleep(600)"):
                st, c = r.json("POST", "/code/context", {"language": "python", "cwd": roots})
                self.assertEqual(st, 200, c)
                st, lst = r.json("GET", "/v1/tasks")
                pids.append([x["pid"] for x in lst["tasks"] if x["id"] == c["task_id"]][0])
                th = threading.Thread(target=stream, args=(
                    r.port, "/code", {"context": {"id": c["id"]}, "code": code}))
                th.start()
                threads.append(th)
            time.sleep(1.5)
            t0 = time.monotonic()
            st, body = r.json("POST", "/v1/reset")
            took = time.monotonic() - t0
            self.assertEqual(st, 200, body)
            for th in threads:
                th.join(10)
                self.assertFalse(th.is_alive())
            print("reset with 3 busy contexts: %.0f ms" % (took * 1000))
            for pid in pids:
                self.assertFalse(os.path.exists("/proc/%d" % pid), pid)
            st, lst = r.json("GET", "/code/contexts?language=python")
            self.assertEqual((st, lst), (200, []))
        finally:
            r.stop()
            r.close()
            shutil.rmtree(roots, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
