"""Real model clients inside chat tasks, through the model proxy to the
scripted gateway (docs/design/model.md#tests-and-what-the-real-clients-did): Claude Code (`claude -p
--output-format stream-json`, completing a Bash tool call), the Anthropic
TypeScript SDK (streaming), Google's @google/genai SDK (streaming), the Gemini
CLI and Codex
(the Responses API), each configured by the variables the chat task gets;
then each one's budget refusal, as the client itself reports it.

The clients are pinned in clients/package.json + package-lock.json and
installed by clients/setup.sh into a cache outside the clone (npm ci, only
when the lockfile changed). Without npm or the registry the tests fail: a
client that cannot be installed is not a client that works.
"""
import json
import os
import shutil
import subprocess
import unittest

from harness import Runner, client_node
from test_chat import out
from test_gateway import TestGateway
from wire_gateways import a_text, a_tool, g_text, r_text

HERE = os.path.dirname(os.path.abspath(__file__))
KEY = "sk-REAL-clients-key-" + os.urandom(8).hex()
NODE = client_node()
QUIET = {"DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
         "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}


def has_tool_result(m):
    c = m.get("content")
    return isinstance(c, list) and any(isinstance(b, dict) and b.get("type") == "tool_result"
                                       for b in c)


def responder(fmt, body):
    """What the "model" says to a real client: Claude Code gets a Bash tool
    call, then (seeing its result) a final answer; anything else a greeting."""
    if fmt == "gemini":
        return g_text("hello from gemini", usage=(9, 5))
    if fmt == "responses":
        return r_text("hello from codex", usage=(25, 7))
    tools = [t.get("name") for t in body.get("tools") or []]
    if "Bash" in tools:
        if not any(has_tool_result(m) for m in body["messages"]):
            return a_tool("Bash", {"command": "echo claude-was-here > marker.txt",
                                   "description": "write the marker"}, usage=(30, 12))
        return a_text("Done: the marker is written.", usage=(50, 9))
    return a_text("hello from claude", usage=(12, 6), split=4)


class Clients(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        r = subprocess.run([os.path.join(HERE, "clients", "setup.sh")], capture_output=True,
                           timeout=900)
        if r.returncode != 0:
            raise RuntimeError("installing the clients failed: " + r.stderr.decode()[-2000:])
        cls.nm = r.stdout.decode().strip().splitlines()[-1]
        cls.versions = {}
        for p in ("@anthropic-ai/claude-code", "@anthropic-ai/sdk", "@google/genai",
                  "@google/gemini-cli", "@openai/codex"):
            with open(os.path.join(cls.nm, p, "package.json")) as f:
                cls.versions[p] = json.load(f)["version"]
        print("clients:", cls.versions)
        cls.gw = TestGateway(key=KEY)
        cls.gw.responder = responder
        cls.r = Runner(env={"FORCEAI_GATEWAY_URL": cls.gw.url, "FORCEAI_GATEWAY_KEY": KEY})

    @classmethod
    def tearDownClass(cls):
        cls.r.close()
        cls.gw.close()

    def setUp(self):
        self.gw.turns.clear()
        self.gw.requests.clear()
        self.gw.errors.clear()
        # a private, task-owned home and working directory per test
        self.dir = os.path.join(self.r.work, self._testMethodName)
        os.makedirs(os.path.join(self.dir, "home"))
        for d in (self.dir, os.path.join(self.dir, "home")):
            os.chown(d, 1000, 1000)
        for s in ("anthropic_stream.cjs", "genai_stream.cjs"):
            shutil.copy(os.path.join(HERE, "clients", s), self.dir)

    def chat(self, cmd, **kw):
        env = dict(QUIET, HOME=os.path.join(self.dir, "home"))
        body = {"task": cmd, "capability": "chat", "cwd": self.dir, "env": env,
                "timeout_ms": 120000}
        body.update(kw)
        ev = self.r.native(body, timeout=150)
        self.assertEqual(ev[-1]["event"], "exit", ev[-3:])
        return ev

    def clean(self, ev):
        """The task never saw the real key; the gateway never saw the token."""
        self.assertNotIn(KEY, json.dumps(ev))
        for rq in self.gw.requests:
            self.assertNotIn("fai-", json.dumps(rq["headers"]) + rq["path"])
        self.assertEqual(self.gw.errors, [])

    def claude(self, **kw):
        return self.chat("%s/.bin/claude -p 'Write the marker file.' --output-format stream-json "
                         "--verbose --allowedTools Bash --model claude-test; echo rc=$?; "
                         "cat marker.txt" % self.nm, **kw)

    def test_claude_code_bash_tool_call(self):
        self.assertEqual(self.versions["@anthropic-ai/claude-code"], "2.1.332")
        ev = self.claude()
        o = out(ev).decode(errors="replace")
        lines = [json.loads(l) for l in o.splitlines() if l.startswith("{")]
        result = [l for l in lines if l.get("type") == "result"]
        self.assertTrue(result, o[-3000:])
        self.assertFalse(result[-1]["is_error"], result[-1])
        self.assertEqual(result[-1]["result"], "Done: the marker is written.")
        # the Bash tool really ran, confined, as the task user
        self.assertIn("rc=0\nclaude-was-here\n", o)
        with open(os.path.join(self.dir, "marker.txt")) as f:
            self.assertEqual(f.read(), "claude-was-here\n")
        self.assertEqual(os.stat(os.path.join(self.dir, "marker.txt")).st_uid, 1000)
        calls = [q for q in self.gw.requests if q["path"].startswith("/v1/messages")]
        self.assertGreaterEqual(len(calls), 2)
        for q in calls:
            self.assertEqual(q["path"].split("?")[0], "/v1/messages")
            self.assertEqual(q["headers"]["x-api-key"], KEY)
            self.assertIn("anthropic-version", q["headers"])
            self.assertIn("claude-code", q["headers"]["anthropic-beta"])
        # the proxy's count is what Claude Code counted itself
        u = ev[-1]["data"]["usage"]
        self.assertEqual(u["prompt_tokens"], result[-1]["usage"]["input_tokens"])
        self.assertEqual(u["completion_tokens"], result[-1]["usage"]["output_tokens"])
        self.assertEqual(u["requests"], len(calls))
        self.clean(ev)

    def test_claude_code_budget_refusal(self):
        ev = self.claude(max_model_requests=1)
        o = out(ev).decode(errors="replace")
        lines = [json.loads(l) for l in o.splitlines() if l.startswith("{")]
        result = [l for l in lines if l.get("type") == "result"][-1]
        print("claude code budget refusal:", json.dumps({k: result.get(k) for k in (
            "is_error", "result", "api_error_status", "api_error_type", "terminal_reason")}))
        self.assertTrue(result["is_error"], result)
        self.assertIn("429", result["result"])
        self.assertIn("budget", result["result"])
        x = ev[-1]["data"]
        self.assertTrue(x["budget"]["exhausted"])
        self.assertGreaterEqual(x["budget"]["refused"], 1)
        # refused before the gateway, and not retried (x-should-retry: false)
        self.assertEqual(len(self.gw.requests), 1)
        self.assertEqual(x["budget"]["refused"], 1)
        self.clean(ev)

    def test_anthropic_sdk_streaming(self):
        ev = self.chat("%s anthropic_stream.cjs %s" % (NODE, self.nm))
        o = out(ev).decode(errors="replace")
        self.assertIn("hello from claude\nUSAGE ", o, o + out(ev, "stderr").decode()[-2000:])
        usage = json.loads(o.split("USAGE ", 1)[1].splitlines()[0])
        self.assertEqual((usage["input_tokens"], usage["output_tokens"]), (12, 6))
        self.assertEqual(ev[-1]["data"]["usage"]["total_tokens"], 18)
        q = self.gw.requests[0]
        self.assertEqual(q["path"], "/v1/messages")
        self.assertTrue(q["body"]["stream"])
        self.assertIn("anthropic-version", q["headers"])
        self.clean(ev)

    def test_anthropic_sdk_budget_refusal(self):
        # the first run's call spends the budget (18 > 1); the second is refused
        ev = self.chat("%s anthropic_stream.cjs %s; %s anthropic_stream.cjs %s" % (
            NODE, self.nm, NODE, self.nm), max_tokens=1)
        o = out(ev).decode(errors="replace")
        err = json.loads(o.split("ERROR ", 1)[1].splitlines()[0])
        print("anthropic sdk budget refusal:", json.dumps(err))
        self.assertEqual(err["status"], 429)
        self.assertEqual(err["type"], "budget_exceeded")
        self.assertEqual(err["name"], "RateLimitError")
        self.assertEqual(ev[-1]["data"]["exit_code"], 3)
        self.assertEqual(ev[-1]["data"]["budget"]["refused"], 1)  # no SDK retry
        self.clean(ev)

    def test_genai_sdk_streaming(self):
        ev = self.chat("%s genai_stream.cjs %s" % (NODE, self.nm))
        o = out(ev).decode(errors="replace")
        self.assertIn("hello from gemini\nUSAGE ", o, o + out(ev, "stderr").decode()[-2000:])
        usage = json.loads(o.split("USAGE ", 1)[1].splitlines()[0])
        self.assertEqual(usage["totalTokenCount"], 14)
        self.assertEqual(ev[-1]["data"]["usage"]["total_tokens"], 14)
        q = self.gw.requests[0]
        self.assertEqual(q["path"], "/v1beta/models/gemini-test:streamGenerateContent?alt=sse")
        self.assertEqual(q["headers"]["x-goog-api-key"], KEY)
        self.clean(ev)

    def test_genai_sdk_budget_refusal(self):
        ev = self.chat("%s genai_stream.cjs %s; %s genai_stream.cjs %s" % (
            NODE, self.nm, NODE, self.nm), max_model_requests=1)
        o = out(ev).decode(errors="replace")
        self.assertIn("hello from gemini", o)
        err = json.loads(o.split("ERROR ", 1)[1].splitlines()[0])
        print("genai sdk budget refusal:", json.dumps(err))
        self.assertEqual(err["status"], 429)
        self.assertIn("budget", err["message"])
        self.assertIn("RESOURCE_EXHAUSTED", err["message"])
        self.assertEqual(ev[-1]["data"]["budget"]["refused"], 1)
        self.clean(ev)

    def codex_cmd(self, prompt="say hello"):
        """Codex's provider for the proxy: the Responses API at OPENAI_BASE_URL,
        the token from OPENAI_API_KEY; nothing that talks to other hosts."""
        cfg = ['model_provider="forceai"', 'model_providers.forceai.name="forceai"',
               'model_providers.forceai.env_key="OPENAI_API_KEY"',
               'model_providers.forceai.wire_api="responses"',
               "analytics.enabled=false", "check_for_update_on_startup=false",
               'otel.exporter="none"', 'approval_policy="never"']
        args = " ".join("-c '%s'" % c for c in cfg)
        return ("mkdir -p $HOME/.codex; %s/.bin/codex exec --json --skip-git-repo-check "
                "--sandbox danger-full-access %s -c "
                "\"model_providers.forceai.base_url=\\\"$OPENAI_BASE_URL\\\"\" "
                "-m test-model '%s'; echo rc=$?" % (self.nm, args, prompt))

    def codex(self, **kw):
        return self.chat(self.codex_cmd(), **kw)

    def test_codex_keeps_working(self):
        ev = self.codex()
        o = out(ev).decode(errors="replace")
        lines = [json.loads(l) for l in o.splitlines() if l.startswith("{")]
        msgs = [l for l in lines if l.get("type") == "item.completed" and
                (l.get("item") or {}).get("type") == "agent_message"]
        self.assertTrue(msgs, o[-3000:] + out(ev, "stderr").decode()[-2000:])
        self.assertEqual(msgs[-1]["item"]["text"], "hello from codex")
        self.assertIn("rc=0", o)
        reqs = [q for q in self.gw.requests if q["path"] == "/v1/responses"]
        self.assertEqual(len(reqs), 1)
        self.assertEqual(reqs[0]["headers"]["authorization"], "Bearer " + KEY)
        u = ev[-1]["data"]["usage"]
        self.assertEqual((u["prompt_tokens"], u["completion_tokens"], u["total_tokens"]),
                         (25, 7, 32))
        self.clean(ev)

    def test_codex_budget_refusal(self):
        ev = self.chat(self.codex_cmd() + "; " + self.codex_cmd(), max_model_requests=1)
        o = out(ev).decode(errors="replace")
        self.assertIn("hello from codex", o)
        lines = [json.loads(l) for l in o.splitlines() if l.startswith("{")]
        errs = [l for l in lines if l.get("type") in ("error", "turn.failed")]
        self.assertTrue(errs, o[-3000:])
        x = ev[-1]["data"]
        print("codex budget refusal:", json.dumps(errs[-1])[:600], "refused:",
              x["budget"]["refused"])
        # Codex 0.171 reports the status ("exceeded retry limit, last status:
        # 429 Too Many Requests"), not the message; it did not call again.
        self.assertIn("429", json.dumps(errs))
        self.assertTrue(x["budget"]["exhausted"])
        self.assertGreaterEqual(x["budget"]["refused"], 1)
        self.assertEqual(len([q for q in self.gw.requests if q["path"] == "/v1/responses"]), 1)
        self.clean(ev)

    def gemini_cli_cmd(self):
        # API-key auth chosen in its settings (it asks interactively otherwise);
        # no telemetry; --skip-trust: a headless run in an untrusted folder.
        os.makedirs(os.path.join(self.dir, "home", ".gemini"), exist_ok=True)
        with open(os.path.join(self.dir, "home", ".gemini", "settings.json"), "w") as f:
            json.dump({"security": {"auth": {"selectedType": "gemini-api-key"}},
                       "telemetry": {"enabled": False},
                       "privacy": {"usageStatisticsEnabled": False}}, f)
        for root, dirs, files in os.walk(os.path.join(self.dir, "home")):
            for n in dirs + files:
                os.chown(os.path.join(root, n), 1000, 1000)
        return ("%s %s/.bin/gemini -p 'say hello' --output-format json -m gemini-test "
                "--skip-trust; echo rc=$?" % (NODE, self.nm))

    def gemini_cli_cmd_only(self):
        return self.gemini_cli_cmd().rsplit(";", 1)[0]

    def gemini_cli(self, **kw):
        return self.chat(self.gemini_cli_cmd(), **kw)

    def test_gemini_cli(self):
        ev = self.gemini_cli()
        o = out(ev).decode(errors="replace")
        res = json.loads(o[:o.rindex("rc=")])
        self.assertEqual(res["response"], "hello from gemini", o[-2000:])
        self.assertIn("rc=0", o)
        calls = [q for q in self.gw.requests if ":streamGenerateContent" in q["path"]]
        self.assertGreaterEqual(len(calls), 1)
        self.assertTrue(calls[0]["path"].startswith("/v1beta/models/gemini-test:"))
        self.assertEqual(calls[0]["headers"]["x-goog-api-key"], KEY)
        tok = res["stats"]["models"]["gemini-test"]["tokens"]
        u = ev[-1]["data"]["usage"]
        self.assertEqual(u["total_tokens"], tok["total"])
        self.clean(ev)

    def test_gemini_cli_budget_refusal(self):
        import time
        t0 = time.monotonic()
        # The Gemini CLI retries a 429 RESOURCE_EXHAUSTED (with backoff, up to 10
        # attempts): the second run gets 20 s, enough to see its first attempt refused even
        # when the CLI is slow to start (10 s once saw no attempt at all on a loaded machine).
        ev = self.chat("%s; echo ---; timeout 20 %s; echo rc=$?" % (
            self.gemini_cli_cmd(), self.gemini_cli_cmd_only()),
                       max_model_requests=1)
        o = out(ev).decode(errors="replace")
        first, second = o.split("---\n", 1)
        self.assertIn("hello from gemini", first)
        x = ev[-1]["data"]
        said = [l.strip() for l in (second + out(ev, "stderr").decode(errors="replace")).splitlines()
                if "budget" in l or "429" in l or "ttempt" in l]
        print("gemini cli budget refusal (%.1f s, refused %d):" % (time.monotonic() - t0,
              x["budget"]["refused"]), json.dumps(said[:6])[:1200])
        self.assertIn("rc=124", second)  # still retrying when timeout ended it
        self.assertTrue(any("failed with status 429" in l and "model budget is spent" in l
                            for l in said), said)
        self.assertTrue(x["budget"]["exhausted"])
        self.assertGreaterEqual(x["budget"]["refused"], 1)
        self.assertEqual(len([q for q in self.gw.requests if "GenerateContent" in q["path"]]), 1)
        self.clean(ev)

if __name__ == "__main__":
    unittest.main()
