"""OpenSandbox execd 1.2's contract (issue 23): POST /command with argv, GET
/ready, token-free /ping and /ready, EXECD_ENVS read again for every command
(written the way the SDK's commands.set_env writes it), GET /session, PTY
viewers (?mode=viewer), and the routes the runner does not offer
(/internal/init 404, /v1/isolated/* 501), each with a JSON body."""
import asyncio
import json
import os
import shutil
import time

from harness import RunnerTest, slow
from wsutil import recv_until, websockets, ws_url

TOKEN = "t12-" + os.urandom(8).hex()


def stdout_text(events):
    """execd's stdout events are lines (without their newline): one per line here."""
    return "".join(e.get("text", "") + "\n" for e in events if e.get("type") == "stdout")


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


class Execd12(RunnerTest):
    runner_kwargs = {"token": TOKEN}

    @classmethod
    def setUpClass(cls):
        import tempfile
        # Outside the Landlock writable roots (/tmp here): tasks may write
        # the EXECD_ENVS file itself and nothing else in its directory.
        cls.envdir = tempfile.mkdtemp(prefix="forceai-envs-", dir="/var/tmp")
        cls.addClassCleanup(shutil.rmtree, cls.envdir, True)
        os.chmod(cls.envdir, 0o755)
        cls.envs = os.path.join(cls.envdir, ".env")
        open(cls.envs, "w").close()
        cls.runner_kwargs = {"token": TOKEN, "env": {"EXECD_ENVS": cls.envs}}
        super().setUpClass()

    def noauth(self, method, path):
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", self.r.port, timeout=30)
        c.request(method, path)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def post(self, body):
        return self.r.request("POST", "/command", body,
                              headers={"Content-Type": "application/json"})

    # ---- argv
    def test_argv_literal_no_shell(self):
        ev = self.r.execd({"argv": ["printf", "%s|", "a b", "$HOME", ";echo x", "*"],
                           "cwd": self.r.work})
        self.assertEqual(stdout_text(ev), "a b|$HOME|;echo x|*|\n", ev)
        self.assertEqual(ev[-1]["type"], "execution_complete", ev)

    def test_argv0_relative_to_cwd_and_path(self):
        script = os.path.join(self.r.work, "hello.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\necho \"hi $1\"\n")
        os.chmod(script, 0o755)
        ev = self.r.execd({"argv": ["./hello.sh", "there"], "cwd": self.r.work})
        self.assertEqual(stdout_text(ev), "hi there\n", ev)
        ev = self.r.execd({"argv": ["id", "-u"], "cwd": self.r.work})
        self.assertEqual(stdout_text(ev).strip(), "1000", ev)

    def test_argv_errors(self):
        for body, word in [({"argv": ["a"], "command": "b"}, "exactly one"),
                           ({}, "required"),
                           ({"argv": []}, "non-empty"),
                           ({"argv": "ls"}, "non-empty array"),
                           ({"argv": ["ls", 5]}, "argv[1] must be a string"),
                           ({"argv": ["ls", "a\u0000b"]}, "NUL"),
                           ({"argv": [""]}, "must not be empty"),
                           ({"argv": ["no-such-program-xyz"]}, "not an executable")]:
            st, _, raw = self.post(body)
            b = json.loads(raw)
            self.assertEqual((st, b["code"]), (400, "INVALID_REQUEST_BODY"), (body, b))
            self.assertIn(word, b["message"], body)

    # ---- probes
    def test_ready_and_ping_need_no_token(self):
        for path in ("/ping", "/ready"):
            st, raw = self.noauth("GET", path)
            self.assertEqual(st, 200, (path, raw))
        st, b = self.r.json("GET", "/ready")
        self.assertIs(b["initialized"], True, b)
        # Everything else still needs it.
        for path in ("/session", "/command", "/v1/hardening", "/files/info?path=/"):
            st, raw = self.noauth("GET", path)
            self.assertEqual(st, 401, (path, raw))
        # POST /ping is not the probe: still refused without the token.
        st, _ = self.noauth("POST", "/ping")
        self.assertEqual(st, 401)
        st, b = self.r.json("GET", "/v1/hardening")
        self.assertEqual(b.get("token_free_routes"), ["GET /ping", "GET /ready"], b)

    # ---- EXECD_ENVS
    def test_execd_envs_1_reread_with_precedence(self):
        # The SDK appends KEY='value' lines (a ' written as '\'').
        with open(self.envs, "w") as f:
            f.write("FROMFILE='one'\nBOTH='file'\nQUOTE='it'\\''s'\nPATH='/bin:/usr/bin'\n")
        ev = self.r.execd({"command": "echo $FROMFILE/$BOTH/$QUOTE/$PATH",
                           "envs": {"BOTH": "request"}, "cwd": self.r.work})
        self.assertEqual(stdout_text(ev), "one/request/it's//bin:/usr/bin\n", ev)
        # Re-read for each command: a task appends (as set_env does) and the
        # next command sees it.
        os.chmod(self.envs, 0o666)
        ev = self.r.execd({"command": "echo \"LATER='two'\" >> \"$EXECD_ENVS\" && echo ok",
                           "cwd": self.r.work})
        self.assertEqual(stdout_text(ev), "ok\n", ev)
        ev = self.r.execd({"command": "echo $LATER", "cwd": self.r.work})
        self.assertEqual(stdout_text(ev), "two\n", ev)
        # The file only: its directory stays closed to tasks (Landlock; the
        # valgrind stage runs tasks unconfined).
        if "--insecure-no-confine" in os.environ.get("RUNNER_EXTRA_ARGS", ""):
            return
        os.chmod(self.envdir, 0o777)
        try:
            ev = self.r.execd({"command": "touch \"$(dirname \"$EXECD_ENVS\")/x\" 2>&1; echo rc=$?",
                               "cwd": self.r.work})
            self.assertIn("rc=1", stdout_text(ev), ev)
            self.assertFalse(os.path.exists(os.path.join(self.envdir, "x")))
        finally:
            os.chmod(self.envdir, 0o755)

    def test_execd_envs_2_errors_not_fatal(self):
        with open(self.envs, "w") as f:
            f.write("GOOD=1\nthis is not an assignment\nBAD='unterminated\nALSO=2\n")
        ev = self.r.execd({"command": "echo $GOOD$ALSO", "cwd": self.r.work})
        self.assertEqual(stdout_text(ev), "12\n", ev)
        self.assertIn("EXECD_ENVS: lines skipped", self.r.logtext())
        # A symlink in its place (to a file the task may not read) is not followed.
        secret = os.path.join(self.envdir, "secret")
        with open(secret, "w") as f:
            f.write("SECRET=root-only\n")
        os.chmod(secret, 0o600)
        os.unlink(self.envs)
        os.symlink(secret, self.envs)
        try:
            ev = self.r.execd({"command": "echo \"[$SECRET]\"", "cwd": self.r.work})
            self.assertEqual(stdout_text(ev), "[]\n", ev)
        finally:
            os.unlink(self.envs)
            open(self.envs, "w").close()
        # A FIFO does not stall the runner.
        os.unlink(self.envs)
        os.mkfifo(self.envs)
        try:
            t0 = time.monotonic()
            ev = self.r.execd({"command": "echo fifo-ok", "cwd": self.r.work})
            self.assertEqual(stdout_text(ev), "fifo-ok\n", ev)
            self.assertLess(time.monotonic() - t0, slow(5))
        finally:
            os.unlink(self.envs)
            open(self.envs, "w").close()

    # ---- sessions
    def test_session_list(self):
        st, b = self.r.json("POST", "/session", {"cwd": self.r.work})
        self.assertEqual(st, 200, b)
        sid = b["session_id"]
        try:
            st, b = self.r.json("GET", "/session")
            self.assertEqual(st, 200)
            mine = [s for s in b["sessions"] if s["session_id"] == sid]
            self.assertEqual(mine, [{"session_id": sid, "cwd": self.r.work, "running": False}])
        finally:
            self.r.request("DELETE", "/session/" + sid)
        st, b = self.r.json("GET", "/session")
        self.assertNotIn(sid, [s["session_id"] for s in b["sessions"]])

    # ---- routes not offered
    def test_runtime_init_and_isolated(self):
        st, b = self.r.json("POST", "/internal/init", {})
        self.assertEqual((st, b["code"]), (404, "NOT_FOUND"), b)
        self.assertIn("--runtime-init", b["message"])
        for path in ("/v1/isolated", "/v1/isolated/sessions", "/v1/isolated/a/b/c"):
            st, b = self.r.json("POST", path, {})
            self.assertEqual((st, b["code"]), (501, "NOT_IMPLEMENTED"), (path, b))

    # ---- PTY viewers
    def test_pty_viewers(self):
        st, b = self.r.json("POST", "/pty", {"cwd": self.r.work})
        sid = b["session_id"]
        hdr = {"X-EXECD-ACCESS-TOKEN": TOKEN}
        url = ws_url(self.r, "/pty/%s/ws" % sid)

        def conn(q=""):
            return websockets.connect(url + q, extra_headers=hdr, max_size=None)

        async def go():
            # A viewer before any shell: told so, closed.
            async with conn("?mode=viewer") as v0:
                frames = await recv_until(v0, lambda k, p: k == "json" and p["type"] == "error")
                self.assertEqual(frames[-1][1]["code"], "NOT_STARTED")
            async with conn() as w:
                await recv_until(w, lambda k, p: k == "json" and p["type"] == "connected")
                await w.send(b"\x00echo first-$((1+1))\n")
                await recv_until(w, lambda k, p: k == "stdout" and b"first-2" in p)
                async with conn("?mode=viewer&since=0") as v1, conn("?mode=viewer") as v2:
                    f1 = await recv_until(v1, lambda k, p: k == "json" and p["type"] == "connected")
                    self.assertIs(f1[-1][1].get("viewer"), True)
                    # since=0: the viewer got the earlier output as replay
                    self.assertIn(b"first-2", b"".join(p[1] for k, p in f1 if k == "replay"))
                    await recv_until(v2, lambda k, p: k == "json" and p["type"] == "connected")
                    # Viewer input is refused and reaches nothing.
                    await v1.send(b"\x00echo from-viewer\n")
                    await v1.send(json.dumps({"type": "resize", "cols": 10, "rows": 5}))
                    e = await recv_until(v1, lambda k, p: k == "json" and p["type"] == "error")
                    self.assertEqual(e[-1][1]["code"], "READ_ONLY")
                    await v1.send(json.dumps({"type": "ping"}))
                    await recv_until(v1, lambda k, p: k == "json" and p["type"] == "pong")
                    # The writer is still the writer; both viewers see its output.
                    await w.send(b"\x00echo second-$((2+2)); stty size\n")
                    for v in (v1, v2):
                        await recv_until(v, lambda k, p: k == "stdout" and b"second-4" in p)
                    seen = await recv_until(w, lambda k, p: k == "stdout" and b"24 80" in p)
                    self.assertNotIn(b"from-viewer", b"".join(p for k, p in seen if k == "stdout"))
                    # A viewer never takes over.
                    st, _, _ = self.r.request("GET", "/pty/%s/ws?mode=viewer&takeover=1" % sid)
                    self.assertEqual(st, 400)
                    st, _, _ = self.r.request("GET", "/pty/%s/ws?mode=writer" % sid)
                    self.assertEqual(st, 400)
                    await w.send(b"\x00exit 5\n")
                    for v in (v1, v2, w):
                        ex = await recv_until(v, lambda k, p: k == "json" and p["type"] == "exit")
                        self.assertEqual(ex[-1][1]["exit_code"], 5)
        try:
            run(go())
        finally:
            self.r.request("DELETE", "/pty/" + sid)
