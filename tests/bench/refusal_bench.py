#!/usr/bin/env python3
"""The cost of recording refusals (docs/design/confinement.md#every-refusal-recorded): two builds measured in the same run,
interleaved round by round, each through `POST /command` with rtt.c (keep-alive):

  true      the round trip of `true` (refused nothing), p50 of --n
  build     `cc -c` of a small C file as a task (a syscall-heavy command refused nothing), median
  flood     `refuse flood --flood` (keyctl, refused by the default policy, in a loop), median;
            also per refused call

    python3 tests/bench/refusal_bench.py --base /work/main/build/forceai-runner \
        --new build/forceai-runner --rounds 3

Needs root (tasks run as uid 1000) and build/bench/rtt (`make build/bench/rtt`). Prints one
table, value per build and the ratio new / base."""
import argparse
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start(binary, tmp):
    port = free_port()
    state = tempfile.mkdtemp(dir=tmp)
    log = open(os.path.join(state, "runner.log"), "wb")
    p = subprocess.Popen([binary, "--listen", "127.0.0.1:%d" % port, "--state-dir",
                          os.path.join(state, "s"), "--seccomp-policy",
                          os.path.join(ROOT, "seccomp", "default.json"),
                          "--landlock-roots", "/tmp:" + tmp], stdout=log, stderr=log)
    for _ in range(500):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return p, port
        except OSError:
            time.sleep(0.01)
    raise RuntimeError("runner did not start")


def rtt(rtt_bin, port, command, n, w):
    import json
    r = subprocess.run([rtt_bin, "-p", str(port), "-n", str(n), "-w", str(w), "-b",
                        json.dumps({"command": command})], capture_output=True, text=True,
                       timeout=600)
    if r.returncode != 0:
        raise RuntimeError("rtt failed: %s %s" % (r.stdout[-500:], r.stderr[-500:]))
    return [int(x) / 1e6 for x in r.stdout.split()]  # ms


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the build without the record")
    ap.add_argument("--new", required=True, help="the build with it")
    ap.add_argument("--rtt", default=os.path.join(ROOT, "build", "bench", "rtt"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=300, help="round trips of `true` per round")
    ap.add_argument("--flood", type=int, default=200000, help="refused calls per flood task")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="forceai-refbench-")
    os.chmod(tmp, 0o777)
    refuse = os.path.join(tmp, "refuse")
    subprocess.run(["cc", "-O2", "-o", refuse,
                    os.path.join(ROOT, "tests", "security", "refuse.c")], check=True)
    os.chmod(refuse, 0o755)
    src = os.path.join(tmp, "unit.c")
    shutil.copy(os.path.join(ROOT, "tests", "security", "refuse.c"), src)
    os.chmod(src, 0o644)
    builds = {"base": a.base, "new": a.new}
    res = {k: {"true": [], "build": [], "flood": []} for k in builds}
    try:
        for rnd in range(a.rounds):
            order = list(builds) if rnd % 2 == 0 else list(reversed(builds))
            for k in order:
                p, port = start(builds[k], tmp)
                try:
                    res[k]["true"].append(statistics.median(rtt(a.rtt, port, "true", a.n, 20)))
                    res[k]["build"].append(statistics.median(
                        rtt(a.rtt, port, "cc -O2 -c -o %s/unit-%s.o %s" % (tmp, k, src), 5, 1)))
                    res[k]["flood"].append(statistics.median(
                        rtt(a.rtt, port, "%s flood %d" % (refuse, a.flood), 3, 0)))
                finally:
                    p.terminate()
                    p.wait(timeout=30)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%-34s %12s %12s %7s" % ("figure (median of rounds)", "base", "new", "ratio"))
    for f, label in (("true", "round trip of `true`, p50 (ms)"),
                     ("build", "`cc -c` as a task (ms)"),
                     ("flood", "%d refused calls (ms)" % a.flood)):
        b, n = statistics.median(res["base"][f]), statistics.median(res["new"][f])
        print("%-34s %12.3f %12.3f %7.2f" % (label, b, n, n / b))
    b = statistics.median(res["base"]["flood"]) * 1000 / a.flood
    n = statistics.median(res["new"]["flood"]) * 1000 / a.flood
    print("%-34s %12.3f %12.3f %7.2f" % ("per refused call (us)", b, n, n / b))
    print("rounds:", {k: {f: ["%.3f" % x for x in v] for f, v in r.items()}
                      for k, r in res.items()})


if __name__ == "__main__":
    main()
