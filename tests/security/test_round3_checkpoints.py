"""Workspace checkpoints (issue 38) from the attacker's side: a process of the
task uid swaps directories and files for symlinks to a sentinel outside the
writable roots while checkpoints are taken and restored (nothing outside is
read into the store or written); a task fills the store and grows a file
while it is copied (the bound holds); a tenant makes its tree hard to
restore (read-only directories, a file replaced by a directory, a tree too
deep: the restore puts back the rest and names what it left); the next
tenant after a reset cannot reach a checkpoint of the previous one; a task
can neither read the store nor call the API.

The swapping process runs as uid 1000 outside the runner's task engine: a
restore refuses while the runner's own tasks run (409), so only a process it
does not know (podman exec --user, a leftover) can race one."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import unittest

from harness import Runner, assert_clean_exit, record_figure

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "integration"))
from test_profiles import ScratchRoots, open_stream, read_until  # noqa: E402

TASK_UID = 1000
FIGURES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "build", "security-round3-checkpoints.json")

# Swaps, as fast as it goes for `secs` seconds: the directory d and the file
# edit.txt of the workspace with symlinks to the outside directory and its
# sentinel, and back.
SWAPPER = r"""
import os, sys, time
ws, outside, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
end = time.monotonic() + secs
n = 0
while time.monotonic() < end:
    for name, target in (("d", outside), ("edit.txt", outside + "/sentinel"),
                         ("d/f", outside + "/sentinel")):
        p = os.path.join(ws, name)
        try:
            os.rename(p, p + ".swap")
            os.symlink(target, p)
            os.unlink(p)
            os.rename(p + ".swap", p)
        except OSError:
            pass
        try:
            os.symlink(target, p)
        except OSError:
            pass
        n += 1
print(n)
"""


def as_task_uid():
    os.setgroups([])
    os.setgid(TASK_UID)
    os.setuid(TASK_UID)


def snapshot_outside(d):
    out = []
    for dp, dn, fn in os.walk(d):
        for n in sorted(dn + fn):
            p = os.path.join(dp, n)
            st = os.lstat(p)
            data = open(p, "rb").read() if os.path.isfile(p) and not os.path.islink(p) else None
            out.append((p, st.st_mode, st.st_uid, st.st_mtime_ns, data))
    return sorted(out)


class CkAttack(unittest.TestCase):
    args = ()

    def setUp(self):
        self.R = ScratchRoots()
        self.addCleanup(self.R.close)
        R = self.R
        # The outside: root's, not writable by the task uid: only the
        # runner could change it.
        os.chmod(R.outside, 0o755)
        self.secret = b"outside-secret-" + os.urandom(16).hex().encode() + b"\n"
        with open(R.outside + "/sentinel", "wb") as f:
            f.write(self.secret)
        os.chmod(R.outside + "/sentinel", 0o644)
        os.chown(R.outside + "/sentinel", 0, 0)
        os.mkdir(R.ws + "/d")
        os.chown(R.ws + "/d", TASK_UID, TASK_UID)
        R.put(R.ws + "/d/f", b"inside\n", 0o644)
        self.r = Runner(("--landlock-roots", R.roots_arg()) + tuple(self.args))
        self.addCleanup(self.r.close)
        self.addCleanup(self.clean_exit)

    def clean_exit(self):
        assert_clean_exit(self.r)

    def create(self, body=None):
        st, b = self.r.json("POST", "/v1/checkpoints", body if body is not None else {})
        self.assertEqual(st, 201, b)
        return b

    def objects(self):
        d = os.path.join(self.r.state, "checkpoints", "objects")
        return set(os.listdir(d)) if os.path.isdir(d) else set()


class SymlinkRace(CkAttack):
    def test_swaps_during_checkpoints_and_restores_touch_nothing_outside(self):
        R = self.R
        first = self.create({"paths": [R.ws]})
        before = snapshot_outside(R.outside)
        p = subprocess.Popen(["/usr/bin/python3", "-c", SWAPPER, R.ws, R.outside, "6"],
                             preexec_fn=as_task_uid, stdout=subprocess.PIPE)
        self.addCleanup(p.kill)
        restores = incomplete = creates = 0
        end = time.monotonic() + 5
        while time.monotonic() < end:
            st, b = self.r.json("POST", "/v1/checkpoints/%s/restore" % first["id"], {})
            self.assertIn(st, (200, 500), b)
            restores += 1
            incomplete += st == 500
            if st == 500:
                self.assertEqual(b["code"], "RESTORE_INCOMPLETE")
                self.assertTrue(any(c["action"] == "failed" for c in b["changes"]), b)
            st, b = self.r.json("POST", "/v1/checkpoints", {"paths": [R.ws]})
            self.assertEqual(st, 201, b)
            creates += 1
            st, b = self.r.json("GET", "/v1/checkpoints/%s/diff?patch=1" % first["id"])
            self.assertEqual(st, 200, b)
            self.assertNotIn(self.secret.decode().strip(), json.dumps(b))
        swaps = int(p.communicate(timeout=20)[0])
        self.assertEqual(snapshot_outside(R.outside), before, "the runner wrote outside the roots")
        self.assertNotIn(hashlib.sha256(self.secret).hexdigest(), self.objects(),
                         "the sentinel outside the roots was read into the store")
        # once the swapper is gone, a restore is complete and exact
        st, b = self.r.json("POST", "/v1/checkpoints/%s/restore" % first["id"], {})
        self.assertEqual(st, 200, b)
        with open(R.ws + "/d/f", "rb") as f:
            self.assertEqual(f.read(), b"inside\n")
        self.assertFalse(os.path.islink(R.ws + "/d"))
        record_figure(FIGURES, "symlink_race", {"swaps": swaps, "restores": restores,
                                                "incomplete": incomplete, "checkpoints": creates})


class TaskExitDiffRace(CkAttack):
    """A task with "changes": true (docs/design/checkpoints.md#checkpoints-undo-for-agents) races its own exit-time diff: it leaves
    a swapper behind (and another uid-1000 process swaps too) that turns d, d/f and edit.txt
    into symlinks to the outside directory and its sentinel while the runner takes the diff.
    Nothing outside the roots may be read into the report or the store: no path under the
    outside directory (its sentinel) is named, the secret's content is never stored."""

    def test_swaps_during_the_exit_diff_read_nothing_outside(self):
        R = self.R
        before = snapshot_outside(R.outside)
        swapper = R.tmp + "/swapper.py"
        R.put(swapper, SWAPPER.encode(), 0o644)
        p = subprocess.Popen(["/usr/bin/python3", "-c", SWAPPER, R.ws, R.outside, "12"],
                             preexec_fn=as_task_uid, stdout=subprocess.PIPE)
        self.addCleanup(p.kill)
        runs = reported = 0
        end = time.monotonic() + 8
        while time.monotonic() < end:
            ev = self.r.native({"task": "(setsid python3 %s %s %s 2 >/dev/null 2>&1 &) ; "
                                        "echo x > %s/made-%d; sleep 0.05" %
                                        (swapper, R.ws, R.outside, R.ws, runs),
                                "changes": True, "kill_tree_on_exit": True}, timeout=120)
            runs += 1
            self.assertEqual(ev[-1].get("event"), "exit", ev[-1:])
            x = ev[-1]["data"]
            self.assertIn("changes", x, "no exit.changes: %s" % x)
            ch = x["changes"]
            if "error" in ch:
                continue
            reported += 1
            text = json.dumps(ch)
            self.assertNotIn(self.secret.decode().strip(), text)
            for k in ("added", "modified", "deleted"):
                for path in ch[k]:
                    self.assertFalse(path.startswith(R.outside), path)
                    self.assertNotIn("sentinel", path, "the diff followed a symlink: %s" % path)
                    self.assertTrue(any(path.startswith(root + "/") for root in
                                        (R.ws, R.tmp, R.home)), path)
        swaps = int(p.communicate(timeout=30)[0])
        time.sleep(2.5)  # the tasks' swappers end
        self.assertGreater(reported, 0)
        self.assertEqual(snapshot_outside(R.outside), before, "the runner wrote outside the roots")
        self.assertNotIn(hashlib.sha256(self.secret).hexdigest(), self.objects(),
                         "the sentinel outside the roots was read into the store")
        record_figure(FIGURES, "task_exit_diff_race", {"swaps": swaps, "tasks": runs,
                                                       "reported": reported})


class StoreBound(CkAttack):
    args = ("--checkpoint-max-bytes", str(8 << 20))

    def test_filling_and_growing_files_keep_the_bound(self):
        R = self.R
        # a file the task grows while it is copied
        grower = subprocess.Popen(
            ["/usr/bin/python3", "-c",
             "import os,time\nf=open(%r,'ab')\nend=time.monotonic()+4\n"
             "while time.monotonic()<end:\n f.write(os.urandom(1<<16)); f.flush()\n" %
             (R.ws + "/grows")], preexec_fn=as_task_uid)
        self.addCleanup(grower.kill)
        results = []
        end = time.monotonic() + 4
        while time.monotonic() < end:
            st, b = self.r.json("POST", "/v1/checkpoints", {"paths": [R.ws]})
            self.assertIn(st, (201, 507), b)
            results.append(st)
            if st == 507:
                self.assertEqual(b["code"], "INSUFFICIENT_STORAGE")
                self.assertIn("--checkpoint-max-bytes", b["message"])
        grower.wait(timeout=10)
        st, lst = self.r.json("GET", "/v1/checkpoints")
        d = os.path.join(self.r.state, "checkpoints", "objects")
        on_disk = sum(os.lstat(os.path.join(d, n)).st_size for n in os.listdir(d))
        self.assertLessEqual(on_disk, 8 << 20)
        self.assertEqual(on_disk, lst["store_bytes"])
        self.assertIn(507, results)
        # the oldest is never dropped to make room
        ids = [c["id"] for c in lst["checkpoints"]]
        self.assertEqual(len(ids), results.count(201))
        record_figure(FIGURES, "store_bound", {"attempts": len(results), "refused_507":
                                               results.count(507), "store_bytes": on_disk})


class Unrestorable(CkAttack):
    def test_readonly_dirs_and_type_swaps_are_restored(self):
        R = self.R
        b = self.create({"paths": [R.ws]})
        # as the task uid: a read-only dir with an added file, a file
        # replaced by a directory, a directory replaced by a file
        script = (
            "import os\nws=%r\n"
            "open(ws+'/d/added','w').write('x')\nos.chmod(ws+'/d',0o555)\n"
            "os.unlink(ws+'/edit.txt') if os.path.exists(ws+'/edit.txt') else None\n"
            "os.mkdir(ws+'/edit.txt'); open(ws+'/edit.txt/in','w').write('y')\n"
            "os.chmod(ws+'/edit.txt',0o500)\n"
            "import shutil; shutil.rmtree(ws+'/src', ignore_errors=True)\n"
            "open(ws+'/src','w').write('z')\n" % R.ws)
        subprocess.run(["/usr/bin/python3", "-c", script], preexec_fn=as_task_uid, check=True)
        st, res = self.r.json("POST", "/v1/checkpoints/%s/restore" % b["id"], {})
        self.assertEqual(st, 200, res)
        self.assertFalse(os.path.exists(R.ws + "/d/added"))
        self.assertEqual(os.stat(R.ws + "/d").st_mode & 0o777, 0o755)
        self.assertEqual(open(R.ws + "/edit.txt", "rb").read(), b"image content\n")
        self.assertTrue(os.path.isfile(R.ws + "/src/main.c"))

    def test_a_tree_too_deep_is_named_and_the_rest_restored(self):
        R = self.R
        b = self.create({"paths": [R.ws]})
        script = ("import os\nos.chdir(%r)\nfor i in range(260):\n os.mkdir('x')\n os.chdir('x')\n"
                  % (R.ws + "/d"))
        subprocess.run(["/usr/bin/python3", "-c", script], preexec_fn=as_task_uid, check=True)
        with open(R.ws + "/edit.txt", "w") as f:
            f.write("changed\n")
        st, res = self.r.json("POST", "/v1/checkpoints/%s/restore" % b["id"], {})
        self.assertEqual((st, res.get("code")), (500, "RESTORE_INCOMPLETE"), res)
        failed = [c for c in res["changes"] if c["action"] == "failed"]
        self.assertTrue(failed and all(c["path"].startswith(R.ws + "/d") for c in failed), res)
        self.assertTrue(failed[0]["reason"])
        self.assertEqual(open(R.ws + "/edit.txt", "rb").read(), b"image content\n")
        record_figure(FIGURES, "too_deep", {"failed": failed[:3], "complete": res["complete"]})


class StoreOutOfReach(CkAttack):
    def test_a_task_cannot_read_the_store_or_call_the_api(self):
        R = self.R
        self.create({"paths": [R.ws]})
        objs = os.path.join(self.r.state, "checkpoints", "objects")
        one = sorted(self.objects())[0]
        cmd = ("ls %s; cat %s/%s; curl -s -m 3 -o /dev/null -w 'http=%%{http_code}\\n' "
               "-X POST http://127.0.0.1:%d/v1/checkpoints; echo done" %
               (objs, objs, one, self.r.port))
        s = open_stream(self.r, "/v1/tasks", {"task": cmd})
        self.addCleanup(s.close)
        out = read_until(s, b"done", timeout=20).decode(errors="replace")
        self.assertIn("Permission denied", out)
        self.assertNotIn("image content", out)
        self.assertNotIn("http=201", out)
        self.assertNotIn("http=401", out)  # refused at the gate, not answered
        st, lst = self.r.json("GET", "/v1/checkpoints")
        self.assertEqual(len(lst["checkpoints"]), 1)


class AfterReset(CkAttack):
    args = ("--allow-reset",)

    def test_next_tenant_cannot_reach_a_previous_checkpoint(self):
        a = self.create({"label": "tenant A"})
        st, _, data = self.r.request("POST", "/v1/reset", timeout=120)
        self.assertEqual(st, 200, data)
        for m, p, body in (("GET", "", None), ("GET", "/diff?patch=1", None),
                           ("POST", "/restore", {}), ("DELETE", "", None)):
            st, e = self.r.json(m, "/v1/checkpoints/" + a["id"] + p, body)
            self.assertEqual((st, e["code"]), (404, "CHECKPOINT_NOT_FOUND"), (m, p, e))
        st, lst = self.r.json("GET", "/v1/checkpoints")
        self.assertEqual(lst["checkpoints"], [])
        self.assertEqual([n for n in os.listdir(self.r.state) if n.startswith("checkpoints")], [])


if __name__ == "__main__":
    unittest.main()
