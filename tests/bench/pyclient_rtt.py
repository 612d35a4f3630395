#!/usr/bin/env python3
"""The round trip of `true` as any client sees it (benchmark 12 of bench.py;
standalone too): a plain Python http.client, a new connection per request,
execd `POST /command {"command":"true"}` read to the end of the stream,
alternating request by request with a raw posix_spawn of `/bin/sh -c true`
(waited for) from the same interpreter. p50 of N of each, and the ratio.

Where bench 4 (rtt.c) measures the runner from a C client on one keep-alive
connection, this one counts the client's own share too: the connection's
setup and teardown, http.client's parsing, reading the chunked stream to
its end.

  python3 tests/bench/pyclient_rtt.py [--runner build/static/forceai-runner]
      [-n 300] [--json out.json]

Exit status 1 when a request failed."""
import argparse
import http.client
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def one_request(port):
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", "/command", body=b'{"command":"true"}',
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    t1 = time.perf_counter()
    if r.status != 200 or b'"execution_complete"' not in data:
        raise RuntimeError("POST /command: HTTP %d %r" % (r.status, data[-300:]))
    return t1 - t0


def one_spawn():
    t0 = time.perf_counter()
    pid = os.posix_spawn("/bin/sh", ["sh", "-c", "true"], os.environ)
    _, st = os.waitpid(pid, 0)
    t1 = time.perf_counter()
    if st != 0:
        raise RuntimeError("sh -c true: status %d" % st)
    return t1 - t0


def measure(runner_bin, n=300, warmup=20):
    os.environ["RUNNER_BIN"] = os.path.abspath(runner_bin)
    sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
    from harness import Runner  # noqa: E402 (RUNNER_BIN must be set first)

    r = Runner()
    try:
        for _ in range(warmup):
            one_request(r.port)
            one_spawn()
        req, raw = [], []
        for _ in range(n):
            req.append(one_request(r.port))
            raw.append(one_spawn())
    finally:
        r.stop()
        r.close()
    p50, raw50 = statistics.median(req), statistics.median(raw)
    return {"n": n, "p50_ms": p50 * 1e3, "raw_p50_ms": raw50 * 1e3, "ratio": p50 / raw50,
            "p90_ms": sorted(req)[int(0.9 * n)] * 1e3,
            "raw_p90_ms": sorted(raw)[int(0.9 * n)] * 1e3,
            "loadavg": " ".join(open("/proc/loadavg").read().split()[:3])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runner", default=os.path.join(ROOT, "build", "static", "forceai-runner"))
    ap.add_argument("-n", type=int, default=300)
    ap.add_argument("--json")
    a = ap.parse_args()
    try:
        res = measure(a.runner, a.n)
    except (RuntimeError, OSError) as e:
        print("pyclient_rtt: %s" % e, file=sys.stderr)
        return 1
    print("round trip of `true`, Python http.client, new connection each, p50 of %d: %.3f ms; "
          "posix_spawn sh -c true p50 %.3f ms; ratio %.2f (load %s)" % (
              a.n, res["p50_ms"], res["raw_p50_ms"], res["ratio"], res["loadavg"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
