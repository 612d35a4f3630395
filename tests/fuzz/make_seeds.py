#!/usr/bin/env python3
"""Writes the committed seed corpora tests/fuzz/corpus/<target>/ (small,
meaningful inputs; libFuzzer mutates from there). Re-run after changing the
routes or the input layouts; the output is deterministic.

    python3 tests/fuzz/make_seeds.py [TARGET...]
"""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")

TOKEN = "X-EXECD-ACCESS-TOKEN: fuzz-token\r\n"
EXECD_ID = "%032x" % 1    # fuzz_http's finished execd task
NATIVE_ID = "%032x" % 2   # ... and native task
SESSION_ID = "%032x" % 3  # ... and the session re-created for every input
SANDBOX = "/tmp/forceai-fuzz-files"  # fuzz_http's only writable root


def req(method, path, body=None, headers="", token=True, version="HTTP/1.1", ctype=True):
    h = "%s %s %s\r\nHost: x\r\n" % (method, path, version)
    if token:
        h += TOKEN
    h += headers
    if body is not None:
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        if ctype:
            h += "Content-Type: application/json\r\n"
        h += "Content-Length: %d\r\n" % len(body)
        return h.encode() + b"\r\n" + body
    return h.encode() + b"\r\n"


def chunked(method, path, chunks, trailer=b""):
    h = "%s %s HTTP/1.1\r\nHost: x\r\n%sTransfer-Encoding: chunked\r\n" \
        "Content-Type: application/json\r\n\r\n" % (method, path, TOKEN)
    out = h.encode()
    for c in chunks:
        out += b"%x\r\n" % len(c) + c + b"\r\n"
    return out + b"0\r\n" + trailer + b"\r\n"


def http_seeds():
    s = {}
    s["ping"] = req("GET", "/ping")
    s["ping_no_token"] = req("GET", "/ping", token=False)
    s["ping_http10"] = req("GET", "/ping", version="HTTP/1.0")
    s["ping_pipelined3"] = req("GET", "/ping") * 3
    s["command"] = req("POST", "/command", {"command": "echo hi", "cwd": "/tmp", "timeout": 1000,
                                            "envs": {"A": "b"}, "background": False})
    s["command_uid"] = req("POST", "/command", {"command": "id", "uid": 1000, "gid": 1000})
    s["command_bad_json"] = req("POST", "/command", '{"command": ')
    s["command_too_big"] = req("POST", "/command", {"command": "x" * 5000})
    s["command_chunked"] = chunked("POST", "/command", [b'{"comm', b'and": "true"}'])
    s["command_expect"] = req("POST", "/command", {"command": "true"},
                              headers="Expect: 100-continue\r\n")
    s["command_interrupt"] = req("DELETE", "/command?id=" + EXECD_ID)
    s["command_interrupt_missing"] = req("DELETE", "/command")
    s["command_status"] = req("GET", "/command/status/" + EXECD_ID)
    s["command_logs"] = req("GET", "/command/%s/logs" % EXECD_ID)
    s["command_logs_cursor"] = req("GET", "/command/%s/logs?cursor=5" % EXECD_ID)
    s["command_logs_bad_cursor"] = req("GET", "/command/%s/logs?cursor=-1" % EXECD_ID)
    s["session_create"] = req("POST", "/session", {"cwd": "/tmp"})
    s["session_create_empty"] = req("POST", "/session", b"")
    s["session_run"] = req("POST", "/session/%s/run" % SESSION_ID, {"command": "pwd", "timeout": 5})
    s["session_delete"] = req("DELETE", "/session/" + SESSION_ID)
    s["session_delete_then_run"] = (req("DELETE", "/session/" + SESSION_ID) +
                                    req("POST", "/session/%s/run" % SESSION_ID, {"command": "x"}))
    s["metrics"] = req("GET", "/metrics")
    s["metrics_watch"] = req("GET", "/metrics/watch")
    s["hardening"] = req("GET", "/v1/hardening")
    s["task_create"] = req("POST", "/v1/tasks", {"task": "echo hi", "capability": "exec",
                                                 "timeout_ms": 1000, "env": {"X": "1"}})
    s["task_create_chat"] = req("POST", "/v1/tasks", {"task": "hi", "capability": "chat"})
    s["task_get"] = req("GET", "/v1/tasks/" + NATIVE_ID)
    s["task_events"] = req("GET", "/v1/tasks/%s/events" % NATIVE_ID)
    s["task_events_last_id"] = req("GET", "/v1/tasks/%s/events" % NATIVE_ID,
                                   headers="Last-Event-ID: 1\r\n")
    s["task_events_query"] = req("GET", "/v1/tasks/%s/events?last_event_id=2" % NATIVE_ID)
    s["task_delete"] = req("DELETE", "/v1/tasks/" + NATIVE_ID)
    s["files_info"] = req("GET", "/files/info?path=/tmp")
    mp = (b"--XyZ\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n"
          b"{\"path\":\"/tmp/forceai-fuzz-files/up.txt\"}\r\n--XyZ\r\nContent-Disposition: form-data; "
          b"name=\"file\"; filename=\"a\"\r\n\r\nhi\r\n--XyZ--\r\n")
    s["files_upload"] = (b"POST /files/upload HTTP/1.1\r\nHost: x\r\n" + TOKEN.encode() +
                         b"Content-Type: multipart/form-data; boundary=XyZ\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(mp) + mp)
    q = "?path=" + SANDBOX
    s["files_info2"] = req("GET", "/files/info?path=/etc/hostname&path=" + SANDBOX)
    s["files_delete"] = req("DELETE", "/files" + q + "/a")
    s["files_mv"] = req("POST", "/files/mv", [{"src": SANDBOX + "/a", "dest": SANDBOX + "/b"}])
    s["files_permissions"] = req("POST", "/files/permissions",
                                 {SANDBOX + "/a": {"mode": 644, "owner": "", "group": ""}})
    s["files_search"] = req("GET", "/files/search" + q + "&pattern=**/*.txt")
    s["files_replace"] = req("POST", "/files/replace", {SANDBOX + "/a": {"old": "x", "new": "y"}})
    s["files_download"] = req("GET", "/files/download?path=/etc/hostname",
                              headers="Range: bytes=1-3\r\n")
    s["files_download_lines"] = req("GET", "/files/download?path=/etc/passwd&offset=2&limit=3")
    s["dirs_list"] = req("GET", "/directories/list?path=/etc&depth=2")
    s["dirs_create"] = req("POST", "/directories", {SANDBOX + "/d/e": {"mode": 755}})
    s["dirs_delete"] = req("DELETE", "/directories" + q + "/d")
    s["mkdir_upload_list"] = (req("POST", "/directories", {SANDBOX + "/d": {"mode": 700}}) +
                              s["files_upload"] + req("GET", "/directories/list" + q))
    s["unknown_route"] = req("GET", "/nope")
    s["wrong_method"] = req("PUT", "/command", {"command": "true"})
    s["bad_method"] = b"BREW /ping HTTP/1.1\r\nHost: x\r\n\r\n"
    s["cl_and_te"] = (b"POST /command HTTP/1.1\r\nHost: x\r\n" + TOKEN.encode() +
                      b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
                      b"5\r\n{\"a\":\r\n0\r\n\r\n")
    s["bad_chunk_size"] = (b"POST /command HTTP/1.1\r\nHost: x\r\n" + TOKEN.encode() +
                           b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
    s["dup_content_length"] = (b"POST /command HTTP/1.1\r\nHost: x\r\n" + TOKEN.encode() +
                               b"Content-Length: 2\r\nContent-Length: 20\r\n\r\n{}")
    s["dup_token"] = req("GET", "/ping", headers="X-EXECD-ACCESS-TOKEN: other\r\n")
    s["path_traversal"] = req("GET", "/v1/tasks/../../etc/passwd")
    s["encoded_traversal"] = req("GET", "/v1/tasks/%2e%2e%2fetc")
    s["deep_json"] = req("POST", "/v1/tasks", "[" * 3000)
    s["bad_utf8_json"] = req("POST", "/command", b'{"command": "\xff\xfe"}')
    s["nul_in_json"] = req("POST", "/command", '{"command": "a\\u0000b"}')
    s["absolute_uri"] = b"GET http://x/ping HTTP/1.1\r\nHost: x\r\n" + TOKEN.encode() + b"\r\n"
    s["lf_only"] = b"GET /ping HTTP/1.1\nHost: x\n" + TOKEN.replace("\r\n", "\n").encode() + b"\n"
    s["folded_header"] = (b"GET /ping HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n" +
                          TOKEN.encode() + b"\r\n")
    s["http2_preface"] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    s["keepalive_then_close"] = req("GET", "/metrics") + req("GET", "/ping",
                                                            headers="Connection: close\r\n")
    # issue 13: PTY sessions, the WebSocket handshake, stdin/resize/signal, lists
    ws_hdrs = ("Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n")
    s["pty_create"] = req("POST", "/pty", {"cwd": SANDBOX, "command": "echo hi"})
    s["pty_status_delete"] = req("GET", "/pty/" + SESSION_ID) + req("DELETE", "/pty/" + SESSION_ID)
    s["pty_ws_unknown"] = req("GET", "/pty/%s/ws?pty=0&since=5&takeover=1" % SESSION_ID,
                              headers=ws_hdrs)
    s["pty_ws_upgrade"] = req("POST", "/pty", "") + req("GET", "/pty/x/ws", headers=ws_hdrs) + \
        ws_frame(1, b'{"type":"ping"}') + ws_frame(2, b"\x00ls\n")
    s["pty_ws_bad_version"] = req("GET", "/pty/%s/ws" % SESSION_ID,
                                  headers=ws_hdrs.replace("n: 13", "n: 8"))
    s["task_stdin_chunked"] = chunked("POST", "/v1/tasks/%s/stdin" % NATIVE_ID, [b"ab", b"cd\n"])
    s["task_stdin_close"] = req("DELETE", "/v1/tasks/%s/stdin" % NATIVE_ID)
    s["task_resize_signal"] = req("POST", "/v1/tasks/%s/resize" % NATIVE_ID,
                                  {"cols": 80, "rows": 24}) + \
        req("POST", "/v1/tasks/%s/signal" % NATIVE_ID, {"signal": "SIGINT"})
    s["task_list"] = req("GET", "/v1/tasks?state=running") + req("GET", "/v1/tasks?x=1")
    s["task_tty"] = req("POST", "/v1/tasks", {"task": "true", "stdin": True,
                                              "tty": {"cols": 10, "rows": 5}})
    s["inventory"] = req("GET", "/command?running=false&limit=2") + req("GET", "/command?&&") + \
        req("GET", "/command?cursor") + req("GET", "/command?running=%zz&")
    # The port proxy: in the fuzzer's own network namespace nothing listens
    # but the runner, so these end in 502 or 403.
    s["proxy_get"] = req("GET", "/proxy/8000/a%20b?x=1", headers="X-Forwarded-For: 1.2.3.4\r\n")
    s["proxy_post"] = req("POST", "/proxy/9/echo", {"a": 1})
    s["proxy_chunked"] = chunked("PUT", "/proxy/65535/", [b"abc", b"de"])
    s["proxy_upgrade"] = req("GET", "/proxy/1/ws", headers="Connection: Upgrade\r\n"
                             "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n")
    s["proxy_bad_port"] = req("GET", "/proxy/70000/") + req("GET", "/proxy/") + \
        req("DELETE", "/proxy/%38/")
    s["ports"] = req("GET", "/v1/ports")
    return s


def h1parse_seeds():
    """fuzz_h1parse: byte 0 = piece size, byte 1 bit 0 = HEAD, then upstream bytes."""
    return {
        "length": b"\x00\x00HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
        "chunked": b"\x07\x00HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\n",
        "upgrade": b"\x03\x01HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                   b"Connection: Upgrade\r\n\r\n",
        "interim": b"\x01\x00HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 404 Not Found\nX: y\n\n",
        "chunks_only": b"\x05\x00a\r\n0123456789\r\n0\r\n\r\n",
    }


def json_seeds():
    """fuzz_json_bodies: byte 0 = route (0 /command, 1 /v1/tasks,
    2 /session, 3 /session/{id}/run), then the body."""
    s = {}
    add = lambda name, route, body: s.__setitem__(
        name, bytes([route]) + (body if isinstance(body, bytes) else
                                (body if isinstance(body, str) else json.dumps(body)).encode()))
    add("command_full", 0, {"command": "echo hi", "cwd": "/tmp", "background": True,
                            "timeout": 60000, "uid": 1000, "gid": 1000,
                            "envs": {"A": "1", "_B2": "x y"}})
    add("command_min", 0, {"command": "true"})
    add("command_bad_env", 0, {"command": "true", "envs": {"1A": "x", "B": 2}})
    add("command_env_nul", 0, '{"command": "true", "envs": {"A": "x\\u0000y"}}')
    add("command_types", 0, {"command": ["ls"], "timeout": "5", "uid": -1})
    add("command_big_ints", 0, {"command": "x", "timeout": 604800001, "uid": 4294967295})
    add("command_dup_keys", 0, '{"command":"a","command":"b"}')
    add("task_full", 1, {"task": "echo hi", "capability": "exec", "timeout_ms": 1000,
                         "cwd": "/tmp", "env": {"PATH": "/bin"}, "model": "m", "max_steps": 3})
    add("task_chat", 1, {"task": "hi", "capability": "chat"})
    add("task_unknown_cap", 1, {"task": "hi", "capability": "root"})
    add("task_null_fields", 1, {"task": "x", "capability": None, "timeout_ms": None, "env": None})
    add("session_create", 2, {"cwd": "/workspace"})
    add("session_create_empty", 2, b"")
    add("session_create_relative", 2, {"cwd": "rel"})
    add("session_run", 3, {"command": "cd /tmp && export A=1", "timeout": 100})
    add("session_run_cwd", 3, {"command": "pwd", "cwd": "/"})
    add("deep", 0, "[" * 2100 + "]" * 2100)
    add("unicode", 1, '{"task": "echo \\ud83d\\ude00 \\u00e9", "env": {"\\u00e9": "x"}}')
    add("bad_utf8", 0, b'{"command": "\xc3\x28"}')
    add("not_object", 0, "[1, 2]")
    add("trailing", 0, '{"command": "a"} x')
    # issue 25: schemas (unknown fields, the other API's names, wrong types)
    add("task_execd_names", 1, {"task": "x", "timeout": 5, "envs": {}, "command": "y"})
    add("task_unknown_field", 1, {"task": "x", "bogus": [1, {"a": None}]})
    add("command_native_names", 0, {"command": "x", "timeout_ms": 5, "env": {}, "task": "y"})
    add("command_unknown_ok", 0, {"command": "x", "newExecdField": {"a": 1}})
    add("command_wrong_types", 0, {"command": "x", "background": "yes", "cwd": 5})
    return s


def linesplit_seeds():
    """fuzz_linesplit: byte 0 = max_line (n+1, or 65536 when >= 128),
    byte 1 = number of cut points, two bytes per cut point, payload."""
    def mk(max_byte, cuts, payload):
        out = bytes([max_byte, len(cuts)])
        for c in cuts:
            out += bytes([c >> 8, c & 255])
        return out + payload
    s = {}
    s["crlf_split"] = mk(200, [3], b"ab\r\ncd\n")
    s["cr_then_lf_pieces"] = mk(200, [2, 2, 3], b"a\r\nb\rc\n\nd")
    s["long_line"] = mk(7, [5, 11], b"0123456789abcdefghij\nxyz")
    s["exact_max"] = mk(3, [], b"abcd\nabcdefgh\r\n\r\n")
    s["empty_lines"] = mk(200, [1, 2, 3, 4], b"\n\n\r\r\n\n\r")
    s["trailing_cr"] = mk(200, [4], b"abc\r")
    s["binary"] = mk(15, [9, 1], bytes(range(256)))
    return s


def seccomp_seeds():
    s = {}
    default = os.path.join(HERE, "..", "..", "seccomp", "default.json")
    with open(default, "rb") as f:
        s["default"] = f.read()
    arch = ["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"]
    s["minimal_allow"] = json.dumps({"defaultAction": "SCMP_ACT_ALLOW", "architectures": arch,
                                     "syscalls": []}).encode()
    s["deny_list"] = json.dumps({
        "defaultAction": "SCMP_ACT_ALLOW", "architectures": arch,
        "syscalls": [{"names": ["ptrace", "bpf"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]
    }).encode()
    s["args"] = json.dumps({
        "defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 1, "architectures": arch,
        "syscalls": [
            {"names": ["read", "write", "exit_group"], "action": "SCMP_ACT_ALLOW"},
            {"names": ["personality"], "action": "SCMP_ACT_ALLOW",
             "args": [{"index": 0, "value": 0, "op": "SCMP_CMP_EQ"}]},
            {"names": ["clone"], "action": "SCMP_ACT_ALLOW",
             "args": [{"index": 0, "value": 2114060288, "valueTwo": 0,
                       "op": "SCMP_CMP_MASKED_EQ"}]},
            {"names": ["socket"], "action": "SCMP_ACT_ERRNO",
             "args": [{"index": 0, "value": 38, "op": "SCMP_CMP_EQ"}]},
        ]}).encode()
    s["archmap_includes"] = json.dumps({
        "defaultAction": "SCMP_ACT_ERRNO",
        "archMap": [{"architecture": "SCMP_ARCH_X86_64",
                     "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]},
                    {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]}],
        "flags": ["SECCOMP_FILTER_FLAG_SPEC_ALLOW"],
        "syscalls": [
            {"names": ["getpid"], "action": "SCMP_ACT_ALLOW",
             "includes": {"minKernel": "4.8"}},
            {"names": ["reboot"], "action": "SCMP_ACT_ALLOW",
             "includes": {"caps": ["CAP_SYS_BOOT"]}},
            {"names": ["arch_prctl"], "action": "SCMP_ACT_ALLOW",
             "includes": {"arches": ["amd64"]}, "excludes": {}},
            {"names": ["nosuchcall", "clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
        ]}).encode()
    s["bad_action"] = b'{"defaultAction": "SCMP_ACT_NOPE", "syscalls": []}'
    s["truncated"] = s["default"][:300]
    return s


def multipart_seeds():
    """fuzz_multipart: byte 0 = chunk size selector, then the Content-Type
    line up to the first '\\n', then the body."""
    def mk(chunk, boundary_ct, body):
        return bytes([chunk]) + boundary_ct.encode() + b"\n" + body
    s = {}
    ct = "multipart/form-data; boundary=XyZ"
    s["upload"] = mk(0, ct, b"--XyZ\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n"
                     b"{\"path\":\"/tmp/a\",\"mode\":644}\r\n--XyZ\r\nContent-Disposition: form-data;"
                     b" name=\"file\"; filename=\"a.txt\"\r\nContent-Type: text/plain\r\n\r\n"
                     b"hello\r\n--XyZ--\r\n")
    s["split_1"] = mk(1, ct, b"preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"f\"\r\n"
                      b"\r\n\r\n--X\r\n--XyZ--\r\nepilogue")
    s["quoted_boundary"] = mk(3, 'multipart/form-data; boundary="a b:c"',
                              b"--a b:c\r\nContent-Disposition: form-data; name=\"x\"; "
                              b"filename=\"q\\\"uote.bin\"\r\n\r\n\x00\x01\r\n--a b:c--")
    s["no_close"] = mk(7, ct, b"--XyZ\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\ndata")
    s["bad_ct"] = mk(0, "text/plain", b"x")
    s["two_files"] = mk(5, ct, (b"--XyZ\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n"
                                b"{}\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; "
                                b"filename=\"b\"\r\n\r\n" + b"z" * 300 + b"\r\n") * 2 + b"--XyZ--\r\n")
    return s


def ws_frame(opcode, payload, fin=True, mask=True, rsv=0):
    """A client frame as RFC 6455 puts it (masked with a fixed key)."""
    import struct
    n = len(payload)
    b0 = (0x80 if fin else 0) | (rsv << 4) | opcode
    m = 0x80 if mask else 0
    if n < 126:
        h = struct.pack("!BB", b0, m | n)
    elif n < 65536:
        h = struct.pack("!BBH", b0, m | 126, n)
    else:
        h = struct.pack("!BBQ", b0, m | 127, n)
    if not mask:
        return h + payload
    key = b"\x12\x34\x56\x78"
    return h + key + bytes(c ^ key[i % 4] for i, c in enumerate(payload))


def ws_seeds():
    """fuzz_ws: byte 0 = handler mode bits (1 pause, 2 echo, 4 close), then
    client bytes; the first of those also picks how many come with the
    handshake."""
    text = lambda o: ws_frame(1, json.dumps(o).encode())
    s = {}
    s["stdin"] = b"\x00" + ws_frame(2, b"\x00echo hi\n")
    s["frames"] = b"\x02" + text({"type": "ping"}) + text({"type": "resize", "cols": 120,
                                                                "rows": 40}) + \
        text({"type": "signal", "signal": "SIGINT"}) + text({"type": "stdin", "data": "ls\n"}) + \
        text({"type": "bogus"}) + ws_frame(2, b"\x07x") + ws_frame(8, b"\x03\xe8bye")
    s["fragmented"] = b"\x01" + ws_frame(2, b"\x00ab", fin=False) + ws_frame(9, b"p") + \
        ws_frame(0, b"cd", fin=False) + ws_frame(0, b"ef\n")
    s["unmasked"] = b"\x00" + ws_frame(2, b"\x00x", mask=False)
    s["bad_utf8"] = b"\x00" + ws_frame(1, b'{"type":"\xff"}')
    s["rsv"] = b"\x00" + ws_frame(2, b"\x00x", rsv=4)
    s["big_len"] = b"\x00" + bytes([0x82, 0xff]) + b"\x00\x00\x00\x00\x7f\xff\xff\xff" + b"abcd"
    s["close_codes"] = b"\x04" + text({"type": "ping"}) + ws_frame(8, b"\x0f\xa1TAKEN_OVER")
    s["echo_many"] = b"\x03" + ws_frame(2, b"\x00" + b"y" * 4000) * 40
    s["control_too_long"] = b"\x00" + ws_frame(9, b"z" * 200)
    return s


def wire_seeds():
    """fuzz_wire: byte 0 = format (0 openai, 1 anthropic, 2 gemini), byte 1 =
    piece size - 1, then a response body (or a route path)."""
    def mk(fmt, piece, body):
        return bytes([fmt, piece]) + body.encode()
    a_start = ('event: message_start\r\ndata: {"type":"message_start","message":{"usage":'
               '{"input_tokens":21,"cache_creation_input_tokens":5,"cache_read_input_tokens":7,'
               '"output_tokens":1}}}\r\n\r\n')
    a_delta = ('event: message_delta\ndata: {"type":"message_delta","usage":'
               '{"output_tokens":9}}\n\n')
    g_chunk = ('data: {"candidates":[],"usageMetadata":{"promptTokenCount":8,'
               '"candidatesTokenCount":4,"thoughtsTokenCount":3,"totalTokenCount":15}}\r\n\r\n')
    return {
        "openai_stream": mk(0, 6, 'data: {"choices":[]}\n\ndata: {"choices":[],"usage":'
                                  '{"prompt_tokens":4,"completion_tokens":5,"total_tokens":9,'
                                  '"prompt_tokens_details":{"cached_tokens":2}}}\n\ndata: [DONE]\n\n'),
        "openai_doc": mk(0, 255, ' {"object":"list","usage":{"prompt_tokens":3,"total_tokens":3}}'),
        "responses": mk(0, 3, 'event: response.completed\ndata: {"response":{"usage":'
                              '{"input_tokens":2,"output_tokens":6}}}\n\n'),
        "anthropic_stream": mk(1, 4, a_start + ": ping\n\n" + a_delta + 'data: {"type":"message_stop"}'),
        "anthropic_multiline": mk(1, 0, 'data: {"type":"message_delta",\ndata: "usage":'
                                        '{"output_tokens":3}}\n\n'),
        "anthropic_message": mk(1, 100, '{"type":"message","usage":{"input_tokens":3,'
                                        '"output_tokens":2}}'),
        "gemini_sse": mk(2, 8, g_chunk + g_chunk),
        "gemini_array": mk(2, 16, '[{"usageMetadata":{"promptTokenCount":10,'
                                  '"candidatesTokenCount":1}},\r\n{"usageMetadata":'
                                  '{"promptTokenCount":10,"candidatesTokenCount":2,'
                                  '"totalTokenCount":12}}]'),
        "route_gemini": mk(2, 0, "/v1beta/models/gemini-2.5-pro:streamGenerateContent"),
        "route_messages": mk(1, 0, "/v1/messages/count_tokens"),
        "route_openai": mk(0, 0, "/v1/chat/completions"),
    }


def main():
    only = set(sys.argv[1:])  # targets to write (default: all)
    sets = {"http": http_seeds(), "json_bodies": json_seeds(), "linesplit": linesplit_seeds(),
            "seccomp": seccomp_seeds(), "multipart": multipart_seeds(), "ws": ws_seeds(),
            "h1parse": h1parse_seeds(), "wire": wire_seeds()}
    for target, seeds in sets.items():
        if only and target not in only:
            continue
        d = os.path.join(CORPUS, target)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for name, data in sorted(seeds.items()):
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        print("%s: %d seeds" % (target, len(seeds)))


if __name__ == "__main__":
    main()
