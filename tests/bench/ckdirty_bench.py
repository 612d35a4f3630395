#!/usr/bin/env python3
"""What a checkpoint costs when little changed (benchmark 18 of bench.py; standalone too;
issue 48): a /workspace of N small files (20,000 and 100,000; 100 files a directory, two
levels), then

  unchanged   POST /v1/checkpoints again, nothing changed (median of --rounds)
  changed10   after 10 files were rewritten (median of --rounds)

against, in the same run and on the same file system, `rsync -a` of the tree onto an
up-to-date copy (median of --rounds). Goal: both <= 0.1x rsync. With --before BIN the
same is measured with another build too, the two interleaved round by round.

  python3 tests/bench/ckdirty_bench.py [--runner build/forceai-runner] [--before BIN]
      [--files 20000,100000] [--rounds 5] [--json out.json]"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TASK_UID = 1000


class BenchError(Exception):
    pass


def make_tree(ws, files):
    for i in range(files):
        d = os.path.join(ws, "a%02d" % (i // 10000), "d%03d" % (i // 100 % 100))
        if i % 100 == 0:
            os.makedirs(d, exist_ok=True)
        p = os.path.join(d, "f%06d.txt" % i)
        with open(p, "wb") as f:
            f.write(b"x" * (i % 700))
    for dp, dn, fn in os.walk(ws):
        os.chown(dp, TASK_UID, TASK_UID)
        for n in fn:
            os.chown(os.path.join(dp, n), TASK_UID, TASK_UID)


def change(ws, files, n, tag):
    for i in range(n):
        k = (i * 7919) % files
        p = os.path.join(ws, "a%02d" % (k // 10000), "d%03d" % (k // 100 % 100), "f%06d.txt" % k)
        with open(p, "ab") as f:
            f.write(("%s-%d" % (tag, i)).encode())


def timed(fn):
    t0 = time.monotonic()
    out = fn()
    return (time.monotonic() - t0) * 1000.0, out


def start(binary, ws):
    os.environ["RUNNER_BIN"] = os.path.abspath(binary)
    sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
    import harness  # noqa: E402
    harness.RUNNER = os.path.abspath(binary)  # read when a Runner starts
    r = harness.Runner(("--landlock-roots", ws, "--checkpoint-max-bytes", str(8 << 30)))
    return r


def post(r, path, body=None, method="POST"):
    st, _, data = r.request(method, path, body if body is not None else {}, timeout=600)
    b = json.loads(data)
    if st not in (200, 201):
        raise BenchError("%s %s: %d %s" % (method, path, st, b))
    return b


def measure(runners, files=20000, rounds=5):
    """runners: {label: binary}. Medians per label, interleaved round by round."""
    base = tempfile.mkdtemp(prefix="forceai-ckdirty-bench-")
    os.chmod(base, 0o755)
    res = {"files": files, "rounds": rounds}
    try:
        ws = os.path.join(base, "workspace")
        os.mkdir(ws)
        make_tree(ws, files)
        dst = os.path.join(base, "rsync")
        subprocess.run(["rsync", "-a", ws + "/", dst + "/"], check=True)
        live = {k: start(b, ws) for k, b in runners.items()}
        try:
            for r in live.values():
                post(r, "/v1/checkpoints", {"paths": [ws]})
                post(r, "/v1/checkpoints", {"paths": [ws]})  # the tracker's first base
            rs, un, ch = [], {k: [] for k in live}, {k: [] for k in live}
            info = {k: {} for k in live}
            for i in range(rounds):
                rs.append(timed(lambda: subprocess.run(["rsync", "-a", ws + "/", dst + "/"],
                                                       check=True))[0])
                for k, r in live.items():
                    post(r, "/v1/checkpoints", {"paths": [ws]})  # the other build's changes
                    ms, b = timed(lambda: post(r, "/v1/checkpoints", {"paths": [ws]}))
                    un[k].append(ms)
                    info[k]["unchanged"] = {x: b.get(x) for x in ("read_files", "reused",
                                                                   "listed_dirs", "duration_ms")}
                for k, r in live.items():
                    change(ws, files, 10, "%s%d" % (k, i))
                    ms, b = timed(lambda: post(r, "/v1/checkpoints", {"paths": [ws]}))
                    ch[k].append(ms)
                    info[k]["changed10"] = {x: b.get(x) for x in ("read_files", "reused",
                                                                   "listed_dirs", "duration_ms")}
                    if b.get("read_files", 0) < 10:
                        raise BenchError("%s: 10 files changed, %s read" % (k, b.get("read_files")))
            res["rsync_a_unchanged_ms"] = statistics.median(rs)
            for k in live:
                res[k] = {"unchanged_ms": statistics.median(un[k]),
                          "changed10_ms": statistics.median(ch[k]), "last": info[k],
                          "unchanged_all": un[k], "changed10_all": ch[k]}
        finally:
            for r in live.values():
                r.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    res["rsync_all"] = rs
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runner", default=os.path.join(ROOT, "build", "forceai-runner"))
    ap.add_argument("--before")
    ap.add_argument("--files", default="20000,100000")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    runners = {"after": a.runner}
    if a.before:
        runners = {"before": a.before, "after": a.runner}
    out = [measure(runners, int(n), a.rounds) for n in a.files.split(",")]
    print(json.dumps(out, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
