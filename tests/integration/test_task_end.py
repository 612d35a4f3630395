"""A task whose tree is gone ends when its shim reports the status, before the shim's own
exit (docs/performance.md §7): the status pipe carries the main process's wait status
with "nothing left" (task/spawn.h), the runner writes the exit event from it and only
reaps the shim after. What must hold: the exit code and the death signal as before, the
refusal record still in the exit event, no shim left running or unreaped, and the shims
not counted as the box's orphans."""
import os
import time
import unittest

from harness import Runner, proc_children as children


class TaskEnd(unittest.TestCase):
    def setUp(self):
        self.r = Runner()

    def tearDown(self):
        self.r.close()

    def test_exit_codes_and_signals_unchanged(self):
        for code in (0, 1, 7, 255):
            ev = self.r.execd({"command": "exit %d" % code})
            if code == 0:
                self.assertEqual(ev[-1]["type"], "execution_complete", ev[-1])
            else:
                self.assertEqual(ev[-1]["error"]["evalue"], str(code), ev[-1])
        ev = self.r.execd({"command": "kill -TERM $$"})
        self.assertEqual(ev[-1]["type"], "error", ev[-1])
        self.assertIn("signal", " ".join(ev[-1]["error"]["traceback"]).lower(), ev[-1])

    def test_output_complete_before_the_exit_event(self):
        ev = self.r.execd({"command": "seq 1 20000; echo done >&2"})
        out = [e["text"] for e in ev if e["type"] == "stdout"]
        self.assertEqual(len(out), 20000)
        self.assertEqual(out[-1], "20000")
        self.assertEqual([e["text"] for e in ev if e["type"] == "stderr"], ["done"])
        self.assertEqual(ev[-1]["type"], "execution_complete")

    def test_no_shim_left_and_none_counted_as_orphan(self):
        for _ in range(40):
            self.assertEqual(self.r.execd({"command": "true"})[-1]["type"],
                             "execution_complete")
        # The spare shim (task/prefork.h) is the one child allowed: it is no task's.
        def tasks_left():
            return [c for c in children(self.r.proc.pid) if c[2] != "forceai-spare"]
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and tasks_left():
            time.sleep(0.05)
        self.assertEqual(tasks_left(), [])
        self.assertLessEqual(len(children(self.r.proc.pid)), 1)
        self.r.stop()
        reaped = [l.get("orphans_reaped") for l in self.r.loglines() if l.get("msg") == "exited"]
        self.assertEqual(reaped, [0], "shims counted as the box's orphans")

    def test_refusal_record_still_in_the_exit_event(self):
        if "--insecure-no-confine" in os.environ.get("RUNNER_EXTRA_ARGS", ""):
            self.skipTest("the valgrind stage runs tasks unconfined: nothing is refused")
        ev = self.r.execd({"command": "unshare -U true 2>/dev/null; exit 0"})
        self.assertEqual(ev[-1]["type"], "execution_complete", ev[-1])
        self.assertTrue(ev[-1].get("denied"), ev[-1])


if __name__ == "__main__":
    unittest.main()
