#!/usr/bin/env python3
"""POST /v1/reset: its time and the runner's peak RSS (benchmark 13 of
bench.py; standalone too), for

  files      a /workspace of 10,000 files (100 directories x 100 files of
             1 KiB) snapshotted at start; before each reset a task rewrites
             1,000 of them, deletes 1,000 and creates 1,000 new ones.
             Baseline in the same run: the same tree restored by hand
             (`rm -rf` of the used copy, then `cp -a` of the pristine one).
  processes  100 running processes (one background task starting 100
             `sleep` of a long, unique duration); the reset ends them all. Baseline: the runner's
             VmRSS before (the time has none: it is the kill and the reap).

Median of the rounds; the runner's VmHWM is read after all the rounds of a
case (one runner per case), and the reset's own report gives the peak RSS of
its worker process and of the runner (the largest of the rounds). Every reset must answer 200, and the files case
checks the tree is back as it was.

  python3 tests/bench/reset_bench.py [--runner build/static/forceai-runner]
      [--rounds 3] [--files 10000] [--procs 100] [--json out.json]

Exit status 1 when a reset failed or left the tree changed."""
import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from portproxy_bench import vm  # same folder (on the path as a script, and for bench.py)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TASK_UID = 1000
# The sleeps' argument tells them from other processes of uid 1000 (the
# machine may run other tests).
MARK = "%d.%d" % (900000 + os.getpid() % 1000, os.getpid())


class BenchError(Exception):
    pass


def tree_digest(root):
    h = hashlib.sha256()
    for d, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(d, f)
            st = os.lstat(p)
            h.update(("%s %o %d\n" % (os.path.relpath(p, root), st.st_mode, st.st_size)).encode())
            with open(p, "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()


def make_tree(root, n):
    per = 100
    for i in range((n + per - 1) // per):
        d = os.path.join(root, "d%03d" % i)
        os.makedirs(d)
        for j in range(min(per, n - i * per)):
            with open(os.path.join(d, "f%03d" % j), "wb") as f:
                f.write(b"%05d-%03d " % (i, j) * 100)
    for d, dirs, files in os.walk(root):
        for x in dirs + files:
            os.lchown(os.path.join(d, x), TASK_UID, TASK_UID)
    os.chown(root, TASK_UID, TASK_UID)


def reset(r, peaks):
    """One reset: the client's time; the answer's own peaks (the reset's
    worker process and the runner) are kept in peaks."""
    t0 = time.monotonic()
    st, _, data = r.request("POST", "/v1/reset", timeout=300)
    t = time.monotonic() - t0
    if st != 200:
        raise BenchError("POST /v1/reset: HTTP %d %r" % (st, data[:300]))
    body = json.loads(data)
    for k in ("worker_peak_rss_kib", "runner_peak_rss_kib"):
        if isinstance(body.get(k), int):
            peaks[k] = max(peaks.get(k, 0), body[k])
    return t


def run_task(r, cmd, background=False):
    ev = r.execd({"command": cmd, "background": background})
    if not ev:
        raise BenchError("task %r: no events" % cmd)
    if not background and ev[-1].get("type") != "execution_complete":
        raise BenchError("task %r failed: %r" % (cmd, ev[-3:]))
    return ev


def measure(runner_bin, rounds=3, files=10000, procs=100):
    os.environ["RUNNER_BIN"] = os.path.abspath(runner_bin)
    sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
    from harness import Runner  # noqa: E402 (RUNNER_BIN must be set first)

    base = tempfile.mkdtemp(prefix="forceai-reset-bench-")
    os.chmod(base, 0o755)
    res = {"rounds": rounds, "files": files, "procs": procs,
           "loadavg_before": " ".join(open("/proc/loadavg").read().split()[:3])}
    try:
        ws, tmp, home = (os.path.join(base, x) for x in ("workspace", "tmp", "home"))
        for d in (ws, tmp, home):
            os.makedirs(d)
            os.chown(d, TASK_UID, TASK_UID)
        make_tree(ws, files)
        pristine = os.path.join(base, "pristine")
        shutil.copytree(ws, pristine, symlinks=True)
        want = tree_digest(ws)
        roots = "%s:%s:%s" % (ws, tmp, home)
        n = max(1, files // 10)
        # Rewrite, delete and create n files each (spread over the tree).
        churn = ("cd %s && i=0; for f in d*/f0[0-9][0-9]; do i=$((i+1)); "
                 "case $((i %% 10)) in 0) echo changed > $f;; 1) rm -f $f;; esac; done; "
                 "mkdir -p new && for j in $(seq %d); do echo new > new/n$j; done" % (ws, n))

        # files
        r = Runner(("--allow-reset", "--landlock-roots", roots))
        try:
            t_reset, t_cp, peaks = [], [], {}
            for _ in range(rounds):
                run_task(r, churn)
                t_reset.append(reset(r, peaks))
                got = tree_digest(ws)
                if got != want:
                    raise BenchError("the workspace differs from its start after the reset")
                # The baseline: the same churn on a copy, restored by hand.
                used = os.path.join(base, "used")
                shutil.copytree(ws, used, symlinks=True)
                subprocess.run(["sh", "-c", churn.replace(ws, used)], check=True)
                t0 = time.monotonic()
                subprocess.run(["rm", "-rf", used], check=True)
                subprocess.run(["cp", "-a", pristine, used], check=True)
                t_cp.append(time.monotonic() - t0)
                shutil.rmtree(used)
            res["files_reset_s"] = t_reset
            res["files_cp_s"] = t_cp
            res["files_vmhwm_kib"] = vm(r.proc.pid, "VmHWM")
            res["files_peaks_kib"] = peaks
        finally:
            r.stop()
            r.close()

        # processes
        r = Runner(("--allow-reset", "--landlock-roots", roots))
        try:
            rss0 = vm(r.proc.pid, "VmRSS")
            t_reset, peaks = [], {}
            for _ in range(rounds):
                run_task(r, "for i in $(seq %d); do sleep %s & done; wait" % (procs, MARK),
                         background=True)
                deadline = time.monotonic() + 20
                while True:
                    out = subprocess.run(["pgrep", "-c", "-f", "^sleep %s$" % MARK],
                                         stdout=subprocess.PIPE, text=True).stdout.strip()
                    if int(out or 0) >= procs:
                        break
                    if time.monotonic() > deadline:
                        raise BenchError("only %s of %d sleeps started" % (out, procs))
                    time.sleep(0.05)
                t_reset.append(reset(r, peaks))
                left = subprocess.run(["pgrep", "-c", "-f", "^sleep %s$" % MARK],
                                      stdout=subprocess.PIPE, text=True).stdout.strip()
                if int(left or 0):
                    raise BenchError("%s processes left after the reset" % left)
            res["procs_reset_s"] = t_reset
            res["procs_vmhwm_kib"] = vm(r.proc.pid, "VmHWM")
            res["procs_peaks_kib"] = peaks
            res["procs_vmrss_before_kib"] = rss0
        finally:
            r.stop()
            r.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    res["files_reset_ms"] = statistics.median(res["files_reset_s"]) * 1e3
    res["files_cp_ms"] = statistics.median(res["files_cp_s"]) * 1e3
    res["procs_reset_ms"] = statistics.median(res["procs_reset_s"]) * 1e3
    res["loadavg_after"] = " ".join(open("/proc/loadavg").read().split()[:3])
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runner", default=os.path.join(ROOT, "build", "static", "forceai-runner"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--files", type=int, default=10000)
    ap.add_argument("--procs", type=int, default=100)
    ap.add_argument("--json")
    a = ap.parse_args()
    try:
        res = measure(a.runner, a.rounds, a.files, a.procs)
    except (BenchError, OSError, subprocess.SubprocessError) as e:
        print("reset_bench: %s" % e, file=sys.stderr)
        return 1
    print("POST /v1/reset, median of %d (load %s -> %s):" % (
        a.rounds, res["loadavg_before"], res["loadavg_after"]))
    print("  %d files: %.1f ms (rm -rf + cp -a of the tree: %.1f ms), runner VmHWM %d KiB, "
          "the reset's own peaks %s" % (a.files, res["files_reset_ms"], res["files_cp_ms"],
                                         res["files_vmhwm_kib"], res["files_peaks_kib"]))
    print("  %d processes: %.1f ms, runner VmHWM %d KiB (VmRSS before %d KiB), the reset's own "
          "peaks %s" % (a.procs, res["procs_reset_ms"], res["procs_vmhwm_kib"],
                        res["procs_vmrss_before_kib"], res["procs_peaks_kib"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
