"""Files API (execd /files and /directories) against the real runner: curl
and raw sockets. The runner acts on files as the task user (uid 1000 by
default) while the tests run as root."""
import calendar
import hashlib
import http.client
import json
import os
import pwd
import grp
import re
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
import unittest
from urllib.parse import quote

from harness import RUNNER, Runner, RunnerTest

TASK_UID = 1000
TASK_GID = 1000
# Under valgrind or the sanitizers memory figures mean nothing and big
# transfers crawl.
WRAPPED = bool(os.environ.get("RUNNER_WRAP"))
SANITIZED = WRAPPED or "asan" in RUNNER
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$")


def q(path):
    return quote(path, safe="/")


def user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def group_name(gid):
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                return h.hexdigest()
            h.update(b)


def multipart(parts, boundary="XyZzY"):
    """parts: list of (name, filename or None, content bytes)."""
    out = b""
    for name, filename, content in parts:
        out += b"--" + boundary.encode() + b"\r\n"
        cd = 'Content-Disposition: form-data; name="%s"' % name
        if filename is not None:
            cd += '; filename="%s"' % filename
        out += cd.encode() + b"\r\n\r\n" + content + b"\r\n"
    out += b"--" + boundary.encode() + b"--\r\n"
    return out, "multipart/form-data; boundary=" + boundary


class FilesBase(RunnerTest):
    def setUp(self):
        # A fresh directory per test, writable by the task user.
        self.d = tempfile.mkdtemp(dir=self.r.work)
        os.chmod(self.d, 0o777)
        self.scratch = tempfile.mkdtemp(prefix="forceai-files-src-")

    def tearDown(self):
        shutil.rmtree(self.d, ignore_errors=True)
        shutil.rmtree(self.scratch, ignore_errors=True)

    # -- helpers --
    def call(self, method, path, body=None, headers=None):
        st, h, data = self.r.request(method, path, body, headers)
        return st, h, data

    def jcall(self, method, path, body=None, headers=None):
        st, h, data = self.call(method, path, body, headers)
        return st, (json.loads(data) if data else None)

    def assertError(self, st, body, status, code=None):
        self.assertEqual(st, status, body)
        self.assertIsInstance(body, dict, body)
        self.assertIn("message", body)
        if code:
            self.assertEqual(body.get("code"), code, body)

    def upload(self, path, data=b"", meta=None, src=None):
        """curl multipart upload as the SDK does; returns (status, body)."""
        m = {"path": path}
        m.update(meta or {})
        mf = os.path.join(self.scratch, "meta.json")
        with open(mf, "w") as f:
            json.dump(m, f)
        if src is None:
            src = os.path.join(self.scratch, "payload")
            with open(src, "wb") as f:
                f.write(data)
        r = self.r.curl("-F", "metadata=@%s;type=application/json;filename=metadata" % mf,
                        "-F", "file=@%s;filename=%s;type=application/octet-stream" % (
                            src, os.path.basename(path) or "x"),
                        "-w", "\n%{http_code}", self.r.url + "/files/upload", timeout=600)
        out = r.stdout.rsplit(b"\n", 1)
        status = int(out[1])
        return status, (json.loads(out[0]) if out[0].strip() else None)

    def download(self, path, dest, *args):
        r = self.r.curl("-o", dest, "-w", "%{http_code}", *args,
                        self.r.url + "/files/download?path=" + q(path), timeout=600)
        return int(r.stdout)

    def ls(self, d):
        return sorted(os.listdir(d))


class Upload(FilesBase):
    def test_roundtrip_random_binary_by_sha256(self):
        for size in (0, 1, 64 * 1024 + 1, (8 if WRAPPED else 100) * 1024 * 1024):
            with self.subTest(size=size):
                src = os.path.join(self.scratch, "src-%d" % size)
                with open(src, "wb") as f:
                    left = size
                    while left:
                        n = min(left, 8 << 20)
                        f.write(os.urandom(n))
                        left -= n
                target = os.path.join(self.d, "rt-%d.bin" % size)
                st, body = self.upload(target, src=src)
                self.assertEqual(st, 200, body)
                self.assertEqual(os.path.getsize(target), size)
                self.assertEqual(sha256_file(target), sha256_file(src))
                dst = os.path.join(self.scratch, "dl-%d" % size)
                self.assertEqual(self.download(target, dst), 200)
                self.assertEqual(sha256_file(dst), sha256_file(src))
                os.unlink(src)
                os.unlink(dst)
                os.unlink(target)

    def test_owned_by_task_user_parents_created(self):
        target = os.path.join(self.d, "a/b/c/file.txt")
        st, body = self.upload(target, b"hi")
        self.assertEqual(st, 200, body)
        for p in (target, os.path.join(self.d, "a"), os.path.join(self.d, "a/b/c")):
            s = os.stat(p)
            self.assertEqual((s.st_uid, s.st_gid), (TASK_UID, TASK_GID), p)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(self.d, "a")).st_mode), 0o755)
        with open(target, "rb") as f:
            self.assertEqual(f.read(), b"hi")

    def test_modes(self):
        t = os.path.join(self.d, "m.txt")
        self.assertEqual(self.upload(t, b"1", {"mode": 600})[0], 200)
        self.assertEqual(stat.S_IMODE(os.stat(t).st_mode), 0o600)
        # Overwrite without a mode keeps the file's mode; a new file gets execd's 755.
        self.assertEqual(self.upload(t, b"2")[0], 200)
        self.assertEqual(stat.S_IMODE(os.stat(t).st_mode), 0o600)
        t2 = os.path.join(self.d, "n.txt")
        self.assertEqual(self.upload(t2, b"1")[0], 200)
        self.assertEqual(stat.S_IMODE(os.stat(t2).st_mode), 0o755)

    def test_repeated_pairs_and_metadata_without_filename(self):
        a, b = os.path.join(self.d, "pa"), os.path.join(self.d, "sub/pb")
        body, ct = multipart([
            ("metadata", None, json.dumps({"path": a}).encode()),
            ("file", "pa", b"AAA"),
            ("ignored", None, b"other form fields are ignored"),
            ("metadata", "metadata", json.dumps({"path": b, "mode": 640}).encode()),
            ("file", "pb", b"B" * 100000),
        ])
        st, _, data = self.call("POST", "/files/upload", body, {"Content-Type": ct})
        self.assertEqual(st, 200, data)
        self.assertEqual(open(a, "rb").read(), b"AAA")
        self.assertEqual(open(b, "rb").read(), b"B" * 100000)
        self.assertEqual(stat.S_IMODE(os.stat(b).st_mode), 0o640)
        # All metadata first, then the files (execd pairs them by order).
        c, d = os.path.join(self.d, "pc"), os.path.join(self.d, "pd")
        body, ct = multipart([
            ("metadata", None, json.dumps({"path": c}).encode()),
            ("metadata", None, json.dumps({"path": d}).encode()),
            ("file", "pc", b"C"),
            ("file", "pd", b"D"),
        ])
        st, _, data = self.call("POST", "/files/upload", body, {"Content-Type": ct})
        self.assertEqual(st, 200, data)
        self.assertEqual(open(c, "rb").read() + open(d, "rb").read(), b"CD")

    def test_chunked_streaming_body(self):
        """Node's fetch streams uploads with Transfer-Encoding: chunked."""
        t = os.path.join(self.d, "chunked.bin")
        payload = os.urandom(3 * 1024 * 1024 + 17)
        body, ct = multipart([("metadata", "metadata", json.dumps({"path": t}).encode()),
                              ("file", "chunked.bin", payload)])

        def gen():
            for i in range(0, len(body), 9973):
                yield body[i:i + 9973]
        c = http.client.HTTPConnection("127.0.0.1", self.r.port, timeout=30)
        c.request("POST", "/files/upload", body=gen(), headers=self.r.headers(
            {"Content-Type": ct}), encode_chunked=True)
        resp = c.getresponse()
        data = resp.read()
        c.close()
        self.assertEqual(resp.status, 200, data)
        self.assertEqual(open(t, "rb").read(), payload)

    def _partial_upload(self, target, payload, send_fraction):
        """Start an upload and stop mid-body; returns the open socket."""
        body, ct = multipart([("metadata", "metadata", json.dumps({"path": target}).encode()),
                              ("file", "x", payload)])
        s = socket.create_connection(("127.0.0.1", self.r.port))
        hdr = "POST /files/upload HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\n" \
              "Content-Length: %d\r\n" % (ct, len(body))
        for k, v in self.r.headers().items():
            hdr += "%s: %s\r\n" % (k, v)
        s.sendall(hdr.encode() + b"\r\n" + body[:int(len(body) * send_fraction)])
        return s, body

    def test_dropped_connection_leaves_old_file_and_no_temp(self):
        t = os.path.join(self.d, "keep.txt")
        with open(t, "wb") as f:
            f.write(b"old content")
        before = self.ls(self.d)
        s, _ = self._partial_upload(t, os.urandom(4 << 20), 0.5)
        time.sleep(0.3)
        # Mid-upload: the old file is still whole, no temporary is visible.
        self.assertEqual(open(t, "rb").read(), b"old content")
        self.assertEqual(self.ls(self.d), before)
        s.close()
        time.sleep(0.3)
        self.assertEqual(open(t, "rb").read(), b"old content")
        self.assertEqual(self.ls(self.d), before)
        self.assertEqual(self.call("GET", "/ping")[0], 200)

    def test_replaced_only_when_complete(self):
        t = os.path.join(self.d, "swap.bin")
        with open(t, "wb") as f:
            f.write(b"old")
        payload = os.urandom(2 << 20)
        s, body = self._partial_upload(t, payload, 0.9)
        time.sleep(0.2)
        self.assertEqual(open(t, "rb").read(), b"old")
        s.sendall(body[int(len(body) * 0.9):])
        s.settimeout(10)
        resp = b""
        while b"\r\n\r\n" not in resp:
            resp += s.recv(4096)
        s.close()
        self.assertTrue(resp.startswith(b"HTTP/1.1 200"), resp)
        self.assertEqual(open(t, "rb").read(), payload)

    def test_bad_uploads(self):
        t = os.path.join(self.d, "bad.txt")
        meta = json.dumps({"path": t}).encode()
        good_body, ct = multipart([("metadata", "metadata", meta), ("file", "bad.txt", b"x")])
        cases = [
            ("not multipart", good_body, "application/json", 400, "INVALID_FILE"),
            ("no boundary", good_body, "multipart/form-data", 400, "INVALID_FILE"),
            ("empty body", b"", ct, 400, "INVALID_FILE"),
            ("truncated", good_body[:-12], ct, 400, "INVALID_FILE"),
            ("garbage", b"this is not multipart at all", ct, 400, "INVALID_FILE"),
            ("header without colon", b"--XyZzY\r\nbroken\r\n\r\nx\r\n--XyZzY--\r\n", ct, 400,
             "INVALID_FILE"),
        ]
        for name, parts, code in [
            ("metadata not JSON", [("metadata", "metadata", b"{not json"),
                                   ("file", "f", b"x")], "INVALID_FILE_METADATA"),
            ("metadata not object", [("metadata", "metadata", b"[1]"),
                                     ("file", "f", b"x")], "INVALID_FILE_METADATA"),
            ("metadata path empty", [("metadata", "metadata", b"{}"), ("file", "f", b"x")],
             "INVALID_FILE_METADATA"),
            ("relative path", [("metadata", "metadata", b'{"path":"rel/x"}'),
                               ("file", "f", b"x")], "INVALID_FILE_METADATA"),
            ("NUL in path", [("metadata", "metadata", b'{"path":"/tmp/a\\u0000b"}'),
                             ("file", "f", b"x")], "INVALID_FILE_METADATA"),
            ("mode not octal", [("metadata", "metadata", json.dumps(
                {"path": t, "mode": 789}).encode()), ("file", "f", b"x")],
             "INVALID_FILE_METADATA"),
            ("mode a string", [("metadata", "metadata", json.dumps(
                {"path": t, "mode": "755"}).encode()), ("file", "f", b"x")],
             "INVALID_FILE_METADATA"),
            ("unknown owner", [("metadata", "metadata", json.dumps(
                {"path": t, "owner": "no-such-user-xyz"}).encode()), ("file", "f", b"x")],
             "INVALID_FILE_METADATA"),
            ("file before metadata", [("file", "f", b"x"), ("metadata", "metadata", meta)],
             "INVALID_FILE_METADATA"),
            ("metadata without file", [("metadata", "metadata", meta)], "INVALID_FILE_CONTENT"),
            ("no metadata", [("other", None, b"x")], "INVALID_FILE_METADATA"),
            ("count mismatch", [("metadata", "metadata", meta), ("file", "f", b"x"),
                                ("metadata", "metadata", meta)], "INVALID_FILE"),
        ]:
            b, c = multipart(parts)
            cases.append((name, b, c, 400, code))
        os.mkdir(os.path.join(self.d, "adir"))
        b, c = multipart([("metadata", "metadata", json.dumps(
            {"path": os.path.join(self.d, "adir")}).encode()), ("file", "f", b"x")])
        cases.append(("directory target", b, c, 400, "INVALID_FILE"))
        for name, body, ctype, status, code in cases:
            with self.subTest(name):
                st, _, data = self.call("POST", "/files/upload", body, {"Content-Type": ctype})
                self.assertError(st, json.loads(data), status, code)
        self.assertFalse(os.path.exists(t))
        self.assertEqual(self.ls(self.d), ["adir"])
        self.assertEqual(self.call("GET", "/ping")[0], 200)


class Download(FilesBase):
    def setUp(self):
        super().setUp()
        self.f = os.path.join(self.d, "data.bin")
        self.content = bytes(range(256)) * 4
        with open(self.f, "wb") as f:
            f.write(self.content)

    def get(self, path, headers=None, extra=""):
        return self.call("GET", "/files/download?path=" + q(path) + extra, None, headers)

    def test_whole_file_headers(self):
        st, h, data = self.get(self.f)
        self.assertEqual(st, 200)
        self.assertEqual(data, self.content)
        self.assertEqual(h["content-type"], "application/octet-stream")
        self.assertEqual(h["content-length"], str(len(self.content)))
        self.assertEqual(h["content-disposition"], 'attachment; filename="data.bin"')

    def test_ranges(self):
        n = len(self.content)
        for rng, start, end in [("bytes=0-0", 0, 0), ("bytes=10-19", 10, 19),
                                ("bytes=1000-", 1000, n - 1), ("bytes=-5", n - 5, n - 1),
                                ("bytes=1020-99999", 1020, n - 1),
                                ("bytes=5000-6000, 3-4", 3, 4)]:
            with self.subTest(rng):
                st, h, data = self.get(self.f, {"Range": rng})
                self.assertEqual(st, 206)
                self.assertEqual(data, self.content[start:end + 1])
                self.assertEqual(h["content-range"], "bytes %d-%d/%d" % (start, end, n))
                self.assertEqual(h["content-length"], str(end - start + 1))

    def test_range_beyond_end_416_malformed_ignored(self):
        for rng in ("bytes=1024-", "bytes=5000-6000", "bytes=-0"):
            with self.subTest(rng):
                st, h, data = self.get(self.f, {"Range": rng})
                self.assertError(st, json.loads(data), 416)
                self.assertEqual(h["content-range"], "bytes */1024")
        # RFC 9110 §14.2: a Range that is not a valid bytes range set is ignored
        for rng in ("items=0-1", "bytes=9-3", "bytes=abc"):
            with self.subTest(rng):
                st, h, data = self.get(self.f, {"Range": rng})
                self.assertEqual((st, data), (200, self.content))

    def test_offset_limit_lines(self):
        t = os.path.join(self.d, "lines.txt")
        with open(t, "w") as f:
            f.write("l1\nl2\nl3\nl4")
        for off, lim, want in [(1, 1, b"l1\n"), (2, 2, b"l2\nl3\n"), (3, 10, b"l3\nl4"),
                               (9, 1, b"")]:
            st, h, data = self.get(t, extra="&offset=%d&limit=%d" % (off, lim))
            self.assertEqual((st, data), (200, want))
            self.assertTrue(h["content-type"].startswith("text/plain"))
        for extra in ("&offset=1", "&limit=1", "&offset=0&limit=1", "&offset=1&limit=0",
                      "&offset=x&limit=1", "&offset=-1&limit=1"):
            st, _, data = self.get(t, extra=extra)
            self.assertError(st, json.loads(data), 400, "INVALID_QUERY")
        st, _, data = self.get(t, {"Range": "bytes=0-1"}, "&offset=1&limit=1")
        self.assertError(st, json.loads(data), 400)

    def test_bad_paths(self):
        st, _, data = self.call("GET", "/files/download")
        self.assertError(st, json.loads(data), 400, "MISSING_QUERY")
        st, _, data = self.call("GET", "/files/download?path=")
        self.assertError(st, json.loads(data), 400, "MISSING_QUERY")
        st, _, data = self.call("GET", "/files/download?path=relative/x")
        self.assertError(st, json.loads(data), 400, "INVALID_QUERY")
        st, _, data = self.call("GET", "/files/download?path=" + q(self.f) + "%00.txt")
        self.assertError(st, json.loads(data), 400, "INVALID_QUERY")
        st, _, data = self.get(self.d)
        self.assertError(st, json.loads(data), 400, "INVALID_FILE")
        st, _, data = self.get(self.f + ".missing")
        self.assertError(st, json.loads(data), 404, "FILE_NOT_FOUND")
        fifo = os.path.join(self.d, "fifo")
        os.mkfifo(fifo)
        os.chmod(fifo, 0o666)
        st, _, data = self.get(fifo)
        self.assertError(st, json.loads(data), 400, "INVALID_FILE")


class InfoDeleteMove(FilesBase):
    def test_info_shape_exactly_execd(self):
        f = os.path.join(self.d, "i.txt")
        self.upload(f, b"12345", {"mode": 644})
        os.symlink("i.txt", os.path.join(self.d, "link"))
        st, body = self.jcall("GET", "/files/info?path=%s&path=%s&path=%s" % (
            q(f), q(self.d + "//./link"), q(self.d)))
        self.assertEqual(st, 200, body)
        self.assertEqual(set(body), {f, self.d + "//./link", self.d})
        fi = body[f]
        self.assertEqual(list(fi), ["path", "type", "size", "modified_at", "created_at",
                                    "owner", "group", "mode"])
        self.assertEqual(fi["path"], f)
        self.assertEqual(fi["type"], "file")
        self.assertEqual(fi["size"], 5)
        self.assertEqual(fi["mode"], 644)
        self.assertEqual(fi["owner"], user_name(TASK_UID))
        self.assertEqual(fi["group"], group_name(TASK_GID))
        for k in ("modified_at", "created_at"):
            self.assertRegex(fi[k], RFC3339)
        mt = calendar.timegm(time.strptime(fi["modified_at"][:19], "%Y-%m-%dT%H:%M:%S"))
        self.assertLess(abs(mt - os.stat(f).st_mtime), 2)
        link = body[self.d + "//./link"]
        self.assertEqual((link["type"], link["path"]), ("symlink", self.d + "/link"))
        self.assertEqual(body[self.d]["type"], "directory")
        self.assertEqual(body[self.d]["mode"], 777)

    def test_info_errors(self):
        st, body = self.jcall("GET", "/files/info")
        self.assertError(st, body, 400, "MISSING_QUERY")
        st, body = self.jcall("GET", "/files/info?path=x/y")
        self.assertError(st, body, 400)
        st, body = self.jcall("GET", "/files/info?path=%2Ftmp%00")
        self.assertError(st, body, 400)
        st, body = self.jcall("GET", "/files/info?path=" + q(self.d + "/missing"))
        self.assertError(st, body, 404, "FILE_NOT_FOUND")

    def test_delete_files(self):
        a, b = os.path.join(self.d, "a"), os.path.join(self.d, "b")
        for p in (a, b):
            self.upload(p, b"x")
        st, _, data = self.call("DELETE", "/files?path=%s&path=%s&path=%s" % (
            q(a), q(b), q(self.d + "/never-existed")))
        self.assertEqual((st, data), (200, b""))
        self.assertEqual(self.ls(self.d), [])
        os.mkdir(os.path.join(self.d, "dir"))
        st, body = self.jcall("DELETE", "/files?path=" + q(self.d + "/dir"))
        self.assertError(st, body, 400, "INVALID_FILE")
        st, body = self.jcall("DELETE", "/files")
        self.assertError(st, body, 400, "MISSING_QUERY")
        st, body = self.jcall("DELETE", "/files?path=rel")
        self.assertError(st, body, 400)
        # A symlink is removed, not what it points to.
        keep = os.path.join(self.d, "dir", "keep")
        open(keep, "w").close()
        os.symlink(keep, os.path.join(self.d, "ln"))
        st, _, _ = self.call("DELETE", "/files?path=" + q(self.d + "/ln"))
        self.assertEqual(st, 200)
        self.assertTrue(os.path.exists(keep))

    def test_move(self):
        a = os.path.join(self.d, "a.txt")
        self.upload(a, b"A")
        dst = os.path.join(self.d, "new/dir/b.txt")
        st, _, data = self.call("POST", "/files/mv", [{"src": a, "dest": dst}])
        self.assertEqual((st, data), (200, b""))
        self.assertEqual(open(dst, "rb").read(), b"A")
        self.assertFalse(os.path.exists(a))
        self.upload(a, b"again")
        st, body = self.jcall("POST", "/files/mv", [{"src": a, "dest": dst}])
        self.assertError(st, body, 409)
        self.assertEqual(open(dst, "rb").read(), b"A")
        st, body = self.jcall("POST", "/files/mv", [{"src": a + ".missing", "dest": dst + "2"}])
        self.assertError(st, body, 404, "FILE_NOT_FOUND")
        for bad in ({"src": a}, [{"src": "rel", "dest": dst}], [{"src": a, "dest": 5}],
                    [1], "[{", [{"src": a + "\u0000", "dest": dst}]):
            with self.subTest(bad=bad):
                st, body = self.jcall("POST", "/files/mv", bad if isinstance(bad, str)
                                      else json.dumps(bad))
                self.assertError(st, body, 400, "INVALID_REQUEST_BODY")
        self.assertTrue(os.path.exists(a))
        # A directory moves too.
        st, _, _ = self.call("POST", "/files/mv", [{"src": os.path.join(self.d, "new"),
                                                     "dest": os.path.join(self.d, "moved")}])
        self.assertEqual(st, 200)
        self.assertTrue(os.path.exists(os.path.join(self.d, "moved/dir/b.txt")))


class PermissionsReplace(FilesBase):
    def test_permissions(self):
        f = os.path.join(self.d, "p.txt")
        self.upload(f, b"x")
        st, _, data = self.call("POST", "/files/permissions", {f: {"mode": 600}})
        self.assertEqual((st, data), (200, b""))
        self.assertEqual(stat.S_IMODE(os.stat(f).st_mode), 0o600)
        # The task user giving the file to itself is fine.
        st, _, data = self.call("POST", "/files/permissions", {f: {
            "mode": 640, "owner": user_name(TASK_UID), "group": str(TASK_GID)}})
        self.assertEqual(st, 200, data)
        self.assertEqual(stat.S_IMODE(os.stat(f).st_mode), 0o640)
        for bad, status in [({f: {"mode": 789}}, 400), ({f: {"mode": "755"}}, 400),
                            ({f: {"mode": -1}}, 400), ({f: {"mode": 17777}}, 400),
                            ({f: {"owner": "no-such-user-xyz"}}, 400), ({f: 5}, 400),
                            ({"rel/x": {"mode": 600}}, 400), ([f], 400),
                            ({f: {"owner": "root"}}, 403), ({f: {"group": "0"}}, 403)]:
            with self.subTest(bad=bad):
                st, body = self.jcall("POST", "/files/permissions", bad)
                self.assertError(st, body, status)
        self.assertEqual(os.stat(f).st_uid, TASK_UID)
        self.assertEqual(stat.S_IMODE(os.stat(f).st_mode), 0o640)
        st, body = self.jcall("POST", "/files/permissions", {f + ".missing": {"mode": 600}})
        self.assertError(st, body, 404)

    def test_replace(self):
        f = os.path.join(self.d, "r.txt")
        self.upload(f, b"host=localhost:8080\nport 8080 8080\n", {"mode": 640})
        st, _, data = self.call("POST", "/files/replace", {f: {"old": "8080", "new": "9090"}})
        self.assertEqual((st, data), (200, b""))
        self.assertEqual(open(f, "rb").read(), b"host=localhost:9090\nport 9090 9090\n")
        self.assertEqual(stat.S_IMODE(os.stat(f).st_mode), 0o640)
        self.assertEqual(os.stat(f).st_uid, TASK_UID)
        g = os.path.join(self.d, "g.txt")
        self.upload(g, b"aaaa")
        st, body = self.jcall("POST", "/files/replace?verbose=true", {
            f: {"old": "9090", "new": ""}, g: {"old": "aa", "new": "b"}})
        self.assertEqual(st, 200, body)
        self.assertEqual(body, {f: {"replacedCount": 3}, g: {"replacedCount": 2}})
        self.assertEqual(open(g, "rb").read(), b"bb")
        for bad, status in [({f: {"old": "", "new": "x"}}, 400), ({f: {"new": "x"}}, 400),
                            ({f: "x"}, 400), ({"rel": {"old": "a", "new": "b"}}, 400),
                            ({self.d: {"old": "a", "new": "b"}}, 400),
                            ({f + ".missing": {"old": "a", "new": "b"}}, 404)]:
            with self.subTest(bad=bad):
                st, body = self.jcall("POST", "/files/replace", bad)
                self.assertError(st, body, status)
        # A hard-linked file is rewritten in place: both names see it.
        h = os.path.join(self.d, "hardlink")
        os.link(g, h)
        st, _, _ = self.call("POST", "/files/replace", {g: {"old": "bb", "new": "cc"}})
        self.assertEqual(st, 200)
        self.assertEqual(open(h, "rb").read(), b"cc")
        self.assertEqual(os.stat(h).st_ino, os.stat(g).st_ino)


class Directories(FilesBase):
    def tree(self):
        for p in ("b/y/deep.txt", "a.txt", "b/x.c", "c/z.txt"):
            full = os.path.join(self.d, p)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(p)
        for root, dirs, files in os.walk(self.d):
            for n in dirs + files:
                os.lchown(os.path.join(root, n), TASK_UID, TASK_GID)

    def test_list_depth_and_order(self):
        self.tree()
        st, body = self.jcall("GET", "/directories/list?path=" + q(self.d))
        self.assertEqual(st, 200, body)
        rel = [e["path"][len(self.d) + 1:] for e in body]
        self.assertEqual(rel, ["a.txt", "b", "c"])
        st, body = self.jcall("GET", "/directories/list?path=%s&depth=2" % q(self.d))
        rel = [e["path"][len(self.d) + 1:] for e in body]
        self.assertEqual(rel, ["a.txt", "b", "b/x.c", "b/y", "c", "c/z.txt"])
        self.assertEqual([e["type"] for e in body][:2], ["file", "directory"])
        st, body = self.jcall("GET", "/directories/list?path=%s&depth=0" % q(self.d))
        self.assertEqual((st, body), (200, []))
        st, body = self.jcall("GET", "/directories/list?path=%s&depth=99" % q(self.d))
        self.assertEqual(len(body), 7)

    def test_list_errors(self):
        self.tree()
        os.symlink(self.d + "/b", self.d + "/lnk")
        for qs, status in [("", 400), ("?path=", 400), ("?path=rel", 400),
                           ("?path=%s&depth=x" % q(self.d), 400),
                           ("?path=%s&depth=-1" % q(self.d), 400),
                           ("?path=%s&depth=1.5" % q(self.d), 400),
                           ("?path=" + q(self.d + "/a.txt"), 400),
                           ("?path=" + q(self.d + "/lnk"), 400),
                           ("?path=" + q(self.d + "/nope"), 404)]:
            with self.subTest(qs=qs):
                st, body = self.jcall("GET", "/directories/list" + qs)
                self.assertError(st, body, status)

    def test_search(self):
        self.tree()
        os.symlink("a.txt", os.path.join(self.d, "c", "link.txt"))

        def search(pattern=None, path=None):
            qs = "?path=" + q(path or self.d)
            if pattern is not None:
                qs += "&pattern=" + quote(pattern, safe="")
            st, body = self.jcall("GET", "/files/search" + qs)
            self.assertEqual(st, 200, body)
            return sorted(e["path"][len(self.d) + 1:] for e in body)
        everything = ["a.txt", "b/x.c", "b/y/deep.txt", "c/link.txt", "c/z.txt"]
        self.assertEqual(search(), everything)
        self.assertEqual(search("**"), everything)
        self.assertEqual(search("*.txt"), ["a.txt", "b/y/deep.txt", "c/link.txt", "c/z.txt"])
        self.assertEqual(search("**/*.c"), ["b/x.c"])
        self.assertEqual(search("b/**"), ["b/x.c", "b/y/deep.txt"])
        self.assertEqual(search("*.{c,nope}"), ["b/x.c"])
        self.assertEqual(search("[a-b]*"), ["a.txt"])
        self.assertEqual(search(self.d + "/c/*"), ["c/link.txt", "c/z.txt"])
        self.assertEqual(search("*", self.d + "/a.txt"), ["a.txt"])
        st, body = self.jcall("GET", "/files/search?path=%s&pattern=%s" % (q(self.d), "%5B"))
        self.assertError(st, body, 400)
        st, body = self.jcall("GET", "/files/search?pattern=*")
        self.assertError(st, body, 400, "MISSING_QUERY")
        st, body = self.jcall("GET", "/files/search?path=" + q(self.d + "/nope"))
        self.assertError(st, body, 404)

    def test_search_and_list_bounded(self):
        big = os.path.join(self.d, "big")
        os.mkdir(big)
        for i in range(10001):
            open(os.path.join(big, "f%05d" % i), "w").close()
        st, body = self.jcall("GET", "/files/search?path=%s&pattern=**" % q(self.d))
        self.assertError(st, body, 400)
        self.assertIn("10000 results", body["message"])
        st, body = self.jcall("GET", "/directories/list?path=" + q(big))
        self.assertError(st, body, 400)
        st, body = self.jcall("GET", "/files/search?path=%s&pattern=f0000*" % q(self.d))
        self.assertEqual((st, len(body)), (200, 10))
        self.assertEqual(self.call("GET", "/ping")[0], 200)

    def test_mkdir_p(self):
        top = os.path.join(self.d, "m1")
        leaf = os.path.join(top, "m2/m3")
        st, _, data = self.call("POST", "/directories", {leaf: {"mode": 700},
                                                          self.d + "/other": {}})
        self.assertEqual((st, data), (200, b""))
        self.assertEqual(stat.S_IMODE(os.stat(leaf).st_mode), 0o700)
        self.assertEqual(stat.S_IMODE(os.stat(top).st_mode), 0o755)
        self.assertEqual(stat.S_IMODE(os.stat(self.d + "/other").st_mode), 0o755)
        self.assertEqual((os.stat(leaf).st_uid, os.stat(top).st_gid), (TASK_UID, TASK_GID))
        # Existing: left alone.
        st, _, _ = self.call("POST", "/directories", {leaf: {"mode": 755}})
        self.assertEqual(st, 200)
        self.assertEqual(stat.S_IMODE(os.stat(leaf).st_mode), 0o700)
        open(os.path.join(self.d, "file"), "w").close()
        for bad, status in [({self.d + "/file": {}}, 400), ({self.d + "/file/sub": {}}, 400),
                            ({self.d + "/x": {"mode": 8}}, 400),
                            ({self.d + "/x": {"mode": "700"}}, 400),
                            ({"rel": {}}, 400), ([self.d + "/x"], 400),
                            ({self.d + "/x": {"owner": "root"}}, 403)]:
            with self.subTest(bad=bad):
                st, body = self.jcall("POST", "/directories", bad)
                self.assertError(st, body, status)
        self.assertFalse(os.path.exists(self.d + "/x"))

    def test_rm_rf_does_not_follow_symlinks(self):
        self.tree()
        outside = tempfile.mkdtemp(dir=self.r.work)
        os.chmod(outside, 0o777)
        with open(os.path.join(outside, "precious"), "w") as f:
            f.write("keep")
        os.symlink(outside, os.path.join(self.d, "b", "y", "to-outside"))
        os.symlink(os.path.join(outside, "precious"), os.path.join(self.d, "b", "p"))
        st, _, data = self.call("DELETE", "/directories?path=%s&path=%s" % (
            q(self.d + "/b"), q(self.d + "/never")))
        self.assertEqual((st, data), (200, b""))
        self.assertFalse(os.path.lexists(self.d + "/b"))
        self.assertEqual(open(os.path.join(outside, "precious")).read(), "keep")
        for qs, status in [("", 400), ("?path=/", 400), ("?path=rel", 400),
                           ("?path=" + q(self.d + "/a.txt"), 400)]:
            with self.subTest(qs=qs):
                st, body = self.jcall("DELETE", "/directories" + qs)
                self.assertError(st, body, status)
        self.assertTrue(os.path.exists(self.d + "/a.txt"))
        shutil.rmtree(outside)


class BodyWording(FilesBase):
    """The JSON-body routes' refusals, byte for byte: they are read by the runner's one body
    reader (http/body.c) in execd's words ("error parsing request, ..." before a syntax
    error), which clients match on."""

    def test_bad_bodies_in_execd_words(self):
        def msg(m):
            return json.dumps({"code": "INVALID_REQUEST_BODY", "message": m},
                              separators=(",", ":")).encode()
        routes = [("/files/mv", "array"), ("/files/permissions", "object"),
                  ("/directories", "object"), ("/files/replace", "object")]
        for path, want in routes:
            other = b"{}" if want == "array" else b"[]"
            cases = [
                (b"", msg("the request body must be a JSON %s" % want)),
                (other, msg("the request body must be a JSON %s" % want)),
                (b"[1,", msg("error parsing request, invalid JSON at line 1 column 3: "
                             "']' expected near end of file")),
                (b'{"a":1,"a":2}', msg("error parsing request, invalid JSON at line 1 "
                                       "column 10: duplicate object key near '\"a\"'")),
                (b"null", msg("error parsing request, invalid JSON at line 1 column 4: "
                              "'[' or '{' expected near 'null'")),
                (b"\n\n{\n  \"a\": tru }", msg("error parsing request, invalid JSON at "
                                              "line 4 column 10: invalid token near 'tru'")),
            ]
            for body, expect in cases:
                with self.subTest(path=path, body=body):
                    st, h, data = self.call("POST", path, body,
                                            {"Content-Type": "application/json"})
                    self.assertEqual((st, data), (400, expect))
                    self.assertEqual(h.get("content-type"), "application/json")


class Identity(FilesBase):
    """The API has the task user's rights, not root's."""

    def setUp(self):
        super().setUp()
        # A sticky world-writable directory (like /tmp) holding root's file.
        self.sticky = os.path.join(self.d, "sticky")
        os.mkdir(self.sticky)
        os.chmod(self.sticky, 0o1777)
        self.secret = os.path.join(self.sticky, "secret")
        with open(self.secret, "w") as f:
            f.write("root only")
        os.chmod(self.secret, 0o600)

    def assertUntouched(self):
        self.assertEqual(open(self.secret).read(), "root only")
        s = os.stat(self.secret)
        self.assertEqual((s.st_uid, stat.S_IMODE(s.st_mode)), (0, 0o600))

    def test_root_file_not_readable_writable_deletable(self):
        st, _, data = self.call("GET", "/files/download?path=" + q(self.secret))
        self.assertError(st, json.loads(data), 403, "PERMISSION_DENIED")
        st, body = self.upload(self.secret, b"overwritten")
        self.assertError(st, body, 403, "PERMISSION_DENIED")
        self.assertUntouched()
        self.assertEqual(self.ls(self.sticky), ["secret"])  # no temporary left
        st, body = self.jcall("DELETE", "/files?path=" + q(self.secret))
        self.assertError(st, body, 403)
        st, body = self.jcall("POST", "/files/replace", {self.secret: {"old": "root",
                                                                        "new": "mine"}})
        self.assertError(st, body, 403)
        st, body = self.jcall("POST", "/files/permissions", {self.secret: {"mode": 666}})
        self.assertError(st, body, 403)
        st, body = self.jcall("POST", "/files/mv", [{"src": self.secret,
                                                      "dest": self.d + "/stolen"}])
        self.assertError(st, body, 403)
        self.assertUntouched()
        # A directory the user may not enter.
        private = os.path.join(self.d, "private")
        os.mkdir(private, 0o700)
        open(os.path.join(private, "x"), "w").close()
        st, body = self.jcall("GET", "/directories/list?path=" + q(private))
        self.assertError(st, body, 403)
        st, body = self.jcall("GET", "/files/info?path=" + q(private + "/x"))
        self.assertError(st, body, 403)
        st, body = self.jcall("DELETE", "/directories?path=" + q(private))
        self.assertError(st, body, 403)
        self.assertTrue(os.path.exists(os.path.join(private, "x")))
        # ... and one it may not write into.
        ro = os.path.join(self.d, "ro")
        os.mkdir(ro, 0o755)
        st, body = self.upload(os.path.join(ro, "new"), b"x")
        self.assertError(st, body, 403)
        st, body = self.jcall("POST", "/directories", {ro + "/sub": {}})
        self.assertError(st, body, 403)
        self.assertEqual(os.listdir(ro), [])
        # Info (stat) needs no read permission, as for a task.
        st, body = self.jcall("GET", "/files/info?path=" + q(self.secret))
        self.assertEqual(st, 200, body)
        self.assertEqual((body[self.secret]["owner"], body[self.secret]["mode"]), ("root", 600))


    def test_outside_writable_roots(self):
        """Tasks may only write beneath the Landlock roots; neither may the API."""
        st, _, data = self.call("GET", "/v1/hardening")
        rep = json.loads(data) if st == 200 else {}
        if not rep.get("confinement_enabled") or not rep.get("landlock", {}).get("abi"):
            self.skipTest("Landlock not in force")
        outside = tempfile.mkdtemp(prefix="forceai-outside-", dir="/var/tmp")
        try:
            os.chmod(outside, 0o777)
            st, body = self.upload(os.path.join(outside, "f"), b"x")
            self.assertError(st, body, 403, "PERMISSION_DENIED")
            self.assertIn("outside", body["message"])
            st, body = self.jcall("POST", "/directories", {outside + "/d": {}})
            self.assertError(st, body, 403)
            self.assertEqual(os.listdir(outside), [])
            # Reading there is fine, as for tasks.
            with open(os.path.join(outside, "r"), "w") as f:
                f.write("readable")
            os.chmod(os.path.join(outside, "r"), 0o644)
            st, _, data = self.call("GET", "/files/download?path=" + q(outside + "/r"))
            self.assertEqual((st, data), (200, b"readable"))
        finally:
            shutil.rmtree(outside)


@unittest.skipUnless(shutil.which("setpriv"), "needs setpriv (util-linux)")
class SupplementaryGroups(FilesBase):
    """The runner started with a supplementary group the task user does not
    have: files readable only by that group stay unreadable through the API."""
    runner_kwargs = {"wrap": ["setpriv", "--groups", "4242", "--"]}

    def test_runner_groups_do_not_leak(self):
        g = os.path.join(self.d, "grp")
        with open(g, "w") as f:
            f.write("group only")
        os.chown(g, 0, 4242)
        os.chmod(g, 0o040)
        st, _, data = self.call("GET", "/files/download?path=" + q(g))
        self.assertEqual(st, 403, data)
        # ... nor writable into a directory only that group may write.
        d = os.path.join(self.d, "grpdir")
        os.mkdir(d)
        os.chown(d, 0, 4242)
        os.chmod(d, 0o070)
        st, body = self.upload(os.path.join(d, "x"), b"x")
        self.assertEqual(st, 403, body)
        self.assertEqual(os.listdir(d), [])


class RootTasksAllowed(FilesBase):
    runner_args = ("--allow-root-tasks",)

    def test_owner_change_allowed(self):
        f = os.path.join(self.d, "own.txt")
        self.upload(f, b"x")
        st, _, data = self.call("POST", "/files/permissions", {f: {"owner": "root",
                                                                    "group": "root"}})
        self.assertEqual(st, 200, data)
        self.assertEqual((os.stat(f).st_uid, os.stat(f).st_gid), (0, 0))
        g = os.path.join(self.d, "up/owned-by-root.txt")
        st, body = self.upload(g, b"y", {"owner": "root", "mode": 600})
        self.assertEqual(st, 200, body)
        self.assertEqual((os.stat(g).st_uid, stat.S_IMODE(os.stat(g).st_mode)), (0, 0o600))
        self.assertEqual(os.stat(os.path.dirname(g)).st_uid, 0)


def _rss_sampler(runner, stop, out):
    pid = runner.host_pid()
    while not stop.is_set():
        try:
            out.append(runner.rss_kib(pid))
        except (OSError, TypeError):
            pass
        time.sleep(0.02)


@unittest.skipIf(SANITIZED, "RSS is only meaningful for the plain build")
class Memory(FilesBase):
    """A 2 GiB upload and download each keep the runner under 16 MiB RSS."""
    SIZE = 2 << 30
    LIMIT_KIB = 16 * 1024

    def measure(self, fn):
        samples, stop = [], threading.Event()
        t = threading.Thread(target=_rss_sampler, args=(self.r, stop, samples))
        t.start()
        try:
            fn()
        finally:
            stop.set()
            t.join()
        return samples

    def test_2gib_upload_and_download_rss(self):
        src = os.path.join(self.scratch, "sparse-2g")
        with open(src, "wb") as f:
            f.truncate(self.SIZE)  # sparse: costs no disk, reads as zeros
        target = os.path.join(self.d, "big.bin")
        base = self.r.rss_kib()
        res = {}
        up = self.measure(lambda: res.update(up=self.upload(target, src=src)))
        self.assertEqual(res["up"][0], 200, res["up"])
        self.assertEqual(os.path.getsize(target), self.SIZE)
        os.unlink(src)
        down = self.measure(lambda: res.update(
            down=self.r.curl("-o", "/dev/null", "-w", "%{http_code} %{size_download}",
                             self.r.url + "/files/download?path=" + q(target), timeout=600)))
        self.assertEqual(res["down"].stdout.decode(), "200 %d" % self.SIZE)
        os.unlink(target)
        print("\n  runner RSS KiB: idle %d, upload max %d (%d samples), download max %d "
              "(%d samples)" % (base, max(up), len(up), max(down), len(down)))
        self.assertGreater(len(up), 5)
        self.assertGreater(len(down), 5)
        self.assertLess(max(up), self.LIMIT_KIB)
        self.assertLess(max(down), self.LIMIT_KIB)


if __name__ == "__main__":
    unittest.main()
