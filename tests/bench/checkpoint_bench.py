#!/usr/bin/env python3
"""Workspace checkpoints (benchmark 14 of bench.py; standalone too): a
/workspace of 10,000 files / 500 MiB (100 directories x 100 files of
random content) and

  first       POST /v1/checkpoints of it (every file read, hashed, stored)
  unchanged   a second one with nothing changed (metadata only)
  changed10   a third after 10 files were rewritten
  diff        GET /v1/checkpoints/{id}/diff of those 10 changes
  restore10   POST /v1/checkpoints/{id}/restore after 10 files changed

against, in the same run and on the same file system, `cp -a` of the tree
into a fresh directory and `rsync -a` of it (first copy, and again with
nothing changed). Goals: unchanged <= 0.1x rsync -a; restore10 <= 0.1x
cp -a. /ping is sampled every 10 ms during the first checkpoint: its
largest latency says whether the loop waited. Times are the client's
(request to answer); the page cache is warm (the tree was just written).

  python3 tests/bench/checkpoint_bench.py [--runner build/forceai-runner]
      [--files 10000] [--mib 500] [--json out.json]"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TASK_UID = 1000


class BenchError(Exception):
    pass


def make_tree(ws, files, mib):
    size = max(1, (mib << 20) // files)
    for i in range(files):
        d = os.path.join(ws, "d%02d" % (i % 100))
        if i < 100:
            os.mkdir(d)
            os.chown(d, TASK_UID, TASK_UID)
        p = os.path.join(d, "f%05d" % i)
        with open(p, "wb") as f:
            f.write(os.urandom(size))
        os.chown(p, TASK_UID, TASK_UID)
    return size


def timed(fn):
    t0 = time.monotonic()
    out = fn()
    return (time.monotonic() - t0) * 1000.0, out


def change(ws, n, tag):
    for i in range(n):
        p = os.path.join(ws, "d%02d" % (i * 7 % 100), "f%05d" % (i * 7 % 100 + 100 * i))
        if not os.path.exists(p):
            p = os.path.join(ws, "d%02d" % (i % 100), "f%05d" % i)
        with open(p, "r+b") as f:
            f.write(("%s-%d" % (tag, i)).encode())


def measure(runner_bin, files=10000, mib=500):
    os.environ["RUNNER_BIN"] = os.path.abspath(runner_bin)
    sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
    from harness import Runner  # noqa: E402 (RUNNER_BIN must be set first)

    base = tempfile.mkdtemp(prefix="forceai-ckpt-bench-")
    os.chmod(base, 0o755)
    res = {"files": files, "mib": mib,
           "loadavg_before": " ".join(open("/proc/loadavg").read().split()[:3])}
    try:
        ws = os.path.join(base, "workspace")
        os.mkdir(ws)
        os.chown(ws, TASK_UID, TASK_UID)
        res["file_bytes"] = make_tree(ws, files, mib)
        subprocess.run(["sync"], check=False)
        # baselines, same file system
        dst = os.path.join(base, "cp")
        res["cp_a_ms"], _ = timed(lambda: subprocess.run(["cp", "-a", ws, dst], check=True))
        shutil.rmtree(dst)
        if shutil.which("rsync"):
            dst = os.path.join(base, "rsync")
            res["rsync_a_ms"], _ = timed(lambda: subprocess.run(
                ["rsync", "-a", ws + "/", dst + "/"], check=True))
            res["rsync_a_unchanged_ms"], _ = timed(lambda: subprocess.run(
                ["rsync", "-a", ws + "/", dst + "/"], check=True))
            shutil.rmtree(dst)
        r = Runner(("--landlock-roots", ws, "--checkpoint-max-bytes", str(8 << 30)))
        try:
            def post(path, body=None, method="POST"):
                st, _, data = r.request(method, path, body if body is not None else {}, timeout=600)
                b = json.loads(data)
                if st not in (200, 201):
                    raise BenchError("%s %s: %d %s" % (method, path, st, b))
                return b

            pings, stop = [], threading.Event()

            def sampler():
                while not stop.is_set():
                    t0 = time.monotonic()
                    r.request("GET", "/ping", timeout=30)
                    pings.append((time.monotonic() - t0) * 1000.0)
                    time.sleep(0.01)

            # the same sampling for 2 s before: what /ping costs on this machine now
            th = threading.Thread(target=sampler)
            th.start()
            time.sleep(2)
            stop.set()
            th.join()
            res["ping_idle_max_ms"] = max(pings) if pings else None
            pings.clear()
            stop.clear()
            th = threading.Thread(target=sampler)
            th.start()
            res["first_ms"], first = timed(lambda: post("/v1/checkpoints", {"paths": [ws]}))
            stop.set()
            th.join()
            res["ping_during_first_max_ms"] = max(pings) if pings else None
            res["ping_during_first_n"] = len(pings)
            res["first_stored_bytes"] = first["stored_bytes"]
            res["first_cloned_files"] = first["cloned_files"]
            res["first_worker_ms"] = first["duration_ms"]
            res["unchanged_ms"], second = timed(lambda: post("/v1/checkpoints", {"paths": [ws]}))
            res["unchanged_read_files"] = second["read_files"]
            res["unchanged_stored_bytes"] = second["stored_bytes"]
            change(ws, 10, "a")
            res["diff_ms"], d = timed(lambda: post("/v1/checkpoints/%s/diff" % second["id"],
                                                   None, "GET"))
            res["diff_changes"] = len(d["changes"])
            res["changed10_ms"], third = timed(lambda: post("/v1/checkpoints", {"paths": [ws]}))
            res["changed10_read_files"] = third["read_files"]
            res["changed10_stored_bytes"] = third["stored_bytes"]
            change(ws, 10, "b")
            res["restore10_ms"], rst = timed(lambda: post(
                "/v1/checkpoints/%s/restore" % third["id"]))
            res["restore10_changes"] = len(rst["changes"])
            if not rst["complete"]:
                raise BenchError("restore incomplete: %s" % rst)
            res["store_bytes"] = post("/v1/checkpoints", None, "GET")["store_bytes"]
        finally:
            r.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runner", default=os.path.join(ROOT, "build", "forceai-runner"))
    ap.add_argument("--files", type=int, default=10000)
    ap.add_argument("--mib", type=int, default=500)
    ap.add_argument("--json")
    a = ap.parse_args()
    res = measure(a.runner, a.files, a.mib)
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
