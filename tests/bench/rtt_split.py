#!/usr/bin/env python3
"""The round trip of `true` split by what is run (docs/performance.md, "Where a
round trip's time goes"): one request of each kind in turn, per build given,
N rounds, Python http.client with a new connection each, p50:
POST /command {"command":"true"} (bash), the same with --insecure-no-confine,
POST /command {"argv":["/bin/true"]} (no shell); and, from the same
interpreter, posix_spawn of `sh -c true`, of `bash -c true` in a task's
environment and of `/bin/true`.

  python3 tests/bench/rtt_split.py [-n 300] BUILD [BUILD...]

Several builds are interleaved request by request (old against new), in a new
order each round."""
import argparse
import http.client
import os
import random
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TASK_ENV = {"PWD": "/", "LOGNAME": "user", "HOME": "/home/user", "LANG": "C.UTF-8",
            "TERM": "xterm", "USER": "user", "SHELL": "/bin/sh",
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


def request(port, body):
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", "/command", body=body, headers={"Content-Type": "application/json"})
    data = c.getresponse().read()
    c.close()
    t = time.perf_counter() - t0
    if b"execution_complete" not in data:
        raise RuntimeError("POST /command: %r" % data[-300:])
    return t


def spawn(argv, env):
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env)
    os.waitpid(pid, 0)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=300)
    ap.add_argument("builds", nargs="+")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
    import harness
    runners, series = [], {}
    try:
        for i, b in enumerate(a.builds):
            harness.RUNNER = os.path.abspath(b)
            on, off = harness.Runner(), harness.Runner(args=["--insecure-no-confine"])
            runners += [on, off]
            tag = "[%d]" % i if len(a.builds) > 1 else ""
            series["command true" + tag] = lambda p=on.port: request(p, b'{"command":"true"}')
            series["command true, unconfined" + tag] = lambda p=off.port: request(
                p, b'{"command":"true"}')
            series["argv /bin/true" + tag] = lambda p=on.port: request(p, b'{"argv":["/bin/true"]}')
        series["raw sh -c true"] = lambda: spawn(["/bin/sh", "-c", "true"], dict(os.environ))
        series["raw bash -c true, task env"] = lambda: spawn(["/bin/bash", "-c", "true"], TASK_ENV)
        series["raw /bin/true"] = lambda: spawn(["/bin/true"], TASK_ENV)
        for _ in range(20):
            for f in series.values():
                f()
        samples = {k: [] for k in series}
        order, rng = list(series), random.Random(1)
        for _ in range(a.n):
            # A new order each round: a series' place in the round biases it (measured:
            # the first runner's requests 20-30 % slower whichever build it was).
            rng.shuffle(order)
            for k in order:
                samples[k].append(series[k]())
    finally:
        for r in runners:
            r.stop()
            r.close()
    sh = statistics.median(samples["raw sh -c true"])
    for i, b in enumerate(a.builds):
        print("[%d] %s" % (i, b))
    print("n=%d, load %s" % (a.n, " ".join(open("/proc/loadavg").read().split()[:3])))
    for k, v in samples.items():
        m = statistics.median(v)
        print("%-34s p50 %.3f ms  %.2fx raw sh" % (k, m * 1e3, m / sh))
    return 0


if __name__ == "__main__":
    sys.exit(main())
