"""Capability `chat`: the loopback model proxy, per-task tokens, usage in the
exit event, and key isolation (docs/design/wire.md#native-task-api, design/model.md#loopback-model-proxy)."""
import base64
import json
import os
import re
import unittest
import urllib.request
import urllib.error

from harness import Runner
from test_gateway import TestGateway, text

# Made at run time: a key written in this file would be found by the very
# search that proves tasks cannot find it (the checkout may be readable).
KEY = "sk-REAL-gateway-key-" + os.urandom(8).hex()


def out(ev, kind="stdout"):
    b = b""
    for e in ev:
        if e.get("event") == kind:
            d = e["data"]
            b += d["text"].encode() if "text" in d else base64.b64decode(d["data_b64"])
    return b


CURL_CHAT = ("curl -sS -N -H \"Authorization: Bearer $OPENAI_API_KEY\" "
             "-H 'Content-Type: application/json' "
             "-d '{\"model\":\"test-model\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
             "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}' "
             "\"$OPENAI_BASE_URL/chat/completions\"")


class ChatBase(unittest.TestCase):
    key = KEY
    runner_args = ()

    @classmethod
    def setUpClass(cls):
        cls.gw = TestGateway(key=cls.key)
        cls.keyfile = None
        env = {"FORCEAI_GATEWAY_URL": cls.gw.url}
        if cls.key:
            env["FORCEAI_GATEWAY_KEY"] = cls.key
        cls.r = Runner(cls.runner_args, env=env)
        cls.proxy_port = [l for l in cls.r.loglines() if l.get("msg") == "ready"][0]["model_proxy_port"]

    @classmethod
    def tearDownClass(cls):
        cls.r.close()
        cls.gw.close()

    def setUp(self):
        self.gw.turns.clear()
        self.gw.requests.clear()
        self.gw.errors.clear()

    def chat(self, cmd, **kw):
        body = {"task": cmd, "capability": "chat", "cwd": self.r.work}
        body.update(kw)
        ev = self.r.native(body)
        self.assertEqual(ev[-1]["event"], "exit", ev)
        return ev

    def proxy(self, path, token, body=None):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.proxy_port, path),
                                     data=json.dumps(body).encode() if body else None,
                                     headers={"Authorization": "Bearer " + token,
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()


class Chat(ChatBase):
    def test_streamed_completion_through_the_proxy(self):
        self.gw.script(text("hello from the model", usage=(11, 4), frag=2))
        ev = self.chat(CURL_CHAT)
        body = out(ev).decode()
        self.assertIn("data: [DONE]", body)
        content = "".join(
            c["delta"].get("content") or "" for l in body.split("\n") if l.startswith("data: {")
            for c in json.loads(l[6:])["choices"])
        self.assertEqual(content, "hello from the model")
        x = ev[-1]["data"]
        self.assertEqual(x["status"], "succeeded")
        self.assertEqual(x["usage"], {"prompt_tokens": 11, "completion_tokens": 4,
                                      "total_tokens": 15, "cache_read_tokens": 0,
                                      "cache_creation_tokens": 0, "requests": 1})
        reqs = self.gw.chat_requests()
        self.assertEqual(len(reqs), 1)
        self.assertEqual(reqs[0]["headers"]["authorization"], "Bearer " + KEY)
        self.assertEqual(self.gw.errors, [])

    def test_usage_summed_over_calls_and_embeddings(self):
        self.gw.script(text("a", usage=(1, 2)), text("b", usage=(3, 4), usage_mode="in_last"))
        emb = ("curl -sS -H \"Authorization: Bearer $OPENAI_API_KEY\" -H 'Content-Type: application/json' "
               "-d '{\"model\":\"e\",\"input\":\"x\"}' \"$OPENAI_BASE_URL/embeddings\"")
        ev = self.chat("%s >/dev/null; %s >/dev/null; %s; curl -sS -H \"Authorization: Bearer "
                       "$OPENAI_API_KEY\" \"$OPENAI_BASE_URL/models\"" % (CURL_CHAT, CURL_CHAT, emb))
        self.assertEqual(ev[-1]["data"]["usage"], {"prompt_tokens": 7, "completion_tokens": 6,
                                                   "total_tokens": 13, "cache_read_tokens": 0,
                                                   "cache_creation_tokens": 0, "requests": 4})
        self.assertIn(b"test-model", out(ev))

    def test_token_refused_after_the_task_and_for_exec(self):
        ev = self.chat("echo $OPENAI_API_KEY; echo $OPENAI_BASE_URL")
        tok, base = out(ev).decode().split()
        self.assertTrue(re.fullmatch(r"fai-[0-9a-f]{64}", tok), tok)
        self.assertEqual(base, "http://127.0.0.1:%d/v1" % self.proxy_port)
        st, b = self.proxy("/v1/models", tok)
        self.assertEqual(st, 401)
        self.assertEqual(json.loads(b)["error"]["code"], "invalid_api_key")
        ev = self.r.native({"task": "echo key=${OPENAI_API_KEY:-none}", "capability": "exec"})
        self.assertEqual(out(ev), b"key=none\n")
        st, _ = self.proxy("/v1/models", "")
        self.assertEqual(st, 401)
        self.assertEqual(self.gw.requests, [])

    def test_only_allowlisted_paths(self):
        ev = self.chat("for p in files fine_tuning/jobs ../admin chat/completions/x; do "
                       "curl -s -o /dev/null -w '%{http_code} ' -H \"Authorization: Bearer $OPENAI_API_KEY\" "
                       "\"$OPENAI_BASE_URL/$p\"; done")
        self.assertEqual(out(ev).decode().split(), ["404", "404", "404", "404"])
        self.assertEqual(self.gw.requests, [])

    def test_key_isolation(self):
        """No place a task can read holds the gateway key. The file search covers the runner's
        own directory whole and, of the host's /tmp, what was written since the runner started
        (a key the runner leaked would be newer): the search's cost does not grow with a CI
        machine's /tmp (a full `grep -r /tmp` took 60 s there). Two canaries, one in each, prove
        the search reaches both."""
        self.gw.script(text("x"))
        pid = self.r.runner_pid()
        # The task's command is logged; the pattern it greps for must not match itself there.
        canary = "canary-%sx" % os.urandom(6).hex()
        marker = os.path.join(self.r.tmp, "since")
        with open(marker, "w"):
            pass
        old = os.stat(marker).st_mtime - 2
        os.utime(marker, (old, old))
        planted = [os.path.join(self.r.tmp, "planted"), "/tmp/forceai-chat-canary-%d" % os.getpid()]
        for p in planted:
            with open(p, "w") as f:
                f.write(canary + "\n")
            os.chmod(p, 0o644)
        files = ("{ find %s /etc -xdev -type f; find /tmp -xdev -maxdepth 3 -type f -newer %s; } "
                 "2>/dev/null | sort -u | xargs -r -d '\\n' grep -s %%s" % (self.r.tmp, marker))
        script = (
            "%s > /tmp/chat-out.$$; cat /tmp/chat-out.$$; rm -f /tmp/chat-out.$$; "
            "env; cat /proc/%d/environ /proc/%d/cmdline /proc/1/environ 2>&1; "
            "cat /proc/%d/maps 2>&1 | head -1; grep -s %s /proc/self/environ; "
            "%s | head -5; echo CANARIES; %s | sort; echo END"
            % (CURL_CHAT, pid, pid, pid, KEY, files % KEY, files % "-lE 'canary-[0-9a-f]{12}x'"))
        try:
            ev = self.chat(script)
        finally:
            for p in planted:
                os.unlink(p)
        everything = json.dumps(ev).encode()
        output = out(ev).decode()
        self.assertIn("END", output)
        self.assertEqual(output.split("CANARIES\n")[1].split("END")[0].split(), sorted(planted))
        self.assertNotIn(KEY.encode(), everything)
        self.assertNotIn(b"REAL-gateway", everything)
        # ... while the gateway got it on the proxied call
        self.assertEqual(self.gw.chat_requests()[0]["headers"]["authorization"], "Bearer " + KEY)
        # and the runner's own environment block no longer holds it
        with open("/proc/%d/environ" % self.r.host_pid(), "rb") as f:
            self.assertNotIn(KEY.encode(), f.read())


class ChatNetwork(ChatBase):
    """A chat task's network comes from its capability, not the runner's exec default: full
    under --exec-network none, and "none" refused (its model proxy is on 127.0.0.1)."""
    runner_args = ("--exec-network", "none")

    def test_chat_defaults_to_full_and_refuses_none(self):
        ev = self.chat("true")
        started = [e for e in ev if e["event"] == "started"][0]["data"]
        self.assertEqual((started["capability"], started["network"]), ("chat", "full"))
        ev = self.r.native({"task": "true", "capability": "exec"})
        started = [e for e in ev if e["event"] == "started"][0]["data"]
        self.assertEqual((started["capability"], started["network"]), ("exec", "none"))
        st, _, b = self.r.request("POST", "/v1/tasks", {"task": "true", "capability": "chat",
                                                        "network": "none"})
        self.assertEqual(st, 400, b)
        self.assertEqual(json.loads(b), {
            "code": "INVALID_REQUEST_BODY",
            "message": "a chat task needs the network: its model proxy is on 127.0.0.1"})


class ChatShutdown(unittest.TestCase):
    def test_sigterm_with_a_proxied_stream_in_flight(self):
        """Regression: MHD_stop_daemon() aborted on a suspended proxy stream."""
        import threading
        import time
        gw = TestGateway(key=None)
        r = Runner(env={"FORCEAI_GATEWAY_URL": gw.url})
        try:
            gw.script(text("slow answer", frag=1, drip=0.5))
            out = []
            th = threading.Thread(target=lambda: out.append(r.native(
                {"task": CURL_CHAT, "capability": "chat"})))
            th.start()
            self.assertTrue(gw.wait_requests(1))
            time.sleep(0.7)
            rc = r.shutdown()
            th.join(10)
            self.assertEqual(rc, 0, r.logtext()[-2000:])
            self.assertEqual(out[0][-1]["data"]["status"], "killed")
        finally:
            r.close()
            gw.close()


class ChatVault(ChatBase):
    key = None  # vault mode: the gateway (a sidecar) must receive no Authorization

    def test_no_authorization_in_vault_mode(self):
        self.gw.script(text("vault ok"))
        ev = self.chat(CURL_CHAT)
        self.assertIn(b'"vau"', out(ev))
        self.assertIn(b"data: [DONE]", out(ev))
        reqs = self.gw.chat_requests()
        self.assertEqual(len(reqs), 1)
        self.assertNotIn("authorization", reqs[0]["headers"])
        self.assertEqual(self.gw.errors, [])


if __name__ == "__main__":
    unittest.main()
