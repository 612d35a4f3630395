#!/usr/bin/env python3
"""The port proxy against nginx's reverse proxy, same upstream, same run
(benchmark 11 of bench.py; standalone too).

The upstream is Debian's nginx serving files on a loopback port (a small
file and a sparse 1 GiB file). In front of it, side by side:

  runner   GET /proxy/{port}/... through the runner (the build given)
  nginx    nginx's own reverse proxy: proxy_pass to an upstream block with
           `keepalive 32`, proxy_http_version 1.1, 64 KiB buffers

both with one worker (the runner is one thread). Measured, interleaved round
by round because the machine is shared and noisy:

  small    `wrk --latency` GETs of the small file over 16 and 256
           connections: req/s and p50 latency, median over the rounds
  body     a 1 GiB GET with curl -o /dev/null: MB/s, median of the rounds
  ws       1 GiB of WebSocket frames echoed through an upgraded connection
           (wsecho), through the runner's proxy and straight to the echo
           server: MB/s (both directions counted once)

  python3 tests/bench/portproxy_bench.py [--runner build/static/forceai-runner]
      [--rounds 3] [--seconds 5] [--body-mib 1024] [--ws-mib 1024] [--json out.json]

Exit status 1 when a measurement could not be made correctly."""
import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import procstat  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MIB = 1 << 20

UPSTREAM_CONF = """worker_processes 1;
daemon off;
master_process off;
error_log %(dir)s/error.log warn;
pid %(dir)s/nginx.pid;
events { worker_connections 1024; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    client_body_temp_path %(dir)s/body;
    proxy_temp_path %(dir)s/proxy;
    fastcgi_temp_path %(dir)s/fcgi;
    uwsgi_temp_path %(dir)s/uwsgi;
    scgi_temp_path %(dir)s/scgi;
    server {
        listen 127.0.0.1:%(port)d;
        root %(root)s;
    }
}
"""

PROXY_CONF = """worker_processes 1;
daemon off;
master_process off;
error_log %(dir)s/error.log warn;
pid %(dir)s/nginx.pid;
events { worker_connections 1024; }
http {
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path %(dir)s/body;
    proxy_temp_path %(dir)s/proxy;
    fastcgi_temp_path %(dir)s/fcgi;
    uwsgi_temp_path %(dir)s/uwsgi;
    scgi_temp_path %(dir)s/scgi;
    upstream files {
        server 127.0.0.1:%(up)d;
        keepalive 32;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:%(port)d;
        proxy_http_version 1.1;
        proxy_buffer_size 64k;
        proxy_buffers 8 64k;
        proxy_busy_buffers_size 128k;
        proxy_max_temp_file_size 0;
        location / {
            proxy_set_header Connection "";
            proxy_pass http://files;
        }
        location /ws {
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection "upgrade";
            proxy_read_timeout 300s;
            proxy_pass http://127.0.0.1:%(ws)d;
        }
    }
}
"""


class BenchError(Exception):
    pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, proc, what):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError("%s exited at start" % what)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise BenchError("%s does not listen on %d" % (what, port))


class Nginx:
    def __init__(self, conf, scratch, **kw):
        self.bin = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.access(self.bin, os.X_OK):
            raise BenchError("nginx not installed (scripts/install-deps.sh bench)")
        os.makedirs(scratch, exist_ok=True)
        for d in ("body", "proxy", "fcgi", "uwsgi", "scgi"):
            os.makedirs(os.path.join(scratch, d), exist_ok=True)
        self.port = free_port()
        path = os.path.join(scratch, "nginx.conf")
        with open(path, "w") as f:
            f.write(conf % dict(kw, dir=scratch, port=self.port))
        self.proc = subprocess.Popen([self.bin, "-c", path, "-p", scratch],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port, self.proc, "nginx")

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def parse_ms(s):
    m = re.match(r"([\d.]+)(us|ms|s)$", s)
    if not m:
        raise BenchError("cannot read wrk latency %r" % s)
    v = float(m.group(1))
    return v / 1000.0 if m.group(2) == "us" else v * 1000.0 if m.group(2) == "s" else v


def wrk_cpu(url, conns, seconds, want_bytes, pid):
    """wrk, and the proxy's CPU time per request meanwhile (µs): steadier than the
    rate on a shared machine, where the rate also follows the other processes."""
    t0 = procstat.cpu_with_children(pid)
    r = wrk(url, conns, seconds, want_bytes)
    t1 = procstat.cpu_with_children(pid)
    if r.get("requests"):
        r["cpu_us_per_req"] = (t1 - t0) * 1e6 / r["requests"]
    return r


def wrk(url, conns, seconds, want_bytes):
    threads = 1 if conns <= 16 else 2
    r = subprocess.run(["wrk", "-t%d" % threads, "-c%d" % conns, "-d%ds" % seconds, "--latency",
                        url], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = r.stdout
    if r.returncode != 0:
        raise BenchError("wrk %s: exit %d: %s" % (url, r.returncode, out[-500:]))
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    p50 = re.search(r"^\s+50%\s+(\S+)", out, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", out, re.M)
    if not m or not p50:
        raise BenchError("cannot read wrk's output: %s" % out[-500:])
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errs = re.search(r"Socket errors: (.*)", out)
    if bad:
        raise BenchError("wrk %s: %s non-2xx answers" % (url, bad.group(1)))
    tr = re.search(r"Transfer/sec:", out)
    total = re.search(r"(\d+) requests in", out)
    return {"rps": float(m.group(1)), "p50_ms": parse_ms(p50.group(1)),
            "p99_ms": parse_ms(p99.group(1)) if p99 else None,
            "requests": int(total.group(1)) if total else None,
            "socket_errors": errs.group(1).strip() if errs else None, "_": bool(tr)}


def curl_get(url, size):
    t0 = time.monotonic()
    c = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{size_download}", url],
                       stdout=subprocess.PIPE, text=True)
    t = time.monotonic() - t0
    code, got = (c.stdout.split() + ["0", "0"])[:2]
    if c.returncode != 0 or code != "200" or int(got) != size:
        raise BenchError("curl %s: exit %d, HTTP %s, %s bytes (want %d)" % (
            url, c.returncode, code, got, size))
    return t


def ws_echo(tool, port, path, size):
    r = subprocess.run([tool, "-c", str(port), "-P", path, "-n", str(size)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    if r.returncode != 0:
        raise BenchError("wsecho %d%s: %s" % (port, path, r.stderr.strip()[-300:]))
    secs, nbytes = r.stdout.split()
    return float(secs), int(nbytes)


def vm(pid, key):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def measure(runner_bin, rounds=3, seconds=5, body_mib=1024, ws_mib=1024, tools=None,
            conns=(16, 256), quick=False, log=print):
    """Runs everything; returns a dict of figures (see main)."""
    tools = tools or os.path.join(ROOT, "build", "bench")
    wstool = os.path.join(tools, "wsecho")
    if not shutil.which("wrk"):
        raise BenchError("wrk not installed (scripts/install-deps.sh bench)")
    if not os.access(wstool, os.X_OK):
        raise BenchError("%s missing (make bench builds it)" % wstool)
    os.environ["RUNNER_BIN"] = os.path.abspath(runner_bin)
    sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
    from harness import Runner  # noqa: E402 (RUNNER_BIN must be set first)

    work = tempfile.mkdtemp(prefix="forceai-portproxy-bench-")
    root = os.path.join(work, "root")
    os.makedirs(root)
    with open(os.path.join(root, "small"), "wb") as f:
        f.write(b"x" * 100)
    body = body_mib * MIB
    with open(os.path.join(root, "blob"), "wb") as f:
        f.truncate(body)
    up = nginx = runner = ws = None
    res = {"rounds": rounds, "seconds": seconds, "body_mib": body_mib, "ws_mib": ws_mib,
           "loadavg_before": " ".join(open("/proc/loadavg").read().split()[:3])}
    try:
        ws = subprocess.Popen([wstool, "-s"], stdout=subprocess.PIPE, text=True)
        ws_port = int(ws.stdout.readline())
        up = Nginx(UPSTREAM_CONF, os.path.join(work, "up"), root=root)
        nginx = Nginx(PROXY_CONF, os.path.join(work, "proxy"), up=up.port, ws=ws_port)
        runner = Runner()
        rbase = "http://127.0.0.1:%d/proxy/%d" % (runner.port, up.port)
        nbase = "http://127.0.0.1:%d" % nginx.port
        for u in (rbase + "/small", nbase + "/small"):
            subprocess.run(["curl", "-sf", "-o", "/dev/null", u], check=True)
        rss0 = vm(runner.proc.pid, "VmRSS")
        samples = {}
        for c in conns:
            for _ in range(rounds):
                for name, base, pid in (("runner", rbase, runner.proc.pid),
                                        ("nginx", nbase, nginx.proc.pid)):
                    samples.setdefault("small_c%d_%s" % (c, name), []).append(
                        wrk_cpu(base + "/small", c, seconds, 100, pid))
            log("portproxy: small GETs over %d connections done" % c)
        # The sparse file's pages come into the page cache on its first read: that
        # one goes straight to the upstream, so that neither proxy pays for it.
        curl_get("http://127.0.0.1:%d/blob" % up.port, body)
        for _ in range(rounds):
            samples.setdefault("body_runner", []).append(curl_get(rbase + "/blob", body))
            samples.setdefault("body_nginx", []).append(curl_get(nbase + "/blob", body))
        log("portproxy: bodies done")
        wsz = ws_mib * MIB
        for _ in range(rounds):
            samples.setdefault("ws_runner", []).append(
                ws_echo(wstool, runner.port, "/proxy/%d/ws" % ws_port, wsz)[0])
            samples.setdefault("ws_direct", []).append(ws_echo(wstool, ws_port, "/ws", wsz)[0])
            samples.setdefault("ws_nginx", []).append(ws_echo(wstool, nginx.port, "/ws", wsz)[0])
        log("portproxy: websocket echo done")
        res["runner_vmhwm_kib"] = vm(runner.proc.pid, "VmHWM")
        res["runner_vmrss_before_kib"] = rss0
    finally:
        for x in (runner, nginx, up):
            if x:
                x.close()
        if ws:
            ws.kill()
            ws.wait()
        shutil.rmtree(work, ignore_errors=True)
    for c in conns:
        for name in ("runner", "nginx"):
            s = samples["small_c%d_%s" % (c, name)]
            res["small_c%d_%s" % (c, name)] = {
                "rps": statistics.median(x["rps"] for x in s),
                "p50_ms": statistics.median(x["p50_ms"] for x in s),
                "p99_ms": statistics.median(x["p99_ms"] for x in s if x["p99_ms"] is not None),
                "cpu_us_per_req": statistics.median(x.get("cpu_us_per_req", 0) for x in s),
                "samples": s}
        rr, nn = res["small_c%d_runner" % c], res["small_c%d_nginx" % c]
        res["small_c%d_rps_ratio" % c] = round(rr["rps"] / nn["rps"], 3)
        res["small_c%d_p50_ratio" % c] = round(rr["p50_ms"] / nn["p50_ms"], 3)
        if nn["cpu_us_per_req"]:
            res["small_c%d_cpu_ratio" % c] = round(rr["cpu_us_per_req"] / nn["cpu_us_per_req"], 3)
    for k in ("body_runner", "body_nginx"):
        res[k + "_MBps"] = round(body / statistics.median(samples[k]) / 1e6, 1)
        res[k + "_seconds"] = samples[k]
    res["body_ratio"] = round(res["body_runner_MBps"] / res["body_nginx_MBps"], 3)
    for k in ("ws_runner", "ws_direct", "ws_nginx"):
        res[k + "_MBps"] = round(wsz / statistics.median(samples[k]) / 1e6, 1)
        res[k + "_seconds"] = samples[k]
    res["ws_ratio_direct"] = round(res["ws_runner_MBps"] / res["ws_direct_MBps"], 3)
    res["ws_ratio_nginx"] = round(res["ws_runner_MBps"] / res["ws_nginx_MBps"], 3)
    res["loadavg_after"] = " ".join(open("/proc/loadavg").read().split()[:3])
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runner", default=os.path.join(ROOT, "build", "static", "forceai-runner"))
    ap.add_argument("--tools", default=os.path.join(ROOT, "build", "bench"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--body-mib", type=int, default=1024)
    ap.add_argument("--ws-mib", type=int, default=1024)
    ap.add_argument("--conns", default="16,256")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    try:
        res = measure(a.runner, a.rounds, a.seconds, a.body_mib, a.ws_mib, a.tools,
                      tuple(int(x) for x in a.conns.split(",")),
                      log=lambda m: print(m, file=sys.stderr, flush=True))
    except BenchError as e:
        print("portproxy: %s" % e, file=sys.stderr)
        return 1
    print("port proxy vs nginx reverse proxy (load %s -> %s), median of %d rounds:" % (
        res["loadavg_before"], res["loadavg_after"], a.rounds))
    for c in a.conns.split(","):
        rr, nn = res["small_c%s_runner" % c], res["small_c%s_nginx" % c]
        print("  small GET, %3s conns: runner %8.0f req/s p50 %.3f ms | nginx %8.0f req/s "
              "p50 %.3f ms | ratio req/s %.2f, p50 %.2f" % (
                  c, rr["rps"], rr["p50_ms"], nn["rps"], nn["p50_ms"],
                  res["small_c%s_rps_ratio" % c], res["small_c%s_p50_ratio" % c]))
        print("  the same, CPU per request: runner %.1f us | nginx %.1f us | ratio %.2f" % (
            rr["cpu_us_per_req"], nn["cpu_us_per_req"], res.get("small_c%s_cpu_ratio" % c, 0)))
    print("  %d MiB body: runner %.0f MB/s | nginx %.0f MB/s | ratio %.2f" % (
        a.body_mib, res["body_runner_MBps"], res["body_nginx_MBps"], res["body_ratio"]))
    print("  %d MiB WebSocket echo: runner %.0f MB/s | direct %.0f MB/s (ratio %.2f) | "
          "nginx %.0f MB/s (ratio %.2f)" % (
              a.ws_mib, res["ws_runner_MBps"], res["ws_direct_MBps"], res["ws_ratio_direct"],
              res["ws_nginx_MBps"], res["ws_ratio_nginx"]))
    print("  runner VmHWM %d KiB (VmRSS before %d KiB)" % (
        res["runner_vmhwm_kib"], res["runner_vmrss_before_kib"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
