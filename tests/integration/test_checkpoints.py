"""Workspace checkpoints (issue 38, docs/design/profiles.md#runtime-init-a-warm-box-bound-to-one-sandbox): POST/GET/DELETE
/v1/checkpoints, the diff (added, modified, deleted, attributes; ?patch=1;
?to=), the restore (content, modes, owners, times, xattrs, symlinks, empty
dirs, added files removed; 409 while tasks run; stop_tasks), the store's
bound (507), what an unchanged tree costs, and reset dropping them all."""
import json
import os
import shutil
import socket
import subprocess
import stat
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
sys.path.insert(0, os.path.dirname(__file__))

from harness import Runner, assert_clean_exit, parse_sse, slow  # noqa: E402
from test_profiles import ScratchRoots, open_stream, read_until, tree  # noqa: E402

TASK_UID = 1000


def xattrs(p):
    try:
        return sorted((n, os.getxattr(p, n, follow_symlinks=False))
                      for n in os.listxattr(p, follow_symlinks=False) if n.startswith("user."))
    except OSError:
        return []


def full_tree(root):
    """tree() plus atimes of files, xattrs, and FIFOs."""
    out = []
    for rel, mode, uid, gid, mtime, what in tree(root):
        p = os.path.join(root, rel)
        out.append((rel, mode, uid, gid, mtime, what, tuple(xattrs(p))))
    return out


class CkBase(unittest.TestCase):
    extra_args = ()

    def setUp(self):
        self.R = ScratchRoots()
        self.addCleanup(self.R.close)
        self.r = Runner(("--landlock-roots", self.R.roots_arg()) + tuple(self.extra_args))
        self.addCleanup(self.r.close)
        self.addCleanup(self.clean_exit)

    def clean_exit(self):
        assert_clean_exit(self.r)

    def create(self, body=None, expect=201):
        st, b = self.r.json("POST", "/v1/checkpoints", body if body is not None else {})
        self.assertEqual(st, expect, b)
        return b

    def diff(self, cid, q=""):
        st, b = self.r.json("GET", "/v1/checkpoints/%s/diff%s" % (cid, q))
        self.assertEqual(st, 200, b)
        return b

    def restore(self, cid, body=None, expect=200):
        st, b = self.r.json("POST", "/v1/checkpoints/%s/restore" % cid, body or {})
        self.assertEqual(st, expect, b)
        return b

    def changes(self, d):
        return {(c["path"][len(self.R.base):], c["change"]) for c in d["changes"]}


class Api(CkBase):
    def test_create_list_get_delete(self):
        b = self.create({"label": "before refactor"})
        for k in ("id", "files", "bytes", "duration_ms", "paths"):
            self.assertIn(k, b)
        self.assertEqual(b["label"], "before refactor")
        # default: the writable roots
        self.assertEqual(sorted(b["paths"]), sorted([self.R.home, self.R.tmp, self.R.ws]))
        self.assertEqual(b["files"], 7)
        st, lst = self.r.json("GET", "/v1/checkpoints")
        self.assertEqual(st, 200)
        self.assertEqual([c["id"] for c in lst["checkpoints"]], [b["id"]])
        st, g = self.r.json("GET", "/v1/checkpoints/" + b["id"])
        self.assertEqual((st, g["id"], g["files"]), (200, b["id"], 7))
        st, d = self.r.json("DELETE", "/v1/checkpoints/" + b["id"])
        self.assertEqual(st, 200, d)
        self.assertEqual(d["store_bytes"], 0)
        for m, p in (("GET", ""), ("GET", "/diff"), ("DELETE", ""), ("POST", "/restore")):
            st, e = self.r.json(m, "/v1/checkpoints/%s%s" % (b["id"], p), {} if m == "POST" else None)
            self.assertEqual((st, e["code"]), (404, "CHECKPOINT_NOT_FOUND"), (m, p))

    def test_paths_rules(self):
        b = self.create({"paths": [self.R.ws + "/src", self.R.ws + "/src/main.c"]})
        self.assertEqual(b["paths"], [self.R.ws + "/src"])  # nested: the outer one's
        self.assertEqual(b["files"], 1)
        for paths, st in (([self.R.outside], 403), (["/etc"], 403), (["relative"], 400),
                          ([self.R.ws + "/nope"], 404), ([1], 400)):
            s, e = self.r.json("POST", "/v1/checkpoints", {"paths": paths})
            self.assertEqual(s, st, (paths, e))
            self.assertIn("message", e)
        # a symlink in a directory of the path that leads outside: refused
        os.symlink(self.R.outside, self.R.ws + "/out")
        s, e = self.r.json("POST", "/v1/checkpoints", {"paths": [self.R.ws + "/out/sentinel"]})
        self.assertEqual(s, 403, e)
        s, _, data = self.r.request("POST", "/v1/checkpoints", b"")  # {} is the defaults
        self.assertEqual(s, 400, data)
        s, e = self.r.json("POST", "/v1/checkpoints", {"nope": 1})
        self.assertEqual((s, e["code"]), (400, "UNKNOWN_FIELD"))
        s, e = self.r.json("POST", "/v1/checkpoints/x/restore", {"stop_tasks": "yes"})
        self.assertEqual(s, 400, e)

    def test_token_required(self):
        r = Runner(("--landlock-roots", self.R.roots_arg()), token="s3cret")
        self.addCleanup(r.close)
        import http.client
        for m, p in (("POST", "/v1/checkpoints"), ("GET", "/v1/checkpoints"),
                     ("GET", "/v1/checkpoints/x/diff")):
            c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=10)
            c.request(m, p, body="{}" if m == "POST" else None)
            self.assertEqual(c.getresponse().status, 401, p)
            c.close()

    def test_unchanged_costs_metadata_only(self):
        for i in range(200):
            self.R.put("%s/f%03d" % (self.R.ws, i), b"same content\n" if i % 2 else b"x%d" % i, 0o644)
        a = self.create()
        # identical contents are stored once
        self.assertLess(a["stored_objects"], 120)
        b = self.create()
        self.assertEqual((b["read_files"], b["stored_bytes"], b["stored_objects"]), (0, 0, 0), b)
        self.assertEqual(b["files"], a["files"])
        with open(self.R.ws + "/f000", "ab") as f:
            f.write(b"changed")
        c = self.create()
        self.assertEqual(c["read_files"], 1, c)
        self.assertEqual(c["stored_objects"], 1)


class Diff(CkBase):
    def test_diff_kinds_and_patch(self):
        R = self.R
        b = self.create()
        with open(R.ws + "/edit.txt", "a") as f:
            f.write("second line\n")
        os.unlink(R.ws + "/delete.txt")
        R.put(R.ws + "/added.txt", b"hello\n", 0o644)
        R.put(R.ws + "/bin.dat", b"\x00\x01\x02binary", 0o644)
        os.chmod(R.ws + "/README", 0o600)
        os.chown(R.ws + "/src/main.c", 0, 0)
        os.setxattr(R.ws + "/root-owned", "user.tag", b"v")
        os.mkdir(R.ws + "/emptydir")
        os.unlink(R.ws + "/link")
        os.symlink("elsewhere", R.ws + "/link")
        d = self.diff(b["id"], "?patch=1")
        got = self.changes(d)
        for want in (("/workspace/edit.txt", "modified"), ("/workspace/delete.txt", "deleted"),
                     ("/workspace/added.txt", "added"), ("/workspace/bin.dat", "added"),
                     ("/workspace/README", "attributes"), ("/workspace/src/main.c", "attributes"),
                     ("/workspace/root-owned", "attributes"), ("/workspace/emptydir", "added"),
                     ("/workspace/link", "modified")):
            self.assertIn(want, got, json.dumps(d, indent=1))
        self.assertEqual(d["counts"], {"added": 3, "modified": 2, "deleted": 1, "attributes": 3})
        by = {c["path"][len(R.base):]: c for c in d["changes"]}
        self.assertEqual(by["/workspace/README"]["what"], ["mode"])
        self.assertEqual(by["/workspace/README"]["mode"], {"old": 0o644, "new": 0o600})
        self.assertEqual(by["/workspace/src/main.c"]["what"], ["owner"])
        self.assertIn("xattrs", by["/workspace/root-owned"]["what"])
        self.assertEqual(by["/workspace/emptydir"]["type"], "directory")
        self.assertEqual(by["/workspace/link"]["type"], "symlink")
        self.assertEqual((by["/workspace/edit.txt"]["size"], by["/workspace/edit.txt"]["old_size"]),
                         (26, 14))
        self.assertIn("+second line\n", by["/workspace/edit.txt"]["patch"])
        self.assertIn("@@ -1,1 +1,2 @@", by["/workspace/edit.txt"]["patch"])
        self.assertIn("+hello", by["/workspace/added.txt"]["patch"])
        self.assertIn("-image file", by["/workspace/delete.txt"]["patch"])
        self.assertEqual(by["/workspace/bin.dat"].get("patch_omitted"), "binary")
        self.assertNotIn("patch", by["/workspace/bin.dat"])
        # without ?patch=1: no patches
        d2 = self.diff(b["id"])
        self.assertFalse(any("patch" in c for c in d2["changes"]))

    def test_patch_hides_what_the_task_user_cannot_read(self):
        b = self.create()
        self.R.put(self.R.ws + "/secret", b"root only\n", 0o600, uid=0)
        d = self.diff(b["id"], "?patch=1")
        c = [c for c in d["changes"] if c["path"].endswith("/secret")][0]
        self.assertNotIn("patch", c)
        self.assertEqual(c["patch_omitted"], "not readable by the task user")

    def test_between_two_checkpoints(self):
        a = self.create()
        self.R.put(self.R.ws + "/x", b"1\n", 0o644)
        b = self.create()
        self.R.put(self.R.ws + "/y", b"2\n", 0o644)
        d = self.diff(a["id"], "?to=%s&patch=1" % b["id"])
        self.assertEqual(self.changes(d), {("/workspace/x", "added")})
        self.assertEqual(d["to"], b["id"])
        self.assertIn("+1", d["changes"][0]["patch"])
        st, e = self.r.json("GET", "/v1/checkpoints/%s/diff?to=nope" % a["id"])
        self.assertEqual(st, 404)
        st, e = self.r.json("GET", "/v1/checkpoints/%s/diff?patch=maybe" % a["id"])
        self.assertEqual(st, 400)


class Restore(CkBase):
    def test_restore_is_exact(self):
        R = self.R
        os.setxattr(R.ws + "/edit.txt", "user.keep", b"1")
        os.mkdir(R.ws + "/empty")
        os.mkfifo(R.ws + "/fifo")
        os.link(R.ws + "/README", R.ws + "/hardlink")
        os.mknod(R.ws + "/null", 0o620 | stat.S_IFCHR, os.makedev(1, 3))
        os.mkdir(R.ws + "/dir-to-file")
        R.put(R.ws + "/dir-to-file/in", b"in\n", 0o640)
        R.put(R.ws + "/file-to-dir", b"f\n", 0o604)
        os.utime(R.ws + "/file-to-dir", ns=(1400000000000000001, 1400000000000000002))
        before = full_tree(R.ws), full_tree(R.home), full_tree(R.tmp), tree(R.outside)
        b = self.create()
        # a tenant at work
        with open(R.ws + "/edit.txt", "w") as f:
            f.write("rewritten\n")
        os.removexattr(R.ws + "/edit.txt", "user.keep")
        os.setxattr(R.ws + "/src", "user.added", b"x")
        os.chmod(R.ws + "/README", 0o666)
        os.chown(R.ws + "/src/main.c", 0, 0)
        os.utime(R.ws + "/root-owned", ns=(1, 2))
        os.unlink(R.ws + "/delete.txt")
        os.rmdir(R.ws + "/empty")
        os.unlink(R.ws + "/fifo")
        os.unlink(R.ws + "/link")
        os.symlink("/etc/passwd", R.ws + "/link")
        import shutil
        shutil.rmtree(R.ws + "/dir-to-file")
        R.put(R.ws + "/dir-to-file", b"now a file\n", 0o644)
        os.unlink(R.ws + "/file-to-dir")
        os.mkdir(R.ws + "/file-to-dir")
        R.put(R.ws + "/file-to-dir/deep", b"deep\n", 0o644)
        os.makedirs(R.ws + "/new/a/b/c")
        R.put(R.ws + "/new/a/b/c/f", b"new\n", 0o644)
        R.put(R.tmp + "/added", b"t\n", 0o644)
        R.put(R.agent + "/.profile", b"evil\n", 0o644)
        os.unlink(R.ws + "/hardlink")  # the link broken: a file of its own
        R.put(R.ws + "/hardlink", b"image readme\n", 0o644)
        os.unlink(R.ws + "/null")
        res = self.restore(b["id"])
        self.assertTrue(res["complete"], res)
        after = full_tree(R.ws), full_tree(R.home), full_tree(R.tmp), tree(R.outside)
        for x, y, name in zip(before, after, ("ws", "home", "tmp", "outside")):
            if x != y:
                self.fail("%s differs after restore:\n%s" % (name, "\n".join(
                    map(str, sorted(set(x) ^ set(y))[:20]))))
        self.assertTrue(stat.S_ISFIFO(os.lstat(R.ws + "/fifo").st_mode))
        st = os.lstat(R.ws + "/null")
        self.assertTrue(stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3))
        self.assertEqual(os.stat(R.ws + "/README").st_ino, os.stat(R.ws + "/hardlink").st_ino)
        self.assertEqual(os.stat(R.ws + "/README").st_nlink, 2)
        acts = {(c["action"], c["path"][len(R.base):]) for c in res["changes"]}
        for want in (("removed", "/workspace/new"), ("removed", "/tmp/added"),
                     ("created", "/workspace/delete.txt"), ("created", "/workspace/empty"),
                     ("replaced", "/workspace/edit.txt"), ("attributes", "/workspace/README"),
                     ("replaced", "/workspace/link"), ("replaced", "/workspace/dir-to-file"),
                     ("replaced", "/workspace/file-to-dir")):
            self.assertIn(want, acts, json.dumps(res, indent=1))
        # a second restore has nothing left to do
        res2 = self.restore(b["id"])
        self.assertEqual(res2["changes"], [], res2)

    def test_restore_of_a_removed_subtree_path(self):
        R = self.R
        b = self.create({"paths": [R.ws + "/src"]})
        import shutil
        shutil.rmtree(R.ws + "/src")
        res = self.restore(b["id"])
        self.assertTrue(res["complete"], res)
        with open(R.ws + "/src/main.c", "rb") as f:
            self.assertEqual(f.read(), b"int main(void){return 0;}\n")
        self.assertEqual(os.stat(R.ws + "/src").st_uid, TASK_UID)

    def test_409_while_a_task_runs_and_stop_tasks(self):
        b = self.create()
        s = open_stream(self.r, "/v1/tasks", {"task": "echo go; sleep 1000"})
        self.addCleanup(s.close)
        got = read_until(s, b'"go\\n"', timeout=60)
        import re
        tid = re.search(rb'"task_id":"([0-9a-f]+)"', got).group(1).decode()
        R = self.R
        R.put(R.ws + "/added", b"x", 0o644)
        if self.r.json("GET", "/v1/tasks/" + tid)[1].get("status") != "running":
            self.skipTest("the task did not keep running here (valgrind: its sleep fails)")
        st, e = self.r.json("POST", "/v1/checkpoints/%s/restore" % b["id"], {})
        self.assertEqual((st, e.get("code")), (409, "TASKS_RUNNING"),
                         (e, self.r.json("GET", "/v1/tasks/" + tid)))
        self.assertIn(tid, e["message"])
        self.assertTrue(os.path.exists(R.ws + "/added"))
        t0 = time.monotonic()
        res = self.restore(b["id"], {"stop_tasks": True})
        self.assertTrue(res["complete"], res)
        self.assertLess(time.monotonic() - t0, slow(10))
        self.assertFalse(os.path.exists(R.ws + "/added"))
        st, t = self.r.json("GET", "/v1/tasks/" + tid)
        self.assertNotEqual(t.get("status"), "running", t)


class Bound(CkBase):
    extra_args = ("--checkpoint-max-bytes", "100000")

    def test_507_beyond_the_bound_and_the_oldest_kept(self):
        R = self.R
        R.put(R.ws + "/a", os.urandom(60000), 0o644)
        first = self.create()
        R.put(R.ws + "/b", os.urandom(60000), 0o644)
        st, e = self.r.json("POST", "/v1/checkpoints", {})
        self.assertEqual((st, e["code"]), (507, "INSUFFICIENT_STORAGE"), e)
        self.assertIn("--checkpoint-max-bytes", e["message"])
        self.assertIn("/workspace/b", e["message"])
        st, lst = self.r.json("GET", "/v1/checkpoints")
        self.assertEqual([c["id"] for c in lst["checkpoints"]], [first["id"]])
        self.assertEqual(lst["store_bytes"], first["store_bytes"])  # the failed one took nothing back
        # a huge sparse file: refused at once, not read
        os.unlink(R.ws + "/b")
        with open(R.ws + "/sparse", "wb") as f:
            f.truncate(64 << 30)
        t0 = time.monotonic()
        st, e = self.r.json("POST", "/v1/checkpoints", {})
        self.assertEqual(st, 507, e)
        self.assertLess(time.monotonic() - t0, slow(5))
        os.unlink(R.ws + "/sparse")
        # deleting makes room
        st, _ = self.r.json("DELETE", "/v1/checkpoints/" + first["id"])
        R.put(R.ws + "/b", os.urandom(30000), 0o644)
        self.create()

    def test_bound_option_checked(self):
        import subprocess
        from harness import RUNNER
        p = subprocess.run([RUNNER, "--checkpoint-max-bytes", "0"], capture_output=True, timeout=10)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(b"checkpoint-max-bytes", p.stderr)


class McpTools(CkBase):
    """checkpoint_create, checkpoint_diff, checkpoint_restore in the tool layer: /mcp (and the
    built-in agent, which lists the same tools) can undo what it did."""

    def rpc(self, sid, method, params, id_=1):
        h = {"Content-Type": "application/json", "Accept": "application/json"}
        if sid:
            h["Mcp-Session-Id"] = sid
        st, hd, data = self.r.request("POST", "/mcp", json.dumps(
            {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}), h, timeout=60)
        self.assertEqual(st, 200, data)
        return hd, json.loads(data)

    def call(self, sid, name, args):
        _, b = self.rpc(sid, "tools/call", {"name": name, "arguments": args})
        return b["result"]

    def test_agent_undoes_its_change(self):
        hd, _ = self.rpc(None, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                              "clientInfo": {"name": "t", "version": "1"}})
        sid = hd["mcp-session-id"]
        _, lst = self.rpc(sid, "tools/list", {})
        names = {t["name"] for t in lst["result"]["tools"]}
        self.assertTrue({"checkpoint_create", "checkpoint_diff", "checkpoint_restore"} <= names)
        res = self.call(sid, "checkpoint_create", {"label": "before"})
        self.assertFalse(res.get("isError"), res)
        ck = json.loads(res["content"][0]["text"])
        w = self.call(sid, "write_file", {"path": self.R.ws + "/edit.txt", "content": "broken\n"})
        self.assertFalse(w.get("isError"), w)
        d = self.call(sid, "checkpoint_diff", {"id": ck["id"], "patch": True})
        self.assertIn("+broken", d["content"][0]["text"])
        rr = self.call(sid, "checkpoint_restore", {"id": ck["id"]})
        self.assertFalse(rr.get("isError"), rr)
        with open(self.R.ws + "/edit.txt", "rb") as f:
            self.assertEqual(f.read(), b"image content\n")
        bad = self.call(sid, "checkpoint_diff", {"id": "nope"})
        self.assertTrue(bad.get("isError"))
        self.assertIn("CHECKPOINT_NOT_FOUND", bad["content"][0]["text"])
        bad = self.call(sid, "checkpoint_restore", {})
        self.assertTrue(bad.get("isError"))

    def test_run_command_reports_its_changes(self):
        hd, _ = self.rpc(None, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                              "clientInfo": {"name": "t", "version": "1"}})
        sid = hd["mcp-session-id"]
        ws = self.R.ws
        res = self.call(sid, "run_command", {
            "command": "echo new > %s/made.txt; echo more >> %s/edit.txt; rm %s/delete.txt" %
            (ws, ws, ws), "changes": True})
        self.assertFalse(res.get("isError"), res)
        ch = res["structuredContent"]["changes"]
        self.assertEqual(ch["added"], [ws + "/made.txt"])
        self.assertEqual(ch["modified"], [ws + "/edit.txt"])
        self.assertEqual(ch["deleted"], [ws + "/delete.txt"])
        self.assertIn("1 added, 1 modified, 1 deleted", res["content"][0]["text"])
        # the checkpoint before the command undoes it
        st, b = self.r.json("POST", "/v1/checkpoints/%s/restore" % ch["checkpoint"], {})
        self.assertEqual(st, 200, b)
        self.assertFalse(os.path.exists(ws + "/made.txt"))
        self.assertTrue(os.path.exists(ws + "/delete.txt"))
        # without changes: no checkpoint, no changes
        res = self.call(sid, "run_command", {"command": "true"})
        self.assertNotIn("changes", res["structuredContent"])


NONROOT = ["setpriv", "--reuid=%d" % TASK_UID, "--regid=%d" % TASK_UID, "--clear-groups",
           "--inh-caps=-all", "--"]


def as_task_uid():
    os.setgroups([])
    os.setgid(TASK_UID)
    os.setuid(TASK_UID)


@unittest.skipUnless(shutil.which("setpriv"), "needs setpriv (util-linux)")
class NonRoot(unittest.TestCase):
    """A runner of the tasks' own uid (non-root mode): its tasks made directories read-only and
    files unreadable; the restore (no CAP_DAC_OVERRIDE) still puts the tree back."""

    def test_nonroot_restore(self):
        R = ScratchRoots()
        self.addCleanup(R.close)
        os.unlink(R.ws + "/root-owned")  # a non-root runner cannot recreate root's files
        r = Runner(("--landlock-roots", R.ws), wrap=NONROOT, owner=TASK_UID)
        self.addCleanup(r.close)
        before = tree(R.ws)
        st, b = r.json("POST", "/v1/checkpoints", {"paths": [R.ws]})
        self.assertEqual(st, 201, b)
        script = ("import os\nws=%r\nopen(ws+'/src/added','w').write('x')\n"
                  "os.chmod(ws+'/src',0o555)\nopen(ws+'/edit.txt','w').write('changed')\n"
                  "os.chmod(ws+'/edit.txt',0)\nos.mkdir(ws+'/locked')\n"
                  "open(ws+'/locked/f','w').write('y')\nos.chmod(ws+'/locked',0)\n" % R.ws)
        subprocess.run(["/usr/bin/python3", "-c", script], preexec_fn=as_task_uid, check=True)
        st, res = r.json("POST", "/v1/checkpoints/%s/restore" % b["id"], {})
        self.assertEqual(st, 200, res)
        self.assertEqual(tree(R.ws), before)


class ResetDrops(unittest.TestCase):
    def test_reset_drops_every_checkpoint(self):
        R = ScratchRoots()
        self.addCleanup(R.close)
        r = Runner(("--allow-reset", "--landlock-roots", R.roots_arg()))
        self.addCleanup(r.close)
        st, b = r.json("POST", "/v1/checkpoints", {})
        self.assertEqual(st, 201, b)
        store = os.path.join(r.state, "checkpoints")
        self.assertTrue(os.path.isdir(store + "/objects"))
        self.assertEqual(os.stat(store).st_mode & 0o777, 0o700)
        st, _, data = r.request("POST", "/v1/reset", timeout=120)
        self.assertEqual(st, 200, data)
        st, lst = r.json("GET", "/v1/checkpoints")
        self.assertEqual((lst["checkpoints"], lst["store_bytes"]), ([], 0))
        st, e = r.json("GET", "/v1/checkpoints/%s/diff" % b["id"])
        self.assertEqual(st, 404)
        # nothing of the store is left in the state dir
        left = [n for n in os.listdir(r.state) if n.startswith("checkpoints")]
        self.assertEqual(left, [], left)

    def test_retired_stores_purged_by_the_next_operation(self):
        """Retired stores (checkpoints.dead.N: a reset's, a previous run's) go at the start of
        the next checkpoint operation, whatever their numbers; nothing else in the state dir
        is touched."""
        R = ScratchRoots()
        self.addCleanup(R.close)
        r = Runner(("--landlock-roots", R.roots_arg()))
        self.addCleanup(r.close)
        st, b = r.json("POST", "/v1/checkpoints", {})
        self.assertEqual(st, 201, b)
        for name in ("checkpoints.dead.0", "checkpoints.dead.7", "checkpoints.dead.999"):
            os.makedirs(os.path.join(r.state, name, "objects", "sub"))
            with open(os.path.join(r.state, name, "objects", "sub", "x"), "w") as f:
                f.write("old")
        os.mkdir(os.path.join(r.state, "checkpoints.deadwood"))
        st, b = r.json("POST", "/v1/checkpoints", {})
        self.assertEqual(st, 201, b)
        left = sorted(n for n in os.listdir(r.state) if n.startswith("checkpoints"))
        self.assertEqual(left, ["checkpoints", "checkpoints.deadwood"], left)


def exit_event(ev):
    assert ev and ev[-1].get("event") in ("exit", "error"), ev[-3:]
    return ev[-1]["data"]


class TaskChanges(CkBase):
    """POST /v1/tasks "changes" (docs/design/checkpoints.md#checkpoints-undo-for-agents): exit.changes lists what the task added,
    modified and deleted; exit.checkpoint, taken before the task started, undoes it."""

    def test_exec_task_reports_its_changes_and_the_checkpoint_undoes_them(self):
        R = self.R
        before = full_tree(R.ws)
        ws = R.ws
        ev = self.r.native({"task": "echo new > %s/made.txt; echo more >> %s/edit.txt; "
                                    "rm %s/delete.txt; mkdir %s/src/sub" % (ws, ws, ws, ws),
                            "changes": True})
        x = exit_event(ev)
        self.assertEqual(x["status"], "succeeded", x)
        ch = x["changes"]
        self.assertEqual(sorted(ch["added"]), [ws + "/made.txt", ws + "/src/sub"], ch)
        self.assertEqual(ch["modified"], [ws + "/edit.txt"], ch)
        self.assertEqual(ch["deleted"], [ws + "/delete.txt"], ch)
        self.assertEqual(ch["counts"], {"added": 2, "modified": 1, "deleted": 1,
                                        "attributes": 0}, ch)
        self.assertIs(ch["truncated"], False)
        self.assertIs(ch["exclusive"], True)
        self.assertNotIn("others_running", ch)
        self.assertTrue(x["checkpoint"].startswith("ck_"), x)
        st, k = self.r.json("GET", "/v1/checkpoints/" + x["checkpoint"])
        self.assertEqual((st, k.get("label")), (200, "task"), k)
        # the checkpoint was taken before the task ran: one call puts the tree back
        res = self.restore(x["checkpoint"])
        self.assertTrue(res["complete"], res)
        self.assertEqual(full_tree(R.ws), before)

    def test_scope_is_the_cwd_when_it_lies_in_a_root(self):
        """A task's checkpoint is of its cwd when that is in a writable root (cheap: an agent's
        workspace, not every root); a cwd outside the roots gets every root."""
        R = self.R
        cmd = "echo a > %s/in-ws.txt; echo b > %s/in-tmp.txt" % (R.ws, R.tmp)
        x = exit_event(self.r.native({"task": cmd, "cwd": R.ws, "changes": True}))
        st, k = self.r.json("GET", "/v1/checkpoints/" + x["checkpoint"])
        self.assertEqual((st, k.get("paths")), (200, [R.ws]), k)
        self.assertEqual(x["changes"]["added"], [R.ws + "/in-ws.txt"], x["changes"])
        x = exit_event(self.r.native({"task": "echo c > %s/again.txt" % R.tmp, "cwd": "/",
                                      "changes": True}))
        st, k = self.r.json("GET", "/v1/checkpoints/" + x["checkpoint"])
        self.assertEqual(sorted(k.get("paths") or []), sorted([R.ws, R.tmp, R.home]), k)
        self.assertEqual(x["changes"]["added"], [R.tmp + "/again.txt"], x["changes"])

    def test_exec_default_is_off_and_a_task_that_changes_nothing(self):
        ev = self.r.native({"task": "true"})
        self.assertNotIn("changes", exit_event(ev))
        self.assertNotIn("checkpoint", exit_event(ev))
        x = exit_event(self.r.native({"task": "cat %s/README" % self.R.ws, "changes": True}))
        self.assertEqual((x["changes"]["added"], x["changes"]["modified"],
                          x["changes"]["deleted"]), ([], [], []), x)
        st, e = self.r.json("POST", "/v1/tasks", {"task": "true", "changes": "yes"})
        self.assertEqual((st, e.get("code")), (400, "INVALID_REQUEST_BODY"), e)
        self.assertIn("changes", e["message"])

    def test_failed_task_reports_too(self):
        x = exit_event(self.r.native({"task": "echo x > %s/half.txt; exit 3" % self.R.ws,
                                      "changes": True}))
        self.assertEqual((x["exit_code"], x["status"]), (3, "failed"), x)
        self.assertEqual(x["changes"]["added"], [self.R.ws + "/half.txt"])

    def test_concurrent_tasks_are_reported_honestly(self):
        """Two tasks in the same tree at once: each one's diff holds the other's file too (the
        diff tells what changed, not who did), and each says it was not alone."""
        ws = self.R.ws
        out = {}

        def run(name, delay):
            out[name] = self.r.native({"task": "sleep %s; echo %s > %s/%s.txt; sleep 1" %
                                       (delay, name, ws, name), "changes": True}, timeout=120)
        import threading
        th = [threading.Thread(target=run, args=(n, d)) for n, d in (("a", 0.5), ("b", 0.7))]
        for t in th:
            t.start()
        for t in th:
            t.join()
        xa, xb = exit_event(out["a"]), exit_event(out["b"])
        ida, idb = out["a"][0]["data"]["task_id"], out["b"][0]["data"]["task_id"]
        for x, me, other in ((xa, ida, idb), (xb, idb, ida)):
            ch = x["changes"]
            self.assertIs(ch["exclusive"], False, ch)
            self.assertIn(other, ch["others_running"], ch)
            self.assertNotIn(me, ch["others_running"], ch)
            self.assertIn(ws + "/%s.txt" % ("a" if me == ida else "b"), ch["added"], ch)
        self.assertNotEqual(xa["checkpoint"], xb["checkpoint"])
        # a task alone afterwards is exclusive again
        x = exit_event(self.r.native({"task": "true", "changes": True}))
        self.assertIs(x["changes"]["exclusive"], True, x)

    def test_a_failed_diff_is_said_and_the_exit_event_still_comes(self):
        """The checkpoint is deleted while the task runs: its diff fails, the exit event says
        so (and comes)."""
        import threading
        out = []
        th = threading.Thread(target=lambda: out.append(self.r.native(
            {"task": "sleep 1.5", "changes": True})))
        th.start()
        ids, deadline = [], time.monotonic() + 30
        while not ids and time.monotonic() < deadline:
            st, lst = self.r.json("GET", "/v1/checkpoints")
            ids = [k["id"] for k in lst["checkpoints"] if k.get("label") == "task"]
            time.sleep(0.05)
        self.assertEqual(len(ids), 1)
        st, b = self.r.json("DELETE", "/v1/checkpoints/" + ids[0])
        self.assertEqual(st, 200, b)
        th.join()
        x = exit_event(out[0])
        self.assertEqual(x["status"], "succeeded", x)
        self.assertEqual(x["checkpoint"], ids[0])
        self.assertIn(x["changes"]["error"], ("the diff failed", "the diff could not start"), x)
        self.assertIn("no checkpoint", x["changes"]["message"])

    def test_keyed_retry_during_the_checkpoint_attaches(self):
        """A retry with the same Idempotency-Key while the first request still waits for its
        checkpoint: it resumes after the first task started and attaches to it (one run)."""
        import threading
        ws = self.R.ws
        body = {"task": "echo run >> %s/runs.txt; sleep 0.5" % ws, "changes": True}
        out = []

        def post():
            st, h, data = self.r.request("POST", "/v1/tasks", body,
                                         headers={"Idempotency-Key": "k-retry-1"}, timeout=60)
            out.append(parse_sse(data))
        th = [threading.Thread(target=post) for _ in range(2)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        ids = {ev[0]["data"]["task_id"] for ev in out}
        self.assertEqual(len(ids), 1, out)
        with open(ws + "/runs.txt") as f:
            self.assertEqual(f.read(), "run\n")

    def test_bound_10000_files(self):
        ws = self.R.ws
        t0 = time.monotonic()
        x = exit_event(self.r.native({
            "task": "mkdir %s/gen && cd %s/gen && seq -f f%%05g 10000 | xargs touch" % (ws, ws),
            "changes": True}, timeout=300))
        took = time.monotonic() - t0
        ch = x["changes"]
        self.assertEqual(x["status"], "succeeded", x)
        self.assertEqual(ch["counts"]["added"], 10001, ch["counts"])
        self.assertEqual(len(ch["added"]), 100)
        self.assertIs(ch["truncated"], True)
        print("\n  10,000 files: task with changes %.2f s, diff %s ms" %
              (took, ch.get("duration_ms")), file=sys.stderr)


class TaskChangesUnavailable(unittest.TestCase):
    """No checkpoints here (non-root, no usable state dir): the task runs all the same and its
    exit event says why it has no changes."""

    @unittest.skipUnless(shutil.which("setpriv"), "needs setpriv (util-linux)")
    def test_exit_says_why(self):
        R = ScratchRoots()
        self.addCleanup(R.close)
        # its state dir inside a writable root: the runner keeps its state in memory (design/security.md#the-state-dir-is-out-of-the-tasks-reach-in-every-mode)
        r = Runner(("--landlock-roots", R.roots_arg()), env={"XDG_RUNTIME_DIR": R.tmp},
                   wrap=NONROOT, owner=TASK_UID, state_dir=False)
        self.addCleanup(r.close)
        st, e = r.json("POST", "/v1/checkpoints", {})
        if st != 501:
            self.skipTest("checkpoints are available to this non-root runner: %s %s" % (st, e))
        x = exit_event(r.native({"task": "echo x > %s/f" % R.ws, "changes": True}))
        self.assertEqual(x["status"], "succeeded", x)
        self.assertIn("state dir", x["changes"]["error"])
        self.assertNotIn("checkpoint", x)
        self.assertTrue(os.path.exists(R.ws + "/f"))


class AgentChanges(unittest.TestCase):
    """An agent task (built-in engine, scripted gateway) reports its edits by default."""

    def setUp(self):
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "gateway"))
        from test_gateway import TestGateway, text, tool
        self.text, self.tool = text, tool
        key = "sk-ck-" + os.urandom(6).hex()
        self.gw = TestGateway(key=key)
        self.addCleanup(self.gw.close)
        self.R = ScratchRoots()
        self.addCleanup(self.R.close)
        self.r = Runner(("--landlock-roots", self.R.roots_arg()),
                        env={"FORCEAI_GATEWAY_URL": self.gw.url, "FORCEAI_GATEWAY_KEY": key,
                             "FORCEAI_MODEL": "test-model"})
        self.addCleanup(self.r.close)

    def test_agent_edits_are_reported_by_default(self):
        ws = self.R.ws
        self.gw.script(
            self.tool("edit_file", {"path": ws + "/edit.txt", "old_string": "image content",
                                    "new_string": "agent content"}, call_id="e1"),
            self.tool("write_file", {"path": ws + "/src/new.c", "content": "int x;\n"},
                      call_id="w1"),
            self.tool("bash", {"command": "rm %s/delete.txt" % ws}, call_id="b1"),
            self.text("Done."))
        ev = self.r.native({"task": "edit things", "capability": "agent", "cwd": ws},
                           timeout=120)
        x = exit_event(ev)
        self.assertEqual(x.get("answer"), "Done.", x)
        ch = x["changes"]
        self.assertEqual(ch["added"], [ws + "/src/new.c"], ch)
        self.assertEqual(ch["modified"], [ws + "/edit.txt"], ch)
        self.assertEqual(ch["deleted"], [ws + "/delete.txt"], ch)
        self.assertIs(ch["exclusive"], True, ch)  # its own commands are its own
        st, res = self.r.json("POST", "/v1/checkpoints/%s/restore" % x["checkpoint"], {})
        self.assertEqual(st, 200, res)
        with open(ws + "/edit.txt", "rb") as f:
            self.assertEqual(f.read(), b"image content\n")
        self.assertFalse(os.path.exists(ws + "/src/new.c"))
        # settable off
        self.gw.script(self.text("Nothing."))
        x = exit_event(self.r.native({"task": "x", "capability": "agent", "cwd": ws,
                                      "changes": False}))
        self.assertNotIn("changes", x)
        self.assertNotIn("checkpoint", x)


if __name__ == "__main__":
    unittest.main()
