"""Confinement: a C probe run as a task tries to get out; real workloads
still work under the policy; fork bombs and daemons are contained."""
import json
import os
import shutil
import subprocess
import threading
import time
import unittest

from harness import ROOT, Runner, RunnerTest

PROBE_SRC = os.path.join(ROOT, "tests", "security", "probe.c")

EXPECT = {
    "mount": "EPERM", "umount2": "EPERM", "pivot_root": "EPERM", "fsopen": "EPERM",
    "open_tree": "EPERM", "unshare_newuser": "EPERM", "unshare_newns": "EPERM",
    "unshare_newnet": "EPERM", "setns": "EPERM", "clone_newuser": "EPERM", "clone_newpid": "EPERM",
    "clone3": "ENOSYS", "ptrace_attach_runner": "EPERM", "process_vm_readv_runner": "EPERM",
    "read_runner_environ": "EACCES", "read_runner_mem": "EACCES", "bpf": "EPERM",
    "perf_event_open": "EPERM", "userfaultfd": "EPERM", "io_uring_setup": "EPERM",
    "keyctl": "EPERM", "add_key": "EPERM", "request_key": "EPERM", "kexec_load": "EPERM",
    "init_module": "EPERM", "finit_module": "EPERM", "delete_module": "EPERM",
    "open_by_handle_at": "EPERM", "name_to_handle_at": "EPERM", "syslog": "EPERM",
    "reboot": "EPERM", "socket_af_alg": "EPERM", "socket_af_vsock": "EPERM",
    "socket_af_packet": "EPERM", "setuid_0": "EPERM", "setgid_0": "EPERM",
    "setgroups_0": "EPERM", "capset_raise": "EPERM", "mknod_dev_mem": "EPERM",
    "kill_runner": "EPERM", "chown_root_file": "EPERM", "write_outside_roots": "EACCES",
}


def stdout_of(events):
    return "\n".join(e["text"] for e in events if e["type"] == "stdout")


class Probe(unittest.TestCase):
    """The probe as a task of a runner that is real PID 1."""

    @classmethod
    def setUpClass(cls):
        cls.r = Runner(pid1=True, token="probe-secret-token")
        cls.bin = os.path.join(cls.r.work, "probe")
        subprocess.run(["cc", "-O1", "-o", cls.bin, PROBE_SRC], check=True)
        os.chmod(cls.bin, 0o755)
        cls.root_file = os.path.join(cls.r.work, "rootfile")
        with open(cls.root_file, "w") as f:
            f.write("root's\n")
        os.chmod(cls.root_file, 0o644)
        cls.outside = "/var/tmp/forceai-probe-outside-%d" % os.getpid()
        ev = cls.r.execd({"command": "%s --pid 1 --root-file %s --outside %s" %
                          (cls.bin, cls.root_file, cls.outside)})
        cls.lines = [json.loads(e["text"]) for e in ev if e["type"] == "stdout"]
        cls.checks = {l["check"]: l for l in cls.lines if "check" in l}
        cls.status = next((l["status"] for l in cls.lines if "status" in l), None)
        cls.hardening = cls.r.json("GET", "/v1/hardening")[1]

    @classmethod
    def tearDownClass(cls):
        rc = cls.r.stop()
        cls.r.close()
        if os.path.exists(cls.outside):
            os.unlink(cls.outside)
        assert rc == 0, "runner exit %s" % rc

    def test_every_escape_is_refused(self):
        self.assertTrue(any(l.get("done") for l in self.lines), "probe did not finish")
        landlock = self.hardening["landlock"]["abi"] is not None
        for name, errno_name in EXPECT.items():
            with self.subTest(check=name):
                c = self.checks.get(name)
                self.assertIsNotNone(c, "probe did not report " + name)
                if name == "write_outside_roots" and not landlock:
                    self.skipTest("Landlock absent")
                self.assertTrue(c.get("refused"), c)
                if "signal" not in c:
                    self.assertEqual(c.get("errno"), errno_name, c)
        self.assertFalse(os.path.exists(self.outside))
        self.assertEqual(os.stat(self.root_file).st_uid, 0)

    def test_proc_status(self):
        st = self.status
        for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            self.assertEqual(int(st[k], 16), 0, k)
        self.assertEqual(st["NoNewPrivs"], "1")
        self.assertEqual(st["Seccomp"], "2")
        self.assertEqual(st["Uid"].split(), ["1000"] * 4)
        self.assertEqual(st["Gid"].split(), ["1000"] * 4)
        self.assertEqual(st["Groups"].strip(), "")

    def test_hardening_report(self):
        h = self.hardening
        self.assertEqual(h["init_mode"], "pid1")
        self.assertGreater(h["seccomp"]["allowed_syscalls"], 100)
        self.assertTrue(h["no_new_privs"])
        self.assertIn("all dropped", h["capabilities"])
        self.assertEqual((h["task_uid"], h["task_gid"]), (1000, 1000))
        self.assertIn("mode", h["cgroup"])
        log = [l for l in self.r.loglines() if l.get("msg") == "hardening"]
        self.assertEqual(len(log), 1)

    def test_setuid_root_binary_gains_nothing(self):
        suid = os.path.join(self.r.work, "suid-id")
        shutil.copy("/usr/bin/id", suid)
        os.chown(suid, 0, 0)
        os.chmod(suid, 0o4755)
        ev = self.r.execd({"command": suid + " -u; " + suid + " -G"})
        out = stdout_of(ev).split("\n")
        self.assertEqual(out[0], "1000")
        self.assertNotIn("0", out[1].split())

    def test_secrets_not_reachable(self):
        ev = self.r.execd({"command": "env; cat /proc/1/environ; cat /proc/1/cmdline; ls -l /proc/1/fd 2>&1; true"})
        self.assertNotIn("probe-secret-token", json.dumps(ev))


class Workloads(RunnerTest):
    def run_ok(self, cmd, timeout=120000):
        ev = self.r.execd({"command": cmd, "cwd": self.r.work, "timeout": timeout,
                           "envs": {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x",
                                    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x",
                                    "HOME": self.r.work}})
        self.assertEqual(ev[-1]["type"], "execution_complete", json.dumps(ev)[-2000:])
        return stdout_of(ev)

    def test_shell_pipeline(self):
        self.assertEqual(self.run_ok("seq 1 100 | grep 7 | sort -r | head -n 2 | tr '\\n' ,"), "97,87,")

    def test_python_subprocess_threads_sockets(self):
        script = os.path.join(self.r.work, "w.py")
        with open(script, "w") as f:
            f.write("import socket,subprocess,threading\n"
                    "srv=socket.socket(); srv.bind(('127.0.0.1',0)); srv.listen()\n"
                    "port=srv.getsockname()[1]; got=[]\n"
                    "def serve():\n"
                    "    c,_=srv.accept(); got.append(c.recv(10)); c.close()\n"
                    "t=threading.Thread(target=serve); t.start()\n"
                    "s=socket.create_connection(('127.0.0.1',port)); s.sendall(b'ping'); s.close(); t.join()\n"
                    "out=subprocess.run(['echo','sub'],capture_output=True,text=True).stdout.strip()\n"
                    "print(got[0].decode(), out)\n")
        self.assertEqual(self.run_ok("python3 " + script), "ping sub")

    def test_gcc_compile_and_run(self):
        src = os.path.join(self.r.work, "hello.c")
        with open(src, "w") as f:
            f.write('#include <stdio.h>\nint main(void){printf("compiled %d\\n", 6*7);return 0;}\n')
        self.assertEqual(self.run_ok("gcc -O1 -o hello hello.c && ./hello"), "compiled 42")

    def test_git_init_commit(self):
        out = self.run_ok("rm -rf repo && git init -q repo && cd repo && echo hi > f && git add f && "
                          "git commit -qm first && git log --oneline | wc -l")
        self.assertEqual(out.strip(), "1")

    def test_node(self):
        if not shutil.which("node"):
            self.fail("node is not installed (make check installs it)")
        self.assertEqual(self.run_ok("node -e 'console.log([1,2,3].map(x=>x*2).join(\"-\"))'"), "2-4-6")


class Containment(RunnerTest):
    def test_fork_bomb_contained_others_keep_running(self):
        results = {}

        def steady():
            results["steady"] = self.r.execd(
                {"command": "python3 -c 'import time\nfor i in range(40):\n print(i, flush=True); time.sleep(0.1)'"})

        # Every process of the bomb carries this script's path in its
        # command line, so we can count exactly its leftovers.
        bomb_path = os.path.join(self.r.work, "bomb-%d.sh" % os.getpid())
        with open(bomb_path, "w") as f:
            f.write("b(){ b|b& }; b; sleep 100\n")

        def bomb():
            # kill_tree_on_exit: should the bomb's main shell exit early, what it forked
            # goes with it, as the test's last check expects (issue 46 keeps it otherwise).
            results["bomb"] = self.r.execd({"command": "bash " + bomb_path, "timeout": 4000,
                                            "kill_tree_on_exit": True})

        ts = threading.Thread(target=steady)
        ts.start()
        time.sleep(0.5)
        tb = threading.Thread(target=bomb)
        tb.start()
        lat = []
        t_end = time.monotonic() + 3
        while time.monotonic() < t_end:
            t0 = time.monotonic()
            st, _, _ = self.r.request("GET", "/ping", timeout=5)
            lat.append(time.monotonic() - t0)
            self.assertEqual(st, 200)
            time.sleep(0.05)
        tb.join(60)
        ts.join(60)
        self.assertEqual(results["bomb"][-1]["type"], "error")
        self.assertEqual([e["text"] for e in results["steady"] if e["type"] == "stdout"],
                         [str(i) for i in range(40)])
        time.sleep(0.5)
        left = subprocess.run(["pgrep", "-f", bomb_path], capture_output=True, text=True).stdout.strip()
        self.assertEqual(left, "", "fork bomb processes left behind")
        self.assertLess(sorted(lat)[int(len(lat) * 0.99) - 1], 0.5)

    def test_setsid_daemons_die_with_their_task(self):
        marker = "41.4213%d" % os.getpid()
        # kill_tree_on_exit: without it they are left running, supervised (issue 46,
        # test_linger_attacks).
        ev = self.r.execd({"command": "for i in 1 2 3; do setsid sleep %s & done; (setsid sh -c 'sleep %s &' &); echo started" % (marker, marker),
                           "kill_tree_on_exit": True})
        self.assertEqual(ev[-1]["type"], "execution_complete")
        time.sleep(0.3)
        left = subprocess.run(["pgrep", "-f", "sleep " + marker], capture_output=True).stdout
        self.assertEqual(left, b"")

    def test_setsid_daemons_die_when_cancelled(self):
        marker = "17.3205%d" % os.getpid()
        ev = self.r.execd({"command": "setsid sleep %s & sleep %s" % (marker, marker), "background": True})
        cid = ev[0]["text"]
        time.sleep(0.3)
        running = int(subprocess.run(["pgrep", "-fc", "sleep " + marker], capture_output=True, text=True).stdout)
        self.assertGreaterEqual(running, 2)
        self.r.request("DELETE", "/command?id=" + cid)
        time.sleep(1.0)
        self.assertEqual(subprocess.run(["pgrep", "-f", "sleep " + marker], capture_output=True).stdout, b"")


if __name__ == "__main__":
    unittest.main()
