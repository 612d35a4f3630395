"""Capability `agent` end to end against scripted model turns: the exact event
sequence, each limit, each error status (docs/design/wire.md#native-task-api, design/model.md#the-agent-loop)."""
import json
import os
import time
import unittest

from harness import Runner, free_port
from test_gateway import (TestGateway, budget_error, raw, status, text, tool)

KEY = "sk-agent-test-" + os.urandom(8).hex()


class AgentBase(unittest.TestCase):
    key = KEY
    extra_env = {}

    @classmethod
    def setUpClass(cls):
        cls.gw = TestGateway(key=cls.key)
        env = {"FORCEAI_GATEWAY_URL": cls.gw.url, "FORCEAI_MODEL": "test-model"}
        if cls.key:
            env["FORCEAI_GATEWAY_KEY"] = cls.key
        env.update(cls.extra_env)
        cls.r = Runner(env=env)

    @classmethod
    def tearDownClass(cls):
        cls.r.close()
        cls.gw.close()

    def setUp(self):
        self.gw.turns.clear()
        self.gw.requests.clear()
        self.gw.errors.clear()

    def agent(self, goal, **kw):
        body = {"task": goal, "capability": "agent", "cwd": self.r.work}
        body.update(kw)
        t0 = time.monotonic()
        ev = self.r.native(body, timeout=60)
        self.elapsed = time.monotonic() - t0
        self.assertTrue(ev, "no events")
        names = [e["event"] for e in ev]
        self.assertEqual(names[0], "started")
        self.assertEqual(sum(n in ("exit", "error") for n in names), 1, names)
        self.assertIn(names[-1], ("exit", "error"))
        self.assertEqual([int(e["id"]) for e in ev], list(range(1, len(ev) + 1)))
        return ev

    def error_of(self, ev):
        self.assertEqual(ev[-1]["event"], "error", [e["event"] for e in ev])
        return ev[-1]["data"]


class AgentFlow(AgentBase):
    def test_three_steps_exact_sequence(self):
        self.gw.script(
            tool("bash", {"command": "printf 'echo hello-from-script\\n' > hello.sh"},
                 call_id="call_write", usage=(30, 10)),
            tool("bash", {"command": "sh hello.sh; echo err-line >&2"}, call_id="call_run",
                 usage=(50, 12), usage_mode="empty_choices"),
            text("The script printed hello-from-script.", usage=(70, 9)))
        ev = self.agent("write a script that prints hello, run it, and report")
        names = [e["event"] for e in ev]
        deltas = names.count("message.delta")
        self.assertGreater(deltas, 3)  # streamed in fragments
        self.assertEqual(
            [n for n in names if n != "message.delta"],
            ["started",
             "usage", "tool.call", "tool.result",
             "usage", "tool.call", "tool.result", "tool.result", "tool.result",
             "usage", "exit"])
        # message deltas come after the last tool result, before the last usage
        first_delta = names.index("message.delta")
        self.assertGreater(first_delta, max(i for i, n in enumerate(names) if n == "tool.result"))
        self.assertLess(first_delta, len(names) - 2)
        d = [e["data"] for e in ev]
        calls = [x for e, x in zip(names, d) if e == "tool.call"]
        self.assertEqual(calls[0]["id"], "call_write")
        self.assertEqual(calls[0]["name"], "bash")
        self.assertEqual(calls[0]["arguments"]["command"],
                         "printf 'echo hello-from-script\\n' > hello.sh")
        results = [x for e, x in zip(names, d) if e == "tool.result"]
        self.assertEqual(results[0]["id"], "call_write")
        self.assertTrue(results[0]["done"])
        self.assertEqual(results[0]["exit_code"], 0)
        live = [r for r in results if not r.get("done")]
        self.assertEqual(sorted((r["stream"], r["text"]) for r in live),
                         [("stderr", "err-line\n"), ("stdout", "hello-from-script\n")])
        self.assertTrue(all(r["id"] == "call_run" for r in live))
        self.assertEqual(results[-1]["exit_code"], 0)
        text_out = "".join(x["text"] for e, x in zip(names, d) if e == "message.delta")
        self.assertEqual(text_out, "The script printed hello-from-script.")
        x = d[-1]
        self.assertEqual(x["status"], "succeeded")
        self.assertEqual(x["exit_code"], 0)
        self.assertEqual(x["answer"], "The script printed hello-from-script.")
        self.assertEqual(x["steps"], 3)
        self.assertEqual(x["usage"], {"prompt_tokens": 150, "completion_tokens": 31,
                                      "total_tokens": 181, "cache_read_tokens": 0,
                                      "cache_creation_tokens": 0, "requests": 3})
        usages = [x for e, x in zip(names, d) if e == "usage"]
        self.assertEqual(usages[1]["total_tokens"], 62)
        self.assertEqual(usages[2]["total"]["total_tokens"], 181)
        # the file really exists, written by the confined task user
        with open(os.path.join(self.r.work, "hello.sh")) as f:
            self.assertEqual(f.read(), "echo hello-from-script\n")
        # what the model was sent
        self.assertEqual(self.gw.errors, [])
        reqs = self.gw.chat_requests()
        self.assertEqual(len(reqs), 3)
        for q in reqs:
            self.assertEqual(q["headers"].get("authorization"), "Bearer " + KEY)
            self.assertEqual(q["body"]["model"], "test-model")
            self.assertIs(q["body"]["stream"], True)
            self.assertEqual([t["function"]["name"] for t in q["body"]["tools"]],
                             ["bash", "read_file", "write_file", "edit_file"])
        m2 = reqs[1]["body"]["messages"]
        self.assertEqual(m2[0]["role"], "system")
        self.assertEqual(m2[1], {"role": "user", "content":
                                 "write a script that prints hello, run it, and report"})
        self.assertEqual(m2[2]["tool_calls"][0]["function"]["arguments"],
                         json.dumps({"command": "printf 'echo hello-from-script\\n' > hello.sh"}))
        self.assertEqual(m2[3]["role"], "tool")
        self.assertEqual(m2[3]["tool_call_id"], "call_write")
        self.assertTrue(m2[3]["content"].startswith("exit_code: 0"))
        m3 = reqs[2]["body"]["messages"]
        self.assertIn("hello-from-script", m3[-1]["content"])
        self.assertIn("err-line", m3[-1]["content"])

    def test_model_from_request_and_reattach(self):
        self.gw.script(text("ok"))
        ev = self.agent("say ok", model="other-model")
        self.assertEqual(self.gw.chat_requests()[0]["body"]["model"], "other-model")
        tid = ev[0]["data"]["task_id"]
        st, b = self.r.json("GET", "/v1/tasks/" + tid)
        self.assertEqual((st, b["status"], b["capability"]), (200, "succeeded", "agent"))
        r = self.r.curl("-H", "Last-Event-ID: 1", self.r.url + "/v1/tasks/%s/events" % tid)
        from harness import parse_sse
        again = parse_sse(r.stdout)
        self.assertEqual([e["id"] for e in again], [e["id"] for e in ev[1:]])

    def test_long_output_truncated_head_and_tail(self):
        self.gw.script(tool("bash", {"command": "echo HEAD; head -c 100000 /dev/zero | tr '\\0' x; echo; echo TAIL"}),
                       text("done"))
        ev = self.agent("print a lot")
        self.assertEqual(ev[-1]["data"]["status"], "succeeded")
        fin = [e["data"] for e in ev if e["event"] == "tool.result" and e["data"].get("done")][0]
        self.assertTrue(fin["truncated"])
        self.assertEqual(fin["output_bytes"], 100000 + 5 + 1 + 5)
        fed = self.gw.chat_requests()[1]["body"]["messages"][-1]["content"]
        self.assertTrue(fed.startswith("exit_code: 0\nHEAD\n"))
        self.assertTrue(fed.rstrip().endswith("TAIL"))
        self.assertIn("bytes of output omitted", fed)
        self.assertLess(len(fed), 17000)

    def test_file_tools_write_edit_read(self):
        # The tool layer's file tools (tools/fileio.c), as the task user, relative paths in the
        # task's working directory.
        self.gw.script(
            tool("write_file", {"path": "sub/notes.txt", "content": "alpha\nbeta\nbeta\n"},
                 call_id="w"),
            tool("edit_file", {"path": "sub/notes.txt", "old_string": "beta",
                               "new_string": "gamma"}, call_id="e1"),
            tool("edit_file", {"path": "sub/notes.txt", "old_string": "alpha\n",
                               "new_string": "ALPHA\n"}, call_id="e2"),
            tool("read_file", {"path": os.path.join(self.r.work, "sub/notes.txt"),
                               "offset": 1, "limit": 2}, call_id="r"),
            tool("write_file", {"path": "/etc/forceai-agent-test", "content": "x"},
                 call_id="w2"),
            text("done"))
        ev = self.agent("edit files")
        self.assertEqual(ev[-1]["data"]["status"], "succeeded")
        fin = {e["data"]["id"]: e["data"] for e in ev
               if e["event"] == "tool.result" and e["data"].get("done")}
        self.assertNotIn("error", fin["w"])
        self.assertIn("occurs 2 times", fin["e1"]["error"])
        self.assertNotIn("error", fin["e2"])
        self.assertIn("outside the directories tasks may write", fin["w2"]["error"])
        reqs = self.gw.chat_requests()
        fed = [m["content"] for m in reqs[-1]["body"]["messages"] if m["role"] == "tool"]
        self.assertTrue(fed[1].startswith("error: "), fed[1])
        self.assertEqual(fed[3], "ALPHA\nbeta\n[... more lines follow: read on with offset 3 ...]\n")
        path = os.path.join(self.r.work, "sub", "notes.txt")
        with open(path) as f:
            self.assertEqual(f.read(), "ALPHA\nbeta\nbeta\n")
        self.assertEqual(os.stat(path).st_uid, 1000)  # the task user's
        self.assertFalse(os.path.exists("/etc/forceai-agent-test"))

    def test_bad_tool_arguments_are_reported_back(self):
        self.gw.script(tool("python", {"code": "1"}), tool("bash", {"cmd": "x"}), text("gave up"))
        ev = self.agent("x")
        res = [e["data"] for e in ev if e["event"] == "tool.result"]
        self.assertIn("unknown tool", res[0]["error"])
        self.assertIn("command", res[1]["error"])
        self.assertEqual(ev[-1]["data"]["status"], "succeeded")

    def test_drip_fed_stream_does_not_block_the_runner(self):
        self.gw.script(text("slow answer here", frag=1, drip=0.15))
        import threading
        out = {}
        th = threading.Thread(target=lambda: out.setdefault("ev", self.agent("slow")))
        th.start()
        time.sleep(0.5)
        t0 = time.monotonic()
        st, _, _ = self.r.request("GET", "/ping")
        self.assertEqual(st, 200)
        self.assertLess(time.monotonic() - t0, 0.5)
        th.join(30)
        ev = out["ev"]
        self.assertEqual(ev[-1]["data"]["answer"], "slow answer here")
        self.assertGreaterEqual([e["event"] for e in ev].count("message.delta"), 16)


class AgentLimits(AgentBase):
    def test_max_steps(self):
        self.gw.script(*[tool("bash", {"command": "true"}) for _ in range(5)])
        ev = self.agent("loop", max_steps=2)
        x = ev[-1]["data"]
        self.assertEqual((ev[-1]["event"], x["status"], x["steps"]), ("exit", "max_steps", 2))
        self.assertEqual(len(self.gw.chat_requests()), 2)

    def test_max_tokens(self):
        self.gw.script(tool("bash", {"command": "true"}, usage=(20, 8)), text("never"))
        ev = self.agent("tokens", max_tokens=25)
        self.assertEqual(ev[-1]["data"]["status"], "max_tokens")
        self.assertEqual(ev[-1]["data"]["usage"]["total_tokens"], 28)
        self.assertEqual(len(self.gw.chat_requests()), 1)

    def test_time_limit_kills_the_tool(self):
        self.gw.script(tool("bash", {"command": "sleep 30"}))
        ev = self.agent("sleep", timeout_ms=1500)
        x = ev[-1]["data"]
        self.assertEqual((x["status"], x["exit_code"]), ("timeout", 124))
        self.assertLess(self.elapsed, 8)

    def test_cancel(self):
        self.gw.script(tool("bash", {"command": "sleep 30"}))
        import threading
        out = {}
        th = threading.Thread(target=lambda: out.setdefault("ev", self.agent("sleep")))
        th.start()
        deadline = time.monotonic() + 10
        tid = None
        while time.monotonic() < deadline and not tid:
            time.sleep(0.1)
            for l in self.r.loglines():
                if l.get("msg") == "agent started":
                    tid = l["task"]
        time.sleep(0.5)
        st, b = self.r.json("DELETE", "/v1/tasks/" + tid)
        self.assertIn(st, (200, 202))
        th.join(15)
        self.assertEqual(out["ev"][-1]["data"]["status"], "cancelled")


class AgentErrors(AgentBase):
    def test_budget_exceeded_not_retried(self):
        self.gw.script(budget_error(400), text("never"))
        e = self.error_of(self.agent("x"))
        self.assertEqual(e["code"], "budget_exceeded")
        self.assertIn("Budget has been exceeded", e["message"])
        self.assertEqual(len(self.gw.chat_requests()), 1)

    def test_budget_exceeded_as_429_not_retried(self):
        self.gw.script(status(429, {"error": {"message": "Max budget limit reached.",
                                              "type": "budget_exceeded"}},
                              headers={"Retry-After": "0"}), text("never"))
        e = self.error_of(self.agent("x"))
        self.assertEqual(e["code"], "budget_exceeded")
        self.assertEqual(len(self.gw.chat_requests()), 1)

    def test_429_retried_after_retry_after(self):
        self.gw.script(status(429, {"error": {"message": "Rate limit reached", "type": "requests"}},
                              headers={"Retry-After": "1"}), text("fine"))
        ev = self.agent("x")
        self.assertEqual(ev[-1]["data"]["status"], "succeeded")
        reqs = self.gw.chat_requests()
        self.assertEqual(len(reqs), 2)
        self.assertGreaterEqual(reqs[1]["t"] - reqs[0]["t"], 0.95)

    def test_429_gives_up(self):
        self.gw.script(*[status(429, {"error": {"message": "slow down"}},
                                headers={"Retry-After": "0"}) for _ in range(10)])
        e = self.error_of(self.agent("x"))
        self.assertEqual((e["code"], e["http_status"]), ("rate_limited", 429))
        self.assertEqual(len(self.gw.chat_requests()), 6)

    def test_5xx_retried_bounded(self):
        self.gw.script(*[status(503, "upstream down", ctype="text/plain") for _ in range(5)])
        e = self.error_of(self.agent("x"))
        self.assertEqual(e["code"], "gateway_error")
        self.assertIn("upstream down", e["message"])
        self.assertEqual(len(self.gw.chat_requests()), 3)

    def test_5xx_then_success(self):
        self.gw.script(status(502, "bad gateway", ctype="text/html"), text("ok"))
        self.assertEqual(self.agent("x")[-1]["data"]["status"], "succeeded")

    def test_403_text_plain(self):
        self.gw.script(status(403, "Forbidden by egress policy", ctype="text/plain"))
        e = self.error_of(self.agent("x"))
        self.assertEqual((e["code"], e["message"], e["http_status"]),
                         ("forbidden", "Forbidden by egress policy", 403))

    def test_unknown_model(self):
        e = self.error_of(self.agent("x", model="no-such-model"))
        self.assertEqual(e["code"], "model_not_found")
        self.assertIn("does not exist", e["message"])

    def test_mid_stream_error_with_done(self):
        self.gw.script(text("partial", error={"message": "upstream overloaded", "type": "server_error"}))
        e = self.error_of(self.agent("x"))
        self.assertEqual((e["code"], e["message"]), ("stream_error", "upstream overloaded"))

    def test_mid_stream_error_without_done(self):
        self.gw.script(text("partial", done=False, error={"message": "context too long"}))
        e = self.error_of(self.agent("x"))
        self.assertEqual((e["code"], e["message"]), ("stream_error", "context too long"))

    def test_mid_stream_budget_error(self):
        self.gw.script(text("p", error={"message": "ExceededTokenBudget: spend 2 > 1",
                                        "type": "auth_error"}))
        self.assertEqual(self.error_of(self.agent("x"))["code"], "budget_exceeded")

    def test_eof_without_done(self):
        self.gw.script(text("no done here", done=False))
        e = self.error_of(self.agent("x"))
        self.assertEqual(e["code"], "malformed_stream")
        self.assertIn("[DONE]", e["message"])

    def test_truncated_stream(self):
        self.gw.script(text("cut", truncate=True))
        e = self.error_of(self.agent("x"))
        self.assertIn(e["code"], ("gateway_connection_error", "malformed_stream"))

    def test_not_json_chunk(self):
        self.gw.script(raw([b"data: {not json}\n\n", b"data: [DONE]\n\n"]))
        e = self.error_of(self.agent("x"))
        self.assertEqual(e["code"], "malformed_stream")

    def test_crlf_and_split_lines_are_fine(self):
        data = (b'data: {"choices":[{"index":0,"delta":{"content":"ab"}}]}\r\n\r\n'
                b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}\r\n\r\n'
                b"data: [DONE]\r\n\r\n")
        # one byte per chunk, the \r and \n of a terminator in separate reads
        self.gw.script(raw([data[i:i + 1] for i in range(len(data))]))
        ev = self.agent("x")
        x = ev[-1]["data"]
        self.assertEqual((x["status"], x["answer"], x["usage"]["total_tokens"]), ("succeeded", "ab", 3))


class AgentWrongKey(AgentBase):
    key = "sk-right"
    extra_env = {"FORCEAI_GATEWAY_KEY": "sk-wrong"}

    def test_401(self):
        e = self.error_of(self.agent("x"))
        self.assertEqual((e["code"], e["http_status"]), ("unauthorized", 401))
        self.assertIn("Incorrect API key", e["message"])


class AgentUnreachable(unittest.TestCase):
    def test_unreachable_and_bad_url(self):
        r = Runner(env={"FORCEAI_GATEWAY_URL": "http://127.0.0.1:%d/v1" % free_port(),
                        "FORCEAI_MODEL": "m"})
        try:
            # "changes": false: the box's first checkpoint would read every file of the
            # harness's writable roots, the host's whole /tmp among them (60 s under ASan).
            ev = r.native({"task": "x", "capability": "agent", "changes": False})
            self.assertEqual(ev[-1]["event"], "error")
            self.assertEqual(ev[-1]["data"]["code"], "gateway_unreachable")
        finally:
            r.close()
        import subprocess
        from harness import RUNNER
        for bad in ("ftp://x/v1", "not a url", "https://user:pw@gw/v1", "gw.example/v1"):
            p = subprocess.run([RUNNER, "--listen", "127.0.0.1:0"], capture_output=True,
                               env=dict(os.environ, FORCEAI_GATEWAY_URL=bad), timeout=10)
            self.assertEqual(p.returncode, 2, (bad, p.stderr))
            self.assertIn(b"FORCEAI_GATEWAY_URL", p.stderr)  # the variable it came from
            self.assertNotIn(b"pw@", p.stderr)

    def test_no_gateway_is_501(self):
        r = Runner()
        try:
            st, b = r.json("POST", "/v1/tasks", {"task": "x", "capability": "agent"})
            self.assertEqual((st, b["code"]), (501, "CAPABILITY_UNAVAILABLE"))
        finally:
            r.close()


if __name__ == "__main__":
    unittest.main()
