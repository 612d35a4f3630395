"""Vault emulation with a real TLS proxy (issue 6): a private nginx with a
CA made at test time terminates TLS for the host name `localhost` in front of
the test gateway and injects the key. The runner holds no key (vault mode),
trusts the CA through SSL_CERT_FILE, and an agent task completes end to end;
nginx's access log shows the runner sent no Authorization, the gateway shows
it received the injected one. Without the CA the task ends in `tls_error`.
Runs for the dev build (OpenSSL) and, when built, the static one (mbedTLS)."""
import os
import shutil
import tempfile
import time
import unittest

import harness
from harness import Runner, free_port
from gwtools import Nginx, ensure_packages, make_ca
from test_gateway import TestGateway, text, tool

KEY = "sk-vault-injected-" + os.urandom(8).hex()
# not inherited by the runner (an empty value is not the same as unset)
TLS_ENV_CLEAR = ("SSL_CERT_FILE", "CURL_CA_BUNDLE", "FORCEAI_GATEWAY_KEY",
                 "FORCEAI_GATEWAY_KEY_FILE", "FORCEAI_GATEWAY_CA", "FORCEAI_GATEWAY_PROXY")


class VaultTLS(unittest.TestCase):
    runner_bin = None  # None: the harness's default (RUNNER_BIN or the dev build)

    @classmethod
    def setUpClass(cls):
        why = ensure_packages(("nginx", "nginx"), ("openssl", "openssl"))
        if why:
            raise unittest.SkipTest(why)
        if cls.runner_bin and not os.access(cls.runner_bin, os.X_OK):
            raise unittest.SkipTest("%s not built" % cls.runner_bin)
        cls.d = tempfile.mkdtemp(prefix="forceai-vault-")
        os.chmod(cls.d, 0o755)
        cls.gw = None
        cls.nginx = None
        try:
            cls.ca, crt, key = make_ca(cls.d, "localhost")
            cls.gw = TestGateway(key=KEY)  # accepts only the key nginx injects
            cls.port = free_port()
            cls.nginx = Nginx(cls.d, cls.port, "127.0.0.1:%d" % cls.gw.port, crt, key, KEY)
        except BaseException:
            cls.tearDownClass()
            raise
        cls.url = "https://localhost:%d/v1" % cls.port

    @classmethod
    def tearDownClass(cls):
        if cls.nginx:
            cls.nginx.close()
        if cls.gw:
            cls.gw.close()
        shutil.rmtree(cls.d, ignore_errors=True)

    def setUp(self):
        self.gw.turns.clear()
        self.gw.requests.clear()
        self.gw.errors.clear()
        self.r = None

    def tearDown(self):
        if self.r:
            self.r.close()

    def start(self, **env):
        e = dict(FORCEAI_GATEWAY_URL=self.url, FORCEAI_MODEL="test-model")
        e.update(env)
        saved = harness.RUNNER
        saved_env = {k: os.environ.pop(k) for k in TLS_ENV_CLEAR if k in os.environ}
        if self.runner_bin:
            harness.RUNNER = self.runner_bin
        try:
            self.r = Runner(env=e)
        finally:
            harness.RUNNER = saved
            os.environ.update(saved_env)
        return self.r

    def agent(self, goal):
        ev = self.r.native({"task": goal, "capability": "agent", "cwd": self.r.work},
                           timeout=90)
        self.assertTrue(ev, "no events; runner log:\n" + self.r.logtext()[-3000:])
        names = [e["event"] for e in ev]
        self.assertEqual(names[0], "started")
        self.assertEqual(sum(n in ("exit", "error") for n in names), 1, names)
        return ev

    def test_agent_end_to_end_through_tls_vault(self):
        self.start(SSL_CERT_FILE=self.ca)
        self.gw.script(
            tool("bash", {"command": "printf 'echo vault-ok\\n' > v.sh && sh v.sh"},
                 call_id="call_v"),
            text("It printed vault-ok."))
        ev = self.agent("write a script, run it, report")
        self.assertEqual(ev[-1]["event"], "exit", [e["event"] for e in ev] +
                         [ev[-1].get("data"), self.nginx.errors()])
        x = ev[-1]["data"]
        self.assertEqual(x["status"], "succeeded")
        self.assertEqual(x["answer"], "It printed vault-ok.")
        res = [e["data"] for e in ev if e["event"] == "tool.result" and e["data"].get("done")]
        self.assertEqual(res[0]["exit_code"], 0)
        self.assertEqual(self.gw.errors, [])
        # the gateway got both calls through nginx, each with the injected key
        reqs = self.gw.chat_requests()
        self.assertEqual(len(reqs), 2)
        for q in reqs:
            self.assertEqual(q["headers"].get("authorization"), "Bearer " + KEY)
        self.assertIn("vault-ok", reqs[1]["body"]["messages"][-1]["content"])
        # and what the runner itself sent to nginx: no Authorization at all
        lines = []
        end = time.monotonic() + 5  # nginx writes the log line when the request ends
        while time.monotonic() < end:
            lines = [l for l in self.nginx.access_lines() if "/v1/chat/completions" in l]
            if len(lines) >= 2:
                break
            time.sleep(0.05)
        self.assertEqual(len(lines), 2, self.nginx.access_lines())
        for l in lines:
            self.assertTrue(l.startswith("POST /v1/chat/completions 200 "), l)
            self.assertTrue(l.endswith('auth="-"'), l)
        self.assertNotIn(KEY, self.r.logtext())

    def test_untrusted_ca_is_tls_error(self):
        # the test CA is not in the system bundle: the handshake must fail
        self.start()
        self.gw.script(text("never"))
        t0 = time.monotonic()
        ev = self.agent("anything")
        self.assertLess(time.monotonic() - t0, 30)
        self.assertEqual(ev[-1]["event"], "error", ev)
        self.assertEqual(ev[-1]["data"]["code"], "tls_error", ev[-1])
        self.assertEqual(self.gw.requests, [])

    def test_wrong_host_name_is_tls_error(self):
        # trusted CA but the certificate names `localhost`, not 127.0.0.1
        self.start(SSL_CERT_FILE=self.ca,
                   FORCEAI_GATEWAY_URL="https://127.0.0.1:%d/v1" % self.port)
        ev = self.agent("anything")
        self.assertEqual(ev[-1]["event"], "error", ev)
        self.assertEqual(ev[-1]["data"]["code"], "tls_error", ev[-1])
        self.assertEqual(self.gw.requests, [])


class VaultTLSStatic(VaultTLS):
    """The same against the static build (libcurl 7.88 + mbedTLS 2.28): the
    binary the image ships. Its libcurl has no netrc support, which the
    gateway client accepts as "ignored"."""
    runner_bin = os.path.join(harness.ROOT, "build", "static", "forceai-runner")


if __name__ == "__main__":
    unittest.main()
