#!/usr/bin/env python3
"""Model proxy overhead (issue 6), standalone.

  A  time to first byte (response head), to first SSE event, and total time of
     one streamed chat completion from the test gateway (tests/gateway/
     test_gateway.py), through the runner's loopback model proxy vs directly
     to the gateway; same run, interleaved, a new connection each time,
     median (and p90) of N.
  B  runner VmRSS while 64 streamed completions run through the proxy at once
     (drip-fed, so they overlap), vs the same runner idle; every stream is
     checked to end with `data: [DONE]`.

The proxy accepts only a live per-task token: the bench starts one `chat`
task that prints its OPENAI_API_KEY and sleeps, and uses that token.

  python3 tests/bench/proxy_bench.py [--runner build/forceai-runner] [--quick]
                                     [-n 200] [--concurrency 64] [--json out.json]

Exit status 1 when a measurement could not be made correctly."""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "tests", "lib"), os.path.join(ROOT, "tests", "gateway")]

import harness  # noqa: E402
from test_gateway import TestGateway, text  # noqa: E402

KEY = "sk-bench-" + os.urandom(8).hex()


class BenchError(Exception):
    pass


def completion(port, token, timeout=60):
    """One streamed completion over a new connection. Returns
    (ttfb_s, first_event_s, total_s, body bytes)."""
    body = json.dumps({"model": "test-model", "stream": True,
                       "stream_options": {"include_usage": True},
                       "messages": [{"role": "user", "content": "bench"}]}).encode()
    req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
           b"Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (port, token.encode(), len(body))
           + body)
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.perf_counter()
        s.sendall(req)
        buf = b""
        ttfb = first_ev = None
        while True:
            d = s.recv(65536)
            if not d:
                break
            now = time.perf_counter()
            if ttfb is None:
                ttfb = now - t0
            buf += d
            if first_ev is None and b"data: " in buf:
                first_ev = now - t0
            if buf.endswith(b"\r\n0\r\n\r\n"):
                break
        total = time.perf_counter() - t0
    finally:
        s.close()
    if not buf.startswith(b"HTTP/1.1 200") or b"data: [DONE]" not in buf:
        raise BenchError("bad stream from port %d: %r" % (port, buf[:300]))
    return ttfb, first_ev, total, buf


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def rss_kib(pid, field="VmRSS:"):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return None


def hold_token(r):
    """Start a chat task that prints its token and sleeps; returns (proc, token)."""
    body = json.dumps({"task": "echo TOKEN=$OPENAI_API_KEY; exec sleep 3600",
                       "capability": "chat", "cwd": r.work})
    p = subprocess.Popen(["curl", "-sS", "-N", "-H", "Content-Type: application/json",
                          "-d", body, r.url + "/v1/tasks"], stdout=subprocess.PIPE)
    end = time.monotonic() + 20
    while time.monotonic() < end:
        line = p.stdout.readline()
        if not line:
            break
        if line.startswith(b"data: ") and b"TOKEN=" in line:
            ev = json.loads(line[6:])
            tok = ev.get("text", "").strip().split("=", 1)[1]
            if tok.startswith("fai-"):
                return p, tok
    p.kill()
    raise BenchError("chat task did not print a token")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runner", default=harness.RUNNER)
    ap.add_argument("--quick", action="store_true", help="small sizes, for make check")
    ap.add_argument("-n", type=int, default=None, help="completions per path (default 200, quick 20)")
    ap.add_argument("--events", type=int, default=None,
                    help="content events per completion (default 200, quick 50)")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--drip-ms", type=float, default=None,
                    help="gap between events in the concurrent phase (default 20, quick 10)")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    n = a.n or (20 if a.quick else 200)
    events = a.events or (50 if a.quick else 200)
    drip = (a.drip_ms if a.drip_ms is not None else (10 if a.quick else 20)) / 1000.0
    harness.RUNNER = a.runner

    gw = TestGateway(key=KEY)
    gw.server.socket.listen(256)  # 64 connections arrive at once
    gw.turns = None
    turn = {"t": text("x" * (events * 8), usage=(12, events), frag=8)}
    gw.next_turn = lambda: turn["t"]
    r = tok_proc = None
    res = {"params": {"n": n, "events": events, "concurrency": a.concurrency,
                      "drip_ms": drip * 1000, "quick": a.quick, "runner": a.runner},
           "loadavg_before": os.getloadavg()}
    try:
        r = harness.Runner(env={"FORCEAI_GATEWAY_URL": gw.url, "FORCEAI_GATEWAY_KEY": KEY,
                                "FORCEAI_MODEL": "test-model"})
        pport = [l for l in r.loglines() if l.get("msg") == "ready"][0]["model_proxy_port"]
        tok_proc, token = hold_token(r)
        pid = r.host_pid()

        # A: interleaved latency, identical streams
        for _ in range(3):  # warm-up both paths
            completion(gw.port, KEY)
            completion(pport, token)
        direct, proxied = [], []
        for i in range(n):
            order = [(direct, gw.port, KEY), (proxied, pport, token)]
            if i % 2:
                order.reverse()
            for acc, port, k in order:
                ttfb, fe, tot, body = completion(port, k)
                acc.append((ttfb, fe, tot, len(body)))
        lat = {}
        for name, idx in (("ttfb", 0), ("first_event", 1), ("total", 2)):
            dv = [x[idx] * 1000 for x in direct]
            pv = [x[idx] * 1000 for x in proxied]
            lat[name] = {"direct_ms_p50": statistics.median(dv), "proxy_ms_p50": statistics.median(pv),
                         "direct_ms_p90": pct(dv, 90), "proxy_ms_p90": pct(pv, 90),
                         "ratio_p50": statistics.median(pv) / statistics.median(dv),
                         "overhead_ms_p50": statistics.median(pv) - statistics.median(dv)}
        res["latency"] = lat

        # B: RSS during concurrent streams through the proxy
        time.sleep(0.2)
        idle = rss_kib(pid)
        turn["t"] = text("y" * (events * 8), usage=(12, events), frag=8, drip=drip)
        samples, errors = [], []
        stop = threading.Event()

        def sampler():
            while not stop.is_set():
                samples.append(rss_kib(pid))
                time.sleep(0.005)
        barrier = threading.Barrier(a.concurrency)
        durations = []

        def one():
            try:
                barrier.wait(30)
                t = completion(pport, token, timeout=120)
                durations.append(t[2])
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))
        st = threading.Thread(target=sampler, daemon=True)
        st.start()
        ths = [threading.Thread(target=one) for _ in range(a.concurrency)]
        t0 = time.perf_counter()
        for t in ths:
            t.start()
        for t in ths:
            t.join(180)
        wall = time.perf_counter() - t0
        stop.set()
        st.join()
        if errors or len(durations) != a.concurrency:
            raise BenchError("%d of %d concurrent streams failed: %s"
                             % (a.concurrency - len(durations), a.concurrency, errors[:3]))
        res["concurrent"] = {"streams": a.concurrency, "idle_rss_kib": idle,
                             "peak_rss_kib": max(samples), "hwm_kib": rss_kib(pid, "VmHWM:"),
                             "rss_growth_kib": max(samples) - idle,
                             "wall_s": wall, "stream_s_p50": statistics.median(durations),
                             "stream_s_ideal": events * drip, "rss_samples": len(samples)}
    finally:
        if tok_proc:
            tok_proc.kill()
            tok_proc.wait()
        if r:
            r.close()
        gw.close()
    res["loadavg_after"] = os.getloadavg()

    print("proxy overhead: %d completions per path, %d content events each, interleaved" % (n, events))
    print("%-12s %10s %10s %10s %10s %8s" % ("figure", "direct p50", "proxy p50", "direct p90",
                                           "proxy p90", "ratio"))
    for name, v in res["latency"].items():
        print("%-12s %8.3fms %8.3fms %8.3fms %8.3fms %7.2fx" % (
            name, v["direct_ms_p50"], v["proxy_ms_p50"], v["direct_ms_p90"], v["proxy_ms_p90"],
            v["ratio_p50"]))
    c = res["concurrent"]
    print("%d concurrent streams through the proxy: runner RSS idle %d KiB, peak %d KiB "
          "(+%d KiB, %.2fx), VmHWM %d KiB; wall %.2fs, stream p50 %.2fs (ideal %.2fs)" % (
              c["streams"], c["idle_rss_kib"], c["peak_rss_kib"], c["rss_growth_kib"],
              c["peak_rss_kib"] / c["idle_rss_kib"], c["hwm_kib"], c["wall_s"],
              c["stream_s_p50"], c["stream_s_ideal"]))
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print("proxy_bench: " + str(e), file=sys.stderr)
        sys.exit(1)
