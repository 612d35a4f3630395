"""The model proxy's wire formats (docs/design/model.md#wire-formats-one-module-per-format): Anthropic Messages and
Gemini next to OpenAI, usage of every format summed into the exit event,
per-task budgets refused in the caller's format, and vault mode's exec
default. Calls are made with curl from inside chat tasks, against the
scripted gateway (test_gateway.py + wire_gateways.py)."""
import json
import os
import unittest

from test_chat import ChatBase, out, CURL_CHAT
from test_gateway import text, tool
from wire_gateways import a_text, g_text, anthropic_error, gemini_error

KEY = "sk-REAL-wire-key-" + os.urandom(8).hex()

A_BODY = json.dumps({"model": "claude-test", "max_tokens": 64, "stream": True,
                     "messages": [{"role": "user", "content": "hi"}]})
A_BODY_PLAIN = json.dumps({"model": "claude-test", "max_tokens": 64,
                           "messages": [{"role": "user", "content": "hi"}]})
G_BODY = json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})


def curl_anthropic(body=A_BODY, path="/v1/messages?beta=true", auth="x-api-key",
                   version=True, extra=""):
    h = ("-H \"x-api-key: $ANTHROPIC_AUTH_TOKEN\"" if auth == "x-api-key"
         else "-H \"Authorization: Bearer $ANTHROPIC_AUTH_TOKEN\"")
    v = "-H 'anthropic-version: 2023-06-01' " if version else ""
    return ("curl -sS -N -w '\\nHTTP=%%{http_code}\\n' %s %s-H 'anthropic-beta: tools-2024-05-16' "
            "-H 'Content-Type: application/json' %s-d '%s' \"$ANTHROPIC_BASE_URL%s\""
            % (h, v, extra, body, path))


def curl_gemini(verb="streamGenerateContent", query="?alt=sse", auth="header", body=G_BODY):
    if auth == "header":
        h, q = "-H \"x-goog-api-key: $GEMINI_API_KEY\" ", query
    else:
        h, q = "", query + ("&" if query else "?") + "key=$GEMINI_API_KEY"
    return ("curl -sS -N -w '\\nHTTP=%%{http_code}\\n' %s-H 'Content-Type: application/json' "
            "-d '%s' \"$GOOGLE_GEMINI_BASE_URL/v1beta/models/gemini-test:%s%s\""
            % (h, body, verb, q))


def http_codes(b):
    return [l.split("=", 1)[1] for l in b.decode(errors="replace").splitlines()
            if l.startswith("HTTP=")]


def json_bodies(b):
    """The JSON documents curl printed (one per line before HTTP=)."""
    docs = []
    for l in b.decode(errors="replace").splitlines():
        if l.startswith("{"):
            try:
                docs.append(json.loads(l))
            except ValueError:
                pass
    return docs


class WireBase(ChatBase):
    key = KEY

    def no_secrets_forwarded(self):
        for rq in self.gw.requests:
            blob = json.dumps(rq)
            self.assertNotIn("fai-", blob, rq)
        self.assertEqual(self.gw.errors, [])


class Environment(WireBase):
    def test_every_family_gets_its_variables_with_one_token(self):
        names = ["OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN",
                 "GOOGLE_GEMINI_BASE_URL", "GEMINI_API_KEY", "ANTHROPIC_API_KEY"]
        ev = self.chat("; ".join('echo "%s=${%s:-unset}"' % (n, n) for n in names),
                       env={"ANTHROPIC_BASE_URL": "http://evil.example", "GEMINI_API_KEY": "x"})
        got = dict(l.split("=", 1) for l in out(ev).decode().split())
        root = "http://127.0.0.1:%d" % self.proxy_port
        self.assertEqual(got["OPENAI_BASE_URL"], root + "/v1")
        self.assertEqual(got["ANTHROPIC_BASE_URL"], root)  # ours win over the request's
        self.assertEqual(got["GOOGLE_GEMINI_BASE_URL"], root)
        self.assertRegex(got["OPENAI_API_KEY"], r"^fai-[0-9a-f]{64}$")
        self.assertEqual(got["ANTHROPIC_AUTH_TOKEN"], got["OPENAI_API_KEY"])
        self.assertEqual(got["GEMINI_API_KEY"], got["OPENAI_API_KEY"])
        self.assertEqual(got["ANTHROPIC_API_KEY"], "unset")
        ev = self.r.native({"task": "echo ${ANTHROPIC_AUTH_TOKEN:-none} ${GEMINI_API_KEY:-none}",
                            "capability": "exec"})
        self.assertEqual(out(ev), b"none none\n")


class Anthropic(WireBase):
    def test_streaming_usage_headers_and_key(self):
        self.gw.script(a_text("hello from claude", usage=(21, 9), cache=(5, 7), split=5))
        # headers pass on, except hop-by-hop ones (and those Connection names)
        # and any that carries the token
        extra = ("-H 'X-Pass: kept' -H 'Connection: keep-alive, X-Drop' -H 'X-Drop: no' "
                 "-H \"X-Custom: t=$ANTHROPIC_AUTH_TOKEN\" "
                 "-H \"x-litellm-api-key: $ANTHROPIC_AUTH_TOKEN\" -H 'Accept-Encoding: gzip' ")
        ev = self.chat(curl_anthropic(extra=extra))
        body = out(ev)
        self.assertEqual(http_codes(body), ["200"], body)
        # the stream went through byte for byte: every text delta is there
        deltas = "".join(json.loads(l[6:])["delta"]["text"]
                         for l in body.decode().splitlines()
                         if l.startswith("data: ") and "text_delta" in l)
        self.assertEqual(deltas, "hello from claude")
        x = ev[-1]["data"]
        self.assertEqual(x["usage"], {"prompt_tokens": 33, "completion_tokens": 9,
                                      "total_tokens": 42, "cache_read_tokens": 7,
                                      "cache_creation_tokens": 5, "requests": 1})
        self.assertNotIn("budget", x)
        rq = self.gw.requests[0]
        self.assertEqual(rq["path"], "/v1/messages?beta=true")
        self.assertEqual(rq["headers"]["x-api-key"], KEY)
        self.assertNotIn("authorization", rq["headers"])
        self.assertEqual(rq["headers"]["anthropic-version"], "2023-06-01")
        self.assertEqual(rq["headers"]["anthropic-beta"], "tools-2024-05-16")
        self.assertEqual(rq["headers"]["x-pass"], "kept")
        for h in ("x-drop", "x-custom", "x-litellm-api-key", "accept-encoding"):
            self.assertNotIn(h, rq["headers"])
        self.no_secrets_forwarded()
        self.assertNotIn(KEY, json.dumps(ev))

    def test_bearer_token_non_streaming_count_tokens_and_crlf(self):
        self.gw.script(a_text("plain", usage=(3, 2)),
                       a_text("crlf", usage=(4, 1), crlf=True, split=1))
        cmd = "; ".join([
            curl_anthropic(A_BODY_PLAIN, path="/v1/messages", auth="bearer"),
            curl_anthropic(A_BODY, path="/v1/messages"),
            curl_anthropic(json.dumps({"model": "claude-test", "messages": [
                {"role": "user", "content": "count me"}]}), path="/v1/messages/count_tokens")])
        ev = self.chat(cmd)
        b = out(ev)
        self.assertEqual(http_codes(b), ["200", "200", "200"], b)
        docs = json_bodies(b)
        self.assertEqual(docs[0]["content"][0]["text"], "plain")
        self.assertIn("input_tokens", docs[-1])
        # count_tokens is a call (requests) but not model usage
        self.assertEqual(ev[-1]["data"]["usage"], {
            "prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10,
            "cache_read_tokens": 0, "cache_creation_tokens": 0, "requests": 3})
        self.assertEqual([r["path"] for r in self.gw.requests],
                         ["/v1/messages", "/v1/messages", "/v1/messages/count_tokens"])
        self.no_secrets_forwarded()

    def test_gateway_strictness_passes_through(self):
        """The scripted gateway refuses what Anthropic refuses: its errors reach
        the client unchanged, Retry-After included."""
        self.gw.script(anthropic_error(429, "rate_limit_error", "slow down",
                                       headers={"Retry-After": "7"}))
        ev = self.chat(curl_anthropic(version=False) + "; " +
                       curl_anthropic(extra="-D /dev/stdout "))
        b = out(ev).decode()
        self.assertEqual(http_codes(b.encode()), ["400", "429"], b)
        self.assertIn("anthropic-version: header is required", b)
        self.assertIn("retry-after: 7", b.lower())
        self.assertIn('"rate_limit_error"', b)
        self.assertEqual(self.gw.errors, ["anthropic-version missing"])
        self.gw.errors.clear()
        self.no_secrets_forwarded()

    def test_runner_errors_in_anthropic_shape(self):
        cmd = ("curl -sS -w '\\nHTTP=%{http_code}\\n' -H 'x-api-key: fai-wrong' "
               "-H 'anthropic-version: 2023-06-01' -d '{}' \"$ANTHROPIC_BASE_URL/v1/messages\"; " +
               curl_anthropic(path="/v1/messages/batches") + "; " +
               "curl -sS -w '\\nHTTP=%{http_code}\\n' -H \"x-api-key: $ANTHROPIC_AUTH_TOKEN\" "
               "\"$ANTHROPIC_BASE_URL/v1/messages\"")
        ev = self.chat(cmd)
        b = out(ev)
        self.assertEqual(http_codes(b), ["401", "404", "405"], b)
        docs = json_bodies(b)
        self.assertEqual(len(docs), 3, b)
        for d, t in zip(docs, ["authentication_error", "not_found_error", "not_found_error"]):
            self.assertEqual(d["type"], "error")
            self.assertEqual(d["error"]["type"], t)
            self.assertTrue(d["error"]["message"])
        self.assertIn("ANTHROPIC_AUTH_TOKEN", docs[0]["error"]["message"])
        self.assertEqual(self.gw.requests, [])

    def test_mid_stream_cut_and_error_event_still_charge(self):
        """A stream the gateway cuts after message_start: the client sees the
        cut, and the input tokens message_start reported are charged, with
        the answer bytes after that report as output (design/model.md#usage-and-budgets)."""
        self.gw.script(a_text("never finished", usage=(40, 9), cut_after=400, split=13),
                       a_text("overloaded", usage=(5, 3), error_event="overloaded_error"))
        ev = self.chat(curl_anthropic() + "; echo rc=$?; " + curl_anthropic())
        b = out(ev).decode(errors="replace")
        self.assertIn("message_start", b)
        self.assertIn("overloaded_error", b)
        u = ev[-1]["data"]["usage"]
        self.assertEqual(u["prompt_tokens"], 45)
        # message_start's output_tokens (1 each), and for the cut one the
        # bytes that came after it, 4 a token: at most the 400 it sent.
        self.assertGreater(u["completion_tokens"], 2)
        self.assertLessEqual(u["completion_tokens"], 2 + 100)
        self.assertEqual(u["requests"], 2)
        self.assertEqual(u.get("estimated_responses"), 1)


class Gemini(WireBase):
    def test_sse_array_and_whole_responses(self):
        self.gw.script(g_text("gemini says hi", usage=(8, 4), thoughts=3, split=7),
                       g_text("array form", usage=(10, 2), cached=6, split=11),
                       g_text("whole", usage=(5, 1)))
        cmd = "; ".join([curl_gemini(),
                         curl_gemini(query=""),
                         curl_gemini(verb="generateContent", query="", auth="query"),
                         curl_gemini(verb="countTokens", query="")])
        ev = self.chat(cmd)
        b = out(ev)
        self.assertEqual(http_codes(b), ["200"] * 4, b)
        self.assertIn(b"gemini says hi"[:5], b)
        self.assertIn(b"totalTokens", b)
        # 8+4+3, 10+2 (6 of them cached), 5+1; countTokens is no usage
        self.assertEqual(ev[-1]["data"]["usage"], {
            "prompt_tokens": 23, "completion_tokens": 10, "total_tokens": 33,
            "cache_read_tokens": 6, "cache_creation_tokens": 0, "requests": 4})
        paths = [r["path"] for r in self.gw.requests]
        self.assertEqual(paths, ["/v1beta/models/gemini-test:streamGenerateContent?alt=sse",
                                 "/v1beta/models/gemini-test:streamGenerateContent",
                                 "/v1beta/models/gemini-test:generateContent",
                                 "/v1beta/models/gemini-test:countTokens"])
        for r in self.gw.requests:
            self.assertEqual(r["headers"]["x-goog-api-key"], KEY)
            self.assertNotIn("authorization", r["headers"])
        self.no_secrets_forwarded()

    def test_429_retry_after_and_cut_stream(self):
        """The gateway's 429 (Retry-After kept) reaches the client as it was; a
        stream cut mid-way: what its chunks reported is charged."""
        self.gw.script(gemini_error(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted",
                                    headers={"Retry-After": "3"}),
                       g_text("cut short", usage=(30, 6), split=5, cut_after=300))
        ev = self.chat(curl_gemini().replace("curl ", "curl -D /dev/stdout ", 1) + "; " +
                       curl_gemini())
        b = out(ev).decode(errors="replace")
        self.assertIn("retry-after: 3", b.lower())
        self.assertIn('"RESOURCE_EXHAUSTED"', b)
        self.assertIn("HTTP=429", b)
        u = ev[-1]["data"]["usage"]
        self.assertEqual(u["requests"], 2)
        # the first chunk's running totals (30 prompt, 1 candidate) made it
        # through; what came after them (at most 300 bytes) is output, 4 a token
        self.assertEqual(u["prompt_tokens"], 30)
        self.assertGreaterEqual(u["completion_tokens"], 1)
        self.assertLessEqual(u["completion_tokens"], 1 + 75)
        self.assertEqual(u.get("estimated_responses"), 1)
        self.no_secrets_forwarded()

    def test_google_shaped_errors(self):
        cmd = ("curl -sS -w '\\nHTTP=%{http_code}\\n' -H 'x-goog-api-key: nope' -d '{}' "
               "\"$GOOGLE_GEMINI_BASE_URL/v1beta/models/m:generateContent\"; "
               "curl -sS -w '\\nHTTP=%{http_code}\\n' -H \"x-goog-api-key: $GEMINI_API_KEY\" "
               "-d '{}' \"$GOOGLE_GEMINI_BASE_URL/v1beta/models/..%2fx:generateContent\"; "
               "curl -sS -w '\\nHTTP=%{http_code}\\n' -H \"x-goog-api-key: $GEMINI_API_KEY\" "
               "-d '{}' \"$GOOGLE_GEMINI_BASE_URL/v1beta/tunedModels/x:generateContent\"; "
               "curl -sS -w '\\nHTTP=%{http_code}\\n' -H \"x-goog-api-key: $GEMINI_API_KEY\" "
               "\"$GOOGLE_GEMINI_BASE_URL/v1beta/models/m:generateContent\"")
        ev = self.chat(cmd)
        b = out(ev)
        self.assertEqual(http_codes(b), ["401", "404", "404", "405"], b)
        docs = json_bodies(b)
        self.assertEqual([d["error"]["status"] for d in docs],
                         ["UNAUTHENTICATED", "NOT_FOUND", "NOT_FOUND", "UNIMPLEMENTED"])
        self.assertEqual([d["error"]["code"] for d in docs], [401, 404, 404, 405])
        self.assertIn("GEMINI_API_KEY", docs[0]["error"]["message"])
        self.assertEqual(self.gw.requests, [])


class Mixed(WireBase):
    def test_usage_summed_across_formats(self):
        self.gw.script(text("openai", usage=(11, 4)), a_text("claude", usage=(21, 9), cache=(5, 7)),
                       g_text("gemini", usage=(8, 4)))
        ev = self.chat("; ".join([CURL_CHAT, curl_anthropic(), curl_gemini()]))
        self.assertEqual(http_codes(out(ev)), ["200", "200"])
        self.assertEqual(ev[-1]["data"]["usage"], {
            "prompt_tokens": 11 + 33 + 8, "completion_tokens": 4 + 9 + 4,
            "total_tokens": 15 + 42 + 12, "cache_read_tokens": 7, "cache_creation_tokens": 5,
            "requests": 3})
        self.assertEqual(self.gw.chat_requests()[0]["headers"]["authorization"], "Bearer " + KEY)
        self.no_secrets_forwarded()

    def test_token_budget_refused_in_each_format(self):
        """max_tokens 50: the first call (42) leaves budget, the second streams
        to its end past it (overshoot reported), then every format is refused
        before the gateway with 429 budget_exceeded in its own shape."""
        self.gw.script(a_text("first", usage=(21, 9), cache=(5, 7)),
                       g_text("second, crossing", usage=(15, 5)))
        cmd = "; ".join([curl_anthropic(), curl_gemini(), CURL_CHAT + " -w '\\nHTTP=%{http_code}\\n'",
                         curl_anthropic(A_BODY_PLAIN), curl_gemini(verb="generateContent",
                                                                   query="")])
        ev = self.chat(cmd, max_tokens=50)
        b = out(ev)
        self.assertEqual(http_codes(b), ["200", "200", "429", "429", "429"], b)
        docs = [d for d in json_bodies(b) if "error" in d]
        self.assertEqual(len(docs), 3, b)
        oa, an, ge = docs
        self.assertEqual(oa["error"]["type"], "budget_exceeded")
        self.assertEqual(oa["error"]["code"], "budget_exceeded")
        self.assertEqual(an["type"], "error")
        self.assertEqual(an["error"]["type"], "budget_exceeded")
        self.assertEqual(ge["error"]["status"], "RESOURCE_EXHAUSTED")
        self.assertEqual(ge["error"]["details"][0]["reason"], "budget_exceeded")
        for d in (oa["error"]["message"], an["error"]["message"], ge["error"]["message"]):
            self.assertIn("max_tokens 50", d)
        x = ev[-1]["data"]
        self.assertEqual(x["usage"]["total_tokens"], 62)
        self.assertEqual(x["usage"]["requests"], 2)
        self.assertEqual(x["budget"], {"max_tokens": 50, "max_model_requests": None,
                                       "exhausted": True, "refused": 3, "overshoot_tokens": 12})
        self.assertEqual(len(self.gw.requests), 2)
        self.no_secrets_forwarded()

    def test_request_budget(self):
        self.gw.script(a_text("only one", usage=(2, 2)))
        ev = self.chat(curl_anthropic() + "; " + curl_anthropic(), max_model_requests=1)
        self.assertEqual(http_codes(out(ev)), ["200", "429"])
        self.assertIn(b"max_model_requests 1", out(ev))
        x = ev[-1]["data"]
        self.assertEqual(x["budget"]["max_model_requests"], 1)
        self.assertTrue(x["budget"]["exhausted"])
        self.assertEqual(x["budget"]["refused"], 1)
        self.assertEqual(len(self.gw.requests), 1)

    def test_bad_budget_fields(self):
        for bad in ({"max_tokens": 0}, {"max_model_requests": -1}, {"max_model_requests": "3"}):
            body = {"task": "true", "capability": "chat"}
            body.update(bad)
            st, _, b = self.r.request("POST", "/v1/tasks", body)
            self.assertEqual(st, 400, (bad, b))
            self.assertIn(list(bad)[0], json.loads(b)["message"])


class RunnerDefaults(WireBase):
    """--task-max-model-requests / --task-max-tokens: the default for every
    task holding a model token (chat and agent); a request's fields win."""
    runner_args = ("--task-max-model-requests", "2", "--task-max-tokens", "1000")

    def test_default_applies_and_request_wins(self):
        self.gw.script(a_text("a", usage=(1, 1)), a_text("b", usage=(1, 1)))
        ev = self.chat("; ".join([curl_anthropic()] * 3))
        self.assertEqual(http_codes(out(ev)), ["200", "200", "429"])
        self.assertEqual(ev[-1]["data"]["budget"], {
            "max_tokens": 1000, "max_model_requests": 2, "exhausted": True, "refused": 1,
            "overshoot_tokens": 0})
        self.gw.script(a_text("c", usage=(1, 1)), a_text("d", usage=(1, 1)),
                       a_text("e", usage=(1, 1)))
        ev = self.chat("; ".join([curl_anthropic()] * 3), max_model_requests=5)
        self.assertEqual(http_codes(out(ev)), ["200", "200", "200"])
        self.assertFalse(ev[-1]["data"]["budget"]["exhausted"])

    def test_agent_uses_the_same_budget(self):
        self.gw.script(*[tool("bash", {"command": "true"}, call_id="c%d" % i) for i in range(3)])
        ev = self.r.native({"task": "loop", "capability": "agent", "model": "m",
                            "cwd": self.r.work})
        x = ev[-1]["data"]
        self.assertEqual(x["status"], "max_model_requests", x)
        self.assertEqual(x["usage"]["requests"], 2)
        # spent after the second answer: its tool calls are not run for a
        # turn that could never be reported back
        self.assertTrue(x["budget"]["exhausted"])
        self.assertEqual(x["budget"]["refused"], 0)
        self.assertEqual(len(self.gw.chat_requests()), 2)


class VaultWire(WireBase):
    key = None

    def test_no_key_in_any_format_and_exec_network_none(self):
        self.gw.script(a_text("vault", usage=(1, 1)), g_text("vault", usage=(1, 1)))
        ev = self.chat(curl_anthropic() + "; " + curl_gemini())
        self.assertEqual(http_codes(out(ev)), ["200", "200"])
        for r in self.gw.requests:
            for h in ("authorization", "x-api-key", "x-goog-api-key"):
                self.assertNotIn(h, r["headers"])
        self.no_secrets_forwarded()
        st, _, b = self.r.request("GET", "/v1/hardening")
        net = json.loads(b)["network"]
        self.assertEqual(net["exec_default"], "none")
        self.assertIn("vault mode", net["exec_default_why"])
        mp = json.loads(b)["model_proxy_connections"]
        self.assertEqual(mp["wire_formats"], ["openai", "anthropic", "gemini"])
        self.assertEqual(mp["task_budget_defaults"], {"max_tokens": 0, "max_model_requests": 0})
        # an exec task cannot open an IP socket to reach the authenticated gateway
        self.gw.requests.clear()
        ev = self.r.native({"task": "curl -sS -m 5 -o /dev/null -w '%%{http_code}' %s/models; "
                                    "echo rc=$?" % self.gw.url, "capability": "exec"})
        self.assertNotIn(b"rc=0", out(ev) + out(ev, "stderr"))
        self.assertEqual(self.gw.requests, [])


class VaultExplicitFull(WireBase):
    key = None
    runner_args = ("--exec-network", "full")

    def test_explicit_full_is_honoured_and_said(self):
        st, _, b = self.r.request("GET", "/v1/hardening")
        net = json.loads(b)["network"]
        self.assertEqual(net["exec_default"], "full")
        self.assertIn("ungoverned", net["exec_default_why"])


if __name__ == "__main__":
    unittest.main()
