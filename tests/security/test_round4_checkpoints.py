"""Red-team round four (issue 44, findings 1-3), checkpoints from the attacker's side: an agent
driving /mcp and a task.

1. checkpoint_diff with "patch": true must not show a file the task user cannot read: a 0644
   file inside root's 0700 directory, renamed by the agent (it owns the parent) after its
   checkpoint, was shown from the store's copy and from a fresh read as root.
2. checkpoint_restore for an MCP agent acts with the task user's rights: it removed a key root
   added later inside that 0700 directory and rolled back root's policy file beside it.
3. A planted symlink must not blind "changes": `mv proj .real && ln -s .real proj`, then a task
   with cwd proj rewrote main.c and added backdoor.c; its exit reported nothing and a restore
   undid nothing. The same when the task replaces its cwd by a link while it runs.

The control plane's own routes act as the runner (docs/design/checkpoints.md#checkpoints-undo-for-agents "For whom"): its restore
still puts root's files back; its patch follows the files API's rule (the task user's rights)."""
import json
import os
import sys
import unittest

from harness import Runner, assert_clean_exit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "integration"))
from test_profiles import ScratchRoots  # noqa: E402

TASK_UID = 1000


def exit_event(ev):
    assert ev and ev[-1].get("event") in ("exit", "error"), ev[-3:]
    return ev[-1]["data"]


class Base(unittest.TestCase):
    def setUp(self):
        self.R = ScratchRoots()
        self.addCleanup(self.R.close)
        self.secret = b"root-policy-" + os.urandom(12).hex().encode()
        self.vault = self.R.ws + "/vault"
        os.mkdir(self.vault)
        os.chmod(self.vault, 0o700)  # root's: the task user cannot enter it
        with open(self.vault + "/policy.json", "wb") as f:
            f.write(b'{"allow": false, "tag": "%s"}\n' % self.secret)
        os.chmod(self.vault + "/policy.json", 0o644)  # only its own mode says readable
        self.r = Runner(("--landlock-roots", self.R.roots_arg()))
        self.addCleanup(self.r.close)
        self.addCleanup(self.clean_exit)

    def clean_exit(self):
        assert_clean_exit(self.r)

    # /mcp, one session: what an agent holding the token reaches
    def rpc(self, method, params, id_=1):
        h = {"Content-Type": "application/json", "Accept": "application/json"}
        if getattr(self, "sid", None):
            h["Mcp-Session-Id"] = self.sid
        st, hd, data = self.r.request("POST", "/mcp", json.dumps(
            {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}), h, timeout=60)
        self.assertEqual(st, 200, data)
        return hd, json.loads(data)

    def mcp(self):
        hd, _ = self.rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                        "clientInfo": {"name": "attacker", "version": "1"}})
        self.sid = hd["mcp-session-id"]

    def call(self, name, args):
        _, b = self.rpc("tools/call", {"name": name, "arguments": args})
        return b["result"]

    def text(self, res):
        return "".join(c.get("text", "") for c in res.get("content", []))

    def sh(self, command):
        res = self.call("run_command", {"command": command, "cwd": self.R.ws})
        return res["structuredContent"]


class DiffDisclosure(Base):
    def test_patch_never_shows_what_the_task_user_cannot_read(self):
        """Finding 1: renamed after the checkpoint, the 0700 directory's file is on both sides
        of the diff (deleted from the store's copy, added in the tree): neither side's content
        reaches the agent, and no name inside it is listed for it."""
        self.mcp()
        res = self.call("checkpoint_create", {"label": "before"})
        self.assertFalse(res.get("isError"), res)
        ck = json.loads(self.text(res))["id"]
        out = self.sh("cat vault/policy.json; mv vault vault2 && echo renamed")
        self.assertIn("Permission denied", out.get("stderr", "") + out.get("stdout", ""), out)
        self.assertIn("renamed", out.get("stdout", ""), out)
        d = self.call("checkpoint_diff", {"id": ck, "patch": True})
        self.assertFalse(d.get("isError"), d)
        t = self.text(d)
        self.assertNotIn(self.secret.decode(), t)
        body = json.loads(t)
        paths = {c["path"][len(self.R.ws):]: c["change"] for c in body["changes"]}
        # the rename itself is what the agent did and can see
        self.assertEqual(paths.get("/vault"), "deleted", paths)
        self.assertEqual(paths.get("/vault2"), "added", paths)
        # what lies inside root's directory is not listed for it, on either side
        self.assertFalse([p for p in paths if p.startswith(("/vault/", "/vault2/"))], paths)
        # the control plane's diff (acting as the runner) lists it, and still shows no content:
        # a patch follows the files API's rule, the task user's rights on the whole path
        st, g = self.r.json("GET", "/v1/checkpoints/%s/diff?patch=1" % ck)
        self.assertEqual(st, 200, g)
        self.assertNotIn(self.secret.decode(), json.dumps(g))
        gp = {c["path"][len(self.R.ws):]: c for c in g["changes"]}
        self.assertIn("/vault2/policy.json", gp, gp.keys())
        self.assertEqual(gp["/vault2/policy.json"].get("patch_omitted"),
                         "not readable by the task user", gp["/vault2/policy.json"])
        self.assertEqual(gp["/vault/policy.json"].get("patch_omitted"),
                         "not readable by the task user", gp["/vault/policy.json"])

    def test_patch_of_what_it_may_read_is_still_shown(self):
        """The guard: a file the task user reads through directories it may enter."""
        self.mcp()
        ck = json.loads(self.text(self.call("checkpoint_create", {})))["id"]
        self.sh("echo changed-by-agent >> edit.txt")
        t = self.text(self.call("checkpoint_diff", {"id": ck, "patch": True}))
        self.assertIn("+changed-by-agent", t)
        self.assertIn("@@ -1,1 +1,2 @@", t)


class RestoreRights(Base):
    def test_restore_for_the_agent_leaves_roots_files(self):
        """Finding 2: root adds a key in its 0700 directory and changes its policy after the
        agent's checkpoint. The agent cannot remove the key itself; its restore must not either,
        nor roll back root's policy. What is the agent's is still put back."""
        self.mcp()
        ck = json.loads(self.text(self.call("checkpoint_create", {})))["id"]
        key = self.vault + "/key"
        with open(key, "wb") as f:
            f.write(b"root's new key\n")
        os.chmod(key, 0o600)
        new_policy = b'{"allow": true}\n'
        with open(self.vault + "/policy.json", "wb") as f:
            f.write(new_policy)
        out = self.sh("echo agent-edit >> edit.txt; echo x > made.txt; rm -f vault/key")
        self.assertNotEqual(out.get("exit_code"), 0, out)
        self.assertIn("Permission denied", out.get("stderr"), out)
        self.assertTrue(os.path.exists(key))
        rr = self.call("checkpoint_restore", {"id": ck})
        self.assertTrue(os.path.exists(key), self.text(rr))
        with open(self.vault + "/policy.json", "rb") as f:
            self.assertEqual(f.read(), new_policy, self.text(rr))
        self.assertNotIn(self.secret.decode(), self.text(rr))
        # the agent's own work is undone
        with open(self.R.ws + "/edit.txt", "rb") as f:
            self.assertEqual(f.read(), b"image content\n", self.text(rr))
        self.assertFalse(os.path.exists(self.R.ws + "/made.txt"), self.text(rr))
        # the control plane's restore acts as the runner: root's files come back too
        st, b = self.r.json("POST", "/v1/checkpoints/%s/restore" % ck, {})
        self.assertEqual(st, 200, b)
        self.assertFalse(os.path.exists(key), b)
        with open(self.vault + "/policy.json", "rb") as f:
            self.assertIn(self.secret, f.read())

    def test_restore_for_the_agent_reopens_its_own_locked_directory(self):
        """The guard: what is the agent's own is restored even where it took its own rights away
        (chmod 000 on its directory): acting as its owner, the restore gives them back."""
        self.mcp()
        ck = json.loads(self.text(self.call("checkpoint_create", {})))["id"]
        self.sh("echo broken > src/main.c; echo x > src/new.c; chmod 000 src")
        rr = self.call("checkpoint_restore", {"id": ck})
        self.assertFalse(rr.get("isError"), rr)
        self.assertTrue(json.loads(self.text(rr))["complete"], self.text(rr))
        with open(self.R.ws + "/src/main.c", "rb") as f:
            self.assertEqual(f.read(), b"int main(void){return 0;}\n")
        self.assertFalse(os.path.exists(self.R.ws + "/src/new.c"))
        self.assertEqual(os.stat(self.R.ws + "/src").st_mode & 0o777, 0o755)

    def test_restore_for_the_agent_writes_no_content_it_could_not_read(self):
        """Renaming root's directory away and restoring must not recreate its file owned by
        (and readable to) the task user: the restore names it as left, the content stays out."""
        self.mcp()
        ck = json.loads(self.text(self.call("checkpoint_create", {})))["id"]
        self.sh("mv vault gone")
        rr = self.call("checkpoint_restore", {"id": ck})
        t = self.text(rr)
        self.assertNotIn(self.secret.decode(), t)
        p = self.vault + "/policy.json"
        if os.path.exists(p):
            st = os.stat(p)
            self.assertEqual(st.st_uid, 0, t)
            self.assertNotEqual(st.st_uid, TASK_UID, t)
        for dp, dn, fn in os.walk(self.R.ws):
            for n in fn:
                q = os.path.join(dp, n)
                if os.stat(q).st_uid == TASK_UID:
                    with open(q, "rb") as f:
                        self.assertNotIn(self.secret, f.read(), q)
        self.assertIn("could not list and enter it", t)


class SymlinkedCwd(Base):
    def proj(self):
        p = self.R.ws + "/proj"
        os.mkdir(p)
        os.chown(p, TASK_UID, TASK_UID)
        self.R.put(p + "/main.c", b"int main(void){return 0;}\n", 0o644)
        return p

    def test_planted_link_does_not_blind_changes(self):
        """Finding 3: the cwd made a link by an earlier task; a "changes" task in it."""
        p = self.proj()
        ws = self.R.ws
        x = exit_event(self.r.native({"task": "mv proj .real && ln -s .real proj", "cwd": ws}))
        self.assertEqual(x["exit_code"], 0, x)
        x = exit_event(self.r.native({
            "task": "echo 'system(\"curl evil\");' >> main.c; echo evil > backdoor.c",
            "cwd": p, "changes": True}))
        self.assertEqual(x["exit_code"], 0, x)
        ch = x["changes"]
        real = ws + "/.real"
        self.assertEqual(ch["modified"], [real + "/main.c"], ch)
        self.assertEqual(ch["added"], [real + "/backdoor.c"], ch)
        self.assertEqual(ch.get("paths"), [real], ch)
        st, k = self.r.json("GET", "/v1/checkpoints/" + x["checkpoint"])
        self.assertEqual(k.get("paths"), [real], k)
        st, b = self.r.json("POST", "/v1/checkpoints/%s/restore" % x["checkpoint"], {})
        self.assertEqual(st, 200, b)
        self.assertFalse(os.path.exists(real + "/backdoor.c"), b)
        with open(real + "/main.c", "rb") as f:
            self.assertEqual(f.read(), b"int main(void){return 0;}\n", b)

    def test_cwd_replaced_by_a_link_during_the_task(self):
        """The task moves its own cwd away and puts a link in its place, then works through
        it: its exit still lists what it did, and says where its cwd leads now."""
        p = self.proj()
        ws = self.R.ws
        x = exit_event(self.r.native({
            "task": "cd .. && mv proj .moved && ln -s .moved proj && "
                    "echo '/* evil */' >> proj/main.c && echo evil > proj/backdoor.c",
            "cwd": p, "changes": True}))
        self.assertEqual(x["exit_code"], 0, x)
        ch = x["changes"]
        self.assertEqual(ch["modified"], [p + "/main.c"], ch)
        self.assertEqual(ch["added"], [p + "/backdoor.c"], ch)
        self.assertEqual(ch["deleted"], [], ch)
        self.assertEqual(ch.get("resolved"), [{"path": p, "now": ws + "/.moved"}], ch)
        # the checkpoint puts the task's view back: proj a directory again, as it was
        st, b = self.r.json("POST", "/v1/checkpoints/%s/restore" % x["checkpoint"], {})
        self.assertEqual(st, 200, b)
        self.assertFalse(os.path.islink(p), b)
        self.assertFalse(os.path.exists(p + "/backdoor.c"), b)
        with open(p + "/main.c", "rb") as f:
            self.assertEqual(f.read(), b"int main(void){return 0;}\n", b)

    def test_a_link_to_root_only_places_is_not_followed_for_the_task(self):
        """A cwd link into root's 0700 directory: the task could not chdir there, and its
        checkpoint is not taken there either (the resolution is the task user's)."""
        ws = self.R.ws
        os.symlink("vault", ws + "/into-vault")
        x = exit_event(self.r.native({"task": "true", "cwd": ws + "/into-vault",
                                      "changes": True}))
        ck = x.get("checkpoint")
        if ck:
            st, k = self.r.json("GET", "/v1/checkpoints/" + ck)
            self.assertNotIn(self.vault, k.get("paths"), k)


if __name__ == "__main__":
    unittest.main()
