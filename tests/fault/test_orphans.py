"""10,000 orphans from one task (2,000 in check): every one is reaped, no
zombie is left, the runner's fds do not grow. Orphans of a task are
reparented to its shim (a child subreaper); orphans of the box's main
process go to the runner itself when it is PID 1 — both are exercised, and
so are orphans still alive when their task ends (killed with it when the request says
kill_tree_on_exit, else kept under the shim until stopped: issue 46)."""
import json
import os
import shutil
import signal
import time
import unittest

from faultlib import (alive, descendants, fd_count, record, scale, wait_for, zombies_below)
from harness import Runner

ORPHANS = scale(2000, 10000)
LINGERING = 300  # orphans still sleeping when their task exits


class TaskOrphans(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.r = Runner()
        cls.pid = cls.r.host_pid()

    @classmethod
    def tearDownClass(cls):
        cls.r.close()

    def test_1_short_lived_orphans(self):
        self.assertEqual(self.r.request("GET", "/ping")[0], 200)
        fds0 = fd_count(self.pid)
        # ( : & ) forks a subshell that backgrounds ':' and exits at once:
        # the background child is an orphan. Count them as they are made.
        cmd = ("n=0; for i in $(seq 1 %d); do ( : & ); n=$((n+1)); done; echo made $n"
               % ORPHANS)
        t0 = time.monotonic()
        ev = self.r.execd({"command": cmd}, timeout=600)
        dt = time.monotonic() - t0
        self.assertEqual(ev[-1]["type"], "execution_complete", ev[-3:])
        out = [e["text"] for e in ev if e["type"] == "stdout"]
        self.assertEqual(out, ["made %d" % ORPHANS])
        self.assertEqual(wait_for(lambda: not zombies_below(self.pid), 10), True,
                         "zombies: %s" % zombies_below(self.pid))
        self.assertEqual(wait_for(lambda: not descendants(self.pid), 10), True,
                         "processes left: %s" % descendants(self.pid))
        self.assertEqual(self.r.request("GET", "/ping")[0], 200)
        # + the finished task's retained spool; connections just closed
        # may take a loop round to be released.
        wait_for(lambda: fd_count(self.pid) <= fds0 + 2, 5, 0.1)
        fds1 = fd_count(self.pid)
        self.assertLessEqual(fds1, fds0 + 2, sorted(os.listdir("/proc/%d/fd" % self.pid)))
        record("orphans_task", orphans=ORPHANS, seconds=round(dt, 1),
               orphans_per_s=round(ORPHANS / dt), fds_before=fds0, fds_after=fds1)

    def test_2_lingering_orphans_killed_with_the_task(self):
        # kill_tree_on_exit: the old default (issue 46 made left-behind processes keep
        # running, test_3).
        cmd = ("for i in $(seq 1 %d); do ( sleep 300 & ); done; echo spawned" % LINGERING)
        s = self.r.curl("-H", "Content-Type: application/json", "-d",
                        json.dumps({"task": cmd, "kill_tree_on_exit": True}),
                        self.r.url + "/v1/tasks", timeout=120)
        self.assertIn(b"spawned", s.stdout)
        self.assertIn(b"event: exit", s.stdout)
        # The task's main process exited: its shim killed the sleeping
        # orphans and reaped them.
        self.assertEqual(wait_for(lambda: not descendants(self.pid), 10), True,
                         "processes left: %d" % len(descendants(self.pid)))
        self.assertFalse(zombies_below(self.pid))

    def test_3_lingering_orphans_stay_under_their_shim_until_stopped(self):
        """The default: the orphans outlive the exit event, all below the task's shim
        (none re-parented to the runner), listed; a DELETE ends them, none is left a
        zombie."""
        cmd = ("for i in $(seq 1 %d); do ( sleep 300 & ); done; echo spawned" % LINGERING)
        s = self.r.curl("-H", "Content-Type: application/json", "-d",
                        json.dumps({"task": cmd}), self.r.url + "/v1/tasks", timeout=120)
        self.assertIn(b"event: exit", s.stdout)
        started = json.loads(s.stdout.split(b"data: ", 1)[1].split(b"\n", 1)[0])
        tid, shim = started["task_id"], started["pid"]
        self.assertEqual(len(descendants(shim)), LINGERING)
        self.assertEqual(len(descendants(self.pid)), LINGERING + 1)  # and the shim
        st, one = self.r.json("GET", "/v1/tasks/" + tid)
        self.assertEqual(one["left_behind"]["count"], LINGERING)
        self.assertEqual(self.r.request("DELETE", "/v1/tasks/" + tid)[0], 202)
        self.assertEqual(wait_for(lambda: not descendants(self.pid), 10), True,
                         "processes left: %d" % len(descendants(self.pid)))
        self.assertFalse(zombies_below(self.pid))


class MainChildOrphans(unittest.TestCase):
    """The runner as PID 1 of a PID namespace with a main process (-- CMD)
    that makes orphans: they are reparented to the runner, which reaps them
    (and counts them: "orphans_reaped" in its exit log)."""

    def test_pid1_reaps_main_child_orphans(self):
        cmd = ("for i in $(seq 1 %d); do ( : & ); done; echo made >&2; exec sleep 300"
               % ORPHANS)
        r = Runner(main=["/bin/sh", "-c", cmd], pid1=True)
        try:
            t0 = time.monotonic()
            made = wait_for(lambda: "made" in r.logtext(), 600, 0.2)
            dt = time.monotonic() - t0
            self.assertTrue(made, "main child did not finish making orphans")
            host = r.host_pid()
            self.assertEqual(wait_for(lambda: not zombies_below(host), 10), True,
                             "zombies below the runner")
            kids = descendants(host)
            self.assertEqual(len(kids), 1, kids)  # just `sleep 300`, the main child
            self.assertEqual(r.request("GET", "/ping")[0], 200)
        finally:
            r.shutdown(signal.SIGTERM)
        reaped = [l.get("orphans_reaped") for l in r.loglines() if l.get("msg") == "exited"]
        shutil.rmtree(r.tmp, ignore_errors=True)
        self.assertTrue(reaped and reaped[0] >= ORPHANS, "orphans_reaped: %s" % reaped)
        record("orphans_pid1", orphans=ORPHANS, orphans_reaped=reaped[0],
               seconds=round(dt, 1))


if __name__ == "__main__":
    unittest.main()
