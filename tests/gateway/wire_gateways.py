"""The Anthropic Messages and Gemini halves of the test gateway (test_gateway.py
serves OpenAI's; one server answers all three, as a LiteLLM-style gateway does:
`/v1/messages...` and `/v1beta/models/...` next to `/v1/chat/completions`).

Strict as the real APIs are: Anthropic's routes reject a missing
`anthropic-version` (400) and a bad `x-api-key` (401, authentication_error),
check the body (model, max_tokens, messages of user/assistant turns); Gemini's
reject a bad `x-goog-api-key`, a `?key=` that should not be there after the
proxy, and bodies without `contents`. Nasty as they are too: usage split
across `message_start` and `message_delta`, SSE bytes written in small pieces
that cut lines, event names and JSON at awkward places, CRLF line ends
(Gemini's SSE uses them), 429 with Retry-After, mid-stream errors and cuts.

Scripted turns (a Turn per model call, shared queue with the OpenAI turns):

    gw.script(a_text("hi", usage=(21, 9), cache=(5, 7)), g_text("yo", usage=(4, 2)))

With no scripted turn left, gw.responder(fmt, body) (if set) decides: the
real-client tests answer whatever Claude Code or an SDK asks that way.
"""
import json
import socket
import time
import urllib.parse

from test_gateway import Turn


def a_text(text, usage=(10, 5), cache=(0, 0), split=7, crlf=False, cut_after=None,
           error_event=None, drip=0.0):
    """An Anthropic answer: streamed when the request says stream, else one
    JSON message. usage=(input, output), cache=(creation, read)."""
    return Turn("anthropic", text=text, tool=None, usage=usage, cache=cache, split=split,
                crlf=crlf, cut_after=cut_after, error_event=error_event, drip=drip)


def a_tool(name, args, tool_id="toolu_01", usage=(30, 12), split=5, text=None):
    return Turn("anthropic", text=text, tool=(tool_id, name, args), usage=usage, cache=(0, 0),
                split=split, crlf=False, cut_after=None, error_event=None, drip=0.0)


def g_text(text, usage=(8, 4), thoughts=0, cached=0, split=9, cut_after=None, chunks=3,
           drip=0.0):
    """A Gemini answer: SSE (alt=sse), a JSON array (stream without alt=sse)
    or one JSON response (generateContent), in `chunks` chunks; drip: seconds
    between the pieces written (SSE)."""
    return Turn("gemini", text=text, usage=usage, thoughts=thoughts, cached=cached, split=split,
                cut_after=cut_after, chunks=chunks, drip=drip)


def anthropic_error(code, typ, msg, headers=None):
    from test_gateway import status
    return status(code, {"type": "error", "error": {"type": typ, "message": msg}},
                  headers=headers)


def gemini_error(code, word, msg, headers=None):
    from test_gateway import status
    return status(code, {"error": {"code": code, "message": msg, "status": word}},
                  headers=headers)


def read_body(h):
    """The request body, Content-Length or chunked (real gateways take both)."""
    if (h.headers.get("Transfer-Encoding") or "").lower() == "chunked":
        out = b""
        while True:
            line = h.rfile.readline().strip()
            n = int(line.split(b";")[0], 16)
            if n == 0:
                while h.rfile.readline().strip():
                    pass
                return out
            out += h.rfile.read(n)
            h.rfile.readline()
    n = int(h.headers.get("Content-Length") or 0)
    return h.rfile.read(n) if n else b""


def _leaks_token(h, gw):
    """The task's proxy token (fai-...) must never reach the gateway."""
    for k, v in h.headers.items():
        if "fai-" in v:
            gw.errors.append("task token forwarded in header %s" % k)
            return True
    if "fai-" in h.path:
        gw.errors.append("task token forwarded in the query")
        return True
    return False


def _send_pieces(h, code, ctype, data, split, cut_after=None, drip=0.0, headers=None):
    h.send_response(code)
    h.send_header("Content-Type", ctype)
    h.send_header("Transfer-Encoding", "chunked")
    h.send_header("Cache-Control", "no-cache")
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    h.end_headers()
    limit = len(data) if cut_after is None else cut_after
    for i in range(0, limit, split):
        piece = data[i:min(i + split, limit)]
        h.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        h.wfile.flush()
        if drip:
            time.sleep(drip)
    if cut_after is not None:
        h.close_connection = True
        h.connection.shutdown(socket.SHUT_RDWR)
        return
    h.wfile.write(b"0\r\n\r\n")
    h.wfile.flush()


def _take_turn(h, gw, fmt, body, fail):
    """The next scripted turn (or the responder's) for a call in format fmt;
    a scripted status is sent here. None when the call is answered."""
    turn = gw.next_turn()
    if turn is None and gw.responder:
        turn = gw.responder(fmt, body)
    if turn is None:
        fail("no scripted turn left")
        return None
    if turn.kind == "status":
        h._send(turn.code, turn.body, turn.ctype, turn.headers)
        return None
    if turn.kind != fmt:
        gw.errors.append("a %s turn scripted for a %s call" % (turn.kind, fmt))
        fail("wrong turn")
        return None
    return turn


# ---- Anthropic ----

def _a_err(h, code, typ, msg):
    h._send(code, json.dumps({"type": "error", "error": {"type": typ, "message": msg}}).encode())


def validate_messages(body, count=False):
    if not isinstance(body, dict):
        return "body is not a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: field required"
    if not count and (not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1):
        return "max_tokens: field required"
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        return "messages: at least one message is required"
    for i, m in enumerate(msgs):
        # (Claude Code 2.1's betas put "system" turns mid-conversation)
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant", "system"):
            return "messages.%d.role: must be user, assistant or system" % i
        c = m.get("content")
        if not isinstance(c, (str, list)):
            return "messages.%d.content: must be a string or a list of blocks" % i
    if msgs[0]["role"] != "user":
        return "messages: first message must use the user role"
    if "stream" in body and not isinstance(body["stream"], bool):
        return "stream: must be a boolean"
    return None


def anthropic_post(h, gw, rec):
    if _leaks_token(h, gw):
        _a_err(h, 400, "invalid_request_error", "a task token reached the gateway")
        return
    key = h.headers.get("x-api-key")
    if gw.key is None:
        if key is not None or h.headers.get("Authorization") is not None:
            gw.errors.append("a key was sent in vault mode")
    elif key != gw.key:
        _a_err(h, 401, "authentication_error", "invalid x-api-key")
        return
    if not h.headers.get("anthropic-version"):
        gw.errors.append("anthropic-version missing")
        _a_err(h, 400, "invalid_request_error", "anthropic-version: header is required")
        return
    path = urllib.parse.urlsplit(h.path).path
    count = path == "/v1/messages/count_tokens"
    if path not in ("/v1/messages", "/v1/messages/count_tokens"):
        _a_err(h, 404, "not_found_error", "Not found")
        return
    body = rec["body"]
    err = validate_messages(body, count)
    if err:
        gw.errors.append(err)
        _a_err(h, 400, "invalid_request_error", err)
        return
    if count:
        n = len(json.dumps(body["messages"])) // 4 + 3
        h._send(200, json.dumps({"input_tokens": n}).encode())
        return
    turn = _take_turn(h, gw, "anthropic", body,
                      lambda m: _a_err(h, 500, "api_error", "test gateway: " + m))
    if turn is None:
        return
    if body.get("stream") is True:
        _anthropic_stream(h, turn, body["model"])
    else:
        _anthropic_message(h, turn, body["model"])


def _a_usage(turn, output):
    i, _ = turn.usage
    cc, cr = turn.cache
    return {"input_tokens": i, "cache_creation_input_tokens": cc, "cache_read_input_tokens": cr,
            "output_tokens": output}


def _anthropic_message(h, turn, model):
    content = []
    if turn.text:
        content.append({"type": "text", "text": turn.text})
    if turn.tool:
        tid, name, args = turn.tool
        content.append({"type": "tool_use", "id": tid, "name": name, "input": args})
    msg = {"id": "msg_test", "type": "message", "role": "assistant", "model": model,
           "content": content, "stop_reason": "tool_use" if turn.tool else "end_turn",
           "stop_sequence": None, "usage": _a_usage(turn, turn.usage[1])}
    h._send(200, json.dumps(msg).encode())


def _anthropic_stream(h, turn, model):
    nl = "\r\n" if turn.crlf else "\n"
    out = []

    def ev(name, obj):
        out.append("event: %s%sdata: %s%s%s" % (name, nl, json.dumps(obj), nl, nl))

    ev("message_start", {"type": "message_start", "message": {
        "id": "msg_test", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": _a_usage(turn, 1)}})
    out.append(": ping" + nl + nl)
    ev("ping", {"type": "ping"})
    idx = 0
    if turn.text:
        ev("content_block_start", {"type": "content_block_start", "index": idx,
                                   "content_block": {"type": "text", "text": ""}})
        t = turn.text
        for i in range(0, len(t), 3):
            ev("content_block_delta", {"type": "content_block_delta", "index": idx,
                                       "delta": {"type": "text_delta", "text": t[i:i + 3]}})
        ev("content_block_stop", {"type": "content_block_stop", "index": idx})
        idx += 1
    if turn.tool:
        tid, name, args = turn.tool
        ev("content_block_start", {"type": "content_block_start", "index": idx, "content_block": {
            "type": "tool_use", "id": tid, "name": name, "input": {}}})
        a = json.dumps(args)
        for i in range(0, len(a), 4):
            ev("content_block_delta", {"type": "content_block_delta", "index": idx, "delta": {
                "type": "input_json_delta", "partial_json": a[i:i + 4]}})
        ev("content_block_stop", {"type": "content_block_stop", "index": idx})
    if turn.error_event:
        ev("error", {"type": "error", "error": {"type": turn.error_event,
                                                "message": "Overloaded"}})
    else:
        ev("message_delta", {"type": "message_delta", "delta": {
            "stop_reason": "tool_use" if turn.tool else "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": turn.usage[1]}})
        ev("message_stop", {"type": "message_stop"})
    _send_pieces(h, 200, "text/event-stream; charset=utf-8", "".join(out).encode(), turn.split,
                 turn.cut_after, turn.drip)


# ---- Gemini ----

def _g_err(h, code, word, msg):
    h._send(code, json.dumps({"error": {"code": code, "message": msg, "status": word}}).encode())


def gemini_request(h, gw, rec, method):
    if _leaks_token(h, gw):
        _g_err(h, 400, "INVALID_ARGUMENT", "a task token reached the gateway")
        return
    u = urllib.parse.urlsplit(h.path)
    q = urllib.parse.parse_qs(u.query)
    if "key" in q:
        gw.errors.append("?key= reached the gateway")
    key = h.headers.get("x-goog-api-key")
    if gw.key is None:
        if key is not None or h.headers.get("Authorization") is not None:
            gw.errors.append("a key was sent in vault mode")
    elif key != gw.key:
        _g_err(h, 400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.")
        return
    path = u.path
    if method == "GET":
        if path == "/v1beta/models":
            h._send(200, json.dumps({"models": [{"name": "models/gemini-test"}]}).encode())
        else:
            _g_err(h, 404, "NOT_FOUND", "no such model")
        return
    if not path.startswith("/v1beta/models/") or ":" not in path:
        _g_err(h, 404, "NOT_FOUND", "not found")
        return
    model, verb = path[len("/v1beta/models/"):].split(":", 1)
    body = rec["body"]
    if not isinstance(body, dict) or not isinstance(body.get("contents"), list) or \
            not body["contents"]:
        gw.errors.append("contents missing")
        _g_err(h, 400, "INVALID_ARGUMENT", "* GenerateContentRequest.contents: contents is not "
               "specified")
        return
    if verb == "countTokens":
        h._send(200, json.dumps({"totalTokens": 17}).encode())
        return
    if verb not in ("generateContent", "streamGenerateContent"):
        _g_err(h, 404, "NOT_FOUND", "unknown method")
        return
    turn = _take_turn(h, gw, "gemini", body,
                      lambda m: _g_err(h, 500, "INTERNAL", "test gateway: " + m))
    if turn is None:
        return
    p, c = turn.usage
    chunks = []
    t = turn.text
    n_chunks = getattr(turn, "chunks", 3)
    step = max(1, (len(t) + n_chunks - 1) // n_chunks)
    parts = [t[i:i + step] for i in range(0, len(t), step)] or [""]
    for n, piece in enumerate(parts):
        last = n == len(parts) - 1
        ch = {"candidates": [{"content": {"parts": [{"text": piece}], "role": "model"},
                              "index": 0}],
              "modelVersion": model}
        # running totals in every chunk; the candidates count grows
        um = {"promptTokenCount": p, "candidatesTokenCount": c if last else n + 1,
              "totalTokenCount": p + (c if last else n + 1) + (turn.thoughts if last else 0)}
        if last and turn.thoughts:
            um["thoughtsTokenCount"] = turn.thoughts
        if turn.cached:
            um["cachedContentTokenCount"] = turn.cached
        ch["usageMetadata"] = um
        if last:
            ch["candidates"][0]["finishReason"] = "STOP"
        chunks.append(ch)
    if verb == "generateContent":
        whole = dict(chunks[-1])
        whole["candidates"] = [{"content": {"parts": [{"text": t}], "role": "model"},
                                "finishReason": "STOP", "index": 0}]
        h._send(200, json.dumps(whole).encode())
        return
    if q.get("alt") == ["sse"]:
        data = "".join("data: %s\r\n\r\n" % json.dumps(ch) for ch in chunks).encode()
        _send_pieces(h, 200, "text/event-stream", data, turn.split, turn.cut_after,
                     getattr(turn, "drip", 0.0))
    else:
        # without alt=sse: one JSON array, written as it is produced
        data = ("[" + ",\r\n".join(json.dumps(ch, indent=1) for ch in chunks) + "]").encode()
        _send_pieces(h, 200, "application/json; charset=UTF-8", data, turn.split,
                     turn.cut_after)


# ---- OpenAI Responses API (what Codex speaks) ----

def r_text(text, usage=(10, 5), split=11):
    """A streamed Responses API answer: one output message of `text`."""
    return Turn("responses", text=text, usage=usage, split=split)


def responses_post(h, gw, rec):
    if _leaks_token(h, gw):
        h._err(400, "a task token reached the gateway")
        return
    if gw.key is not None and h.headers.get("Authorization") != "Bearer " + gw.key:
        h._err(401, "Incorrect API key provided", errcode="invalid_api_key")
        return
    body = rec["body"]
    if not isinstance(body, dict) or not isinstance(body.get("model"), str) or \
            not isinstance(body.get("input"), (str, list)):
        gw.errors.append("responses: model and input required")
        h._err(400, "model and input are required")
        return
    if body.get("stream") is not True:
        gw.errors.append("responses: only streaming is scripted")
        h._err(400, "stream must be true for this test")
        return
    turn = _take_turn(h, gw, "responses", body,
                      lambda m: h._err(500, "test gateway: " + m, typ="server_error"))
    if turn is None:
        return
    out = []
    seq = [0]

    def ev(obj):
        obj["sequence_number"] = seq[0]
        seq[0] += 1
        out.append("event: %s\ndata: %s\n\n" % (obj["type"], json.dumps(obj)))

    resp = {"id": "resp_test", "object": "response", "created_at": int(time.time()),
            "model": body["model"], "status": "in_progress", "output": [], "usage": None}
    ev({"type": "response.created", "response": dict(resp)})
    ev({"type": "response.in_progress", "response": dict(resp)})
    item = {"id": "msg_test", "type": "message", "status": "in_progress", "role": "assistant",
            "content": []}
    ev({"type": "response.output_item.added", "output_index": 0, "item": item})
    ev({"type": "response.content_part.added", "item_id": "msg_test", "output_index": 0,
        "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}})
    t = turn.text
    for i in range(0, len(t), 4):
        ev({"type": "response.output_text.delta", "item_id": "msg_test", "output_index": 0,
            "content_index": 0, "delta": t[i:i + 4]})
    part = {"type": "output_text", "text": t, "annotations": []}
    ev({"type": "response.output_text.done", "item_id": "msg_test", "output_index": 0,
        "content_index": 0, "text": t})
    ev({"type": "response.content_part.done", "item_id": "msg_test", "output_index": 0,
        "content_index": 0, "part": part})
    done = dict(item, status="completed", content=[part])
    ev({"type": "response.output_item.done", "output_index": 0, "item": done})
    i, o = turn.usage
    resp.update(status="completed", output=[done], usage={
        "input_tokens": i, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": o, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": i + o})
    ev({"type": "response.completed", "response": resp})
    _send_pieces(h, 200, "text/event-stream", "".join(out).encode(), turn.split)
