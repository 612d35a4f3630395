"""Red-team round four (issue 47): E2B's envd face (--envd-listen) from the attacker's side.

- A process started through envd reaches for the runner's doors (the main API, the envd port
  itself, on 127.0.0.1 and 127.0.0.2): the connection gate (docs/design/security.md#no-api-from-tasks) answers it
  nothing, as it answers any task.
- A task calls envd's POST /init to set its own access token: no answer, the token unchanged.
- `root` asked for (Basic auth's user, ?username=, /init's defaultUser): refused with a Connect
  error (or envd's HTTP error) that says why, and nothing runs.
- A file outside the task user's reach (read /etc/shadow, write into /etc, list /root): refused
  as the task user would be, nothing written.
- Watchers left open forever: polling watchers are bounded in number and each one's queue is
  bounded (a flood of changes nobody polls holds at most WATCHER_EVENTS_MAX events); WatchDir
  streams share the watch engine's limit.
- A Connect envelope that lies about its length (longer than the body, shorter, 4 GiB, or a
  second envelope smuggled after the first): refused as invalid_argument, no process started.
- The token: without X-Access-Token (and the runner's own header) every route but /health is
  401; and a process started through envd is in /v1/tasks and the audit trail (door envd).
- gzip uploads (Content-Encoding: gzip, docs/design/envd.md#gzip-uploads-and-the-upload-bound): a gzip bomb (10 MB of zeros in
  about 10 KB) is 413 naming --envd-upload-max once the decoded bytes pass it, raw or
  multipart, nothing left behind; a truncated, corrupt or trailing-garbage stream is 400 naming
  the fault and the file it would have replaced is untouched; the loop answers /health while a
  large gzip body inflates; another encoding is 400 naming gzip and identity.
- A ListDir of a large tree: walked in slices by the files layer's engine, so the loop answers
  /health meanwhile; past 10,000 entries a resource_exhausted error that says so (the walk of
  its own blocked the loop for the whole listing and cut it at 100,000 without a word); a Remove
  of a large tree, in slices too."""
import base64
import gzip
import http.client
import json
import os
import shutil
import struct
import tempfile
import threading
import time
import unittest

from harness import Runner, free_port

PY = "/usr/bin/python3"

PROBE = r'''
import json, socket, sys
out = {}
for port in sys.argv[1:]:
    for addr in ("127.0.0.1", "127.0.0.2"):
        try:
            s = socket.create_connection((addr, int(port)), timeout=3)
            s.sendall(b"POST /init HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 27\r\n\r\n{\"accessToken\":\"attacker\"}")
            got = s.recv(200)
            out[addr + ":" + port] = got.split(b"\r\n")[0].decode() if got else "closed"
            s.close()
        except OSError as e:
            out[addr + ":" + port] = "error: " + e.__class__.__name__
print(json.dumps(out))
'''


def envelope(obj, flags=0):
    b = json.dumps(obj).encode()
    return struct.pack(">BI", flags, len(b)) + b


def frames(data):
    out = []
    while len(data) >= 5:
        f, n = struct.unpack(">BI", data[:5])
        out.append((f, json.loads(data[5:5 + n])))
        data = data[5 + n:]
    return out


def health_polled_during(envd, call):
    """call() while another thread polls GET /health through envd(method, path) back to back:
    (its result, its seconds, the longest a /health overlapping it waited). A loop that blocks
    for the call makes one /health wait about as long as the call (the one-go walks of ListDir
    and Remove: 0.172-0.232 s of 0.176-0.233 s); one that works in slices, a few ms."""
    answered, other, done = [], [], threading.Event()

    def probe():
        while not done.is_set():
            t = time.monotonic()
            st = envd("GET", "/health")[0]
            if st == 204:
                answered.append((t, time.monotonic()))
            else:
                other.append(st)
    th = threading.Thread(target=probe)
    th.start()
    try:
        time.sleep(0.05)
        t0 = time.monotonic()
        out = call()
        t1 = time.monotonic()
        time.sleep(0.05)
    finally:
        done.set()
        th.join()
    if other:
        raise AssertionError("/health answered %s, not 204" % other[:5])
    waits = [b - a for a, b in answered if b > t0 and a < t1]
    if not waits:
        raise AssertionError("no /health was answered at all")
    return out, t1 - t0, max(waits)


class EnvdAttacks(unittest.TestCase):
    TOKEN = None

    def setUp(self):
        self.port = free_port()
        self.r = Runner(("--envd-listen", "127.0.0.1:%d" % self.port), token=self.TOKEN)

    def tearDown(self):
        rc = self.r.stop()
        log = self.r.logtext()
        self.r.close()
        if rc != 0:
            raise AssertionError("runner exited %s:\n%s" % (rc, log[-3000:]))

    def envd(self, method, path, body=b"", headers=None, timeout=30):
        h = {"X-Access-Token": self.TOKEN} if self.TOKEN else {}
        h.update(headers or {})
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        c.request(method, path, body=body, headers=h)
        resp = c.getresponse()
        data = resp.read()
        c.close()
        return resp.status, resp.getheader("Content-Type"), data

    def rpc(self, method, msg, headers=None):
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        st, _, data = self.envd("POST", method, json.dumps(msg), h)
        return st, json.loads(data) if data else None

    def start(self, msg, headers=None, raw=None):
        h = {"Content-Type": "application/connect+json"}
        h.update(headers or {})
        st, ct, data = self.envd("POST", "/process.Process/Start",
                                 raw if raw is not None else envelope(msg), h)
        self.assertEqual(st, 200)
        self.assertEqual(ct, "application/connect+json")
        return frames(data)

    def run_py(self, code, *args):
        ev = self.start({"process": {"cmd": PY, "args": ["-c", code] + list(args)}})
        out = b"".join(base64.b64decode(e["event"]["data"].get("stdout", ""))
                       for _, e in ev if "data" in e.get("event", {}))
        return ev, out

    def envd_tasks(self):
        st, body = self.r.json("GET", "/v1/tasks")
        self.assertEqual(st, 200)
        return [t for t in body["tasks"] if t.get("kind") == "envd_process"]

    def test_a_process_started_through_envd_reaches_no_door(self):
        ev, out = self.run_py(PROBE, str(self.r.port), str(self.port))
        self.assertEqual(ev[-1], (2, {}), ev)
        got = json.loads(out)
        for k, v in got.items():
            self.assertNotIn("HTTP/1.1", v, "a task got an answer from %s: %s" % (k, v))
        # The task's /init set no token: the envd API still answers without one.
        st, _ = self.rpc("/process.Process/List", {})
        self.assertEqual(st, 200)
        self.assertEqual(self.envd("GET", "/envs")[0], 200)

    def test_root_is_refused_and_says_why(self):
        basic = {"Authorization": "Basic " + base64.b64encode(b"root:").decode()}
        ev = self.start({"process": {"cmd": "/usr/bin/id"}}, basic)
        self.assertEqual(len(ev), 1, ev)
        self.assertEqual(ev[0][0], 2)
        err = ev[0][1]["error"]
        self.assertEqual(err["code"], "permission_denied")
        self.assertIn("root", err["message"])
        self.assertIn("task user", err["message"])
        st, body = self.rpc("/filesystem.Filesystem/ListDir", {"path": "/"}, basic)
        self.assertEqual((st, body["code"]), (403, "permission_denied"))
        st, _, data = self.envd("GET", "/files?path=/etc/hostname&username=root")
        self.assertEqual(st, 403)
        self.assertIn(b"root", data)
        st, _, _ = self.envd("POST", "/init", json.dumps({"defaultUser": "root"}),
                             {"Content-Type": "application/json"})
        self.assertEqual(st, 403)
        self.assertEqual(self.envd_tasks(), [], "nothing ran")
        # Another unknown user: unauthenticated, as envd answers it.
        ev = self.start({"process": {"cmd": "/usr/bin/id"}},
                        {"Authorization": "Basic " + base64.b64encode(b"nobody2:").decode()})
        self.assertEqual(ev[0][1]["error"]["code"], "unauthenticated")

    def test_files_outside_the_task_users_reach(self):
        st, _, data = self.envd("GET", "/files?path=/etc/shadow")
        self.assertEqual(st, 403, data)
        st, _, data = self.envd("POST", "/files?path=/etc/forceai-envd-attack",
                                b"x", {"Content-Type": "application/octet-stream"})
        self.assertIn(st, (403,), data)
        self.assertFalse(os.path.exists("/etc/forceai-envd-attack"))
        st, body = self.rpc("/filesystem.Filesystem/Remove", {"path": "/etc/hostname"})
        self.assertEqual(body["code"], "permission_denied")
        self.assertTrue(os.path.exists("/etc/hostname"))
        st, body = self.rpc("/filesystem.Filesystem/Move",
                            {"source": "/etc/hostname", "destination": "/tmp/stolen"})
        self.assertEqual(body["code"], "permission_denied")
        d = tempfile.mkdtemp(prefix="forceai-envd-priv-")
        self.addCleanup(os.rmdir, d)
        os.chmod(d, 0o700)
        st, body = self.rpc("/filesystem.Filesystem/ListDir", {"path": d})
        self.assertEqual(body["code"], "permission_denied", body)

    def big_tree(self, prefix, dirs, mode, owner=None):
        """A directory under the work dir holding d0..d<dirs-1>, 1,000 empty files each."""
        d = tempfile.mkdtemp(prefix=prefix, dir=self.r.work)
        os.chmod(d, mode)
        for i in range(dirs):
            self.thousand_files(os.path.join(d, "d%d" % i), owner)
        return d

    @staticmethod
    def thousand_files(sub, owner=None):
        os.mkdir(sub)
        if owner is not None:
            os.chown(sub, owner, owner)
        for k in range(1000):
            open(os.path.join(sub, "f%04d" % k), "w").close()

    def test_a_large_listdir_neither_stalls_the_loop_nor_is_cut_silently(self):
        # ListDir walks with the files layer's engine in 2 ms slices: /health is answered
        # while 9,009 entries are listed (the walk of its own blocked the loop for all of
        # it), and past the files layer's bound (10,000 entries) the answer is an error
        # that says so, not a list cut short without a word.
        d = self.big_tree("forceai-envd-big-", 9, 0o755)
        (st, _, data), took, worst = health_polled_during(
            self.envd, lambda: self.envd("POST", "/filesystem.Filesystem/ListDir",
                                         json.dumps({"path": d, "depth": 2}),
                                         {"Content-Type": "application/json"}))
        body = json.loads(data)
        self.assertEqual(st, 200, body)
        paths = [e["path"] for e in body["entries"]]
        want = []
        for i in range(9):
            want.append("%s/d%d" % (d, i))
            want += ["%s/d%d/f%04d" % (d, i, k) for k in range(1000)]
        self.assertEqual(paths, want, "every entry once, a directory before its contents")
        print("ListDir of 9,009 entries %.3f s; the longest /health wait %.3f s" % (took, worst))
        self.assertLess(worst, took / 2, "the loop answered nothing else while listing")
        self.thousand_files(os.path.join(d, "d9"))
        st, body = self.rpc("/filesystem.Filesystem/ListDir", {"path": d, "depth": 2})
        self.assertEqual((st, body["code"]), (429, "resource_exhausted"), body)
        self.assertIn("more than 10000 entries", body["message"])
        self.assertIn("narrow it", body["message"])
        st, body = self.rpc("/filesystem.Filesystem/ListDir", {"path": d})
        self.assertEqual(st, 200, body)
        self.assertEqual(len(body["entries"]), 10)

    def test_a_name_that_is_not_utf8_is_listed_not_dropped(self):
        # A task can name a file with any bytes; ListDir and Stat write such a name as Go's
        # encoder does (U+FFFD), and neither drops the entry nor answers an empty message.
        d = tempfile.mkdtemp(prefix="forceai-envd-u8-", dir=self.r.work)
        os.chmod(d, 0o755)
        open(os.path.join(d.encode(), b"bad\xff name"), "w").close()
        open(os.path.join(d, "good"), "w").close()
        st, body = self.rpc("/filesystem.Filesystem/ListDir", {"path": d})
        self.assertEqual(st, 200, body)
        self.assertEqual(sorted(e["name"] for e in body["entries"]), ["bad\ufffd name", "good"])
        os.symlink(b"target\xfe", os.path.join(d.encode(), b"lnk"))
        st, body = self.rpc("/filesystem.Filesystem/Stat", {"path": d + "/lnk"})
        self.assertEqual(st, 200, body)
        self.assertEqual(body["entry"]["symlinkTarget"], "target\ufffd")
        self.assertEqual(body["entry"]["type"], "FILE_TYPE_SYMLINK")

    def test_removing_a_large_tree_does_not_stall_the_loop(self):
        # Remove is the files layer's rm -rf in slices: /health is answered while 20,000
        # files go (the one-go removal held every other request until it was done).
        d = self.big_tree("forceai-envd-rm-", 20, 0o777, owner=1000)
        (st, body), took, worst = health_polled_during(
            self.envd, lambda: self.rpc("/filesystem.Filesystem/Remove", {"path": d}))
        self.assertEqual((st, body), (200, {}))
        self.assertFalse(os.path.exists(d))
        print("Remove of 20,020 entries %.3f s; the longest /health wait %.3f s" % (took, worst))
        self.assertLess(worst, took / 2, "the loop answered nothing else while removing")
        # What needs no walk (a file) goes at once; a path that is not there is not_found.
        f = os.path.join(self.r.work, "forceai-envd-rm-one")
        open(f, "w").close()
        os.chmod(self.r.work, 0o777)
        self.assertEqual(self.rpc("/filesystem.Filesystem/Remove", {"path": f}), (200, {}))
        self.assertFalse(os.path.exists(f))
        st, body = self.rpc("/filesystem.Filesystem/Remove", {"path": f})
        self.assertEqual((st, body["code"]), (404, "not_found"), body)

    def test_watchers_left_open_are_bounded(self):
        d = tempfile.mkdtemp(prefix="forceai-envd-w-", dir=self.r.work)
        os.chmod(d, 0o777)
        ids = []
        for _ in range(16):
            st, body = self.rpc("/filesystem.Filesystem/CreateWatcher", {"path": d})
            self.assertEqual(st, 200, body)
            ids.append(body["watcherId"])
        st, body = self.rpc("/filesystem.Filesystem/CreateWatcher", {"path": d})
        self.assertEqual((st, body["code"]), (429, "resource_exhausted"))
        self.assertIn("RemoveWatcher", body["message"])
        for i in range(5000):  # a flood nobody polls
            open(os.path.join(d, "f%d" % i), "w").close()
        time.sleep(1)
        st, body = self.rpc("/filesystem.Filesystem/GetWatcherEvents", {"watcherId": ids[0]})
        self.assertEqual(st, 200)
        self.assertLessEqual(len(body["events"]), 4096)
        self.assertGreater(len(body["events"]), 100)
        st, body = self.rpc("/filesystem.Filesystem/RemoveWatcher", {"watcherId": ids[0]})
        self.assertEqual(st, 200)
        st, body = self.rpc("/filesystem.Filesystem/CreateWatcher", {"path": d})
        self.assertEqual(st, 200, body)
        st, body = self.rpc("/filesystem.Filesystem/GetWatcherEvents", {"watcherId": "nope"})
        self.assertEqual(body["code"], "not_found")

    def test_an_envelope_that_lies_about_its_length(self):
        real = envelope({"process": {"cmd": "/bin/true"}})
        lies = {
            "longer than the body": struct.pack(">BI", 0, len(real) + 100) + real[5:],
            "shorter than the body": struct.pack(">BI", 0, len(real) - 10) + real[5:],
            "4 GiB": struct.pack(">BI", 0, 0xFFFFFFFF) + real[5:],
            "a second envelope smuggled": real + envelope({"process": {"cmd": "/bin/id"}}),
            "compressed without a codec": struct.pack(">BI", 1, len(real) - 5) + real[5:],
            "shorter than the prefix": b"\x00\x00\x00",
        }
        for why, body in lies.items():
            ev = self.start(None, raw=body)
            self.assertEqual(len(ev), 1, why)
            self.assertEqual(ev[0][0], 2, why)
            self.assertEqual(ev[0][1]["error"]["code"], "invalid_argument", (why, ev))
        self.assertEqual(self.envd_tasks(), [], "no process started")
        # And a unary RPC sent as a stream, or JSON sent where Connect+JSON is due.
        ev = self.start(None, raw=json.dumps({"process": {"cmd": "/bin/true"}}).encode())
        self.assertEqual(ev[0][1]["error"]["code"], "invalid_argument")

    def test_a_process_is_a_task_and_audited(self):
        ev, out = self.run_py("print('hi')")
        pid = ev[0][1]["event"]["start"]["pid"]
        self.assertEqual(out, b"hi\n")
        tasks = self.envd_tasks()
        self.assertEqual([t["pid"] for t in tasks], [pid])
        st, h, data = self.r.request("GET", "/v1/audit?format=json")
        self.assertEqual(st, 200, data)
        text = data.decode()
        self.assertIn('"door":"envd"', text)
        self.assertIn("task started", text)


class EnvdToken(EnvdAttacks):
    """The same attacks on a box with an access token, and the token's own rules."""
    TOKEN = "envd-" + os.urandom(8).hex()

    def test_the_token_is_required(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("POST", "/process.Process/List", "{}", {"Content-Type": "application/json"})
        self.assertEqual(c.getresponse().status, 401)
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("GET", "/files?path=/etc/hostname")
        self.assertEqual(c.getresponse().status, 401)
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("GET", "/health")
        self.assertEqual(c.getresponse().status, 204)
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("POST", "/init", json.dumps({"accessToken": "mine"}),
                  {"Content-Type": "application/json"})
        self.assertEqual(c.getresponse().status, 401)
        st, _ = self.rpc("/process.Process/List", {})
        self.assertEqual(st, 200)


if __name__ == "__main__":
    unittest.main()


class EnvdReset(unittest.TestCase):
    """A pooled box's next tenant meets a fresh envd: what the last one's /init set (its
    token, variables, workdir), its processes and its polling watchers do not survive
    POST /v1/reset (profile hook end_envd, docs/design/envd.md#health-envs-metrics-init-reset)."""

    def setUp(self):
        self.port = free_port()
        # A writable root of its own: the machine's /tmp may hold more than a reset keeps.
        self.root = tempfile.mkdtemp(prefix="forceai-envd-reset-")
        os.chmod(self.root, 0o755)
        os.chown(self.root, 1000, 1000)
        self.addCleanup(shutil.rmtree, self.root, True)
        self.r = Runner(("--envd-listen", "127.0.0.1:%d" % self.port, "--allow-reset",
                         "--landlock-roots", self.root))

    TOKEN = None
    tearDown = EnvdAttacks.tearDown
    envd, rpc, start, run_py = EnvdAttacks.envd, EnvdAttacks.rpc, EnvdAttacks.start, EnvdAttacks.run_py

    def test_a_reset_forgets_the_tenants_envd(self):
        st, _, _ = self.envd("POST", "/init", json.dumps(
            {"envVars": {"TENANT_SECRET": "s3cret"}, "defaultWorkdir": self.root,
             "accessToken": "tenant-a"}), {"Content-Type": "application/json"})
        self.assertEqual(st, 204)
        a = {"X-Access-Token": "tenant-a"}
        self.assertEqual(self.envd("GET", "/envs")[0], 401)  # the token now binds
        st, w = self.rpc("/filesystem.Filesystem/CreateWatcher", {"path": self.root}, a)
        self.assertEqual(st, 200, w)
        st, _, body = self.r.request("POST", "/v1/reset",
                                     headers={"X-EXECD-ACCESS-TOKEN": "tenant-a"}, timeout=300)
        self.assertEqual(st, 200, body)
        st, _, data = self.envd("GET", "/envs")
        self.assertEqual(st, 200, "the tenant's token outlived the reset")
        self.assertNotIn("TENANT_SECRET", json.loads(data))
        st, got = self.rpc("/filesystem.Filesystem/GetWatcherEvents",
                           {"watcherId": w["watcherId"]})
        self.assertEqual(st, 404, got)
        ev = self.run_py("import os; print(os.getcwd())")[1]
        self.assertNotEqual(ev.strip().decode(), self.root,
                            "the tenant's defaultWorkdir outlived the reset")


class EnvdGzipUploads(unittest.TestCase):
    """POST /files with Content-Encoding: gzip, as E2B's SDK sends it ({gzip: true}), from the
    attacker's side; the upload bound is 1 MiB here."""
    BOUND = 1024 * 1024
    TOKEN = None
    tearDown = EnvdAttacks.tearDown
    envd = EnvdAttacks.envd

    def setUp(self):
        self.port = free_port()
        self.r = Runner(("--envd-listen", "127.0.0.1:%d" % self.port,
                         "--envd-upload-max", str(self.BOUND)))
        self.dir = tempfile.mkdtemp(prefix="forceai-envd-gz-", dir=self.r.work)
        os.chmod(self.dir, 0o777)

    def post(self, name, body, encoding="gzip", ctype="application/octet-stream", query=True):
        h = {"Content-Type": ctype}
        if encoding:
            h["Content-Encoding"] = encoding
        path = "/files?path=%s/%s" % (self.dir, name) if query else "/files"
        st, ct, data = self.envd("POST", path, body, h, timeout=120)
        return st, ct, json.loads(data) if data else None

    def left_behind(self):
        return sorted(os.listdir(self.dir))

    def test_a_gzip_bomb_is_refused_at_the_bound_and_leaves_nothing(self):
        bomb = gzip.compress(bytes(10 * 1000 * 1000), 9)
        self.assertLess(len(bomb), 20000)
        t0 = time.monotonic()
        st, ct, body = self.post("bomb", bomb)
        self.assertEqual(st, 413, body)
        self.assertEqual(ct, "application/json")
        self.assertIn("1048576", body["message"])
        self.assertIn("--envd-upload-max", body["message"])
        self.assertEqual(body["code"], 413)
        self.assertLess(time.monotonic() - t0, 20)
        self.assertEqual(self.left_behind(), [], "a refused upload left files behind")
        # the same bomb inside a gzip-encoded multipart body
        b = "forceai-gz-bound"
        mp = (("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s/m\"\r\n"
               "Content-Type: application/octet-stream\r\n\r\n") % (b, self.dir)).encode() + \
            bytes(10 * 1000 * 1000) + ("\r\n--%s--\r\n" % b).encode()
        st, _, body = self.post("", gzip.compress(mp, 9), ctype="multipart/form-data; boundary=" + b,
                                query=False)
        self.assertEqual(st, 413, body)
        self.assertEqual(self.left_behind(), [])
        # the bound is the upload's, not gzip's: just under it is written whole
        data = os.urandom(self.BOUND)
        st, _, body = self.post("under", gzip.compress(data, 1))
        self.assertEqual(st, 200, body)
        with open(os.path.join(self.dir, "under"), "rb") as f:
            self.assertEqual(f.read(), data)
        st, _, body = self.post("identity-over", os.urandom(self.BOUND + 1), encoding=None)
        self.assertEqual(st, 413, body)
        self.assertNotIn("gzip", body["message"])
        self.assertEqual(self.left_behind(), ["under"])

    def test_a_broken_gzip_stream_is_refused_and_replaces_nothing(self):
        target = os.path.join(self.dir, "kept")
        with open(target, "wb") as f:
            f.write(b"the old content")
        os.chmod(target, 0o666)
        good = gzip.compress(b"new content " * 5000, 6)
        crc = bytearray(good)
        crc[-8] ^= 0xff
        cases = [
            (good[:len(good) // 2], "truncated"),
            (good[:-1], "truncated"),
            (bytes(crc), "CRC-32 mismatch"),
            (good + b"garbage", "data after the end"),
            (b"plain text, not gzip", "not gzip"),
            (good[:10] + b"\xff" * 50, "bad deflate block"),
            (b"", "empty body"),
        ]
        for body, words in cases:
            st, ct, got = self.post("kept", body)
            self.assertEqual(st, 400, (words, got))
            self.assertEqual(ct, "application/json")
            self.assertIn(words, got["message"])
            self.assertIn("gzip", got["message"])
            with open(target, "rb") as f:
                self.assertEqual(f.read(), b"the old content", words)
            self.assertEqual(self.left_behind(), ["kept"], words)
        self.assertEqual(self.envd("GET", "/health")[0], 204)

    def test_other_encodings_are_refused_naming_what_is_accepted(self):
        for enc in ("br", "deflate", "gzip, br", "compress"):
            st, _, body = self.post("x", b"anything", encoding=enc)
            self.assertEqual(st, 400, body)
            self.assertIn("gzip or identity", body["message"])
        self.assertEqual(self.left_behind(), [])

    def test_the_loop_answers_while_a_large_gzip_body_inflates(self):
        self.r.stop()
        self.r.close()
        self.port = free_port()
        self.r = Runner(("--envd-listen", "127.0.0.1:%d" % self.port,
                         "--envd-upload-max", str(400 * 1000 * 1000)))
        self.dir = tempfile.mkdtemp(prefix="forceai-envd-gz-", dir=self.r.work)
        os.chmod(self.dir, 0o777)
        big = gzip.compress(bytes(300 * 1000 * 1000), 9)  # ~300 KB: 300 MB to write
        (st, _, body), _, worst = health_polled_during(self.envd, lambda: self.post("big", big))
        self.assertEqual(st, 200, body)
        self.assertEqual(os.path.getsize(os.path.join(self.dir, "big")), 300 * 1000 * 1000)
        print("worst /health %.3f s" % worst)
        self.assertLess(worst, 0.2, "/health waited %.2f s behind the inflating body" % worst)
