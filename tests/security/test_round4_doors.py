"""Round four of the runner's doors (issue 44), from the attacker's side.

Finding 4: the port proxy must not hand the runner's access token to the app behind
/proxy/{port}, which is the task's. The task's own HTTP server answers each request with the
head it received; the client sends the token in every form the runner accepts (X-EXECD-ACCESS-
TOKEN, X-Access-Token, Authorization: Bearer) and inside other fields (a cookie, a custom
field, %-encoded, Basic credentials); the server must never see it (docs/design/interactive.md#every-byte-queued-counts-the-websocket-ping-flood)."""
import base64
import hashlib
import http.client
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

from harness import POLICY, RUNNER, Runner, free_port, nonroot_files

PY = "/usr/bin/python3"

# The task's server: every request is answered with the head it received, as bytes.
RECORDER = r'''
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
while True:
    c, _ = s.accept()
    data = b""
    while b"\r\n\r\n" not in data:
        got = c.recv(65536)
        if not got:
            break
        data += got
    head = data.split(b"\r\n\r\n")[0]
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
              % (len(head), head))
    c.close()
'''


def wait_listening(port, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("nothing listens on port %d" % port)


def forms(token):
    """(label, the fields a client adds besides X-EXECD-ACCESS-TOKEN)."""
    pct = "".join("%%%02X" % ord(ch) for ch in token)
    basic = base64.b64encode(("user:" + token).encode()).decode()
    urlsafe = base64.urlsafe_b64encode(("x" + token + "y").encode()).decode().rstrip("=")
    return [
        ("execd", {}),
        ("x-access-token", {"X-Access-Token": token}),
        ("x-access-token lower case", {"x-access-token": token}),
        ("bearer", {"Authorization": "Bearer " + token}),
        ("bearer lower case", {"authorization": "bearer  " + token}),
        ("cookie", {"Cookie": "session=abc; tok=%s; x=1" % token}),
        ("custom field", {"X-Upstream-Key": "prefix-%s-suffix" % token}),
        ("%-encoded cookie", {"Cookie": "tok=" + pct}),
        ("basic credentials", {"Authorization": "Basic " + basic}),
        ("base64url inside a field", {"X-Blob": "v1." + urlsafe + ".sig"}),
    ]


class ProxyKeepsTheToken(unittest.TestCase):
    def run_forms(self, r, token, auth_field="X-EXECD-ACCESS-TOKEN"):
        port = free_port()
        script = os.path.join(r.work, "recorder.py")
        with open(script, "w") as f:
            f.write(RECORDER)
        os.chmod(script, 0o644)
        ev = r.execd({"command": "exec %s %s %d" % (PY, script, port), "background": True})
        self.assertEqual(ev[0]["type"], "init", ev)
        wait_listening(port)
        leaked = []
        for label, extra in forms(token):
            h = {auth_field: token, "X-Kept": "yes"}
            h.update(extra)
            c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=30)
            c.request("GET", "/proxy/%d/x" % port, headers=h)
            resp = c.getresponse()
            seen = resp.read().decode(errors="replace")
            c.close()
            self.assertEqual(resp.status, 200, (label, seen))
            # The request itself went through: the app's own fields are kept.
            self.assertIn("X-Kept: yes", seen, label)
            # Each value sent carries the token in some encoding: none may arrive.
            carried = [token] + list(extra.values())
            if any(v in seen for v in carried):
                leaked.append((label, seen))
        self.assertEqual(leaked, [], "the task's server saw the runner's token")

    def test_startup_token_in_every_form(self):
        token = "r4-" + os.urandom(12).hex()
        r = Runner(token=token)
        try:
            self.run_forms(r, token)
            # An app's own credentials are not the runner's: they go through.
            port = free_port()
            script = os.path.join(r.work, "recorder2.py")
            with open(script, "w") as f:
                f.write(RECORDER)
            os.chmod(script, 0o644)
            r.execd({"command": "exec %s %s %d" % (PY, script, port), "background": True})
            wait_listening(port)
            c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=30)
            c.request("GET", "/proxy/%d/x" % port, headers={
                "X-EXECD-ACCESS-TOKEN": token, "Authorization": "Bearer app-own-key",
                "Cookie": "app=1"})
            seen = c.getresponse().read().decode()
            c.close()
            self.assertIn("Authorization: Bearer app-own-key", seen)
            self.assertIn("Cookie: app=1", seen)
        finally:
            self.assertEqual(r.stop(), 0, r.logtext()[-3000:])
            r.close()

    def test_runtime_init_token_in_every_form(self):
        # Bound by runtime init, the runner keeps only the token's hash: the forwarded
        # fields are still searched for the token that authenticated the request.
        r = Runner(["--runtime-init"])
        try:
            token = "cp-" + os.urandom(12).hex()
            st, b = r.json("POST", "/internal/init", {
                "sandboxId": "r4", "generation": 1,
                "accessTokenHash": "sha256:" + hashlib.sha256(token.encode()).hexdigest()})
            self.assertEqual(st, 200, b)
            r.token = token
            self.run_forms(r, token)
        finally:
            self.assertEqual(r.stop(), 0, r.logtext()[-3000:])
            r.close()


TASK = 1000
REFUSED = "refused, a task could have written it"


class ConfigFromTrustedPlaces(unittest.TestCase):
    """Issue 44: files the runner reads as configuration at start (the lifecycle hooks, the
    EXECD_ENVS file, the stdio MCP servers, the token files) are refused, exit 2 with the reason,
    when a task user could have written them or a directory above them (docs/design/security.md#trusted-input-only-from-places-no-task-can-write).
    The attacker is a task of uid 1000 that planted the file, or a directory on its way, in a
    writable root before the box (re)started."""

    def setUp(self):
        self.d = tempfile.mkdtemp(prefix="forceai-r4-cfg-")  # root's 0700, under /tmp
        os.chmod(self.d, 0o755)
        self.addCleanup(shutil.rmtree, self.d, True)

    def plant(self, rel, text, owner=0, mode=0o644, dir_owner=0, dir_mode=0o755):
        path = os.path.join(self.d, rel)
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        os.chown(parent, dir_owner, dir_owner)
        os.chmod(parent, dir_mode)
        with open(path, "w") as f:
            f.write(text)
        os.chown(path, owner, owner)
        os.chmod(path, mode)
        return path

    def start(self, args=(), env=None, wrap=None):
        binary, policy = nonroot_files() if wrap else (RUNNER, POLICY)
        e = dict(os.environ)
        e.update(env or {})
        cmd = list(wrap or []) + [binary, "--listen", "127.0.0.1:%d" % free_port(),
                                  "--seccomp-policy", policy,
                                  "--landlock-roots", "/tmp"] + list(args)
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=8, env=e)
        except subprocess.TimeoutExpired as t:  # it started: the file was taken
            err = t.stderr.decode(errors="replace") if t.stderr else ""
            return subprocess.CompletedProcess(cmd, "still running after 8 s", "", err)

    def assert_refused(self, p, path, why):
        self.assertEqual(p.returncode, 2, p.stderr[-2000:])
        self.assertIn(path, p.stderr)
        self.assertIn(REFUSED, p.stderr)
        self.assertIn(why, p.stderr)
        self.assertIn("root's and not writable by group or others", p.stderr)

    def cases(self):
        """(label, make(name) -> (args, env, path shown, reason))"""
        lc = "[[periodic]]\nname = 'x'\nintervalSeconds = 60\ncommand = 'true'\n"

        def lifecycle(where):
            def make(name):
                path = where(name + "/lifecycle.toml", lc)
                return [], {"EXECD_LIFECYCLE_CONFIG": path}, path

            return make

        def home_lifecycle(where):
            def make(name):
                path = where(name + "/home/.execd/lifecycle.toml", lc)
                return [], {"HOME": os.path.dirname(os.path.dirname(path))}, path

            return make

        def mcp(where):
            def make(name):
                path = where(name + "/mcp.json", '{"mcpServers": {}}')
                return ["--mcp-servers", path], {}, path

            return make

        def envs(where):
            def make(name):
                path = where(name + "/.env", "A='1'\n")
                return ["--execd-envs", path], {}, path

            return make

        def token(where):
            def make(name):
                path = where(name + "/token", "tok-%s\n" % name)
                os.chmod(path, 0o600)
                return ["--token-file", path], {}, path

            return make

        return [("EXECD_LIFECYCLE_CONFIG", lifecycle), ("$HOME/.execd/lifecycle.toml",
                                                         home_lifecycle),
                ("--mcp-servers", mcp), ("--execd-envs", envs), ("--token-file", token)]

    def test_planted_by_a_task_or_under_its_directory_is_refused(self):
        task_file = lambda rel, text: self.plant(rel, text, owner=TASK)  # noqa: E731
        task_dir = lambda rel, text: self.plant(rel, text, dir_owner=TASK)  # noqa: E731
        open_dir = lambda rel, text: self.plant(rel, text, dir_mode=0o777)  # noqa: E731
        for label, kind in self.cases():
            plants = [("task dir", task_dir, "is owned by uid 1000, a task's"),
                      ("0777 dir", open_dir, "is writable by every user (mode 0777")]
            # EXECD_ENVS is the tasks' own channel (set_env writes it): the task user's file
            # is fine there (below), a directory of theirs is not.
            if label not in ("--execd-envs", "--token-file"):
                plants.append(("task file", task_file, "is owned by uid 1000, a task's"))
            for i, (how, where, why) in enumerate(plants):
                with self.subTest(file=label, planted=how):
                    args, env, path = kind(where)("%s-%d" % (label.strip("-$/.").replace(
                        "/", "_"), i))
                    p = self.start(args, env)
                    self.assert_refused(p, path, why)

    def test_a_task_symlink_in_a_sticky_directory_is_refused(self):
        # Sticky /tmp: a task cannot replace root's entries there, but a link it made is its:
        # the file the link reaches is root's, the redirection is the task's.
        lc = "[[periodic]]\nname = 'x'\nintervalSeconds = 60\ncommand = 'true'\n"
        sticky = os.path.join(self.d, "sticky")
        os.makedirs(sticky)
        os.chmod(sticky, 0o1777)
        kinds = [
            ("--mcp-servers", "mcp.json", '{"mcpServers": {}}',
             lambda link: (["--mcp-servers", link], {})),
            ("EXECD_LIFECYCLE_CONFIG", "lifecycle.toml", lc,
             lambda link: ([], {"EXECD_LIFECYCLE_CONFIG": link})),
            ("--token-file", "token", "tok-linked\n",
             lambda link: (["--token-file", link], {})),
        ]
        for label, name, text, use in kinds:
            with self.subTest(file=label):
                good = self.plant("good/" + name, text,
                                  mode=0o600 if label == "--token-file" else 0o644)
                link = os.path.join(sticky, name)
                os.symlink(good, link)
                os.lchown(link, TASK, TASK)
                args, env = use(link)
                p = self.start(args, env)
                self.assert_refused(p, link, "is owned by uid 1000, a task's")
                # The same link made by root is fine: a task may not swap it in a sticky
                # directory.
                os.lchown(link, 0, 0)
                r = Runner(args, env=env, token="tok-linked" if label == "--token-file"
                           else None)
                self.assertEqual(r.stop(), 0, r.logtext()[-2000:])
                r.close()

    def test_trusted_places_still_start(self):
        # Root's files in root's directories (under a writable root and outside), the
        # EXECD_ENVS file the task user's (as OpenSandbox's bootstrap leaves it).
        lc = self.plant("ok/lifecycle.toml", "")
        mcp = self.plant("ok/mcp.json", '{"mcpServers": {}}')
        envs = self.plant("ok/.env", "A='1'\n", owner=TASK, mode=0o600)
        r = Runner(["--mcp-servers", mcp, "--execd-envs", envs],
                   env={"EXECD_LIFECYCLE_CONFIG": lc})
        try:
            ev = r.execd({"command": "echo A=$A"})
            self.assertIn("A=1", "".join(e.get("text", "") for e in ev))
        finally:
            self.assertEqual(r.stop(), 0, r.logtext()[-2000:])
            r.close()

    @unittest.skipUnless(shutil.which("setpriv"), "needs setpriv (util-linux)")
    def test_nonroot_mode_home_lifecycle_is_the_tasks(self):
        # Non-root mode: the tasks have the runner's own uid, so what that uid owns inside the
        # writable roots (the issue's case: $HOME under /home) is the tasks'; the same file
        # outside the roots is not theirs to write (Landlock).
        wrap = ["setpriv", "--reuid=%d" % TASK, "--regid=%d" % TASK, "--clear-groups",
                "--inh-caps=-all", "--"]
        lc = "[[periodic]]\nname = 'x'\nintervalSeconds = 60\ncommand = 'true'\n"
        inside = self.plant("in/home/.execd/lifecycle.toml", lc, owner=TASK, dir_owner=TASK)
        os.chown(os.path.dirname(os.path.dirname(inside)), TASK, TASK)
        home = os.path.dirname(os.path.dirname(inside))
        p = self.start([], {"HOME": home}, wrap=wrap)
        self.assertEqual(p.returncode, 2, p.stderr[-2000:])
        self.assertIn(inside, p.stderr)
        self.assertIn("non-root mode: tasks run with the runner's uid 1000", p.stderr)
        self.assertIn("inside the tasks' writable root /tmp", p.stderr)


if __name__ == "__main__":
    unittest.main()
