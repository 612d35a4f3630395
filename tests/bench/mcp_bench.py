#!/usr/bin/env python3
"""Latency of a run_command of `true` through /mcp (a session, tools/call answered as JSON)
beside the same command through POST /v1/tasks (the SSE stream read to its exit event), in
the same run on one runner, interleaved, each over its own keep-alive connection.
    python3 tests/bench/mcp_bench.py [N]      (default 200 of each)
Prints the median and p90 of each and their ratio."""
import http.client
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from harness import Runner  # noqa: E402


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    r = Runner(args=("--retain-count", "16"))
    try:
        mc = http.client.HTTPConnection("127.0.0.1", r.port, timeout=30)
        tc = http.client.HTTPConnection("127.0.0.1", r.port, timeout=30)
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        mc.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                              "params": {"protocolVersion": "2025-11-25"}}), h)
        resp = mc.getresponse()
        sid = resp.getheader("Mcp-Session-Id")
        resp.read()
        mh = dict(h, **{"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25",
                        "Accept": "application/json"})

        def via_mcp(i):
            mc.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                                                  "params": {"name": "run_command",
                                                             "arguments": {"command": "true"}}}), mh)
            b = json.loads(mc.getresponse().read())
            assert b["result"]["structuredContent"]["exit_code"] == 0, b

        sh = dict(mh, Accept="application/json, text/event-stream")

        def via_mcp_sse(i):
            mc.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                                                  "params": {"name": "run_command",
                                                             "arguments": {"command": "true"}}}), sh)
            b = mc.getresponse().read()
            assert b'"exit_code":0' in b, b

        def via_tasks(i):
            tc.request("POST", "/v1/tasks", json.dumps({"task": "true"}), h)
            b = tc.getresponse().read()
            assert b"event: exit" in b and b'"exit_code":0' in b, b

        mcp, sse, tasks = [], [], []
        for i in range(10):  # warm-up
            via_mcp(i)
            via_mcp_sse(i)
            via_tasks(i)
        for i in range(n):
            order = [(via_mcp, mcp), (via_mcp_sse, sse), (via_tasks, tasks)]
            for fn, out in order[i % 3:] + order[:i % 3]:
                t0 = time.perf_counter()
                fn(i + 100)
                out.append((time.perf_counter() - t0) * 1e6)

        def p(v, q):
            return sorted(v)[int(len(v) * q)]
        for name, v in (("/mcp run_command true (JSON answer)", mcp),
                        ("/mcp run_command true (SSE answer)", sse), ("/v1/tasks true", tasks)):
            print("%-36s median %7.0f us  p90 %7.0f us  (n=%d)" % (name, statistics.median(v),
                                                                   p(v, 0.9), len(v)))
        print("ratio /mcp JSON : /v1/tasks (median) = %.2f" % (statistics.median(mcp) /
                                                               statistics.median(tasks)))
        print("ratio /mcp SSE : /v1/tasks (median) = %.2f" % (statistics.median(sse) /
                                                              statistics.median(tasks)))
    finally:
        r.close()


if __name__ == "__main__":
    main()
