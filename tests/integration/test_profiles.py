"""The gateway's runtime profiles: --one-shot (ephemeral-task) through every
API, and POST /v1/reset (pooled) with everything a new tenant must not find.
Reset tests use writable roots in a scratch directory (never the host's /tmp
or /home): --landlock-roots names them."""
import hashlib
import http.client
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from harness import (Runner, assert_clean_exit, parse_execd, parse_sse, proc_table,
                     rss_is_meaningful, slow)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "gateway"))
from test_gateway import TestGateway, text, tool  # noqa: E402

TASK_UID = 1000


def wait_exit(r, timeout=15):
    """The runner's exit status once it ends by itself."""
    r.proc.wait(timeout)
    return r.proc.returncode


def post_json(r, path, body, timeout=30):
    st, data = r.json("POST", path, body)
    return st, data


def open_stream(r, path, body):
    """POST and keep the streamed response open; returns the socket."""
    s = socket.create_connection(("127.0.0.1", r.port))
    b = json.dumps(body)
    hdr = "".join("%s: %s\r\n" % kv for kv in r.headers().items())
    s.sendall(("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s"
               "Content-Length: %d\r\n\r\n%s" % (path, hdr, len(b), b)).encode())
    return s


def read_until(sock, needle, timeout=10):
    sock.settimeout(timeout)
    buf = b""
    while needle not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf


def read_all(sock, timeout=10):
    sock.settimeout(timeout)
    buf = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            break
        buf += chunk
    return buf


def vm_hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def descendants(pid):
    """Pids below pid (from /proc, via ppid)."""
    kids = {}
    for p, (pp, state, _) in proc_table().items():
        if state not in ("Z", "X"):
            kids.setdefault(pp, []).append(p)
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for k in kids.get(p, []):
            out.append(k)
            todo.append(k)
    return out


def file_fds(pid):
    """The runner's descriptors on files (spools, memfds, the snapshot store),
    not sockets, pipes or anon inodes."""
    out = []
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            t = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if t.startswith("/") and not t.startswith("/dev/"):
            out.append(t)
    return sorted(out)


def argv0_with_marker(marker):
    """argv[0] of every process whose argv[0] starts with the marker (the names
    `exec -a` gave), by pid: stable once a process has exec'd into it, unlike
    a match anywhere in the command line, which a process loses for a moment
    while it execs (its cmdline reads empty)."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    a0 = f.read().split(b"\0", 1)[0]
            except OSError:
                continue
            if a0.startswith(marker.encode()):
                out[int(d)] = a0.decode()
    return out


def pids_with_marker(marker):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    if marker.encode() in f.read():
                        out.append(int(d))
            except OSError:
                pass
    return out


# ---------------------------------------------------------------- one-shot


class OneShot(unittest.TestCase):
    def runner(self, *args, **kw):
        r = Runner(("--one-shot",) + args, **kw)
        self.addCleanup(r.close)
        return r

    def test_execd_exit_code_409_and_exit(self):
        r = self.runner()
        s = open_stream(r, "/command", {"command": "echo one; sleep 1; exit 7"})
        read_until(s, b'"one"')
        st, body = post_json(r, "/command", {"command": "echo two"})
        self.assertEqual(st, 409, body)
        self.assertEqual(body["code"], "ONE_SHOT_BUSY")
        self.assertIn("one-shot", body["message"])
        st, body = post_json(r, "/v1/tasks", {"task": "echo two"})
        self.assertEqual(st, 409, body)
        # Not tasks: still served while the task runs.
        self.assertEqual(r.request("GET", "/ping")[0], 200)
        self.assertEqual(r.request("GET", "/v1/hardening")[0], 200)
        st, _, _ = r.request("POST", "/directories", body=json.dumps({r.work + "/d": {}}))
        self.assertEqual(st, 200)
        data = read_all(s)
        s.close()
        self.assertIn(b'"evalue":"7"', data)
        self.assertEqual(wait_exit(r), 7)
        log = r.logtext()
        self.assertIn("one-shot: task finished", log)

    def test_native_signal_status(self):
        r = self.runner()
        ev = r.native({"task": "echo hi; kill -TERM $$"})
        self.assertEqual(ev[-1]["event"], "exit")
        self.assertEqual(ev[-1]["data"]["exit_code"], 143)
        self.assertEqual(wait_exit(r), 143)  # 128 + SIGTERM, as with -- CMD

    def test_session_run(self):
        r = self.runner()
        st, body = post_json(r, "/session", {})
        self.assertEqual(st, 200)  # a session is not a task
        sid = body["session_id"]
        ev = r.execd({"command": "export A=1; exit 5"}, path="/session/%s/run" % sid)
        self.assertEqual(ev[-1]["type"], "error")
        self.assertEqual(wait_exit(r), 5)

    def test_background_command(self):
        r = self.runner()
        ev = r.execd({"command": "sleep 0.5; exit 3", "background": True})
        self.assertEqual(ev[-1]["type"], "execution_complete")
        st, body = post_json(r, "/command", {"command": "true"})
        self.assertEqual(st, 409)
        self.assertEqual(wait_exit(r), 3)

    def test_refused_request_does_not_count(self):
        r = self.runner()
        st, _ = post_json(r, "/command", {"command": "true", "cwd": "/nonexistent"})
        self.assertEqual(st, 400)
        ev = r.execd({"command": "exit 4"})
        self.assertEqual(ev[-1]["type"], "error")
        self.assertEqual(wait_exit(r), 4)

    def test_nothing_accepted_after_the_task(self):
        r = self.runner("--grace-ms", "3000", "--idle-timeout-ms", "2000")
        # A client keeps the stream open without reading while the task
        # writes more than the socket buffers hold: the task is throttled,
        # the idle timeout drops the client, the task ends, the box exits.
        s = open_stream(r, "/v1/tasks", {"task": "head -c 30000000 /dev/zero; exit 9"})
        time.sleep(0.5)
        # Meanwhile a second client asks for another task on a kept-alive
        # connection.
        c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=10)
        c.request("POST", "/v1/tasks", body=json.dumps({"task": "true"}),
                  headers=r.headers({"Content-Type": "application/json"}))
        resp = c.getresponse()
        self.assertEqual(resp.status, 409)
        resp.read()
        t0 = time.monotonic()
        rc = wait_exit(r, timeout=30)
        elapsed = time.monotonic() - t0
        s.close()
        self.assertEqual(rc, 9)
        # idle timeout (2 s) + the rest of the output + the grace bound
        self.assertLess(elapsed, slow(12))
        print("\n  one-shot with a client that never reads: exited %.1f s later" % elapsed)

    def test_second_task_after_the_first_is_refused(self):
        r = self.runner()
        c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=10)
        c.request("POST", "/command", body=json.dumps({"command": "exit 0"}),
                  headers=r.headers({"Content-Type": "application/json"}))
        resp = c.getresponse()
        self.assertEqual(resp.status, 200)
        resp.read()
        # Same connection, right after the terminal event: either refused
        # (409) or the connection is already closed by the shutdown.
        try:
            c.request("POST", "/command", body=json.dumps({"command": "touch " + r.work +
                                                           "/second"}),
                      headers=r.headers({"Content-Type": "application/json"}))
            resp = c.getresponse()
            self.assertIn(resp.status, (409, 503))
        except (ConnectionError, http.client.HTTPException):
            pass
        self.assertEqual(wait_exit(r), 0)
        self.assertFalse(os.path.exists(os.path.join(r.work, "second")))

    def test_with_main_command_is_a_usage_error(self):
        r = Runner(("--one-shot",), main=["true"], ready=False)
        self.addCleanup(r.close)
        self.assertEqual(wait_exit(r), 2)
        self.assertIn("--one-shot", r.logtext())

    def test_environment_variable(self):
        r = Runner(env={"FORCEAI_RUNNER_ONE_SHOT": "1"})
        self.addCleanup(r.close)
        r.execd({"command": "exit 6"})
        self.assertEqual(wait_exit(r), 6)


class OneShotModel(unittest.TestCase):
    """chat and agent tasks (they need a gateway)."""

    @classmethod
    def setUpClass(cls):
        cls.gw = TestGateway(key="sk-oneshot")

    @classmethod
    def tearDownClass(cls):
        cls.gw.close()

    def runner(self):
        r = Runner(("--one-shot",), env={"FORCEAI_GATEWAY_URL": self.gw.url,
                                         "FORCEAI_GATEWAY_KEY": "sk-oneshot",
                                         "FORCEAI_MODEL": "test-model"})
        self.addCleanup(r.close)
        return r

    def test_agent_task(self):
        r = self.runner()
        self.gw.script(tool("bash", {"command": "echo tool-ran"}, call_id="c1"),
                       text("done"))
        ev = r.native({"task": "run something", "capability": "agent", "cwd": r.work})
        names = [e["event"] for e in ev]
        self.assertIn("tool.result", names)  # its tool call ran: not a second task
        self.assertEqual(ev[-1]["event"], "exit", names)
        self.assertEqual(wait_exit(r), 0)

    def test_chat_task(self):
        r = self.runner()
        ev = r.native({"task": "exit 12", "capability": "chat"})
        self.assertEqual(ev[-1]["data"]["exit_code"], 12)
        self.assertEqual(wait_exit(r), 12)


# ---------------------------------------------------------------- reset


def tree(root):
    """Everything under root: (path, mode, uid, gid, mtime_ns, content hash or
    link target), root included."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [""] + sorted(dirnames + filenames):
            p = os.path.join(dirpath, name) if name else dirpath
            if not name and dirpath != root:
                continue
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            what = None
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    what = hashlib.sha256(f.read()).hexdigest()[:16]
            elif stat.S_ISLNK(st.st_mode):
                what = "-> " + os.readlink(p)
            out.append((rel, st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, what))
    return sorted(out)


class ScratchRoots:
    """/workspace, /tmp and a home in a scratch directory, with 'image'
    content; plus a directory outside them."""

    def __init__(self, files=0):
        self.base = tempfile.mkdtemp(prefix="forceai-reset-")
        os.chmod(self.base, 0o755)
        b = self.base
        self.ws, self.tmp, self.home = b + "/workspace", b + "/tmp", b + "/home"
        self.outside = b + "/outside"
        for d, m in ((self.ws, 0o755), (self.tmp, 0o1777), (self.home, 0o755),
                     (self.outside, 0o777)):
            os.mkdir(d)
            os.chmod(d, m)
        os.chown(self.ws, TASK_UID, TASK_UID)
        self.agent = self.home + "/agent"
        os.mkdir(self.agent, 0o750)
        os.chown(self.agent, TASK_UID, TASK_UID)
        self.put(self.ws + "/README", b"image readme\n", 0o644)
        self.put(self.ws + "/edit.txt", b"image content\n", 0o644)
        self.put(self.ws + "/delete.txt", b"image file\n", 0o600)
        os.mkdir(self.ws + "/src")
        os.chown(self.ws + "/src", TASK_UID, TASK_UID)
        self.put(self.ws + "/src/main.c", b"int main(void){return 0;}\n", 0o644)
        self.put(self.ws + "/root-owned", b"root's\n", 0o644, uid=0)
        os.symlink("README", self.ws + "/link")
        os.lchown(self.ws + "/link", TASK_UID, TASK_UID)
        self.put(self.agent + "/.profile", b"export PS1='$ '\n", 0o644)
        self.put(self.tmp + "/image-tmp", b"from the image\n", 0o644)
        self.put(self.outside + "/sentinel", b"outside the roots\n", 0o666)
        if files:
            d = self.ws + "/many"
            os.mkdir(d)
            os.chown(d, TASK_UID, TASK_UID)
            for i in range(files):
                sub = "%s/%02d" % (d, i % 100)
                if i < 100:
                    os.mkdir(sub)
                    os.chown(sub, TASK_UID, TASK_UID)
                self.put("%s/f%05d" % (sub, i), b"file %d\n" % i, 0o644)
        # Times in the past, so a restored time shows as restored.
        for dirpath, dirnames, filenames in os.walk(b, topdown=False):
            for n in dirnames + filenames:
                os.utime(os.path.join(dirpath, n), ns=(1500000000123456789, 1500000000123456789), follow_symlinks=False)

    def put(self, path, data, mode, uid=TASK_UID):
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, mode)
        os.chown(path, uid, uid)

    def roots_arg(self):
        return "%s:%s:%s" % (self.ws, self.tmp, self.home)

    def trees(self):
        return {"ws": tree(self.ws), "tmp": tree(self.tmp), "home": tree(self.home),
                "outside": tree(self.outside)}

    def close(self):
        shutil.rmtree(self.base, ignore_errors=True)


class ResetBase(unittest.TestCase):
    files = 0
    extra_args = ()
    env = None

    def setUp(self):
        self.roots = ScratchRoots(self.files)
        self.addCleanup(self.roots.close)
        self.before = self.roots.trees()
        kw = self.runner_kwargs()
        # RUNNER_WRAP (valgrind) would wrap the namespace wrapper, not the
        # runner: such runners run unwrapped.
        saved = os.environ.pop("RUNNER_WRAP", None) if "wrap" in kw else None
        try:
            self.r = Runner(("--allow-reset", "--landlock-roots", self.roots.roots_arg()) +
                            tuple(self.extra_args), env=self.env, **kw)
        finally:
            if saved is not None:
                os.environ["RUNNER_WRAP"] = saved
        self.addCleanup(self.r.close)
        self.addCleanup(self.clean_exit)

    def clean_exit(self):
        assert_clean_exit(self.r)

    def runner_kwargs(self):
        return {}

    def reset(self, expect=200):
        t0 = time.monotonic()
        st, _, data = self.r.request("POST", "/v1/reset", timeout=300)
        body = json.loads(data) if data else None
        self.elapsed = time.monotonic() - t0
        self.assertEqual(st, expect, body)
        return body

    def assert_pristine(self):
        after = self.roots.trees()
        for k in self.before:
            if after[k] != self.before[k]:
                diff = sorted(set(after[k]) ^ set(self.before[k]))
                self.fail("%s differs from the start after the reset:\n%s" %
                          (k, "\n".join(map(str, diff[:20]))))


class Reset(ResetBase):
    def test_no_trace_for_the_next_tenant(self):
        r, R = self.r, self.roots
        marker = "tenant-a-" + os.urandom(4).hex()
        fds_fresh = file_fds(r.host_pid())
        # Tenant A: files added, changed, removed, ownership and modes,
        # a symlink planted to outside the roots, setsid daemons, a
        # session with exported state, finished and running tasks.
        script = (
            "set -e; cd %(ws)s; echo changed >> edit.txt; rm delete.txt; chmod 600 README;"
            "rm -r src; ln -s %(out)s src;"
            "echo %(m)s > new-%(m)s; mkdir -p deep/a/b; echo x > deep/a/b/c;"
            "ln -s %(out)s escape; ln -sf %(out)s/sentinel link;"
            "echo %(m)s > %(tmp)s/t-%(m)s; echo %(m)s >> %(agent)s/.profile;"
            "mkfifo %(tmp)s/fifo; echo done"
            % {"ws": R.ws, "m": marker, "out": R.outside, "tmp": R.tmp, "agent": R.agent})
        ev = r.execd({"command": script})
        self.assertEqual(ev[-1]["type"], "execution_complete", ev)
        old_cmd = ev[0]["text"]
        ev = r.native({"task": "echo output-of-%s" % marker})
        old_native = ev[0]["data"]["task_id"]
        st, body = post_json(r, "/session", {})
        sid = body["session_id"]
        r.execd({"command": "export SECRET_%s=1" % marker.replace("-", "_")},
                path="/session/%s/run" % sid)
        # Running: daemons (setsid, double fork) and a foreground stream.
        r.execd({"command": "(setsid bash -c 'exec -a %s-daemon sleep 1000' &); "
                            "exec -a %s-bg sleep 1000" % (marker, marker), "background": True})
        s = open_stream(r, "/v1/tasks", {"task": "echo go; exec -a %s-fg sleep 1000" % marker})
        read_until(s, b"go")
        # The three final processes, by the names they exec'd into.
        want = sorted(marker + s for s in ("-bg", "-daemon", "-fg"))
        deadline = time.monotonic() + 10
        while (sorted(argv0_with_marker(marker).values()) != want and
               time.monotonic() < deadline):
            time.sleep(0.05)
        self.assertEqual(sorted(argv0_with_marker(marker).values()), want)

        body = self.reset()
        print("\n  reset (tenant with files, 3 processes, a session, a stream): %s" %
              json.dumps(body))
        rm = body["removed"]
        self.assertGreaterEqual(rm["processes"], 3)
        self.assertEqual(rm["sessions"], 1)
        self.assertEqual(rm["streams"], 1)
        self.assertGreaterEqual(rm["records"], 3)
        self.assertGreaterEqual(rm["files"], 3)
        self.assertGreaterEqual(body["restored"]["files"], 2)
        # The other client's stream got its terminal event.
        data = read_all(s, timeout=5)
        s.close()
        self.assertIn(b"event: exit", data)
        self.assertIn(b'"status":"killed"', data)

        # Nothing of tenant A, seen from the host ...
        self.assertEqual(pids_with_marker(marker), [])
        self.assert_pristine()
        self.assertEqual(open(R.outside + "/sentinel", "rb").read(), b"outside the roots\n")
        # ... from the API ...
        for path in ("/v1/tasks/" + old_native, "/v1/tasks/%s/events" % old_native,
                     "/command/status/" + old_cmd, "/command/%s/logs" % old_cmd):
            self.assertEqual(r.request("GET", path)[0], 404, path)
        st, _ = post_json(r, "/session/%s/run" % sid, {"command": "true"})
        self.assertEqual(st, 404)
        # ... no retained log, spool or session state (the runner holds the
        # same files as when it was fresh: the roots and the snapshot) ...
        self.assertEqual(file_fds(r.host_pid()), fds_fresh)
        # ... and from tenant B's task.
        ev = r.execd({"command": "grep -rl %s %s %s %s 2>/dev/null; env | grep -i %s; "
                                 "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline "
                                 "2>/dev/null | grep -a %s; done; echo end"
                                 % (marker, R.ws, R.tmp, R.home, marker.replace("-", "_"),
                                    marker)})
        out = [e["text"] for e in ev if e["type"] == "stdout"]
        self.assertEqual([o for o in out if "grep" not in o], ["end"], out)

    def test_503_while_resetting(self):
        r, R = self.r, self.roots
        # Enough for the reset to take a while: 20,000 files to remove.
        ev = r.execd({"command": "cd %s && mkdir junk && cd junk && "
                                 "seq 1 20000 | xargs touch && echo ok" % R.ws}, timeout=120)
        self.assertEqual(ev[-1]["type"], "execution_complete", ev[-3:])
        result = {}

        def do_reset():
            result["body"] = self.r.json("POST", "/v1/reset")

        t = threading.Thread(target=do_reset)
        t.start()
        statuses = {}
        started = []
        while t.is_alive():
            st, _, data = r.request("POST", "/command", {"command": "true", "background": True})
            statuses[st] = statuses.get(st, 0) + 1
            if st == 503:
                self.assertEqual(json.loads(data)["code"], "RESETTING")
            elif st == 200:
                started.append(1)
            ping = r.request("GET", "/ping")[0]
            self.assertEqual(ping, 200)
        t.join()
        self.assertEqual(result["body"][0], 200, result)
        self.assertGreater(statuses.get(503, 0), 0, statuses)
        self.assert_pristine()

    def test_upload_from_before_the_reset_is_not_committed(self):
        R = self.roots
        target = R.ws + "/uploaded-by-a"
        payload = os.urandom(256 * 1024)
        b = b"--B\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n" + \
            json.dumps({"path": target}).encode() + b"\r\n--B\r\nContent-Disposition: " \
            b"form-data; name=\"file\"; filename=\"x\"\r\n\r\n" + payload + b"\r\n--B--\r\n"
        s = socket.create_connection(("127.0.0.1", self.r.port))
        hdr = "".join("%s: %s\r\n" % kv for kv in self.r.headers().items())
        s.sendall(("POST /files/upload HTTP/1.1\r\nHost: x\r\n%sContent-Type: multipart/"
                   "form-data; boundary=B\r\nContent-Length: %d\r\n\r\n"
                   % (hdr, len(b))).encode() + b[:len(b) // 2])
        time.sleep(0.3)  # the first half is in (streamed to an unnamed file)
        self.reset()
        s.sendall(b[len(b) // 2:])
        resp = read_until(s, b"}", timeout=5)
        s.close()
        self.assertTrue(resp.startswith(b"HTTP/1.1 503"), resp[:200])
        self.assertIn(b"RESETTING", resp)
        self.assertFalse(os.path.exists(target))
        self.assert_pristine()

    def test_reset_twice_and_unchanged_tree(self):
        body = self.reset()
        self.assertEqual(body["removed"]["files"], 0)
        self.assertEqual(body["restored"]["files"], 0)
        self.assertGreater(body["unchanged"], 5)
        self.assert_pristine()
        # A second tenant, a second reset.
        self.r.execd({"command": "echo b > %s/README" % self.roots.ws})
        body = self.reset()
        self.assertEqual(body["restored"]["files"], 1)
        self.assert_pristine()

    def test_reset_while_reset_is_409(self):
        self.r.execd({"command": "cd %s && seq 1 5000 | xargs touch" % self.roots.tmp})
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("a", self.r.json("POST",
                                                                            "/v1/reset")))
        t.start()
        time.sleep(0.005)
        st, body = self.r.json("POST", "/v1/reset")
        t.join()
        self.assertEqual(out["a"][0], 200)
        # The second came while the first ran (409), or after it (200).
        self.assertIn(st, (200, 409), body)
        if st == 409:
            self.assertEqual(body["code"], "RESET_IN_PROGRESS")


class ResetExecdEnvs(ResetBase):
    """OpenSandbox's EXECD_ENVS file (the SDK's set_env) lies outside the
    writable roots, and tasks may write it: a reset gives it back as it was
    at start, or tenant B's commands run with tenant A's variables."""

    def setUp(self):
        self.envdir = tempfile.mkdtemp(prefix="forceai-envs-", dir="/var/tmp")
        self.addCleanup(shutil.rmtree, self.envdir, True)
        os.chmod(self.envdir, 0o755)
        self.envs = os.path.join(self.envdir, ".env")
        with open(self.envs, "w") as f:
            f.write("BASE='from-the-image'\n")
        os.chown(self.envs, TASK_UID, TASK_UID)
        os.chmod(self.envs, 0o600)
        self.env = {"EXECD_ENVS": self.envs}
        super().setUp()

    def out(self, cmd):
        ev = self.r.execd({"command": cmd})
        return "".join(e["text"] for e in ev if e["type"] == "stdout")

    def test_tenant_variables_do_not_survive(self):
        self.assertEqual(self.out("echo $BASE"), "from-the-image")
        # Tenant A: set_env's way (append a line), then a chmod of its own.
        self.out("echo \"A_SECRET='tenant-a'\" >> %s; chmod 666 %s" % (self.envs, self.envs))
        self.assertEqual(self.out("echo $A_SECRET"), "tenant-a")
        self.reset()
        self.assertEqual(self.out("echo ${A_SECRET:-none} $BASE"), "none from-the-image")
        with open(self.envs) as f:
            self.assertEqual(f.read(), "BASE='from-the-image'\n")
        st = os.stat(self.envs)
        self.assertEqual((st.st_uid, stat.S_IMODE(st.st_mode)), (TASK_UID, 0o600))


class ResetModelToken(ResetBase):
    """A running chat task's model-proxy token is dead after the reset."""

    def setUp(self):
        self.gw = TestGateway(key="sk-reset")
        self.addCleanup(self.gw.close)
        self.env = {"FORCEAI_GATEWAY_URL": self.gw.url, "FORCEAI_GATEWAY_KEY": "sk-reset"}
        super().setUp()

    def proxy(self, token):
        port = [l for l in self.r.loglines() if l.get("msg") == "ready"][0]["model_proxy_port"]
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/v1/models", headers={"Authorization": "Bearer " + token})
        resp = c.getresponse()
        resp.read()
        return resp.status

    def test_token_refused(self):
        s = open_stream(self.r, "/v1/tasks", {"task": "echo key=$OPENAI_API_KEY; sleep 1000",
                                              "capability": "chat"})
        data = read_until(s, b"key=fai-")
        tok = data.split(b"key=")[1][:68].decode()
        self.assertTrue(tok.startswith("fai-") and len(tok) == 68, tok)
        self.assertEqual(self.proxy(tok), 200)
        body = self.reset()
        self.assertEqual(body["removed"]["model_tokens"], 1)
        self.assertEqual(self.proxy(tok), 401)
        rest = read_all(s, timeout=5)
        s.close()
        self.assertIn(b"event: exit", rest)


class ResetDisabled(unittest.TestCase):
    def test_refused_without_allow_reset(self):
        r = Runner()
        self.addCleanup(r.close)
        marker = os.path.join(r.work, "stays")
        open(marker, "w").close()
        st, body = r.json("POST", "/v1/reset")
        self.assertEqual(st, 403)
        self.assertEqual(body["code"], "RESET_DISABLED")
        self.assertTrue(os.path.exists(marker))

    def test_auth_like_every_route(self):
        roots = ScratchRoots()
        self.addCleanup(roots.close)
        r = Runner(("--allow-reset", "--landlock-roots", roots.roots_arg()), token="tok-reset")
        self.addCleanup(r.close)
        c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=10)
        c.request("POST", "/v1/reset")
        resp = c.getresponse()
        self.assertEqual(resp.status, 401)
        self.assertEqual(r.json("POST", "/v1/reset")[0], 200)

    def test_too_big_to_snapshot_refuses_to_start(self):
        roots = ScratchRoots()
        self.addCleanup(roots.close)
        r = Runner(("--allow-reset", "--landlock-roots", roots.roots_arg(),
                    "--reset-snapshot-max", "10"), ready=False)
        self.addCleanup(r.close)
        self.assertEqual(wait_exit(r), 1)
        self.assertIn("--reset-snapshot-max", r.logtext())


class ResetMounts(ResetBase):
    """Mount points inside a root are never crossed: a tmpfs (another
    st_dev) and a bind mount of a directory on the same file system (same
    st_dev, another mount id). The runner runs in its own mount namespace
    (unshare --mount), so the host sees none of it."""

    def runner_kwargs(self):
        R = self.roots
        for d in (R.ws + "/tmpfs", R.ws + "/bind"):
            os.mkdir(d)
            os.chown(d, TASK_UID, TASK_UID)
        os.chmod(R.outside, 0o777)
        script = ("mount -t tmpfs -o mode=0777 forceai-test %s/tmpfs && "
                  "mount --bind %s %s/bind && exec \"$@\"" % (R.ws, R.outside, R.ws))
        self.before = R.trees()
        return {"wrap": ["unshare", "--mount", "--propagation", "private", "--fork", "sh", "-c", script,
                         "sh"]}

    def test_not_crossed(self):
        R = self.roots
        ev = self.r.execd({"command": "echo t > %s/tmpfs/tenant && echo b > %s/bind/tenant && "
                                      "ln -s /etc %s/tmpfs/l && echo ok" % (R.ws, R.ws, R.ws)})
        self.assertEqual(ev[-2]["text"], "ok", ev)
        body = self.reset()
        self.assertGreaterEqual(body["mount_points_skipped"], 2)
        ev = self.r.execd({"command": "cat %s/tmpfs/tenant %s/bind/tenant" % (R.ws, R.ws)})
        self.assertEqual([e["text"] for e in ev if e["type"] == "stdout"], ["t", "b"])
        # The bind-mounted directory is outside the roots: untouched.
        self.assertEqual(open(R.outside + "/tenant").read(), "b\n")
        self.assertEqual(open(R.outside + "/sentinel", "rb").read(), b"outside the roots\n")


class ResetPid1(ResetBase):
    """The runner as PID 1 of its own PID, IPC and mount namespaces (as in a
    container): /dev/shm and /dev/mqueue are private mounts here, so the
    reset also restores /dev/shm, removes the tenant's SysV IPC objects and
    POSIX queues, and ends any process of the task uid in the namespace,
    also one that is not the runner's descendant (entered with nsenter)."""

    def runner_kwargs(self):
        dev = self.roots.base + "/realdev"
        os.mkdir(dev)
        script = (
            "set -e; mount --rbind /dev %(d)s; mount -t tmpfs -o mode=755 fakedev /dev; "
            "for n in null zero full random urandom tty ptmx; do touch /dev/$n; "
            "mount --bind %(d)s/$n /dev/$n; done; mkdir /dev/pts /dev/shm /dev/mqueue; "
            "mount --bind %(d)s/pts /dev/pts; mount -t tmpfs -o mode=1777 shm /dev/shm; "
            "mount -t mqueue mqueue /dev/mqueue; ln -s /proc/self/fd /dev/fd; "
            "ln -s fd/0 /dev/stdin; ln -s fd/1 /dev/stdout; ln -s fd/2 /dev/stderr; "
            "exec \"$@\"" % {"d": dev})
        return {"pid1": True,
                "wrap": ["unshare", "--ipc", "--mount", "--propagation", "private", "--fork",
                         "sh", "-c", script, "sh"]}

    def test_ipc_shm_and_entered_processes(self):
        r = self.r
        mk = ("ipcmk -M 4096 >/dev/null && ipcmk -Q >/dev/null && ipcmk -S 1 >/dev/null && "
              "echo x > /dev/shm/tenant-shm && echo ok")
        ev = r.execd({"command": mk})
        out = [e["text"] for e in ev if e["type"] == "stdout"]
        self.assertEqual(out, ["ok"], ev)
        pid = r.host_pid()
        # A confined task cannot open a POSIX queue (Landlock denies the
        # open on the internal mqueue mount: EACCES); the task uid outside
        # the confinement can, and the reset must remove that too.
        mq = ("import ctypes, os; l = ctypes.CDLL(None, use_errno=True); "
              "fd = l.mq_open(b'/tenantq', os.O_CREAT | os.O_RDWR, 0o600, None); "
              "assert fd >= 0, ctypes.get_errno()")
        ev = r.execd({"command": "/usr/bin/python3 -c \"%s\"" % mq})
        if "--insecure-no-confine" not in os.environ.get("RUNNER_EXTRA_ARGS", ""):
            self.assertIn("AssertionError: 13", json.dumps(ev))
        subprocess.run(["nsenter", "--target", str(pid), "--ipc", "--mount", "setpriv",
                        "--reuid=%d" % TASK_UID, "--regid=%d" % TASK_UID, "--clear-groups",
                        "/usr/bin/python3", "-c", mq], check=True, timeout=30)
        ev = r.execd({"command": "ls /dev/mqueue"})
        self.assertEqual([e["text"] for e in ev if e["type"] == "stdout"], ["tenantq"])
        entered = subprocess.Popen(["nsenter", "--target", str(pid), "--pid", "--mount",
                                    "setpriv", "--reuid=%d" % TASK_UID, "--regid=%d" % TASK_UID,
                                    "--clear-groups", "sleep", "1000"])
        self.addCleanup(lambda: entered.poll() is None and entered.kill())
        deadline = time.monotonic() + 10
        sleeper = None
        while time.monotonic() < deadline and not sleeper:
            time.sleep(0.05)
            kids = descendants(entered.pid)
            for k in kids:
                try:
                    if os.stat("/proc/%d" % k).st_uid == TASK_UID and \
                            open("/proc/%d/comm" % k).read().strip() == "sleep":
                        sleeper = k
                except OSError:
                    pass
        self.assertTrue(sleeper, "the entered process did not start")
        body = self.reset()
        print("\n  reset as PID 1: %s" % json.dumps(body))
        self.assertEqual(body["ipc"]["shm"], 1)
        self.assertEqual(body["ipc"]["sem"], 1)
        self.assertEqual(body["ipc"]["msg"], 1)
        self.assertEqual(body["ipc"]["mqueue"], 1)
        self.assertGreaterEqual(body["removed"]["processes"], 1)
        # Killed (nsenter, its parent outside the namespace, may not reap it:
        # it stops itself when its child is stopped).
        self.assertNotIn(sleeper, descendants(entered.pid))
        ev = r.execd({"command": "ipcs -m -q -s | grep -c '^0x'; ls -A /dev/shm /dev/mqueue; "
                                 "echo end"})
        out = [e["text"] for e in ev if e["type"] == "stdout" and e["text"] != "\n"]
        self.assertEqual(out, ["0", "/dev/mqueue:", "/dev/shm:", "end"], ev)
        self.assert_pristine()


class ResetFigures(ResetBase):
    """The bounds of a reset, measured: 10,000 files in /workspace and 100
    running processes. Prints the figures."""
    files = 10000

    def ping_during(self, fn):
        """fn() while a client pings; sets ping_max (ms) and pings, and
        ping_base: the worst ping over the second before, without a reset
        (the machine's own noise)."""
        base = []
        end = time.monotonic() + 1
        while time.monotonic() < end:
            t0 = time.monotonic()
            self.r.request("GET", "/ping")
            base.append(time.monotonic() - t0)
            time.sleep(0.002)
        self.ping_base = max(base) * 1000
        stop = threading.Event()
        lat = []

        def pinger():
            while not stop.is_set():
                t0 = time.monotonic()
                self.assertEqual(self.r.request("GET", "/ping")[0], 200)
                lat.append(time.monotonic() - t0)
                time.sleep(0.002)

        t = threading.Thread(target=pinger)
        t.start()
        try:
            return fn()
        finally:
            stop.set()
            t.join()
            self.ping_max = max(lat) * 1000 if lat else 0
            self.pings = len(lat)

    def test_figures(self):
        r, R = self.r, self.roots
        pid = r.host_pid()
        snap = [l for l in r.loglines() if l.get("msg") == "reset: writable roots snapshotted"][0]
        hwm_start = vm_hwm_kib(pid)
        # 10,000 files: a tenant changes 1,000, removes 1,000 and adds 10,000.
        ev = r.execd({"command": "cd %s/many && for d in 0*; do echo x >> $d/f000$d 2>/dev/null; "
                                 "done; find . -name 'f*1' -exec sh -c 'echo y >> \"$1\"' _ {} \\; ;"
                                 "find . -name 'f*2' -delete; mkdir ../added && cd ../added && "
                                 "for i in $(seq 0 99); do mkdir d$i; (cd d$i && seq 1 100 | "
                                 "xargs touch); done; echo ok" % R.ws}, timeout=300)
        self.assertEqual(ev[-2].get("text"), "ok", ev[-3:])
        body = self.ping_during(self.reset)
        files_s = self.elapsed
        self.assert_pristine()
        hwm_files = vm_hwm_kib(pid)
        print("\n  reset, /workspace with 10,000 files (1,000 changed, 1,000 removed, "
              "10,000 added): %.0f ms (runner: %d ms; files phase %d ms), runner VmHWM %d KiB "
              "(%d at start, snapshot of %d entries / %d bytes took %d ms), worker peak RSS "
              "%d KiB, /ping max %.1f ms over %d pings (%.1f ms in the second before; longest "
              "reset step in the loop %d ms)"
              % (files_s * 1000, body["duration_ms"], body["phases_ms"]["files"], hwm_files,
                 hwm_start, snap["entries"], snap["bytes"], snap["ms"],
                 body["worker_peak_rss_kib"], self.ping_max, self.pings, self.ping_base,
                 body["longest_step_ms"]))
        print("  removed %s, restored %s" % (json.dumps(body["removed"]),
                                             json.dumps(body["restored"])))
        self.assertGreaterEqual(body["removed"]["files"], 10000)
        self.assertGreaterEqual(body["restored"]["files"], 1000)

        # 100 running processes: 10 background tasks of 10 processes each
        # (9 setsid daemons, and the sleep bash execs into).
        for i in range(10):
            ev = r.execd({"command": "for i in 1 2 3 4 5 6 7 8 9; do setsid sleep 1000 & done; "
                                     "sleep 1000", "background": True})
            self.assertEqual(ev[-1]["type"], "execution_complete")
        deadline = time.monotonic() + 10
        while len(descendants(pid)) < 110 and time.monotonic() < deadline:
            time.sleep(0.05)
        n = len(descendants(pid))
        self.assertGreaterEqual(n, 110)  # 100 + 10 shims
        body = self.ping_during(self.reset)
        self.assertEqual(descendants(pid), [])
        self.assertGreaterEqual(body["removed"]["processes"], 100)
        self.assertEqual(body["removed"]["tasks"], 10)
        hwm_procs = vm_hwm_kib(pid)
        print("  reset, 100 running processes (%d with the shims; %d reported ended): %.0f ms "
              "(runner: %d ms; processes phase %d ms), runner VmHWM %d KiB, /ping max %.1f ms "
              "over %d pings (%.1f ms in the second before; longest reset step in the loop %d ms)"
              % (n, body["removed"]["processes"], self.elapsed * 1000, body["duration_ms"],
                 body["phases_ms"]["processes"], hwm_procs, self.ping_max, self.pings,
                 self.ping_base, body["longest_step_ms"]))
        self.assert_pristine()
        if rss_is_meaningful():  # not under ASan or valgrind
            self.assertLess(hwm_procs, 32 * 1024)
            self.assertLess(self.ping_max, 500)


if __name__ == "__main__":
    unittest.main()
