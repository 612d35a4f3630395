"""Lifecycle hooks as OpenSandbox's execd runs them (OSEP-0020, issue 36,
docs/design/profiles.md#lifecycle-hooks-osep-0020-prestart-and-periodic): preStart before the box takes tasks (and before its
main process), with its timeout and failure policy, its result in the
startup status file (--lifecycle-startup-status-file) and on /ready;
periodic hooks on their interval, never overlapping; both run as tasks
(uid 1000, confined), listed in GET /v1/tasks, without the EXECD_ENVS file's
variables; reset and shutdown end them. Configuration from
OPEN_SANDBOX_LIFECYCLE (JSON), EXECD_LIFECYCLE_CONFIG / $HOME/.execd/
lifecycle.toml (TOML), or the runtime init request."""
import json
import os
import subprocess
import time
import unittest

from harness import Runner, slow

PY = "/usr/bin/python3"


def wait_for(pred, timeout=15, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def procs_with(marker):
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def sleeper(marker):
    """A hook that never ends, findable by its marker (pgrep -f)."""
    return [PY, "-c", "import time; time.sleep(1000)", marker]


class Hooks(unittest.TestCase):
    def setUp(self):
        self.tmpdir = "/tmp/forceai-lc-%d-%s" % (os.getpid(), os.urandom(3).hex())
        os.makedirs(self.tmpdir)
        # Hooks (the task user) write here; the configuration root writes here must stay
        # root's (sticky: docs/design/security.md#trusted-input-only-from-places-no-task-can-write).
        os.chmod(self.tmpdir, 0o1777)

    def start(self, lifecycle=None, args=(), env=None, toml=None, main=None):
        if "--allow-reset" in args:
            # A reset restores the writable roots: a scratch directory of its
            # own (never the host's /tmp, nor the status file's directory).
            roots = os.path.join(self.tmpdir, "roots")
            os.mkdir(roots)
            os.chmod(roots, 0o1777)
            args = list(args) + ["--landlock-roots", roots]
        self.status = os.path.join(self.tmpdir, "status.json")
        e = dict(env or {})
        if lifecycle is not None:
            e["OPEN_SANDBOX_LIFECYCLE"] = json.dumps(lifecycle)
        if toml is not None:
            path = os.path.join(self.tmpdir, "lifecycle.toml")
            with open(path, "w") as f:
                f.write(toml)
            e["EXECD_LIFECYCLE_CONFIG"] = path
        self.r = Runner(["--lifecycle-startup-status-file", self.status] + list(args), env=e,
                        main=main)
        return self.r

    def tearDown(self):
        r = getattr(self, "r", None)
        if r:
            rc = r.stop()
            log = r.logtext()
            r.close()
            if rc != 0:
                raise AssertionError("runner exited %s; log:\n%s" % (rc, log[-3000:]))
        subprocess.run(["rm", "-rf", getattr(self, "tmpdir", "/nonexistent")])

    def status_json(self):
        try:
            with open(self.status) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def f(self, name):
        return os.path.join(self.tmpdir, name)

    def test_prestart_runs_before_ready(self):
        mark = self.f("pre")
        r = self.start({"preStart": {"command": ["/bin/sh", "-c",
                                                 "sleep 1; id -u > %s" % mark],
                                     "timeoutSeconds": 20}})
        st, b = r.json("GET", "/ready")
        self.assertEqual((st, b["status"], b["code"]), (503, "starting", "STARTING"), b)
        st, b = r.json("POST", "/command", {"command": "true"})
        self.assertEqual((st, b["code"]), (503, "STARTING"), b)
        self.assertEqual(self.status_json()["status"], "running")
        self.assertTrue(wait_for(lambda: r.json("GET", "/ready")[0] == 200))
        with open(mark) as fh:
            self.assertEqual(fh.read().strip(), "1000")  # a task's identity
        s = self.status_json()
        self.assertEqual(s["status"], "succeeded", s)
        self.assertEqual((s["preStart"]["last_status"], s["preStart"]["last_exit_code"]),
                         ("succeeded", 0))
        st, b = r.json("GET", "/ready")
        self.assertEqual(b["lifecycle"]["preStart"]["last_status"], "succeeded")
        # Listed among the tasks, named.
        tasks = r.json("GET", "/v1/tasks")[1]["tasks"]
        hooks = [t for t in tasks if t.get("kind") == "lifecycle_hook"]
        self.assertEqual([t["hook"] for t in hooks], ["preStart"])
        self.assertEqual(hooks[0]["status"], "succeeded")

    def test_prestart_runs_before_the_main_process(self):
        pre, main = self.f("pre"), self.f("main")
        self.start({"preStart": {"command": ["/bin/sh", "-c", "sleep 1; date +%%s%%N > %s" % pre]}},
                   main=["/bin/sh", "-c",
                         "trap 'exit 0' TERM; date +%%s%%N > %s; sleep 600 & wait" % main])
        self.assertTrue(wait_for(lambda: os.path.exists(main) and os.path.getsize(main)))
        with open(pre) as a, open(main) as b:
            self.assertLess(int(a.read()), int(b.read()))

    def test_failing_prestart_abort_keeps_the_box_closed(self):
        r = self.start({"preStart": {"command": "exit 3"}})
        self.assertTrue(wait_for(lambda: (self.status_json() or {}).get("status") == "failed"))
        st, b = r.json("GET", "/ready")
        self.assertEqual((st, b["status"], b["code"]), (503, "failed", "PRESTART_FAILED"), b)
        self.assertIn("exit code 3", b["message"])
        st, b = r.json("POST", "/v1/tasks", {"task": "true"})
        self.assertEqual((st, b["code"]), (503, "PRESTART_FAILED"))
        self.assertEqual(self.status_json()["preStart"]["last_exit_code"], 3)

    def test_failing_prestart_continue_opens_the_box(self):
        r = self.start({"preStart": {"command": "exit 4", "failurePolicy": "Continue"}})
        self.assertTrue(wait_for(lambda: r.json("GET", "/ready")[0] == 200))
        s = self.status_json()
        self.assertEqual((s["status"], s["preStart"]["last_exit_code"]), ("failed_continued", 4))

    def test_prestart_that_never_ends_is_killed_at_its_timeout(self):
        marker = "lc-never-%s" % os.urandom(4).hex()
        t0 = time.monotonic()
        r = self.start({"preStart": {"command": sleeper(marker), "timeoutSeconds": 1}})
        self.assertTrue(wait_for(lambda: (self.status_json() or {}).get("status") == "failed"))
        took = time.monotonic() - t0
        self.assertLess(took, slow(6))
        s = self.status_json()
        self.assertIn("timed out", s["message"])
        self.assertEqual(s["preStart"]["last_status"], "timeout")
        self.assertTrue(wait_for(lambda: not procs_with(marker), timeout=5), procs_with(marker))
        self.assertEqual(r.json("GET", "/ready")[1]["code"], "PRESTART_FAILED")

    def test_periodic_hooks_run_on_their_interval(self):
        out = self.f("ticks")
        r = self.start({"periodic": [{"name": "tick", "intervalSeconds": 1,
                                      "command": "date +%%s >> %s" % out}]})
        self.assertEqual(r.json("GET", "/ready")[0], 200)  # no preStart: ready at once
        time.sleep(3.6)
        with open(out) as fh:
            n = len(fh.read().split())
        self.assertTrue(2 <= n <= 4, n)
        tasks = r.json("GET", "/v1/tasks")[1]["tasks"]
        names = [t["hook"] for t in tasks if t.get("kind") == "lifecycle_hook"]
        self.assertTrue(len(names) >= 2 and set(names) == {"tick"}, names)
        b = r.json("GET", "/ready")[1]
        self.assertGreaterEqual(b["lifecycle"]["periodic"][0]["runs"], 2)

    def test_periodic_hooks_never_overlap(self):
        marker = "lc-slow-%s" % os.urandom(4).hex()
        r = self.start({"periodic": [{"name": "slow", "intervalSeconds": 1, "timeoutSeconds": 300,
                                      "command": sleeper(marker)}]})
        time.sleep(3.5)
        self.assertEqual(len(procs_with(marker)), 1)
        per = r.json("GET", "/ready")[1]["lifecycle"]["periodic"][0]
        self.assertEqual(per["runs"], 1)
        self.assertGreaterEqual(per["skipped"], 1)

    def test_toml_config_file(self):
        out = self.f("toml-pre")
        r = self.start(toml='[preStart]\ncommand = ["/bin/sh", "-c", "echo toml > %s"]\n'
                            'timeoutSeconds = 10\n\n[[periodic]]\nname = "t"\n'
                            'intervalSeconds = 60\nexec = { command = "true" }\n' % out)
        self.assertTrue(wait_for(lambda: r.json("GET", "/ready")[0] == 200))
        with open(out) as fh:
            self.assertEqual(fh.read(), "toml\n")

    def test_hooks_do_not_get_execd_envs(self):
        envs = self.f("execd.env")
        out = self.f("hookenv")
        os.makedirs(self.f("x"), exist_ok=True)
        with open(envs, "w") as fh:
            fh.write("EXECD_SECRET_VAR='from-file'\n")
        r = self.start({"preStart": {"command": "env > %s" % out}}, env={"EXECD_ENVS": envs})
        self.assertTrue(wait_for(lambda: r.json("GET", "/ready")[0] == 200))
        with open(out) as fh:
            self.assertNotIn("EXECD_SECRET_VAR", fh.read())
        # A command still gets it.
        ev = r.execd({"command": "echo V=$EXECD_SECRET_VAR"})
        self.assertIn("V=from-file", "".join(e.get("text", "") for e in ev))

    def test_reset_and_shutdown_end_hooks(self):
        marker = "lc-reset-%s" % os.urandom(4).hex()
        r = self.start({"periodic": [{"name": "long", "intervalSeconds": 1, "timeoutSeconds": 300,
                                      "command": sleeper(marker)}]},
                       args=["--allow-reset"])
        self.assertTrue(wait_for(lambda: procs_with(marker), timeout=5))
        st, b = r.json("POST", "/v1/reset")
        self.assertEqual(st, 200, b)
        self.assertEqual(procs_with(marker), [])
        # A fresh box: its hooks run again.
        self.assertTrue(wait_for(lambda: procs_with(marker), timeout=5))
        self.assertEqual(r.stop(), 0)
        self.assertEqual(procs_with(marker), [])

    def test_bad_config_stops_the_runner(self):
        tmp = "/tmp/forceai-lc-bad-%d" % os.getpid()
        r = Runner([], env={"OPEN_SANDBOX_LIFECYCLE": '{"preStart": {"command": []}}'},
                   ready=False)
        try:
            self.assertNotEqual(r.proc.wait(10), 0)
            self.assertIn("OPEN_SANDBOX_LIFECYCLE", r.logtext())
            self.assertIn("command", r.logtext())
        finally:
            r.close()
        del tmp

    def test_runtime_init_lifecycle(self):
        mark = self.f("init-pre")
        r = self.start(args=["--runtime-init"])
        st, b = r.json("POST", "/internal/init", {
            "sandboxId": "lc", "generation": 1,
            "lifecycle": {"preStart": {"command": "sleep 1; echo ok > %s" % mark}}})
        self.assertEqual(st, 200, b)
        st, b = r.json("GET", "/ready")
        self.assertEqual((st, b["status"]), (503, "starting"), b)
        self.assertTrue(wait_for(lambda: r.json("GET", "/ready")[0] == 200))
        self.assertTrue(os.path.exists(mark))
        self.assertEqual(self.status_json()["sandboxId"], "lc")

    def test_reset_gives_the_next_binding_the_box_own_hooks(self):
        r = self.start({"preStart": {"command": "true"}},
                       args=["--runtime-init", "--allow-reset"])
        st, b = r.json("POST", "/internal/init", {
            "sandboxId": "t1", "generation": 1,
            "lifecycle": {"periodic": [{"name": "t1-only", "intervalSeconds": 60,
                                        "command": "true"}]}})
        self.assertEqual(st, 200, b)
        b = r.json("GET", "/ready")[1]
        self.assertNotIn("preStart", b["lifecycle"])  # the binding's lifecycle replaced it
        self.assertEqual([p["name"] for p in b["lifecycle"]["periodic"]], ["t1-only"])
        self.assertEqual(r.json("POST", "/v1/reset")[0], 200)
        self.assertEqual(self.status_json()["status"], "not_initialized")
        st, b = r.json("POST", "/internal/init", {"sandboxId": "t2", "generation": 2})
        self.assertEqual(st, 200, b)
        self.assertTrue(wait_for(lambda: r.json("GET", "/ready")[0] == 200))
        b = r.json("GET", "/ready")[1]
        self.assertEqual(b["lifecycle"]["preStart"]["last_status"], "succeeded")
        self.assertEqual(b["lifecycle"]["periodic"], [])


if __name__ == "__main__":
    unittest.main()
