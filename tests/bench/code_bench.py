#!/usr/bin/env python3
"""Bench 14: code contexts (docs/design/audit.md#the-doors-and-their-one-call-each) against a Jupyter kernel
driven by Debian's jupyter_client (python3-jupyter-client, python3-ipykernel):
the round trip of `1+1` in a warm Python context, the time from creating a
context to its first result, the memory of an idle context (the
interpreter's RSS), and 16 contexts at once. Run alone:
    python3 tests/bench/code_bench.py [RUNNER] [--quick]"""
import http.client
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))


def _post(port, path, body, conn=None):
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    if not conn:
        c.close()
    return r.status, data


def _result(data):
    for frame in data.decode().split("\n\n"):
        if frame.strip():
            ev = json.loads(frame)
            if ev["type"] == "result":
                return ev["results"]["text/plain"]
    raise RuntimeError("no result: %r" % data[-300:])


def _rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def measure_runner(binary, n):
    import harness
    os.environ["RUNNER_BIN"] = binary
    r = harness.Runner(("--code-max-contexts", "32"))
    out = {}
    try:
        firsts = []
        for _ in range(3 if n < 100 else 5):
            t0 = time.monotonic()
            st, data = _post(r.port, "/code/context", {"language": "python"})
            cid = json.loads(data)["id"]
            st, data = _post(r.port, "/code", {"context": {"id": cid}, "code": "1+1"})
            assert _result(data) == "2"
            firsts.append((time.monotonic() - t0) * 1000)
        out["first_result_ms"] = statistics.median(firsts)
        conn = http.client.HTTPConnection("127.0.0.1", r.port, timeout=60)
        rtts = []
        for i in range(n):
            t0 = time.monotonic()
            st, data = _post(r.port, "/code", {"context": {"id": cid}, "code": "1+1"}, conn)
            rtts.append((time.monotonic() - t0) * 1000)
            assert _result(data) == "2"
        conn.close()
        out["rtt_p50_ms"] = statistics.median(rtts)
        out["rtt_p90_ms"] = sorted(rtts)[int(len(rtts) * 0.9)]
        st, data = _post(r.port, "/code", {"context": {"id": cid}, "code": "import os\nos.getpid()"})
        pid = int(_result(data))
        time.sleep(0.5)
        out["idle_rss_kib"] = _rss_kib(pid)
        # 16 at once: created together, then one cell in each, all in flight.
        r.request("DELETE", "/code/contexts?language=python")
        t0 = time.monotonic()
        ids = [json.loads(_post(r.port, "/code/context", {"language": "python"})[1])["id"]
               for _ in range(16)]
        import threading
        errs = []

        def one(cid):
            st, data = _post(r.port, "/code", {"context": {"id": cid}, "code": "sum(range(1000))"})
            if st != 200 or _result(data) != "499500":
                errs.append((st, data[-200:]))
        ths = [threading.Thread(target=one, args=(c,)) for c in ids]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        out["sixteen_ms"] = (time.monotonic() - t0) * 1000
        out["sixteen_errors"] = len(errs)
        out["runner_rss_kib"] = r.rss_kib()
    finally:
        r.stop()
        r.close()
    return out


def measure_jupyter(n):
    from jupyter_client import KernelManager
    firsts = []
    km = kc = None
    for _ in range(3 if n < 100 else 5):
        if km:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
        t0 = time.monotonic()
        km = KernelManager(kernel_name="python3")
        km.start_kernel()
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        r = kc.execute_interactive("1+1", timeout=60, output_hook=lambda m: None)
        firsts.append((time.monotonic() - t0) * 1000)
    out = {"first_result_ms": statistics.median(firsts)}
    rtts = []
    for _ in range(n):
        t0 = time.monotonic()
        got = []
        r = kc.execute_interactive("1+1", timeout=60, output_hook=lambda m: got.append(m))
        rtts.append((time.monotonic() - t0) * 1000)
        assert r["content"]["status"] == "ok"
    out["rtt_p50_ms"] = statistics.median(rtts)
    out["rtt_p90_ms"] = sorted(rtts)[int(len(rtts) * 0.9)]
    time.sleep(0.5)
    out["idle_rss_kib"] = _rss_kib(km.provisioner.process.pid)
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    return out


def measure(binary, quick=False):
    n = 30 if quick else 300
    return {"runner": measure_runner(binary, n), "jupyter": measure_jupyter(n), "n": n}


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    binary = os.path.abspath(args[0] if args else "build/forceai-runner")
    print(json.dumps(measure(binary, "--quick" in sys.argv), indent=1))
