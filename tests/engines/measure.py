#!/usr/bin/env python3
"""One agent task per engine (a tool call, then an answer) against the
scripted gateway, with the runner's CPU time and RSS beside those of the
engine's own processes (the CLI and what it started), sampled every 10 ms
from /proc. Prints the event sequence of each run.

    python3 tests/engines/measure.py [codex claude-code builtin]

Not a test (nothing is asserted but that the runs succeed): the figures go
into the design document (design/model.md#images). The machine may be shared: figures of one
run are indicative; the CLI's against the runner's in the same run is the
ratio that matters."""
import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "gateway"))

from harness import Runner  # noqa: E402
from gateways import Gateway, rtext, rtool  # noqa: E402
from test_gateway import TestGateway, text, tool  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def stat(pid):
    with open("/proc/%d/stat" % pid) as f:
        f = f.read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK, int(f[21]) * PAGE  # utime+stime, rss


def hwm(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def engine_procs(root, runner_pid):
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == runner_pid:
            continue
        try:
            if os.readlink("/proc/%s/cwd" % p).startswith(root) and \
                    os.stat("/proc/%s" % p).st_uid != 0:
                out.append(int(p))
        except OSError:
            pass
    return out


def run(engine, binp):
    key = "sk-measure"
    if engine == "builtin":
        gw = TestGateway(key=key)
        gw.script(tool("bash", {"command": "echo measured-$((6*7))"}, call_id="c1"),
                  text("It printed measured-42."))
    else:
        gw = Gateway(key)
        gw.script(rtool("echo measured-$((6*7))"), rtext("It printed measured-42."))
    args = []
    if engine != "builtin":
        args = ["--agent-engine", "%s=%s" % (engine, os.path.join(
            binp, "codex" if engine == "codex" else "claude"))]
    r = Runner(args=args, env={"FORCEAI_GATEWAY_URL": gw.url, "FORCEAI_GATEWAY_KEY": key,
                               "FORCEAI_MODEL": "test-model"})
    home = os.path.join(r.tmp, "home")
    os.mkdir(home)
    os.chmod(home, 0o777)
    rp = r.host_pid()
    cpu0, rss0 = stat(rp)
    seen_cpu = {}
    peak = {"runner": rss0, "engine": 0}
    done = threading.Event()

    def sample():
        while not done.is_set():
            try:
                peak["runner"] = max(peak["runner"], stat(rp)[1])
            except OSError:
                pass
            total = 0
            for p in engine_procs(r.tmp, rp):
                try:
                    c, rss = stat(p)
                except OSError:
                    continue
                seen_cpu[p] = c
                total += rss
            peak["engine"] = max(peak["engine"], total)
            time.sleep(0.01)
    th = threading.Thread(target=sample)
    th.start()
    t0 = time.monotonic()
    body = {"task": "run the tool and report", "capability": "agent", "cwd": r.work,
            "env": {"HOME": home}}
    if engine != "builtin":
        body["engine"] = engine
    ev = r.native(body, timeout=180)
    wall = time.monotonic() - t0
    done.set()
    th.join()
    cpu1, _ = stat(rp)
    res = {"engine": engine, "status": ev[-1]["data"].get("status"), "wall_s": round(wall, 2),
           "runner_cpu_s": round(cpu1 - cpu0, 3), "runner_peak_rss_mib": round(peak["runner"] / 2**20, 1),
           "runner_vmhwm_mib": round(hwm(rp) / 2**20, 1),
           "engine_cpu_s": round(sum(seen_cpu.values()), 3),
           "engine_peak_rss_mib": round(peak["engine"] / 2**20, 1),
           "engine_processes": len(seen_cpu)}
    seq = []
    for e in ev:
        n = e["event"]
        if n == "engine.event":
            continue
        if n == "tool.result":
            n += "(done)" if e["data"].get("done") else "(live)"
        if not seq or seq[-1] != n:
            seq.append(n)
    res["events"] = " ".join(seq)
    r.close()
    gw.close()
    return res


def main():
    engines = sys.argv[1:] or ["builtin", "codex", "claude-code"]
    binp = subprocess.run([os.path.join(HERE, "setup.sh")], capture_output=True, text=True,
                          check=True).stdout.strip().splitlines()[-1]
    for e in engines:
        print(json.dumps(run(e, binp)))


if __name__ == "__main__":
    main()
