#!/usr/bin/env python3
"""Where a round trip of `true` goes (docs/performance.md, "Where a round
trip's time goes"): POST /command {"command":"true"} N times while `perf
record -a` keeps kernel tracepoints (process fork/exec/exit and a few system
calls: no ptrace stops, so the tasks run at full speed), then each request's
phases from the runner's, its shim's and its task's events, p50 and p90.

  sudo python3 tests/bench/rtt_timeline.py [--runner build/forceai-runner] [-n 300]

Needs perf and root (tracepoints system-wide)."""
import argparse
import http.client
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CALLS = ("sendto", "recvfrom", "execve", "exit_group", "seccomp", "landlock_restrict_self",
         "setsid", "close_range", "prlimit64", "fchown", "setgroups", "capset", "chdir")
EVENTS = ",".join(["sched:sched_process_fork", "sched:sched_process_exec"] +
                  ["syscalls:sys_enter_" + c for c in CALLS])
# (from, to, what): the marks are set by collect() below.
STEPS = [("recv", "fork", "request read -> spawn clone (parse, admission, env, pipes)"),
         ("fork", "shim_exec", "spawn child: fds placed, execveat of the shim"),
         ("shim_exec", "task_fork", "shim start-up -> clone of the task"),
         ("task_fork", "setsid", "  the task child runs"),
         ("setsid", "close_range", "  setsid (a new session: a new autogroup)"),
         ("close_range", "prlimit64", "  fds closed, cgroup joined"),
         ("prlimit64", "fchown", "  rlimits, bounding set (a prctl per capability), securebits"),
         ("fchown", "setgroups", "  the stdio pipes given to the task user"),
         ("setgroups", "capset", "  setgroups, setresgid, setresuid, the check"),
         ("capset", "chdir", "  capabilities cleared, death signal"),
         ("chdir", "landlock_restrict_self", "  chdir, no_new_privs"),
         ("landlock_restrict_self", "seccomp", "Landlock restrict_self"),
         ("seccomp", "execve", "seccomp filter attach"),
         ("execve", "task_exec", "execve of bash (kernel)"),
         ("task_exec", "task_exit", "bash -c true itself"),
         ("task_exit", "shim_exit", "bash's exit -> the shim reaps it and exits"),
         ("task_exit", "done", "bash's exit -> the runner writes execution_complete"),
         ("recv", "first_send", "first byte (the response head) after the request"),
         ("recv", "done", "in the runner: request read -> execution_complete")]


def request(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", "/command", body=b'{"command":"true"}',
              headers={"Content-Type": "application/json"})
    data = c.getresponse().read()
    c.close()
    if b"execution_complete" not in data:
        raise RuntimeError("POST /command: %r" % data[-300:])


def record(runner, n, out):
    os.environ["RUNNER_BIN"] = os.path.abspath(runner)
    sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
    from harness import Runner  # noqa: E402 (RUNNER_BIN must be set first)
    r = Runner()
    try:
        for _ in range(20):
            request(r.port)
        perf = subprocess.Popen(["perf", "record", "-q", "-a", "-o", out, "-e", EVENTS],
                                stderr=subprocess.DEVNULL)
        time.sleep(1.5)
        t = []
        for _ in range(n):
            t0 = time.perf_counter()
            request(r.port)
            t.append(time.perf_counter() - t0)
        time.sleep(0.3)
        perf.send_signal(2)
        perf.wait()
        return r.proc.pid, statistics.median(t) * 1e3
    finally:
        r.stop()
        r.close()


def collect(data, rpid):
    out = subprocess.run(["perf", "script", "-i", data, "-F", "pid,time,event,trace"],
                         capture_output=True, text=True).stdout
    role, reqs, cur = {rpid: "runner"}, [], None
    for line in out.splitlines():
        m = re.match(r"\s*(\d+)\s+([\d.]+):\s+(\S+):\s*(.*)", line)
        if not m:
            continue
        pid, t, ev, tr = int(m.group(1)), float(m.group(2)) * 1e6, m.group(3), m.group(4)
        if ev == "sched:sched_process_fork":
            f = re.search(r"pid=(\d+) child_comm=\S+ child_pid=(\d+)", tr)
            parent, child = int(f.group(1)), int(f.group(2))
            kind = {"runner": "shim", "shim": "task"}.get(role.get(parent), "other")
            if parent in role:
                role[child] = kind
                if cur is not None and kind in ("shim", "task"):
                    cur.setdefault("fork" if kind == "shim" else "task_fork", t)
            continue
        who = role.get(pid)
        call = ev.split("sys_enter_")[-1] if "sys_enter_" in ev else None
        if who == "runner" and call == "recvfrom" and "size: 0x00008000" in tr:
            if cur is None or "done" in cur:
                cur = {"recv": t}
                reqs.append(cur)
        if cur is None or who is None:
            continue
        if who == "runner" and call == "sendto":
            if "fork" in cur:
                cur.setdefault("first_send", t)
            if "task_exit" in cur:
                cur.setdefault("done", t)
        elif who == "shim" and ev == "sched:sched_process_exec":
            cur["shim_exec"] = t
        elif who == "shim" and call == "exit_group":
            cur["shim_exit"] = t
        elif who == "task" and ev == "sched:sched_process_exec":
            cur["task_exec"] = t
        elif who == "task" and call == "exit_group":
            cur["task_exit"] = t
        elif who == "task" and call:
            cur.setdefault(call, t)
    return [q for q in reqs if "done" in q and "task_exit" in q]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runner", default=os.path.join(ROOT, "build", "forceai-runner"))
    ap.add_argument("-n", type=int, default=300)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        rpid, p50 = record(a.runner, a.n, data)
        reqs = collect(data, rpid)
    print("%d requests traced; client p50 %.3f ms while recording; load %s" % (
        len(reqs), p50, " ".join(open("/proc/loadavg").read().split()[:3])))
    for frm, to, what in STEPS:
        v = sorted(q[to] - q[frm] for q in reqs if frm in q and to in q)
        if v:
            print("%7.0f us p50 %7.0f p90  %s" % (statistics.median(v), v[int(len(v) * .9)], what))
    return 0 if reqs else 1


if __name__ == "__main__":
    sys.exit(main())
