"""Scripted model gateways for the agent engines' tests (python3 stdlib only):
OpenAI's Responses API (what Codex CLI calls) and Anthropic's Messages API
(what Claude Code calls), strict and nasty the way real gateways are.

    gw = ResponsesGateway(key="sk-test")
    gw.script(rtool("echo hi"), rtext("done"))      # one turn per model call
    gw.default = rtool("true")                       # when the script is empty

A turn's text may be a function of the request body (a model that answers
from what it was sent), e.g. rtext(lambda body: ...).

Strict: the key in Authorization (Messages: x-api-key or Bearer), a JSON
body with a model and stream: true, the input/messages well formed (every
tool result answers an earlier tool call; Messages: alternating roles,
max_tokens, the anthropic-version header). A request that breaks a rule is
answered 400 and recorded in gw.errors (a test asserts there are none).

Nasty: tool-call arguments split into small deltas (the id and name only in
the first event), usage only at the very end, keep-alive pings, a scripted
429 with Retry-After, a stream cut in the middle of an answer.
"""
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Turn:
    def __init__(self, kind, **kw):
        self.kind = kind
        self.__dict__.update(kw)


def rtool(command, call_id=None, usage=(100, 10), frag=5):
    """A shell tool call (the shell tool the client offered)."""
    return Turn("tool", command=command, call_id=call_id, usage=usage, frag=frag)


def rtext(text, usage=(100, 10), frag=4):
    return Turn("text", text=text, usage=usage, frag=frag)


def rstatus(code, body, headers=None):
    return Turn("status", code=code, body=body, headers=headers or {})


def rcut(text="half an ans"):
    """Some text, then the connection closes with no end of the stream."""
    return Turn("cut", text=text)


class _Base:
    api = None

    def __init__(self, key):
        self.key = key
        self.requests = []
        self.errors = []
        self.turns = []
        self.default = None
        self.lock = threading.Lock()
        gw = self

        class H(self.handler):
            gateway = gw
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d/v1" % self.port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def script(self, *turns):
        with self.lock:
            self.turns.extend(turns)

    def reset(self):
        with self.lock:
            self.turns.clear()
            self.requests.clear()
            self.errors.clear()
            self.default = None

    def next_turn(self):
        with self.lock:
            return self.turns.pop(0) if self.turns else self.default

    def model_requests(self):
        return [r for r in self.requests if r["method"] == "POST" and r["path"].startswith(self.api)]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    gateway = None
    disable_nagle_algorithm = True

    def log_message(self, *a):
        pass

    def _send(self, code, obj, headers=None):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _start_stream(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()

    def _end_stream(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _cut(self):
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def do_GET(self):
        gw = self.gateway
        gw.requests.append({"method": "GET", "path": self.path,
                            "headers": {k.lower(): v for k, v in self.headers.items()},
                            "body": None, "t": time.monotonic()})
        if self.path.split("?")[0] == "/v1/models":
            self._send(200, {"object": "list", "data": [
                {"id": "test-model", "object": "model", "type": "model",
                 "display_name": "test-model", "created_at": "2026-01-01T00:00:00Z"}],
                "has_more": False, "first_id": "test-model", "last_id": "test-model"})
            return
        self._send(404, {"error": {"message": "no route %s" % self.path, "type": "not_found"}})

    def do_POST(self):
        gw = self.gateway
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = {"_unparseable": raw[:200].decode(errors="replace")}
        rec = {"method": "POST", "path": self.path, "bytes": len(raw),
               "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body,
               "t": time.monotonic()}
        gw.requests.append(rec)
        self.handle_model(rec)


# ---------------------------------------------------------------- Responses

def validate_responses(body):
    if not isinstance(body, dict):
        return "body is not a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model must be a non-empty string"
    if body.get("stream") is not True:
        return "stream must be true"
    items = body.get("input")
    if not isinstance(items, list) or not items:
        return "input must be a non-empty array"
    calls = set()
    for i, it in enumerate(items):
        if not isinstance(it, dict) or not isinstance(it.get("type"), str):
            return "input[%d] has no type" % i
        t = it["type"]
        if t == "message":
            if it.get("role") not in ("user", "assistant", "system", "developer"):
                return "input[%d]: bad role" % i
            if not isinstance(it.get("content"), (list, str)):
                return "input[%d]: content must be a list or string" % i
        elif t in ("function_call", "custom_tool_call"):
            if not isinstance(it.get("call_id"), str) or not isinstance(it.get("name"), str):
                return "input[%d]: a call needs call_id and name" % i
            calls.add(it["call_id"])
        elif t in ("function_call_output", "custom_tool_call_output"):
            if it.get("call_id") not in calls:
                return "input[%d]: output for call %r that was never made" % (i, it.get("call_id"))
    for t in body.get("tools") or []:
        if not isinstance(t, dict) or not isinstance(t.get("type"), str):
            return "bad tool definition"
    return None


class ResponsesGateway(_Base):
    api = "/v1/responses"

    def shell_tool(self, body):
        names = [t.get("name") for t in body.get("tools") or []]
        for n in ("exec_command", "shell_command", "shell"):
            if n in names:
                return n
        return None


def _rsp_handle(self, rec):
    gw = self.gateway
    if rec["path"] != "/v1/responses":
        self._send(404, {"error": {"message": "no route %s" % rec["path"],
                                   "type": "invalid_request_error"}})
        return
    if rec["headers"].get("authorization") != "Bearer " + gw.key:
        self._send(401, {"error": {"message": "Incorrect API key provided",
                                   "type": "invalid_request_error", "code": "invalid_api_key"}})
        return
    body = rec["body"]
    err = validate_responses(body)
    if err:
        gw.errors.append(err)
        self._send(400, {"error": {"message": err, "type": "invalid_request_error"}})
        return
    turn = gw.next_turn()
    if turn is None:
        self._send(500, {"error": {"message": "no scripted turn left", "type": "server_error"}})
        return
    if turn.kind == "status":
        self._send(turn.code, turn.body, turn.headers)
        return
    rid = "resp_%d" % len(gw.requests)
    seq = [0]

    def ev(obj):
        obj["sequence_number"] = seq[0]
        seq[0] += 1
        self._chunk(("event: %s\ndata: %s\n\n" % (obj["type"], json.dumps(obj))).encode())

    self._start_stream()
    ev({"type": "response.created", "response": {"id": rid, "object": "response",
                                                 "status": "in_progress", "output": []}})
    self._chunk(b": ping\n\n")
    if turn.kind in ("text", "cut"):
        text = turn.text(body) if callable(turn.text) else turn.text
        mid = "msg_%s" % rid
        ev({"type": "response.output_item.added", "output_index": 0,
            "item": {"type": "message", "id": mid, "role": "assistant", "status": "in_progress",
                     "content": []}})
        ev({"type": "response.content_part.added", "output_index": 0, "content_index": 0,
            "item_id": mid, "part": {"type": "output_text", "text": "", "annotations": []}})
        frag = getattr(turn, "frag", 4)
        for i in range(0, len(text), frag):
            ev({"type": "response.output_text.delta", "output_index": 0, "content_index": 0,
                "item_id": mid, "delta": text[i:i + frag]})
        if turn.kind == "cut":
            self._chunk(b'event: response.output_text.delta\ndata: {"type":"response.outp')
            self._cut()
            return
        ev({"type": "response.output_text.done", "output_index": 0, "content_index": 0,
            "item_id": mid, "text": text})
        item = {"type": "message", "id": mid, "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}
    else:
        name = gw.shell_tool(body)
        if not name:
            gw.errors.append("no shell tool offered: %s" % [t.get("name") for t in body.get("tools") or []])
            self._end_stream()
            return
        args = json.dumps({"cmd": turn.command} if name == "exec_command" else
                          {"command": turn.command} if name == "shell_command" else
                          {"command": ["bash", "-lc", turn.command]})
        cid = turn.call_id or "call_%s" % rid
        fid = "fc_%s" % rid
        ev({"type": "response.output_item.added", "output_index": 0,
            "item": {"type": "function_call", "id": fid, "call_id": cid, "name": name,
                     "arguments": "", "status": "in_progress"}})
        for i in range(0, len(args), turn.frag):
            ev({"type": "response.function_call_arguments.delta", "output_index": 0,
                "item_id": fid, "delta": args[i:i + turn.frag]})
        ev({"type": "response.function_call_arguments.done", "output_index": 0,
            "item_id": fid, "arguments": args})
        item = {"type": "function_call", "id": fid, "call_id": cid, "name": name,
                "arguments": args, "status": "completed"}
    ev({"type": "response.output_item.done", "output_index": 0, "item": item})
    p, q = turn.usage
    ev({"type": "response.completed", "response": {
        "id": rid, "object": "response", "status": "completed", "output": [item],
        "usage": {"input_tokens": p, "output_tokens": q, "total_tokens": p + q,
                  "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}}}})
    self._end_stream()


# ---------------------------------------------------------------- Messages

def validate_messages(body, headers):
    if not headers.get("anthropic-version"):
        return "anthropic-version header is required"
    if not isinstance(body, dict):
        return "body is not a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        return "messages: at least one message is required"
    uses = set()
    prev = None
    # The beta Claude Code asks for first lets system messages sit between turns.
    roles = ("user", "assistant")
    if "mid-conversation-tool-changes" in headers.get("anthropic-beta", ""):
        roles += ("system",)
    for i, m in enumerate(msgs):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in roles:
            return "messages.%d.role: Input should be 'user' or 'assistant'" % i
        if role == "system":
            continue
        if role == prev:
            return "messages: roles must alternate between user and assistant (%d)" % i
        prev = role
        c = m.get("content")
        if isinstance(c, str):
            continue
        if not isinstance(c, list):
            return "messages.%d.content: must be a string or a list" % i
        for b in c:
            t = b.get("type") if isinstance(b, dict) else None
            if t == "tool_use":
                uses.add(b.get("id"))
            elif t == "tool_result" and b.get("tool_use_id") not in uses:
                return "messages.%d: tool_result for unknown tool_use_id %r" % (i, b.get("tool_use_id"))
    if msgs[0]["role"] != "user":
        return "messages: the first message must use the user role"
    return None


class MessagesGateway(_Base):
    api = "/v1/messages"


def _msg_handle(self, rec):
    gw = self.gateway
    path = rec["path"].split("?")[0]
    h = rec["headers"]
    key_ok = h.get("x-api-key") == gw.key or h.get("authorization") == "Bearer " + gw.key
    if not key_ok:
        self._send(401, {"type": "error", "error": {"type": "authentication_error",
                                                    "message": "invalid x-api-key"}})
        return
    if path == "/v1/messages/count_tokens":
        self._send(200, {"input_tokens": 42})
        return
    if path != "/v1/messages":
        self._send(404, {"type": "error", "error": {"type": "not_found_error",
                                                    "message": "no route %s" % path}})
        return
    body = rec["body"]
    err = validate_messages(body, h)
    if err:
        gw.errors.append(err)
        self._send(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                    "message": err}})
        return
    # Claude Code's side calls (titles, quota checks) are not the agent's turns.
    if not body.get("tools"):
        rec["side"] = True
        self._send(200, {"id": "msg_side", "type": "message", "role": "assistant",
                         "model": body["model"], "content": [{"type": "text", "text": "ok"}],
                         "stop_reason": "end_turn", "stop_sequence": None,
                         "usage": {"input_tokens": 1, "output_tokens": 1}}) if not body.get("stream") \
            else self._msg_stream(rtext("ok", usage=(1, 1)), body)
        return
    turn = gw.next_turn()
    if turn is None:
        self._send(500, {"type": "error", "error": {"type": "api_error",
                                                    "message": "no scripted turn left"}})
        return
    if turn.kind == "status":
        self._send(turn.code, turn.body, turn.headers)
        return
    if body.get("stream") is not True:
        gw.errors.append("turn scripted as a stream but stream is not true")
        self._send(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                    "message": "stream must be true here"}})
        return
    self._msg_stream(turn, body)


def _msg_stream(self, turn, body):
    gw = self.gateway
    mid = "msg_%d" % len(gw.requests)

    def ev(obj):
        self._chunk(("event: %s\ndata: %s\n\n" % (obj["type"], json.dumps(obj))).encode())

    p, q = getattr(turn, "usage", (10, 1))
    self._start_stream()
    ev({"type": "message_start", "message": {
        "id": mid, "type": "message", "role": "assistant", "model": body["model"],
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": p, "output_tokens": 1, "cache_read_input_tokens": 0,
                  "cache_creation_input_tokens": 0}}})
    ev({"type": "ping"})
    if turn.kind in ("text", "cut"):
        text = turn.text(body) if callable(turn.text) else turn.text
        ev({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}})
        frag = getattr(turn, "frag", 4)
        for i in range(0, len(text), frag):
            ev({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": text[i:i + frag]}})
        if turn.kind == "cut":
            self._chunk(b'event: content_block_delta\ndata: {"type":"content_blo')
            self._cut()
            return
        ev({"type": "content_block_stop", "index": 0})
        stop = "end_turn"
    else:
        names = [t.get("name") for t in body.get("tools") or []]
        if "Bash" not in names:
            gw.errors.append("no Bash tool offered: %s" % names)
        cid = turn.call_id or "toolu_%s" % mid
        ev({"type": "content_block_start", "index": 0,
            "content_block": {"type": "tool_use", "id": cid, "name": "Bash", "input": {}}})
        args = json.dumps({"command": turn.command, "description": "run a command"})
        for i in range(0, len(args), turn.frag):
            ev({"type": "content_block_delta", "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": args[i:i + turn.frag]}})
        ev({"type": "content_block_stop", "index": 0})
        stop = "tool_use"
    ev({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
        "usage": {"output_tokens": q}})
    ev({"type": "message_stop"})
    self._end_stream()


class _RspHandler(_Handler):
    handle_model = _rsp_handle


class _MsgHandler(_Handler):
    handle_model = _msg_handle
    _msg_stream = _msg_stream


class _GwHandler(_Handler):
    _msg_stream = _msg_stream

    def handle_model(self, rec):
        if rec["path"].startswith("/v1/messages"):
            _msg_handle(self, rec)
        else:
            _rsp_handle(self, rec)


class Gateway(ResponsesGateway):
    """Both APIs on one address (the runner has one gateway URL)."""
    api = "/v1/"

    def model_requests(self):
        return [r for r in self.requests if r["method"] == "POST" and not r.get("side")
                and (r["path"].startswith("/v1/responses") or
                     r["path"].split("?")[0] == "/v1/messages")]


ResponsesGateway.handler = _RspHandler
MessagesGateway.handler = _MsgHandler
Gateway.handler = _GwHandler
