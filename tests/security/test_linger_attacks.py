"""Left-behind processes from the attacker's side (issue 46 item 1, docs/design/tasks.md#left-behind-processes-kept-supervised):
what a finished command leaves running stays bounded by the box's limits (a spawner that
tries to leave 2,000 processes behind; left-behind sets count against --max-tasks), cannot
escape accounting by re-parenting (double fork, setsid, its own process group: still below
its task's shim, still listed), and cannot survive a stop through the API or a reset while
ignoring SIGTERM and SIGHUP.

The spawner runs as a uid of its own (--task-user 3461) with --limit-nproc 200: RLIMIT_NPROC
counts a uid's processes machine-wide, so uid 1000's would reach into every other test
running on the machine."""
import json
import os
import shutil
import tempfile
import time
import unittest

from harness import Runner

SPAWNER_UID = 3461
NPROC = 200

SPAWNER = r"""
import os, time
made = failed = 0
for i in range(2000):
    try:
        pid = os.fork()
    except OSError:
        failed += 1
        continue
    if pid == 0:
        time.sleep(300)
        os._exit(0)
    made += 1
with open(%r, "w") as f:
    f.write("%%d %%d\n" %% (made, failed))
time.sleep(300)
"""

SURVIVOR = r"""
import os, signal, sys, time
for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    signal.signal(s, signal.SIG_IGN)
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
os.setpgid(0, 0)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    time.sleep(1)
"""


def stat(pid):
    """(ppid, starttime, uid) of a live process, or None (gone or a zombie)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
        with open("/proc/%d/status" % pid) as f:
            uid = [int(l.split()[1]) for l in f if l.startswith("Uid:")][0]
    except OSError:
        return None
    rest = st[st.rindex(")") + 2:].split()
    return None if rest[0] == "Z" else (int(rest[1]), int(rest[19]), uid)


def procs_of_uid(uid):
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            s = stat(int(d))
            if s and s[2] == uid:
                out[int(d)] = s[1]
    return out


def alive(procs):
    return [p for p, start in procs.items() if (stat(p) or (0, None))[1] == start]


def wait_for(pred, timeout, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


class Scratch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="forceai-linger-sec-")
        os.chmod(cls.root, 0o777)

    @classmethod
    def tearDownClass(cls):
        cls.r.close()
        shutil.rmtree(cls.root, ignore_errors=True)

    def ping_ms(self):
        t0 = time.monotonic()
        st, _, _ = self.r.request("GET", "/ping", timeout=10)
        self.assertEqual(st, 200)
        return (time.monotonic() - t0) * 1000


class LeftBehindSpawner(Scratch):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.r = Runner(("--task-user", "%d:%d" % (SPAWNER_UID, SPAWNER_UID), "--limit-nproc",
                        str(NPROC), "--allow-reset", "--landlock-roots", cls.root,
                        "--grace-ms", "500"))

    def test_spawner_left_behind_stays_bounded_and_reset_ends_it(self):
        self.assertEqual(procs_of_uid(SPAWNER_UID), {}, "uid %d is in use" % SPAWNER_UID)
        script = os.path.join(self.root, "spawner.py")
        report = os.path.join(self.root, "spawned")
        with open(script, "w") as f:
            f.write(SPAWNER % report)
        ev = self.r.native({"task": "python3 %s & echo started" % script}, timeout=30)
        self.assertEqual(ev[-1]["event"], "exit", ev)
        tid = ev[0]["data"]["task_id"]
        self.assertTrue(wait_for(lambda: os.path.exists(report), 60), "spawner never finished")
        with open(report) as f:
            made, failed = map(int, f.read().split())
        self.assertGreater(failed, 0, "the spawner was never refused a process")
        self.assertLessEqual(made, NPROC)
        procs = procs_of_uid(SPAWNER_UID)
        self.assertLessEqual(len(procs), NPROC)
        # The runner stays responsive and lists the whole set under its command.
        self.assertLess(max(self.ping_ms() for _ in range(20)), 1000)
        st, one = self.r.json("GET", "/v1/tasks/" + tid)
        self.assertEqual(one["left_behind"]["count"], len(procs), one["left_behind"]["count"])
        self.assertLessEqual(len(one["left_behind"]["pids"]), 64)
        st, body = self.r.json("POST", "/v1/reset")
        self.assertEqual(st, 200, body)
        self.assertEqual(alive(procs), [])
        self.assertEqual(procs_of_uid(SPAWNER_UID), {})
        print("\n    figures: spawner made %d, refused %d; reset %s ms" %
              (made, failed, body.get("duration_ms")))


class Survivors(Scratch):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.r = Runner(("--allow-reset", "--landlock-roots", cls.root, "--grace-ms", "500",
                        "--max-tasks", "3"))

    def survivor(self, name):
        """A task that leaves behind a process that double forks, leaves its session and
        process group and ignores SIGTERM/SIGHUP/SIGINT: (task id, shim pid, its pid)."""
        script = os.path.join(self.root, "survivor.py")
        with open(script, "w") as f:
            f.write(SURVIVOR)
        out = os.path.join(self.root, name)
        ev = self.r.native({"task": "python3 %s %s & echo started" % (script, out)}, timeout=30)
        self.assertEqual(ev[-1]["event"], "exit", ev)
        self.assertTrue(wait_for(lambda: os.path.exists(out), 10))
        with open(out) as f:
            pid = int(f.read())
        return ev[0]["data"]["task_id"], ev[0]["data"]["pid"], pid

    def test_reparented_survivor_is_accounted_and_stopped(self):
        tid, shim, pid = self.survivor("s1")
        # Re-parented to its task's shim (a subreaper), not to the runner or PID 1.
        ppid, start, _ = stat(pid)
        self.assertEqual(ppid, shim)
        st, one = self.r.json("GET", "/v1/tasks/" + tid)
        self.assertIn(pid, one["left_behind"]["pids"], one)
        st, body = self.r.json("DELETE", "/v1/tasks/" + tid)
        self.assertEqual(st, 202, body)
        # SIGTERM is ignored: the grace (500 ms) then SIGKILL.
        self.assertEqual(wait_for(lambda: not alive({pid: start}), 10), True)
        self.assertFalse(alive({shim: None}) and stat(shim))

    def test_survivor_does_not_survive_reset(self):
        tid, shim, pid = self.survivor("s2")
        start = stat(pid)[1]
        st, body = self.r.json("POST", "/v1/reset")
        self.assertEqual(st, 200, body)
        self.assertEqual(alive({pid: start}), [])
        self.assertIsNone(stat(shim))

    def test_left_behind_sets_count_against_max_tasks(self):
        ids = []
        for i in range(3):
            ev = self.r.native({"task": "sleep 300 & echo %d" % i}, timeout=30)
            self.assertEqual(ev[-1]["event"], "exit", ev)
            ids.append(ev[0]["data"]["task_id"])
        st, body = self.r.json("POST", "/v1/tasks", {"task": "sleep 300 & echo 4"})
        self.assertEqual(st, 429, body)
        self.assertEqual(body["code"], "TOO_MANY_TASKS", body)
        st, _ = self.r.json("DELETE", "/v1/tasks/" + ids[0])
        self.assertEqual(st, 202)
        ok = wait_for(lambda: self.r.request("POST", "/v1/tasks", json.dumps(
            {"task": "true"}), timeout=10)[0] == 200, 10, 0.2)
        self.assertTrue(ok, "a slot never came back after the stop")
        for tid in ids[1:]:
            self.r.json("DELETE", "/v1/tasks/" + tid)


if __name__ == "__main__":
    unittest.main()
