#!/usr/bin/env python3
"""Files API throughput: a 1 GiB file uploaded (POST /files/upload, curl -F)
and downloaded (GET /files/download, curl -o /dev/null) through the runner,
each against `cat` of the same file in the same run, interleaved round by
round because the machine is shared and noisy:

  download  vs  cat FILE > /dev/null          (read from the page cache)
  upload    vs  cat FILE > COPY               (read + write a new file)

Prints MB/s (10^6 bytes) of the median round and the ratio API / cat; also
the runner's peak RSS during the transfers. --json PATH writes the same as
JSON. Exit status 1 when a transfer fails or is not byte-exact.

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runner", default=os.path.join(ROOT, "build", "forceai-runner"))
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default="/tmp", help="where the test files go (needs 3x size)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    os.environ["RUNNER_BIN"] = os.path.abspath(args.runner)
    sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
    from harness import Runner  # noqa: E402 (RUNNER_BIN must be set first)

    size = args.size_mib << 20
    work = tempfile.mkdtemp(prefix="forceai-files-bench-", dir=args.dir)
    os.chmod(work, 0o777)  # the runner writes as the task user
    runner = None
    failed = False
    try:
        # The task user must be allowed to write there (Landlock roots).
        extra = () if work.startswith("/tmp/") else ("--landlock-roots", "/tmp:" + work)
        runner = Runner(args=extra)
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
        t = {"cat_read": [], "download": [], "cat_write": [], "upload": []}
        peak = {"download": 0, "upload": 0}
        for rnd in range(args.rounds):
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

        def mbps(k):
            return size / 1e6 / statistics.median(t[k])
        res = {
            "size_bytes": size,
            "rounds": args.rounds,
            "download_MBps": round(mbps("download"), 1),
            "cat_read_MBps": round(mbps("cat_read"), 1),
            "download_ratio": round(mbps("download") / mbps("cat_read"), 3),
            "upload_MBps": round(mbps("upload"), 1),
            "cat_write_MBps": round(mbps("cat_write"), 1),
            "upload_ratio": round(mbps("upload") / mbps("cat_write"), 3),
            "runner_peak_rss_kib": peak,
            "seconds": {k: [round(x, 3) for x in v] for k, v in t.items()},
            "loadavg": os.getloadavg(),
            "ok": not failed,
        }
        print("files API throughput, %d MiB file, median of %d rounds (load %.1f):" % (
            args.size_mib, args.rounds, os.getloadavg()[0]))
        print("  %-9s %9s MB/s   baseline %-24s %9s MB/s   ratio %.2f   runner peak RSS %d KiB" % (
            "download", res["download_MBps"], "cat FILE > /dev/null", res["cat_read_MBps"],
            res["download_ratio"], peak["download"]))
        print("  %-9s %9s MB/s   baseline %-24s %9s MB/s   ratio %.2f   runner peak RSS %d KiB" % (
            "upload", res["upload_MBps"], "cat FILE > COPY", res["cat_write_MBps"],
            res["upload_ratio"], peak["upload"]))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=2)
    finally:
        if runner:
            runner.close()
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
