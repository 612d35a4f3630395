"""The files API against a hostile task (issue 12, findings 2, 4, 7 and 8).

Every attack here is run the way an agent's code would run it: AS A TASK,
through the runner's own API (a background /command swapping names in a
loop, a foreground command planting links or huge files), while the test
drives the files API as the API client would. Each test fails on a runner
that reopens by name, follows what the task planted, or scans on its event
loop; the figures (swaps, requests, /ping latencies) are printed."""
import json
import os
import time
import unittest
from urllib.parse import quote

from files_attack import Pinger, start_swapper, stop_swapper
from harness import Runner

TASK_UID = 1000
TASK_GID = 1000
# /ping while the files API works through a long scan. The loop's own
# slices are a few ms; the rest is headroom for a shared, noisy 2-core
# machine (a runner that scans on its loop misses both by seconds: a
# search 3 s, a line range or replace over 20 s).
PING_MAX_MS = 1000.0
PING_P99_MS = 100.0


def q(path):
    return quote(path, safe="/")


class FilesAttack(unittest.TestCase):
    """A runner per test; ws is a directory the task made (its own)."""
    runner_args = ()

    def setUp(self):
        # A runner per test: one that froze must not take the next test down.
        self.r = Runner(self.runner_args)
        self.ws = os.path.join(self.r.work, "ws")
        self.task("mkdir -p " + self.ws)
        self.outside = []

    def tearDown(self):
        rc = self.r.stop()
        log = self.r.logtext()
        self.r.close()
        for p in self.outside:
            if os.path.lexists(p):
                os.unlink(p)
        if rc != 0:
            raise AssertionError("runner exited %s after SIGTERM; log tail:\n%s"
                                 % (rc, log[-3000:]))

    def task(self, cmd, timeout=120):
        """A foreground task as the task user; its stdout."""
        ev = self.r.execd({"command": cmd, "cwd": self.r.work, "timeout": timeout * 1000},
                          timeout=timeout + 10)
        assert ev and ev[-1]["type"] == "execution_complete", json.dumps(ev)[-1500:]
        return "\n".join(e["text"] for e in ev if e["type"] == "stdout")

    def background(self, cmd):
        ev = self.r.execd({"command": cmd, "cwd": self.r.work, "background": True})
        return ev[0]["text"]

    def request(self, method, path, body=None, timeout=30):
        """(status, body bytes); a timeout or a dead connection is status None."""
        try:
            st, _, data = self.r.request(method, path, body, timeout=timeout)
            return st, data
        except OSError as e:
            return None, repr(e).encode()

    def start_swapper(self, name, a, b, secs=50):
        return start_swapper(self.r, name, a, b, secs)

    def stop_swapper(self, stop, out):
        return stop_swapper(stop, out)

    def make_outside(self, content, uid=TASK_UID):
        """A file outside the Landlock write roots (/var/tmp), owned by uid:
        only the roots, not file permissions, keep the task out of it."""
        p = "/var/tmp/forceai-files-attack-%d-%d" % (os.getpid(), len(self.outside))
        with open(p, "wb") as f:
            f.write(content)
        os.chown(p, uid, uid)
        os.chmod(p, 0o644)
        self.outside.append(p)
        return p


class ReplaceRace(FilesAttack):
    """Finding 2: replace checks one descriptor, then reopens by name. The
    task swaps the file with a FIFO (the reopen blocks the runner for good)
    or with a symbolic link leading outside the write roots (the reopen
    writes there). The file has a second hard link, so replace rewrites it
    in place, the path that reopened."""
    SECONDS = 12

    def race(self, name, other_setup):
        d = os.path.join(self.ws, name)
        self.task("mkdir %s && cd %s && printf 'a' > f && ln f f.link && %s" % (d, d, other_setup))
        f = os.path.join(d, "f")
        stop, out = self.start_swapper(name, f, os.path.join(d, "x"))
        statuses, n = {}, 0
        t_end = time.monotonic() + self.SECONDS
        try:
            with Pinger(self.r, period=0.05) as p:
                while time.monotonic() < t_end:
                    # old == new: a match every time, so every request rewrites.
                    st, data = self.request("POST", "/files/replace",
                                            {f: {"old": "a", "new": "a"}}, timeout=10)
                    n += 1
                    statuses[st] = statuses.get(st, 0) + 1
                    if st not in (200, 400):
                        self.unexpected = data
                    if st is None:
                        break  # frozen: no point going on
        finally:
            swaps = self.stop_swapper(stop, out)
        print("\n    %s: %s swaps, %d replace requests %s, ping %s" % (
            name, swaps, n, statuses, p.figures()))
        return d, statuses, swaps, n, p

    def check_race(self, statuses, swaps, n, p):
        self.assertNotIn(None, statuses, "a replace request never got an answer: the runner froze")
        self.assertEqual(p.bad, [], "/ping failed during the race")
        # 200: the regular file rewritten; 400: the other one refused.
        self.assertEqual(set(statuses) - {200, 400}, set(), getattr(self, "unexpected", None))
        self.assertGreater(swaps or 0, 5000)
        self.assertGreater(n, 200)

    def test_fifo_swap_never_blocks(self):
        d, statuses, swaps, n, p = self.race("fifo", "mkfifo x")
        self.check_race(statuses, swaps, n, p)
        self.assertEqual(self.request("GET", "/ping", timeout=5)[0], 200)
        # Both sides were met: the regular file rewritten, the FIFO refused.
        self.assertGreater(statuses.get(200, 0), 0)
        self.assertGreater(statuses.get(400, 0), 0)

    def test_symlink_swap_never_writes_outside(self):
        outside = self.make_outside(b"outside, untouched\n")
        d, statuses, swaps, n, p = self.race("symlink", "ln -s %s x" % outside)
        with open(outside, "rb") as f:
            self.assertEqual(f.read(), b"outside, untouched\n",
                             "replace wrote through a swapped-in symbolic link")
        self.check_race(statuses, swaps, n, p)
        self.assertGreater(statuses.get(200, 0), 0)


class LongScans(FilesAttack):
    """Finding 4: long scans (a line range of a 40 GiB sparse file, a search
    over a big tree with a costly pattern, removing that tree, replace in
    big files) must not stall the loop: /ping keeps answering within
    PING_MAX_MS."""

    def measure(self, name, method, path, body=None, timeout=40):
        with Pinger(self.r, period=0.005, timeout=20) as p:
            time.sleep(0.1)
            t0 = time.monotonic()
            st, data = self.request(method, path, body, timeout=timeout)
            took = time.monotonic() - t0
            time.sleep(0.1)
        fig = p.figures()
        print("\n    %s: status %s in %.2f s, ping %s" % (name, st, took, fig))
        self.assertEqual(p.bad, [], "/ping failed")
        self.assertLess(fig["max_ms"], PING_MAX_MS, "the loop stalled during " + name)
        self.assertLess(fig["p99_ms"], PING_P99_MS, "the loop stalled during " + name)
        return st, data

    def test_line_range_of_sparse_40g(self):
        f = os.path.join(self.ws, "sparse")
        self.task("truncate -s 40G " + f)
        st, data = self.measure("40G sparse offset=2&limit=1", "GET",
                                "/files/download?path=%s&offset=2&limit=1" % q(f))
        # Either the whole scan (no second line: empty) or the scan bound.
        self.assertIn(st, (200, 400), data)
        if st == 400:
            self.assertIn(b"Range", data)
        else:
            self.assertEqual(data, b"")
        # A range that exists is still served.
        self.task("printf 'one\\ntwo\\nthree\\n' > %s/lines" % self.ws)
        st, data = self.request("GET", "/files/download?path=%s&offset=2&limit=1" %
                                q(self.ws + "/lines"))
        self.assertEqual((st, data), (200, b"two\n"))

    def test_search_big_tree_costly_pattern(self):
        tree = os.path.join(self.ws, "tree")
        # 150 directories x 1,000 files with 200-character names: 150,150
        # entries (under the 200,000 a walk may look at).
        self.task("python3 -c \"import os\n"
                  "for i in range(150):\n"
                  " d='%s/%%d' %% i; os.makedirs(d)\n"
                  " for j in range(1000):"
                  " open('%%s/%%06d%%s' %% (d, j, 'a' * 194), 'w').close()\"" %
                  tree, timeout=300)
        # Each name costs the matcher ~140 x 60 steps (the star retried
        # at every position against 60 literals).
        pattern = "*" + "a" * 60 + "b"
        st, data = self.measure("search 150,150 entries, pattern *a{60}b", "GET",
                                "/files/search?path=%s&pattern=%s" % (q(tree), pattern))
        # Found nothing, or stopped by the walk's work-time bound.
        self.assertIn(st, (200, 400), data)
        if st == 200:
            self.assertEqual(json.loads(data), [])
        else:
            self.assertIn(b"ms", data)
        st, data = self.measure("list depth 2 of 150,150 entries", "GET",
                                "/directories/list?path=%s&depth=2" % q(tree))
        self.assertEqual(st, 400, data[:200])  # over 10,000 results
        self.assertIn(b"10000 results", data)
        st, data = self.measure("delete 150,150 entries", "DELETE",
                                "/directories?path=" + q(tree))
        self.assertEqual((st, data), (200, b""))
        self.assertFalse(os.path.exists(tree))

    def test_replace_in_big_files(self):
        files = [os.path.join(self.ws, "big%d" % i) for i in range(8)]
        self.task("for f in %s; do yes 'abcdefgh 0123456789' | head -c 60M > $f; done" %
                  " ".join(files), timeout=300)
        st, data = self.measure("replace in 8 x 60 MiB", "POST", "/files/replace?verbose=true",
                                {f: {"old": "0123", "new": "3210"} for f in files}, timeout=45)
        self.assertEqual(st, 200, data)
        counts = json.loads(data)
        want = 60 * 1024 * 1024 // 20
        for f in files:
            self.assertIn(counts[f]["replacedCount"], (want, want + 1))
        with open(files[0], "rb") as fh:
            self.assertEqual(fh.read(40), b"abcdefgh 3210456789\n" * 2)


class ProcSelf(FilesAttack):
    """Finding 7: the task plants ws/self -> /proc/self; resolved by the
    runner that is the runner's own /proc entry: another session's saved
    `export -p` (its secrets) in the runner's session memfd, the runner's
    memory map, its environment."""

    def test_proc_self_is_not_the_runner(self):
        secret = "forceai-secret-%d" % os.getpid()
        st, body = self.r.json("POST", "/session", {})
        self.assertEqual(st, 200, body)
        sid = body["session_id"]
        ev = self.r.execd({"command": "export LEAKED_SECRET=%s" % secret},
                          path="/session/%s/run" % sid)
        self.assertEqual(ev[-1]["type"], "execution_complete", ev)
        self.task("ln -s /proc/self %s/self" % self.ws)
        link = self.ws + "/self"
        served = []
        for base in (link, "/proc/self"):
            for n in range(0, 64):
                st, data = self.request("GET", "/files/download?path=%s/fd/%d" % (q(base), n),
                                        timeout=10)
                if st == 200:
                    served.append("%s/fd/%d" % (base, n))
                self.assertNotIn(secret.encode(), data, "%s/fd/%d leaked the session" % (base, n))
            for name in ("maps", "environ", "status", "cmdline"):
                st, data = self.request(
                    "GET", "/files/download?path=%s/%s&offset=1&limit=100000" % (q(base), name),
                    timeout=10)
                if st == 200:
                    served.append("%s/%s" % (base, name))
                self.assertNotIn(secret.encode(), data)
        print("\n    served from the runner's /proc: %s" % served)
        self.assertEqual(served, [], "the runner's own /proc entries were served")
        self.assertEqual(self.request("GET", "/ping")[0], 200)


class ChownRoot(FilesAttack):
    """Finding 8: with --allow-root-tasks the API may give files to other
    owners. It must not follow a task-planted link onto a root-owned file,
    nor change anything outside the write roots."""
    runner_args = ("--allow-root-tasks",)

    def root_file(self):
        p = self.make_outside(b"root's\n", uid=0)
        os.chmod(p, 0o644)
        return p

    def assertRootOwned(self, p):
        s = os.stat(p)
        self.assertEqual((s.st_uid, s.st_gid, s.st_mode & 0o7777), (0, 0, 0o644), p)

    def test_chown_does_not_follow_planted_link(self):
        target = self.root_file()
        link = os.path.join(self.ws, "planted")
        self.task("ln -s %s %s" % (target, link))
        for body in ({link: {"owner": "2000", "group": "2000"}}, {link: {"mode": 777}},
                     {link: {"owner": "2000", "mode": 666}}):
            st, data = self.request("POST", "/files/permissions", body)
            self.assertNotEqual(st, 200, data)
            self.assertRootOwned(target)
        # Nor outside the write roots when asked directly.
        st, data = self.request("POST", "/files/permissions", {target: {"owner": "2000"}})
        self.assertEqual(st, 403, data)
        self.assertRootOwned(target)
        # A file of the task's own, beneath the roots, still changes hands.
        own = os.path.join(self.ws, "own")
        self.task("echo x > " + own)
        st, data = self.request("POST", "/files/permissions", {own: {"owner": "2000",
                                                                      "mode": 600}})
        self.assertEqual(st, 200, data)
        self.assertEqual((os.stat(own).st_uid, os.stat(own).st_mode & 0o777), (2000, 0o600))

    def test_chown_race_with_swapped_link(self):
        target = self.root_file()
        d = os.path.join(self.ws, "chrace")
        self.task("mkdir %s && cd %s && echo mine > f && ln -s %s x" % (d, d, target))
        f = os.path.join(d, "f")
        stop, out = self.start_swapper("chown", f, os.path.join(d, "x"))
        n, statuses = 0, {}
        t_end = time.monotonic() + 8
        try:
            while time.monotonic() < t_end:
                # Two other owners in turn: each request changes something.
                owner = str(2000 + n % 2)
                st, data = self.request("POST", "/files/permissions",
                                        {f: {"owner": owner, "group": owner}}, timeout=10)
                n += 1
                statuses[st] = statuses.get(st, 0) + 1
                if os.stat(target).st_uid != 0:
                    break
        finally:
            swaps = self.stop_swapper(stop, out)
        print("\n    chown race: %s swaps, %d chown requests %s" % (swaps, n, statuses))
        self.assertRootOwned(target)
        self.assertGreater(swaps or 0, 5000)
        self.assertGreater(n, 100)


if __name__ == "__main__":
    unittest.main()
