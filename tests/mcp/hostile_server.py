#!/usr/bin/env python3
"""A small stdio MCP server that misbehaves on request, behind /mcp in the tests: `echo`
answers, `crash` exits (the runner must report it and restart the server on next use),
`flood` writes an endless line (the runner must kill the server, not grow), `stall` never
answers (a cancel must still end the call), `spam` stops reading its stdin and writes
server->client requests and tools/list_changed in a loop (the runner's own answers must not
pile up: it must kill the server as stalled), `churn` says tools/list_changed again after
each tools/list for `seconds` (a client's GET stream that is not read must not pile up). Newline-delimited JSON-RPC on stdin/stdout."""
import json
import os
import sys
import time


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


TOOLS = [{"name": n, "description": d, "inputSchema": {"type": "object"}} for n, d in (
    ("echo", "echo the text argument"), ("crash", "exit at once"),
    ("flood", "write an endless line"), ("stall", "never answer"), ("whoami", "uid and pid"),
    ("spam", "stop reading; requests and list_changed in a loop"),
    ("churn", "list_changed after each tools/list for a while"))]

for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    mid, method = m.get("id"), m.get("method")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
            "serverInfo": {"name": "hostile", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": TOOLS}})
    elif method == "tools/call":
        name = m["params"]["name"]
        args = m["params"].get("arguments") or {}
        if name == "echo":
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [{"type": "text", "text": args.get("text", "")}]}})
        elif name == "whoami":
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [{"type": "text", "text": "%d %d" % (os.getuid(), os.getpid())}]}})
        elif name == "crash":
            os._exit(3)
        elif name == "flood":
            chunk = "x" * 65536
            while True:
                sys.stdout.write(chunk)
        elif name == "stall":
            pass
        elif name == "spam":
            k = 0
            while True:
                k += 1
                sys.stdout.write('{"jsonrpc":"2.0","id":"s%d","method":"roots/list"}\n'
                                 '{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}\n'
                                 % k)
                if k % 64 == 0:
                    sys.stdout.flush()
        elif name == "churn":
            end, n = time.monotonic() + float(args.get("seconds", 5)), 0
            while time.monotonic() < end:
                send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
                while True:  # the runner asks for the list: answer it, then change it again
                    q = json.loads(sys.stdin.readline() or "null")
                    if q is None:
                        sys.exit(0)
                    if q.get("method") == "tools/list":
                        send({"jsonrpc": "2.0", "id": q["id"], "result": {"tools": TOOLS}})
                        n += 1
                        break
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [{"type": "text", "text": "%d lists" % n}]}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no"}})
