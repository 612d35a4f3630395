"""The built-in engine (docs/design/model.md#the-agent-loop, design/model.md#agent-engines-finding-an-engine): conversations kept across
tasks, and the context bound (--agent-context-max) over a long run; against
the strict Chat Completions test gateway of tests/gateway."""
import json
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "gateway"))

from harness import Runner  # noqa: E402
from test_gateway import TestGateway, text, tool  # noqa: E402

KEY = "sk-builtin-" + os.urandom(6).hex()
BOUND = 65536


class Builtin(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = TestGateway(key=KEY)
        cls.gw.models_context = None
        handler = cls.gw.server.RequestHandlerClass
        plain_get = handler.do_GET

        def do_GET(h):
            # A gateway that publishes the model's context length (vLLM's
            # and OpenRouter's lists do), when the test sets one.
            if h.path == "/v1/models" and cls.gw.models_context:
                h._record(b"")
                h._send(200, json.dumps({"object": "list", "data": [
                    {"id": "test-model", "object": "model",
                     "context_length": cls.gw.models_context}]}).encode())
                return
            plain_get(h)
        handler.do_GET = do_GET
        cls.r = Runner(args=["--agent-context-max", str(BOUND), "--agent-max-steps", "300"],
                       env={"FORCEAI_GATEWAY_URL": cls.gw.url, "FORCEAI_GATEWAY_KEY": KEY,
                            "FORCEAI_MODEL": "test-model"})

    @classmethod
    def tearDownClass(cls):
        cls.r.close()
        cls.gw.close()

    def setUp(self):
        self.gw.turns.clear()
        self.gw.requests.clear()
        self.gw.errors.clear()

    def agent(self, goal, timeout=120, **kw):
        body = {"task": goal, "capability": "agent", "cwd": self.r.work}
        body.update(kw)
        ev = self.r.native(body, timeout=timeout)
        self.assertEqual(ev[0]["event"], "started")
        self.assertEqual(ev[0]["data"]["engine"], "builtin")
        self.assertIn(ev[-1]["event"], ("exit", "error"))
        return ev

    def test_conversation_continues(self):
        self.gw.script(text("Noted: the word is heron."))
        ev1 = self.agent("Remember the word heron.")
        conv = ev1[0]["data"]["conversation"]
        self.assertEqual(ev1[-1]["data"]["conversation"], conv)
        self.gw.script(text("It was heron."))
        ev2 = self.agent("Which word was it?", conversation=conv)
        self.assertEqual(ev2[0]["data"]["conversation"], conv)
        self.assertEqual(ev2[-1]["data"]["answer"], "It was heron.")
        m = self.gw.chat_requests()[-1]["body"]["messages"]
        said = [(x["role"], x.get("content")) for x in m]
        self.assertEqual(said[1], ("user", "Remember the word heron."))
        self.assertIn(("assistant", "Noted: the word is heron."), said)
        self.assertEqual(said[-1], ("user", "Which word was it?"))
        self.assertEqual(self.gw.errors, [])

    def test_model_context_from_models_lowers_the_bound(self):
        self.gw.models_context = 8000  # tokens: 24,000 bytes at 3 bytes a token
        try:
            big = "head -c 30000 /dev/zero | tr '\\0' b"
            self.gw.script(*[tool("bash", {"command": big}, call_id="m%d" % i)
                             for i in range(20)])
            self.gw.script(text("Done."))
            ev = self.agent("twenty big outputs", max_steps=30)
        finally:
            self.gw.models_context = None
        x = ev[-1]["data"]
        self.assertEqual(x["status"], "succeeded", x)
        self.assertEqual(x["context"]["model_context_tokens"], 8000)
        self.assertEqual(x["context"]["max_bytes"], 24000)
        sizes = [int(q["headers"]["content-length"]) for q in self.gw.chat_requests()]
        self.assertLessEqual(max(sizes), 24000)
        self.assertGreater(max(sizes), 16000)  # the bound is used, not just the limit
        self.assertEqual([q["path"] for q in self.gw.requests][:2],
                         ["/v1/models", "/v1/chat/completions"])

    def test_edit_file(self):
        path = os.path.join(self.r.work, "greeting.txt")
        with open(path, "w") as f:
            f.write("hello world\nbye world\n")
        os.chmod(path, 0o666)
        self.gw.script(
            tool("edit_file", {"path": path, "old_string": "hello world",
                               "new_string": "hello runner"}, call_id="e1"),
            tool("read_file", {"path": path}, call_id="r1"),
            text("Edited."))
        ev = self.agent("change the greeting")
        self.assertEqual(ev[-1]["data"].get("answer"), "Edited.", ev[-1])
        with open(path) as f:
            self.assertEqual(f.read(), "hello runner\nbye world\n")
        calls = [e["data"]["name"] for e in ev if e["event"] == "tool.call"]
        self.assertEqual(calls, ["edit_file", "read_file"])
        done = [e["data"] for e in ev if e["event"] == "tool.result" and e["data"].get("done")]
        self.assertEqual(len(done), 2)
        # The model was offered the file tools and got the file back.
        q = self.gw.chat_requests()
        self.assertEqual(sorted(t["function"]["name"] for t in q[0]["body"]["tools"]),
                         ["bash", "edit_file", "read_file", "write_file"])
        self.assertIn("hello runner", q[2]["body"]["messages"][-1]["content"])
        self.assertEqual(self.gw.errors, [])

    def test_continued_after_max_steps(self):
        # The first task stops with a tool call the model made but that never
        # ran: the kept history answers it, or a strict gateway refuses it.
        self.gw.script(tool("bash", {"command": "echo one"}, call_id="c1"),
                       tool("bash", {"command": "echo two"}, call_id="c2"))
        ev1 = self.agent("count", max_steps=2)
        self.assertEqual(ev1[-1]["data"]["status"], "max_steps")
        self.gw.script(text("Counted to two."))
        ev2 = self.agent("and now?", conversation=ev1[0]["data"]["conversation"])
        self.assertEqual(ev2[-1]["data"].get("answer"), "Counted to two.", ev2[-1])
        self.assertEqual(self.gw.errors, [])

    def test_200_steps_stay_under_the_bound(self):
        big = "head -c 30000 /dev/zero | tr '\\0' a; echo step-$RANDOM"
        self.gw.script(*[tool("bash", {"command": big}, call_id="call_%d" % i, usage=(10, 2))
                         for i in range(200)])
        self.gw.script(text("Done after 200 steps."))
        t0 = time.monotonic()
        ev = self.agent("a long task: run the command 200 times", max_steps=250, timeout=600)
        took = time.monotonic() - t0
        x = ev[-1]["data"]
        self.assertEqual(x["status"], "succeeded", x)
        self.assertEqual(x["steps"], 201)
        reqs = self.gw.chat_requests()
        self.assertEqual(len(reqs), 201)
        sizes = [int(q["headers"]["content-length"]) for q in reqs]
        largest = max(sizes)
        print("\n    200-step run: largest request %d bytes (bound %d), last %d, %.1f s,"
              " %d messages elided" % (largest, BOUND, sizes[-1], took,
                                       x["context"]["elided_messages"]), file=sys.stderr)
        self.assertLessEqual(largest, BOUND)
        self.assertEqual(x["context"]["largest_request_bytes"], largest)
        # Without the bound the last request would hold 200 outputs of 16 KiB.
        self.assertGreater(x["context"]["elided_messages"], 150)
        last = reqs[-1]["body"]["messages"]
        self.assertEqual(last[1], {"role": "user",
                                   "content": "a long task: run the command 200 times"})
        self.assertIn("step-", last[-1]["content"])  # the latest output is whole
        self.assertIn("[elided by the runner:", str(last[2:10]))
        self.assertEqual(self.gw.errors, [])
        # Continued, the same conversation obeys the same bound.
        self.gw.requests.clear()
        self.gw.script(text("Still here."))
        ev2 = self.agent("and then?", conversation=ev[0]["data"]["conversation"])
        self.assertEqual(ev2[-1]["data"].get("answer"), "Still here.", ev2[-1])
        self.assertLessEqual(int(self.gw.chat_requests()[0]["headers"]["content-length"]), BOUND)
        self.assertEqual(self.gw.errors, [])


if __name__ == "__main__":
    unittest.main()
