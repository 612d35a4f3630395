"""OpenSandbox execd 1.3's runtime init (issue 36, docs/design/profiles.md#runtime-init-a-warm-box-bound-to-one-sandbox): a
warm box started with --runtime-init (EXECD_RUNTIME_INIT) refuses every task
until POST /internal/init binds it to one sandbox: sandboxId and generation
(on /ready, /metrics and every log line), envs (the tasks' sandbox-level
environment, replace semantics), accessTokenHash (from then on every
request's token is checked against the hash; the raw token is never in the
box), entrypointPolicy, lifecycle, telemetry.attributes; warnings for what is
ignored. One-shot: a second call is 409, a bad body 400 without using the
slot. POST /v1/reset makes the box ready for a new init (a newer generation)."""
import hashlib
import os
import shutil
import tempfile
import time
import unittest

from harness import Runner

PY = "/usr/bin/python3"


def token_hash(tok):
    return "sha256:" + hashlib.sha256(tok.encode()).hexdigest()


def stdout_text(events):
    return "".join(e.get("text", "") + "\n" for e in events if e.get("type") == "stdout")


class Base(unittest.TestCase):
    args = ["--runtime-init"]
    token = None
    env = None

    def setUp(self):
        args = list(self.args)
        if "--allow-reset" in args:
            # A reset restores the writable roots: a scratch directory, never
            # the host's /tmp.
            roots = tempfile.mkdtemp(prefix="forceai-init-roots-")
            os.chmod(roots, 0o1777)
            self.addCleanup(shutil.rmtree, roots, True)
            args += ["--landlock-roots", roots]
        self.r = Runner(args, token=self.token, env=self.env)

    def tearDown(self):
        rc = self.r.stop()
        log = self.r.logtext()
        self.r.close()
        if rc != 0:
            raise AssertionError("runner exited %s; log tail:\n%s" % (rc, log[-3000:]))

    def init(self, body, headers=None):
        return self.r.json("POST", "/internal/init", body, headers=headers)

    def good(self, **kw):
        b = {"sandboxId": "sb-%s" % os.urandom(3).hex(), "generation": 1}
        b.update(kw)
        return b


class BeforeInit(Base):
    def test_ready_is_503_and_tasks_are_refused(self):
        st, b = self.r.json("GET", "/ready")
        self.assertEqual(st, 503, b)
        self.assertIs(b["initialized"], False)
        self.assertEqual(b["code"], "NOT_INITIALIZED")
        self.assertEqual(b["runtimeInitProtocol"], 1)
        self.assertEqual(self.r.request("GET", "/ping")[0], 200)
        for method, path, body in (("POST", "/command", {"command": "true"}),
                                   ("POST", "/v1/tasks", {"task": "true"}),
                                   ("POST", "/session", {}),
                                   ("GET", "/files/info?path=/tmp", None),
                                   ("POST", "/pty", {})):
            with self.subTest(path=path):
                st, b = self.r.json(method, path, body)
                self.assertEqual((st, b["code"]), (503, "NOT_INITIALIZED"), b)
                self.assertIn("/internal/init", b["message"])

    def test_hardening_says_how_init_is_reached(self):
        b = self.r.json("GET", "/v1/hardening")[1]
        self.assertEqual(b["token_free_routes"],
                         ["GET /ping", "GET /ready", "POST /internal/init (before the binding only)"])

    def test_other_methods(self):
        st, b = self.r.json("GET", "/internal/init")
        self.assertEqual((st, b["code"]), (405, "METHOD_NOT_ALLOWED"), b)


class HappyPath(Base):
    def test_init_binds_the_box(self):
        tok = "tok-" + os.urandom(12).hex()
        st, b = self.init(self.good(sandboxId="sb-happy", generation=7,
                                    accessTokenHash=token_hash(tok),
                                    entrypointPolicy="keep",
                                    envs={"SANDBOX_FOO": "bar", "PATH": "/usr/bin:/bin"},
                                    telemetry={"attributes": {"team": "a"}}))
        self.assertEqual(st, 200, b)
        self.assertEqual((b["status"], b["sandboxId"], b["generation"]),
                         ("initialized", "sb-happy", 7))
        self.assertIsInstance(b["warning"], list)
        # /ready is token-free and names the binding.
        st, b = self.r.json("GET", "/ready")
        self.assertEqual(st, 200, b)
        self.assertEqual((b["initialized"], b["sandboxId"], b["generation"]),
                         (True, "sb-happy", 7))
        # Everything else needs the new token now.
        self.assertEqual(self.r.request("GET", "/metrics")[0], 401)
        self.r.token = tok
        st, m = self.r.json("GET", "/metrics")
        self.assertEqual((st, m["sandbox_id"], m["generation"]), (200, "sb-happy", 7))
        self.assertEqual(m["attributes"], {"team": "a"})
        ev = self.r.execd({"command": "echo FOO=$SANDBOX_FOO; echo PATH=$PATH"})
        out = stdout_text(ev)
        self.assertIn("FOO=bar\n", out)
        self.assertIn("PATH=/usr/bin:/bin\n", out)
        # A request's envs still win over the sandbox's.
        ev = self.r.execd({"command": "echo FOO=$SANDBOX_FOO", "envs": {"SANDBOX_FOO": "req"}})
        self.assertIn("FOO=req\n", stdout_text(ev))
        # Every log line after the binding names it.
        bound = [l for l in self.r.loglines() if l.get("msg") == "runtime init applied"]
        self.assertEqual(len(bound), 1)
        self.assertEqual((bound[0]["sandboxId"], bound[0]["generation"]), ("sb-happy", 7))
        later = [l for l in self.r.loglines() if l.get("msg") == "task started"]
        self.assertTrue(later and all(l.get("sandboxId") == "sb-happy" for l in later), later)
        # No secret in the log: neither the token nor the env values.
        self.assertNotIn(tok, self.r.logtext())
        self.assertNotIn('"bar"', self.r.logtext())

    def test_warnings_for_what_is_ignored(self):
        st, b = self.init(self.good(entrypointPolicy="restart", future={"x": 1},
                                    telemetry={"attributes": {"k": "v"}, "exporter": "otlp"},
                                    lifecycle={"prePause": {"command": "true"}}))
        self.assertEqual(st, 200, b)
        w = " | ".join(b["warning"])
        for needle in ("future", "telemetry.exporter", "restart", "prePause",
                       "no accessTokenHash"):
            self.assertIn(needle, w)


class OneShot(Base):
    def test_second_init_is_409(self):
        tok = "t-" + os.urandom(8).hex()
        st, b = self.init(self.good(sandboxId="first", accessTokenHash=token_hash(tok)))
        self.assertEqual(st, 200, b)
        for body, hdr in ((self.good(sandboxId="second", generation=9), None),
                          ({}, None),
                          (self.good(sandboxId="second", generation=9),
                           {"X-EXECD-ACCESS-TOKEN": tok})):
            st, b = self.init(body, headers=hdr)
            self.assertEqual((st, b["code"]), (409, "ALREADY_INITIALIZED"), b)
        st, b = self.r.json("GET", "/ready")
        self.assertEqual(b["sandboxId"], "first")

    def test_bad_bodies_do_not_use_the_slot(self):
        bad = [b"", b"not json", b"[]", b"{}",
               {"sandboxId": "x"},
               {"sandboxId": "", "generation": 1},
               {"sandboxId": "a/b", "generation": 1},
               {"sandboxId": "x", "generation": -1},
               {"sandboxId": "x", "generation": 1, "entrypointPolicy": "sometimes"},
               {"sandboxId": "x", "generation": 1, "accessTokenHash": "sha256:abc"},
               {"sandboxId": "x", "generation": 1, "accessTokenHash": "md5:" + "0" * 64},
               {"sandboxId": "x", "generation": 1, "envs": {"1BAD": "v"}},
               {"sandboxId": "x", "generation": 1, "envs": ["A=1"]},
               {"sandboxId": "x", "generation": 1, "lifecycle": {"preStart": {}}},
               {"sandboxId": "x", "generation": 1,
                "lifecycle": {"periodic": [{"name": "p", "command": "x"}]}},
               {"sandboxId": "x", "generation": 1, "telemetry": {"attributes": {"a": 1}}}]
        for body in bad:
            with self.subTest(body=body):
                st, _, data = self.r.request("POST", "/internal/init", body)
                self.assertEqual(st, 400, data)
                self.assertIn(b'"code"', data)
                self.assertEqual(self.r.json("GET", "/ready")[0], 503)
        st, b = self.init(self.good(sandboxId="after-bad"))
        self.assertEqual((st, b["sandboxId"]), (200, "after-bad"), b)
        self.assertEqual(self.r.json("GET", "/ready")[0], 200)


class TokenHash(Base):
    def test_right_token_accepted_wrong_refused(self):
        tok = "right-" + os.urandom(12).hex()
        st, b = self.init(self.good(accessTokenHash=token_hash(tok)))
        self.assertEqual(st, 200, b)
        for wrong in ("", "wrong", tok + "x", tok[:-1], token_hash(tok),
                      hashlib.sha256(tok.encode()).hexdigest()):
            with self.subTest(token=wrong):
                st, _, _ = self.r.request("GET", "/metrics",
                                          headers={"X-EXECD-ACCESS-TOKEN": wrong})
                self.assertEqual(st, 401)
        self.assertEqual(self.r.request("GET", "/metrics")[0], 401)  # no header
        self.r.token = tok
        self.assertEqual(self.r.request("GET", "/metrics")[0], 200)
        # The raw token is nowhere in the box: not in a task's environment,
        # not in the runner's.
        ev = self.r.execd({"command": "env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'"})
        self.assertNotIn(tok, stdout_text(ev))
        with open("/proc/%d/environ" % self.r.host_pid(), "rb") as f:
            self.assertNotIn(tok.encode(), f.read())


class StartupToken(Base):
    token = "startup-" + os.urandom(8).hex()

    def test_init_needs_the_startup_token_then_only_the_new_one_counts(self):
        st, b = self.r.json("POST", "/internal/init", self.good(),
                            headers={"X-EXECD-ACCESS-TOKEN": "nope"})
        self.assertEqual((st, b["code"]), (401, "UNAUTHORIZED"), b)
        self.assertEqual(self.r.json("GET", "/ready")[0], 503)  # slot unused
        new = "new-" + os.urandom(8).hex()
        st, b = self.init(self.good(sandboxId="tok", accessTokenHash=token_hash(new)))
        self.assertEqual(st, 200, b)
        self.assertEqual(self.r.request("GET", "/metrics")[0], 401)  # the startup token
        self.r.token = new
        self.assertEqual(self.r.request("GET", "/metrics")[0], 200)


class ResetComposition(Base):
    args = ["--runtime-init", "--allow-reset"]

    def test_a_reset_box_waits_for_a_new_init(self):
        t1 = "one-" + os.urandom(8).hex()
        st, b = self.init(self.good(sandboxId="tenant-1", generation=1,
                                    accessTokenHash=token_hash(t1),
                                    envs={"ONLY_FIRST": "1", "SHARED": "first"}))
        self.assertEqual(st, 200, b)
        self.r.token = t1
        self.assertIn("SHARED=first", stdout_text(self.r.execd({"command": "echo SHARED=$SHARED"})))
        st, b = self.r.json("POST", "/v1/reset")
        self.assertEqual(st, 200, b)
        self.assertEqual(b["runtime_init"], {"unbound": True, "initialized": False})
        self.r.token = None  # no startup token: the binding's hash is gone too
        st, b = self.r.json("GET", "/ready")
        self.assertEqual((st, b["initialized"], b["code"]), (503, False, "NOT_INITIALIZED"), b)
        self.assertNotIn("sandboxId", b)
        st, b = self.r.json("POST", "/command", {"command": "true"})
        self.assertEqual((st, b["code"]), (503, "NOT_INITIALIZED"))
        # The old generation (a replayed init) is refused; a newer one binds.
        st, b = self.init(self.good(sandboxId="tenant-2", generation=1))
        self.assertEqual((st, b["code"]), (409, "STALE_GENERATION"), b)
        t2 = "two-" + os.urandom(8).hex()
        st, b = self.init(self.good(sandboxId="tenant-2", generation=2,
                                    accessTokenHash=token_hash(t2), envs={"SHARED": "second"}))
        self.assertEqual(st, 200, b)
        self.assertEqual(self.r.request("GET", "/metrics", headers={"X-EXECD-ACCESS-TOKEN": t1})[0],
                         401)
        self.r.token = t2
        out = stdout_text(self.r.execd({"command": "echo SHARED=$SHARED; echo FIRST=${ONLY_FIRST-unset}"}))
        # Replace semantics: the second tenant's variables only.
        self.assertIn("SHARED=second\n", out)
        self.assertIn("FIRST=unset\n", out)
        st, b = self.r.json("GET", "/ready")
        self.assertEqual((b["sandboxId"], b["generation"]), ("tenant-2", 2))


class EntrypointPolicy(unittest.TestCase):
    """The entrypoint (-- CMD) runs from the start of a warm box; `keep` leaves
    it alone, `restart` stops it (SIGTERM) and starts it again with the
    sandbox's envs once the binding's preStart is over."""

    def box(self, policy, lifecycle=None):
        d = tempfile.mkdtemp(prefix="forceai-ep-")
        self.addCleanup(shutil.rmtree, d, True)
        self.log = os.path.join(d, "starts")
        main = ["/bin/sh", "-c", "trap 'exit 0' TERM; echo \"$(date +%%s%%N) ${SANDBOX_X-none}\" >> %s; "
                "sleep 600 & wait" % self.log]
        r = Runner(["--runtime-init"], main=main)
        self.addCleanup(r.close)
        deadline = time.monotonic() + 10
        while not os.path.exists(self.log) and time.monotonic() < deadline:
            time.sleep(0.05)
        body = {"sandboxId": "ep", "generation": 1, "entrypointPolicy": policy,
                "envs": {"SANDBOX_X": "bound"}}
        if lifecycle:
            body["lifecycle"] = lifecycle
        st, b = r.json("POST", "/internal/init", body)
        self.assertEqual(st, 200, b)
        return r, b

    def starts(self):
        with open(self.log) as f:
            return [l.split() for l in f.read().splitlines()]

    def test_keep(self):
        r, b = self.box("keep")
        time.sleep(0.5)
        self.assertEqual([s[1] for s in self.starts()], ["none"])
        self.assertEqual(r.stop(), 0)

    def test_restart_after_prestart(self):
        r, b = self.box("restart", {"preStart": {"command": "sleep 1"}})
        self.assertFalse([w for w in b["warning"] if "restart" in w], b)
        deadline = time.monotonic() + 15
        while len(self.starts()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        s = self.starts()
        self.assertEqual([x[1] for x in s], ["none", "bound"])
        pre = [l for l in r.loglines() if l.get("msg") == "lifecycle: preStart done"][0]
        self.assertGreaterEqual(int(s[1][0]) // 1000000, pre["ts"])
        self.assertEqual(r.json("GET", "/ready")[0], 200)
        self.assertEqual(r.stop(), 0)


class WithoutTheFlag(unittest.TestCase):
    def test_internal_init_is_404_and_the_box_is_ready(self):
        r = Runner([])
        try:
            st, b = r.json("POST", "/internal/init", {"sandboxId": "x", "generation": 1})
            self.assertEqual((st, b["code"]), (404, "NOT_FOUND"), b)
            st, b = r.json("GET", "/ready")
            self.assertEqual((st, b["initialized"]), (200, True), b)
        finally:
            self.assertEqual(r.stop(), 0)
            r.close()

    def test_environment_variable_turns_it_on(self):
        r = Runner([], env={"EXECD_RUNTIME_INIT": "on"})
        try:
            self.assertEqual(r.json("GET", "/ready")[0], 503)
        finally:
            self.assertEqual(r.stop(), 0)
            r.close()


if __name__ == "__main__":
    unittest.main()
