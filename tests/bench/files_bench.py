#!/usr/bin/env python3
"""Files API throughput: a 1 GiB file uploaded (POST /files/upload, curl -F)
and downloaded (GET /files/download, curl -o /dev/null) through the runner,
against Debian's nginx serving and accepting the same file on loopback, and
against `cat`, all in the same run, interleaved round by round because the
machine is shared and noisy:

  download  vs  nginx, sendfile on (GET of the file)     and  cat FILE > /dev/null
  upload    vs  nginx, client_body_in_file_only (the same multipart POST stored
                to a file)                               and  cat FILE > COPY

nginx runs from a private config on a loopback port in a scratch dir
(scripts/install-deps.sh bench installs it). Prints MB/s (10^6 bytes) of the
median round and the ratios; also the runner's peak RSS during the transfers.
--json PATH writes the same as JSON. Exit status 1 when a transfer fails or
is not byte-exact. bench.py (benchmark 9) calls measure().

  python3 tests/bench/files_bench.py [--runner build/forceai-runner]
      [--size-mib 1024] [--rounds 3] [--dir /tmp] [--json out.json]
"""
import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def timed(cmd, **kw):
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, **kw)
    return time.monotonic() - t0, r


class RssPeak:
    """Samples the runner's VmRSS every 20 ms while in a with-block."""

    def __init__(self, pid):
        self.pid, self.peak, self.stop = pid, 0, threading.Event()

    def _run(self):
        while not self.stop.is_set():
            try:
                with open("/proc/%d/status" % self.pid) as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            self.peak = max(self.peak, int(line.split()[1]))
            except OSError:
                pass
            time.sleep(0.02)

    def __enter__(self):
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()
        return self

    def __exit__(self, *a):
        self.stop.set()
        self.t.join()


NGINX_CONF = """worker_processes 1;
daemon off;
master_process off;
error_log %(dir)s/error.log warn;
pid %(dir)s/nginx.pid;
events { worker_connections 64; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    client_body_temp_path %(dir)s/body;
    proxy_temp_path %(dir)s/proxy;
    fastcgi_temp_path %(dir)s/fcgi;
    uwsgi_temp_path %(dir)s/uwsgi;
    scgi_temp_path %(dir)s/scgi;
    server {
        listen 127.0.0.1:%(port)d;
        root %(root)s;
        # The whole request body is stored in a file (client_body_in_file_only),
        # then the request goes on without it to a location that answers 200.
        location = /upload {
            client_body_in_file_only on;
            client_max_body_size 0;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_pass http://127.0.0.1:%(port)d/stored;
        }
        location = /stored { return 200 "stored"; }
    }
}
"""


class Nginx:
    """Debian's nginx on a loopback port, private config and scratch dir."""

    def __init__(self, root, scratch):
        import socket
        self.bin = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.access(self.bin, os.X_OK):
            raise RuntimeError("nginx not installed (scripts/install-deps.sh bench)")
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.dir = scratch
        self.body = os.path.join(scratch, "body")
        for d in ("body", "proxy", "fcgi", "uwsgi", "scgi"):
            os.makedirs(os.path.join(scratch, d), exist_ok=True)
        conf = os.path.join(scratch, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF % {"dir": scratch, "port": self.port, "root": root})
        self.proc = subprocess.Popen([self.bin, "-c", conf, "-p", scratch],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("nginx exited: %s" % self.proc.stderr.read().decode()[-500:])
            try:
                c = socket.create_connection(("127.0.0.1", self.port), timeout=0.5)
                c.close()
                return
            except OSError:
                time.sleep(0.05)
        self.close()
        raise RuntimeError("nginx did not listen on port %d" % self.port)

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def stored(self):
        """Size of the newest stored upload body, then remove them all."""
        names = [os.path.join(self.body, n) for n in os.listdir(self.body)]
        size = max((os.path.getsize(n) for n in names), default=-1)
        for n in names:
            os.unlink(n)
        return size

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runner", default=os.path.join(ROOT, "build", "forceai-runner"))
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default="/tmp", help="where the test files go (needs 3x size)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    res = measure(args.runner, args.size_mib, args.rounds, args.dir)
    peak = res["runner_peak_rss_kib"]
    print("files API throughput, %d MiB file, median of %d rounds (load %.1f):" % (
        args.size_mib, args.rounds, os.getloadavg()[0]))
    for k, nb, cb in (("download", "nginx sendfile", "cat FILE > /dev/null"),
                      ("upload", "nginx body to file", "cat FILE > COPY")):
        print("  %-9s %8s MB/s   %s %8s MB/s (ratio %.2f)   %s %8s MB/s (ratio %.2f)   "
              "runner peak RSS %d KiB" % (
                  k, res[k + "_MBps"], nb, res["nginx_%s_MBps" % k], res["nginx_%s_ratio" % k],
                  cb, res["cat_%s_MBps" % ("read" if k == "download" else "write")],
                  res[k + "_ratio"], peak[k]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0 if res["ok"] else 1


def measure(runner_bin, size_mib, rounds, where="/tmp"):
    """Runs the rounds; returns the figures (see main for their names)."""
    os.environ["RUNNER_BIN"] = os.path.abspath(runner_bin)
    sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
    from harness import Runner  # noqa: E402 (RUNNER_BIN must be set first)

    size = size_mib << 20
    work = tempfile.mkdtemp(prefix="forceai-files-bench-", dir=where)
    os.chmod(work, 0o777)  # the runner writes as the task user
    runner = nginx = None
    failed = False
    try:
        # The task user must be allowed to write there (Landlock roots).
        extra = () if work.startswith("/tmp/") else ("--landlock-roots", "/tmp:" + work)
        runner = Runner(args=extra)
        scratch = os.path.join(work, "nginx")
        os.mkdir(scratch)
        nginx = Nginx(work, scratch)
        pid = runner.host_pid()
        src = os.path.join(work, "src.bin")
        with open(src, "wb") as f:
            left = size
            while left:
                n = min(left, 8 << 20)
                f.write(os.urandom(n))
                left -= n
        os.chmod(src, 0o644)
        want = sha256(src)
        meta = os.path.join(work, "meta.json")
        target = os.path.join(work, "uploaded.bin")
        with open(meta, "w") as f:
            json.dump({"path": target}, f)
        copy = os.path.join(work, "copy.bin")
        url = runner.url
        t = {"cat_read": [], "download": [], "cat_write": [], "upload": [],
             "nginx_download": [], "nginx_upload": []}
        peak = {"download": 0, "upload": 0}
        for rnd in range(rounds):
            dt, r = timed(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code} %{size_download}",
                           nginx.url("/src.bin")])
            ok = r.stdout.decode() == "200 %d" % size
            if not ok:
                print("nginx download failed: %r %r" % (r.stdout, r.stderr), file=sys.stderr)
            failed |= not ok
            t["nginx_download"].append(dt)

            dt, r = timed(["sh", "-c", 'cat "$1" > /dev/null', "sh", src])
            failed |= r.returncode != 0
            t["cat_read"].append(dt)

            with RssPeak(pid) as rss:
                dt, r = timed(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code} %{size_download}",
                               url + "/files/download?path=" + src])
            ok = r.stdout.decode() == "200 %d" % size
            if not ok:
                print("download failed: %r %r" % (r.stdout, r.stderr), file=sys.stderr)
            failed |= not ok
            t["download"].append(dt)
            peak["download"] = max(peak["download"], rss.peak)

            dt, r = timed(["sh", "-c", 'cat "$1" > "$2"', "sh", src, copy])
            failed |= r.returncode != 0
            t["cat_write"].append(dt)
            os.unlink(copy)

            with RssPeak(pid) as rss:
                dt, r = timed(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
                               "-F", "metadata=@%s;type=application/json;filename=metadata" % meta,
                               "-F", "file=@%s;filename=uploaded.bin" % src,
                               url + "/files/upload"])
            ok = r.stdout.decode() == "200" and os.path.getsize(target) == size
            if ok and rnd == 0:
                ok = sha256(target) == want  # byte-exact, checked once
            if not ok:
                print("upload failed: %r %r" % (r.stdout, r.stderr), file=sys.stderr)
            failed |= not ok
            t["upload"].append(dt)
            peak["upload"] = max(peak["upload"], rss.peak)
            if os.path.exists(target):
                os.unlink(target)

            dt, r = timed(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
                           "-F", "metadata=@%s;type=application/json;filename=metadata" % meta,
                           "-F", "file=@%s;filename=uploaded.bin" % src, nginx.url("/upload")])
            ok = r.stdout.decode() == "200" and nginx.stored() > size
            if not ok:
                print("nginx upload failed: %r %r" % (r.stdout, r.stderr), file=sys.stderr)
            failed |= not ok
            t["nginx_upload"].append(dt)

        def mbps(k):
            return size / 1e6 / statistics.median(t[k])
        res = {
            "size_bytes": size,
            "rounds": rounds,
            "download_MBps": round(mbps("download"), 1),
            "cat_read_MBps": round(mbps("cat_read"), 1),
            "download_ratio": round(mbps("download") / mbps("cat_read"), 3),
            "upload_MBps": round(mbps("upload"), 1),
            "cat_write_MBps": round(mbps("cat_write"), 1),
            "upload_ratio": round(mbps("upload") / mbps("cat_write"), 3),
            "nginx_download_MBps": round(mbps("nginx_download"), 1),
            "nginx_download_ratio": round(mbps("download") / mbps("nginx_download"), 3),
            "nginx_upload_MBps": round(mbps("nginx_upload"), 1),
            "nginx_upload_ratio": round(mbps("upload") / mbps("nginx_upload"), 3),
            "runner_peak_rss_kib": peak,
            "seconds": {k: [round(x, 3) for x in v] for k, v in t.items()},
            "loadavg": os.getloadavg(),
            "ok": not failed,
        }
        return res
    finally:
        if nginx:
            nginx.close()
        if runner:
            runner.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
