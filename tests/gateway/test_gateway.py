"""A strict and nasty OpenAI-compatible test gateway (python3 stdlib only),
plus self-tests that show it refuses what a real gateway would refuse.

Every request is recorded (method, path, headers, body). Responses come from
a script of turns, one turn per model call, so a test decides exactly what
the model "says":

    gw = TestGateway(key="sk-test")          # key=None: accept no Authorization only
    gw.script(tool("bash", {"command": "ls"}), text("done"))
    ...
    gw.requests[0]["headers"]["authorization"]

Nastiness built in: tool-call arguments split into tiny fragments across
chunks (and the id/name only in the first fragment), usage either in a
separate chunk with `choices: []` or inside the last choice chunk, keep-alive
comments, CRLF line endings on request, slow drip-feeding, 429 with
Retry-After, LiteLLM budget errors, mid-stream errors with and without
[DONE], truncated streams, non-JSON (text/plain) error bodies.
"""
import json
import socket
import threading
import time
import unittest
import http.client
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROLES = {"system", "user", "assistant", "tool", "developer"}


class Turn:
    """One scripted answer. kind: 'stream' | 'status' | 'raw'."""

    def __init__(self, kind, **kw):
        self.kind = kind
        self.__dict__.update(kw)


def text(content, usage=(10, 5), usage_mode="empty_choices", done=True, frag=3, drip=0.0,
         crlf=False, error=None, truncate=False, model_check=None):
    return Turn("stream", content=content, tools=[], usage=usage, usage_mode=usage_mode,
                done=done, frag=frag, drip=drip, crlf=crlf, error=error, truncate=truncate)


def tool(name, args, call_id=None, content=None, usage=(20, 8), usage_mode="in_last", frag=4,
         drip=0.0, extra_calls=()):
    calls = [(call_id or "call_%d" % id(args), name, args)] + list(extra_calls)
    return Turn("stream", content=content, tools=calls, usage=usage, usage_mode=usage_mode,
                done=True, frag=frag, drip=drip, crlf=False, error=None, truncate=False)


def status(code, body, ctype="application/json", headers=None):
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    return Turn("status", code=code, body=body.encode(), ctype=ctype, headers=headers or {})


def raw(data, code=200, ctype="text/event-stream", chunked=True, cut=False):
    return Turn("raw", code=code, data=data, ctype=ctype, chunked=chunked, cut=cut)


def budget_error(code=400):
    """LiteLLM's budget error (proxy/_types.py ProxyException shape)."""
    return status(code, {"error": {
        "message": "Budget has been exceeded! Current cost: 1.21, Max budget: 1.0",
        "type": "budget_exceeded", "param": None, "code": str(code)}})


class TestGateway:
    def __init__(self, key=None, host="127.0.0.1", port=0, strict_key=True):
        self.key = key
        self.strict_key = strict_key
        self.requests = []
        self.errors = []  # request validation failures (a test asserts none)
        self.turns = []
        self.responder = None  # fmt, body -> Turn when no turn is scripted (wire_gateways.py)
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        gw = self

        class H(Handler):
            gateway = gw
        self.server = ThreadingHTTPServer((host, port), H)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.host = host
        self.url = "http://%s:%d/v1" % (host, self.port)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def script(self, *turns):
        with self.lock:
            self.turns.extend(turns)

    def next_turn(self):
        with self.lock:
            return self.turns.pop(0) if self.turns else None

    def record(self, rec):
        with self.cond:
            self.requests.append(rec)
            self.cond.notify_all()

    def wait_requests(self, n, timeout=10):
        with self.cond:
            end = time.monotonic() + timeout
            while len(self.requests) < n and time.monotonic() < end:
                self.cond.wait(0.1)
            return len(self.requests) >= n

    def chat_requests(self):
        return [r for r in self.requests if r["path"] == "/v1/chat/completions"]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def validate_chat(body):
    """Strict request checks, as OpenAI's API does them. Returns an error or None."""
    if not isinstance(body, dict):
        return "body is not a JSON object"
    m = body.get("model")
    if not isinstance(m, str) or not m:
        return "model must be a non-empty string"
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        return "messages must be a non-empty array"
    tool_ids = set()
    for i, msg in enumerate(msgs):
        if not isinstance(msg, dict) or msg.get("role") not in ROLES:
            return "messages[%d]: bad role" % i
        role = msg["role"]
        c = msg.get("content")
        if role == "assistant":
            if c is not None and not isinstance(c, str):
                return "messages[%d]: content must be a string or null" % i
            tcs = msg.get("tool_calls")
            if c is None and not tcs:
                return "messages[%d]: assistant needs content or tool_calls" % i
            for tc in tcs or []:
                if tc.get("type") != "function" or not isinstance(tc.get("id"), str):
                    return "messages[%d]: bad tool call" % i
                fn = tc.get("function") or {}
                if not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments"), str):
                    return "messages[%d]: tool call function needs name and arguments strings" % i
                tool_ids.add(tc["id"])
        elif role == "tool":
            if not isinstance(c, str):
                return "messages[%d]: tool content must be a string" % i
            if msg.get("tool_call_id") not in tool_ids:
                return "messages[%d]: tool_call_id does not answer a tool call" % i
        elif not isinstance(c, str):
            return "messages[%d]: content must be a string" % i
    if "stream" in body and not isinstance(body["stream"], bool):
        return "stream must be a boolean"
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            return "tools must be an array"
        for t in tools:
            if t.get("type") != "function" or not isinstance((t.get("function") or {}).get("name"), str):
                return "bad tool definition"
    so = body.get("stream_options")
    if so is not None and not body.get("stream"):
        return "stream_options is only allowed with stream: true"
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    gateway = None
    # Real gateways (uvicorn, nginx) send each SSE event at once; without
    # this, Nagle holds an event back until the previous segment is ACKed.
    disable_nagle_algorithm = True

    def log_message(self, *a):
        pass

    def _record(self, body_raw):
        body = None
        try:
            body = json.loads(body_raw) if body_raw else None
        except ValueError:
            body = {"_unparseable": body_raw.decode(errors="replace")}
        rec = {"method": self.command, "path": self.path,
               "headers": {k.lower(): v for k, v in self.headers.items()},
               "body": body, "t": time.monotonic()}
        self.gateway.record(rec)
        return rec

    def _send(self, code, body, ctype="application/json", headers=None):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _err(self, code, msg, typ="invalid_request_error", errcode=None):
        self._send(code, json.dumps({"error": {"message": msg, "type": typ, "param": None,
                                               "code": errcode}}).encode())

    def _auth_ok(self):
        got = self.headers.get("Authorization")
        gw = self.gateway
        if gw.key is None:
            if got is not None and gw.strict_key:
                gw.errors.append("Authorization sent in vault mode")
            return True
        if got != "Bearer " + gw.key:
            self._err(401, "Incorrect API key provided", errcode="invalid_api_key")
            return False
        return True

    def do_GET(self):
        rec = self._record(b"")
        if self.path.startswith("/v1beta/"):
            import wire_gateways
            wire_gateways.gemini_request(self, self.gateway, rec, "GET")
            return
        if not self._auth_ok():
            return
        if self.path == "/v1/models":
            self._send(200, json.dumps({"object": "list", "data": [
                {"id": "test-model", "object": "model", "owned_by": "test"}]}).encode())
        else:
            self._err(404, "no route")

    def do_POST(self):
        import wire_gateways
        body_raw = wire_gateways.read_body(self)
        rec = self._record(body_raw)
        # Anthropic's and Gemini's routes: wire_gateways.py
        if self.path.startswith("/v1/messages"):
            wire_gateways.anthropic_post(self, self.gateway, rec)
            return
        if self.path.startswith("/v1beta/"):
            wire_gateways.gemini_request(self, self.gateway, rec, "POST")
            return
        if self.path == "/v1/responses":
            wire_gateways.responses_post(self, self.gateway, rec)
            return
        if not self._auth_ok():
            return
        if self.path == "/v1/embeddings":
            self._send(200, json.dumps({"object": "list", "data": [
                {"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}],
                "model": "test-embed", "usage": {"prompt_tokens": 3, "total_tokens": 3}}).encode())
            return
        if self.path != "/v1/chat/completions":
            self._err(404, "Unknown route %s" % self.path)
            return
        err = validate_chat(rec["body"])
        if err:
            self.gateway.errors.append(err)
            self._err(400, err)
            return
        body = rec["body"]
        if body["model"] == "no-such-model":
            self._err(404, "The model `no-such-model` does not exist or you do not have access to it.",
                      errcode="model_not_found")
            return
        turn = self.gateway.next_turn()
        if turn is None:
            self._err(500, "test gateway: no scripted turn left", typ="server_error")
            return
        if turn.kind == "status":
            self._send(turn.code, turn.body, turn.ctype, turn.headers)
            return
        if turn.kind == "raw":
            self._raw(turn)
            return
        if body.get("stream") is not True:
            self.gateway.errors.append("turn scripted as a stream but stream is not true")
            self._err(400, "stream must be true for this test")
            return
        include_usage = (body.get("stream_options") or {}).get("include_usage") is True
        self._stream(turn, body["model"], include_usage)

    # ---- streaming ----

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _raw(self, turn):
        self.send_response(turn.code)
        self.send_header("Content-Type", turn.ctype)
        if turn.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
        self.end_headers()
        data = turn.data if isinstance(turn.data, list) else [turn.data]
        for d in data:
            if isinstance(d, (int, float)):
                time.sleep(d)
                continue
            if turn.chunked:
                self._chunk(d)
            else:
                self.wfile.write(d)
                self.wfile.flush()
        if turn.chunked and not turn.cut:
            self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        self.close_connection = True
        if turn.cut:
            self.connection.shutdown(socket.SHUT_RDWR)

    def _stream(self, turn, model, include_usage):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        nl = b"\r\n" if turn.crlf else b"\n"
        base = {"id": "chatcmpl-test", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": model}

        def ev(obj):
            d = dict(base)
            d.update(obj)
            self._chunk(b"data: " + json.dumps(d).encode() + nl + nl)
            if turn.drip:
                time.sleep(turn.drip)

        self._chunk(b": keep-alive" + nl + nl)
        ev({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                         "finish_reason": None}]})
        c = turn.content or ""
        for i in range(0, len(c), turn.frag):
            ev({"choices": [{"index": 0, "delta": {"content": c[i:i + turn.frag]},
                             "finish_reason": None}]})
        if turn.truncate:
            # cut the connection in the middle of a chunk's JSON
            self._chunk(b'data: {"id":"chatcmpl-test","choi')
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        if turn.error is not None:
            self._chunk(b"data: " + json.dumps({"error": turn.error}).encode() + nl + nl)
            if turn.done:
                self._chunk(b"data: [DONE]" + nl + nl)
            self.wfile.write(b"0\r\n\r\n")
            self.close_connection = True
            return
        for idx, (cid, name, args) in enumerate(turn.tools):
            a = json.dumps(args)
            ev({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": idx, "id": cid, "type": "function",
                 "function": {"name": name, "arguments": ""}}]}, "finish_reason": None}]})
            for i in range(0, len(a), turn.frag):
                ev({"choices": [{"index": 0, "delta": {"tool_calls": [
                    {"index": idx, "function": {"arguments": a[i:i + turn.frag]}}]},
                    "finish_reason": None}]})
        usage = None
        if turn.usage and include_usage:
            p, q = turn.usage
            usage = {"prompt_tokens": p, "completion_tokens": q, "total_tokens": p + q}
        last = {"choices": [{"index": 0, "delta": {},
                             "finish_reason": "tool_calls" if turn.tools else "stop"}]}
        if usage and turn.usage_mode == "in_last":
            last["usage"] = usage
        ev(last)
        if usage and turn.usage_mode == "empty_choices":
            ev({"choices": [], "usage": usage})
        if turn.done:
            self._chunk(b"data: [DONE]" + nl + nl)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def sse_stream_lines(data):
    return [l for l in data.decode().split("\n") if l.startswith("data: ")]


class GatewaySelfTest(unittest.TestCase):
    """The test gateway itself must be strict, or the other tests prove nothing."""

    def setUp(self):
        self.gw = TestGateway(key="sk-self")

    def tearDown(self):
        self.gw.close()

    def post(self, body, key="sk-self"):
        c = http.client.HTTPConnection("127.0.0.1", self.gw.port, timeout=10)
        h = {"Content-Type": "application/json"}
        if key:
            h["Authorization"] = "Bearer " + key
        c.request("POST", "/v1/chat/completions", json.dumps(body), h)
        r = c.getresponse()
        return r.status, r.read()

    def test_refuses_bad_requests_and_keys(self):
        self.assertEqual(self.post({"model": "m", "messages": []})[0], 400)
        self.assertEqual(self.post({"messages": [{"role": "user", "content": "x"}]})[0], 400)
        self.assertEqual(self.post({"model": "m", "messages": [
            {"role": "tool", "content": "x", "tool_call_id": "nope"}]})[0], 400)
        self.assertEqual(self.post({"model": "m", "messages": [{"role": "user", "content": "x"}]},
                                   key="wrong")[0], 401)
        self.assertEqual(len(self.gw.errors), 3)

    def test_tool_fragments_and_usage(self):
        self.gw.script(tool("bash", {"command": "echo hi"}, call_id="c1", frag=2))
        st, data = self.post({"model": "m", "stream": True, "stream_options": {"include_usage": True},
                              "messages": [{"role": "user", "content": "x"}]})
        self.assertEqual(st, 200)
        lines = sse_stream_lines(data)
        self.assertEqual(lines[-1], "data: [DONE]")
        frags = [json.loads(l[6:]) for l in lines[:-1]]
        args = "".join(tc["function"].get("arguments", "")
                       for f in frags for ch in f["choices"]
                       for tc in ch["delta"].get("tool_calls", []))
        self.assertEqual(json.loads(args), {"command": "echo hi"})
        self.assertGreater(len([f for f in frags if f["choices"] and
                                f["choices"][0]["delta"].get("tool_calls")]), 5)
        self.assertTrue(any("usage" in f for f in frags))
        self.assertEqual(self.gw.requests[0]["headers"]["authorization"], "Bearer sk-self")


if __name__ == "__main__":
    unittest.main()
