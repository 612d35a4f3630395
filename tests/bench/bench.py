#!/usr/bin/env python3
"""forceai-runner benchmarks (`make bench`).

Every figure is measured beside a baseline taken in the same run (the machine
is shared and noisy), and reported as value, baseline and ratio. Latency
figures come from the C drivers built from tests/bench/*.c (CLOCK_MONOTONIC);
this script only starts processes, merges samples and writes the report:
build/bench/results.json and build/bench/results.md, and a table on stdout.

  1 start-to-ready    fork+exec of the runner until GET /ping answers 200 (median)
                      vs fork+exec+exit of /bin/true, from the same driver (ready.c)
  2 idle RSS          runner VmRSS after start vs Debian's tini (tini -- sleep 100)
  3 binary size       stripped static runner vs stripped tini-static
  4 round trip        POST /command {"command":"true"} until the terminal event
                      (rtt.c, keep-alive) vs fork+exec+wait of /bin/sh -c true
                      and of /bin/bash -c true (rawspawn.c); p50 and p99
  5 throughput        1 GiB of 100-byte lines through POST /v1/tasks and through
                      execd POST /command (one JSON event per line), read by
                      curl -sN -o /dev/null, vs the same generator | cat > /dev/null
  6 concurrency       N tasks each printing M bytes at once, every stream checked
                      byte for byte; runner VmHWM vs its idle RSS
  7 confinement       round trip with confinement vs --insecure-no-confine, and
                      bwrap / firejail launching /bin/true vs plain /bin/true
  8 load              16 clients (keep-alive, rtt.c -c) looping POST /command
                      {"command":"true"} for 60 s: tasks/s, latency p50/p99, runner
                      CPU time per task (/proc/PID/stat) vs 16 threads looping
                      fork+exec+wait of /bin/sh -c true for 60 s (rawspawn.c -c)
  10 port proxy       1 GiB GET through /proxy/{port} from a task's server
                      (python3 -m http.server, a sparse file) read by curl vs curl
                      straight to that port; 1 GiB PUT the same way to a task that
                      reads and hashes it (tests/integration/proxy_upstreams.py);
                      runner VmHWM over both vs its VmRSS before
  14 audit cost       the audit trail on (default, stderr to a file as a container
                      log) vs --insecure-no-audit, interleaved rounds: round
                      trip of `true` (rtt.c, p50) and small GETs through
                      /proxy/{port} to nginx (curl, one keep-alive connection
                      per client, 2 clients) in req/s; goal: under 5 % slower
  9 files             1 GiB GET /files/download and POST /files/upload (curl -F)
                      vs Debian's nginx serving (sendfile on) and storing
                      (client_body_in_file_only) the same file on loopback
                      (files_bench.py)

Exit status: 1 when a benchmark could not run correctly (a task failed, a
stream was not byte-exact, a driver failed); missed goals only fail with
--strict.
"""
import argparse
import asyncio
import base64
import hashlib
import json
import math
import os
import platform
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import procstat  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MIB = 1024 * 1024


# ---------------------------------------------------------------- helpers

class BenchError(Exception):
    pass


def log(msg):
    print("bench: " + msg, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def pct(samples, p):
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    s = sorted(samples)
    k = max(0, min(len(s) - 1, int(math.ceil(p / 100.0 * len(s))) - 1))
    return s[k]


def proc_status(pid):
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if v.strip().endswith("kB"):
                    out[k] = int(v.split()[0])
    except OSError:
        pass
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    out["Pss"] = int(line.split()[1])
    except OSError:
        pass
    return out


def run_tool(argv, what, failures=None):
    """Runs a C driver; returns its stdout lines split in fields of ints.
    With a `failures` list, a driver that reports failed runs is tolerated:
    its message is appended there and the samples of the good runs returned."""
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0 and failures is not None and r.returncode == 1:
        failures.append(r.stderr.strip()[-500:])
    elif r.returncode != 0:
        raise BenchError("%s failed (exit %d): %s\n  command: %s" % (
            what, r.returncode, r.stderr.strip()[-2000:], " ".join(argv)))
    if r.stderr.strip():
        log("%s: %s" % (what, r.stderr.strip()))
    return [[int(x) for x in line.split()] for line in r.stdout.splitlines() if line.strip()]


def http(port, method, path, body=None, timeout=10):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    hdrs = {"Content-Type": "application/json"} if body is not None else {}
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=hdrs)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


class Runner:
    """One runner on a loopback port with a private state dir, started by us."""

    def __init__(self, binary, cfg, extra=(), name="runner"):
        self.name = name
        self.port = free_port()
        self.tmp = tempfile.mkdtemp(prefix="forceai-bench-")
        os.chmod(self.tmp, 0o755)
        self.log_path = os.path.join(self.tmp, "runner.log")
        self.argv = [binary] + runner_args(cfg, self.port, os.path.join(self.tmp, "state")) + list(extra)
        self.logf = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.argv, stdout=self.logf, stderr=self.logf,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.pid = self.proc.pid
        deadline = time.monotonic() + 15
        while True:
            if self.proc.poll() is not None:
                raise BenchError("%s exited %s at start:\n%s\n  command: %s" % (
                    name, self.proc.returncode, self.logtext()[-2000:], " ".join(self.argv)))
            try:
                if http(self.port, "GET", "/ping", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise BenchError("%s not ready after 15 s:\n%s" % (name, self.logtext()[-2000:]))
            time.sleep(0.01)

    def logtext(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def loglines(self):
        out = []
        for line in self.logtext().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                log("%s ignored SIGTERM for 15 s; SIGKILL to its group %d" % (self.name, self.pid))
                os.killpg(self.pid, signal.SIGKILL)
                self.proc.wait()
        self.logf.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def runner_args(cfg, port, state):
    a = ["--listen", "127.0.0.1:%d" % port, "--state-dir", state]
    if cfg.policy:
        a += ["--seccomp-policy", cfg.policy]
    return a + list(cfg.runner_arg)


# ---------------------------------------------------------------- results

class Results:
    def __init__(self):
        self.rows = []
        self.errors = []
        self.notes = []

    def add(self, bench, measure, value, unit, baseline=None, baseline_value=None,
            ratio=None, goal=None, ok=None, extra=None):
        if ratio is None and baseline_value and baseline_value > 0 and value >= 0:
            ratio = value / baseline_value
        row = {"bench": bench, "measure": measure, "value": value, "unit": unit,
               "baseline": baseline, "baseline_value": baseline_value, "ratio": ratio,
               "goal": goal, "ok": ok}
        if extra:
            row["extra"] = extra
        self.rows.append(row)
        return row

    def error(self, bench, msg):
        log("ERROR in %s: %s" % (bench, msg))
        self.errors.append({"bench": bench, "error": msg})

    def note(self, msg):
        self.notes.append(msg)


def fmt(v, unit=""):
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if isinstance(v, int) and not unit:
        return str(v)
    a = abs(v)
    s = "%.0f" % v if a >= 100 else "%.1f" % v if a >= 10 else "%.2f" % v if a >= 0.1 else "%.3f" % v
    return s + (" " + unit if unit else "")


def table(res):
    head = ["#", "measure", "value", "baseline (same run)", "baseline", "ratio", "goal", ""]
    lines = []
    for r in sorted(res.rows, key=lambda r: int(r["bench"])):
        status = {True: "ok", False: "MISS", None: ""}[r["ok"]]
        lines.append([r["bench"], r["measure"], fmt(r["value"], r["unit"]), r["baseline"] or "-",
                      fmt(r["baseline_value"], r["unit"]) if r["baseline_value"] is not None else "-",
                      ("%.2fx" % r["ratio"]) if r["ratio"] is not None else "-", r["goal"] or "-", status])
    return head, lines


def write_reports(res, meta, out):
    os.makedirs(out, exist_ok=True)
    doc = {"meta": meta, "results": res.rows, "errors": res.errors, "notes": res.notes}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    head, lines = table(res)
    md = ["# forceai-runner benchmarks", ""]
    md.append("Run %s on `%s` (%s CPUs, kernel %s), load average %s before / %s after; %s mode." % (
        meta["date"], meta["host"], meta["cpus"], meta["kernel"], meta["loadavg_before"],
        meta["loadavg_after"], "quick" if meta["quick"] else "full"))
    md.append("")
    for k in ("runner", "runner_version", "static", "confinement"):
        if meta.get(k):
            md.append("- %s: `%s`" % (k, meta[k]))
    md.append("")
    md.append("Every baseline was measured in the same run, interleaved with the figure it is "
              "compared with; ratio = value / baseline.")
    md.append("")
    md.append("| " + " | ".join(head) + " |")
    md.append("|" + "|".join("---" for _ in head) + "|")
    for l in lines:
        md.append("| " + " | ".join(x.replace("|", "\\|") for x in l) + " |")
    if res.notes:
        md += ["", "Notes:", ""] + ["- " + n for n in res.notes]
    if res.errors:
        md += ["", "Errors:", ""] + ["- %s: %s" % (e["bench"], e["error"]) for e in res.errors]
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")


def print_table(res):
    head, lines = table(res)
    w = [max(len(str(x)) for x in col) for col in zip(head, *lines)] if lines else [len(h) for h in head]
    def row(cells):
        return "  ".join(str(c).ljust(w[i]) for i, c in enumerate(cells)).rstrip()
    print(row(head))
    print("  ".join("-" * x for x in w))
    for l in lines:
        print(row(l))
    for n in res.notes:
        print("note: " + n)
    for e in res.errors:
        print("ERROR %s: %s" % (e["bench"], e["error"]))


# ---------------------------------------------------------------- benchmarks

def bench_ready(cfg, res, binaries):
    """1: start-to-ready, interleaved in rounds with the /bin/true floor."""
    ready = os.path.join(cfg.tools, "ready")
    rounds = max(1, min(cfg.ready_runs, 4))
    per = [cfg.ready_runs // rounds + (1 if i < cfg.ready_runs % rounds else 0) for i in range(rounds)]
    floor, samples, stops = [], {n: [] for n, _ in binaries}, {n: [] for n, _ in binaries}
    tmp = tempfile.mkdtemp(prefix="forceai-bench-ready-")
    try:
        for n in per:
            floor += [x[0] for x in run_tool([ready, "-x", "-n", str(n), "--", "/bin/true"], "ready -x")]
            for name, binary in binaries:
                port = free_port()
                logp = os.path.join(tmp, name + ".log")
                argv = [ready, "-n", str(n), "-p", str(port), "-l", logp, "--", binary] + \
                    runner_args(cfg, port, os.path.join(tmp, "state-" + name))
                try:
                    rows = run_tool(argv, "ready (%s)" % name)
                except BenchError as e:
                    try:
                        with open(logp) as f:
                            e.args = (e.args[0] + "\n  runner log: " + f.read()[-1500:],)
                    except OSError:
                        pass
                    raise
                samples[name] += [x[0] for x in rows]
                stops[name] += [x[1] for x in rows]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    fmed = statistics.median(floor) / 1e6
    for name, _ in binaries:
        med = statistics.median(samples[name]) / 1e6
        res.add("1", "start-to-ready, %s (median of %d; min %.2f ms)" % (
            name, len(samples[name]), min(samples[name]) / 1e6), med, "ms",
                "exec+exit /bin/true", fmed,
                # The goal is the image's build's; the dev build loads libcurl's
                # shared libraries (about 3 ms of its start) and is shown for scale.
                goal="<= 5 ms" if name == "static" else None,
                ok=med <= 5.0 if name == "static" else None,
                extra={"min_ms": min(samples[name]) / 1e6, "max_ms": max(samples[name]) / 1e6,
                       "stop_median_ms": statistics.median(stops[name]) / 1e6})
    for name, _ in binaries:
        res.add("1", "SIGTERM-to-exit when idle, %s (median)" % name,
                statistics.median(stops[name]) / 1e6, "ms")


def idle_rss(argv, settle, pid_of=None):
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        time.sleep(settle)
        if p.poll() is not None:
            raise BenchError("%s exited %s" % (argv[0], p.returncode))
        return proc_status(p.pid)
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def bench_rss(cfg, res, binaries):
    """2: idle RSS of each runner build beside tini (and tini-static)."""
    tinis = [(t, shutil.which(t)) for t in ("tini", "tini-static")]
    tinis = [(t, p) for t, p in tinis if p]
    ref = {}
    for t, p in tinis:
        ref[t] = idle_rss([p, "--", "sleep", "100"], 0.5)
    if not tinis:
        res.note("tini not installed: idle RSS has no baseline")
    for name, binary in binaries:
        r = Runner(binary, cfg, name=name)
        try:
            http(r.port, "GET", "/ping")
            time.sleep(0.5)
            st = proc_status(r.pid)
        finally:
            r.close()
        base = "tini-static" if name == "static" and "tini-static" in ref else "tini" if "tini" in ref else None
        rss = st.get("VmRSS", 0) / 1024.0
        shipped = name == "static" or len(binaries) == 1
        res.add("2", "idle RSS, %s (VmRSS)" % name, rss, "MiB",
                ("%s -- sleep 100" % base) if base else None,
                ref[base]["VmRSS"] / 1024.0 if base else None,
                goal="<= 2 MiB" if shipped else "(goal: static)",
                ok=(rss <= 2.0) if shipped else None,
                extra={"pss_mib": st.get("Pss", 0) / 1024.0, "rss_anon_mib": st.get("RssAnon", 0) / 1024.0,
                       "rss_file_mib": st.get("RssFile", 0) / 1024.0,
                       "baseline_pss_mib": ref[base].get("Pss", 0) / 1024.0 if base else None})
        if base:
            res.add("2", "idle PSS, %s" % name, st.get("Pss", 0) / 1024.0, "MiB",
                    "%s PSS" % base, ref[base].get("Pss", 0) / 1024.0)


def stripped_size(path, tmpdir):
    out = os.path.join(tmpdir, os.path.basename(path) + ".stripped")
    subprocess.run(["strip", "--strip-all", "-o", out, path], check=True)
    return os.stat(out).st_size


def bench_size(cfg, res, tmpdir):
    """3: stripped size of the static binary."""
    if not cfg.static or not os.path.exists(cfg.static):
        res.note("3: no static binary at %s (run `make static`): size not measured" % cfg.static)
        return
    size = stripped_size(cfg.static, tmpdir)
    ts = shutil.which("tini-static")
    base = stripped_size(ts, tmpdir) if ts else None
    res.add("3", "static binary, stripped", size / MIB, "MiB", "tini-static, stripped" if ts else None,
            base / MIB if base else None, goal="<= 2 MiB", ok=size <= 2 * MIB,
            extra={"bytes": size, "baseline_bytes": base})


def locale_archived():
    """Is C.UTF-8 in glibc's locale archive (image/install.sh puts it there)?"""
    try:
        r = subprocess.run(["localedef", "--list-archive"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return any(l.strip().lower() in ("c.utf8", "c.utf-8") for l in r.stdout.splitlines())


def hardening_summary(h):
    if not h:
        return "no /v1/hardening report"
    if not h.get("enabled"):
        return "confinement disabled"
    sc = h.get("seccomp") or {}
    ll = h.get("landlock") or {}
    cg = h.get("cgroup") or {}
    return "seccomp %s (%s syscalls allowed), Landlock ABI %s, capabilities: %s, no_new_privs %s, " \
        "cgroup %s, tasks as %s:%s" % (
            sc.get("policy"), sc.get("allowed_syscalls"), ll.get("abi"), h.get("capabilities"),
            h.get("no_new_privs"), cg.get("mode"), h.get("task_uid"), h.get("task_gid"))


def bench_latency(cfg, res, binary):
    """4 + 7: round trips, interleaved with their raw baselines."""
    rtt = os.path.join(cfg.tools, "rtt")
    raw = os.path.join(cfg.tools, "rawspawn")
    on = Runner(binary, cfg, name="confined")
    off = None
    try:
        try:
            off = Runner(binary, cfg, extra=["--insecure-no-confine"], name="unconfined")
        except BenchError as e:
            res.error("7", "runner with --insecure-no-confine did not start: %s" % e)
        hard = None
        try:
            st, body = http(on.port, "GET", "/v1/hardening")
            if st == 200:
                hard = json.loads(body)
        except (OSError, ValueError):
            pass
        cfg.meta["hardening"] = hard
        cfg.meta["confinement"] = hardening_summary(hard)
        if not (hard or {}).get("enabled"):
            res.note("the runner under test reports no confinement in force (%s): figures 4-7 "
                     "are for unconfined tasks" % cfg.meta["confinement"])
        bw = shutil.which("bwrap")
        fj = shutil.which("firejail")
        # The bash a command runs in (docs/design/tasks.md "The task shell") and where its
        # locale comes from: the box this bench measures is laid out as the image's.
        task_shell = "/bin/bash-static" if os.access("/bin/bash-static", os.X_OK) else "/bin/bash"
        cfg.meta["task_shell"] = task_shell
        cfg.meta["locale"] = "LANG=%s, C.utf8 %s the locale archive" % (
            os.environ.get("LANG", "(unset)"), "in" if locale_archived() else "not in")
        series = {
            "rtt_on": lambda n, w: [x[0] for x in run_tool([rtt, "-p", str(on.port), "-n", str(n), "-w", str(w)], "rtt confined")],
            "rtt_native": lambda n, w: [x[0] for x in run_tool(
                [rtt, "-p", str(on.port), "-n", str(n), "-w", str(w), "-P", "/v1/tasks",
                 "-b", '{"task":"true","capability":"exec"}'], "rtt native")],
            "raw_sh": lambda n, w: [x[0] for x in run_tool([raw, "-n", str(n), "-w", str(w), "--", "/bin/sh", "-c", "true"], "rawspawn sh")],
            "raw_bash": lambda n, w: [x[0] for x in run_tool([raw, "-n", str(n), "-w", str(w), "--", "/bin/bash", "-c", "true"], "rawspawn bash")],
            "raw_true": lambda n, w: [x[0] for x in run_tool([raw, "-n", str(n), "-w", str(w), "--", "/bin/true"], "rawspawn true")],
        }
        counts = {"rtt_on": cfg.rtt_n, "rtt_native": cfg.rtt_n,
                  "raw_sh": cfg.rtt_n, "raw_bash": cfg.rtt_n, "raw_true": cfg.rtt_n}
        if task_shell != "/bin/bash":
            series["raw_shell"] = lambda n, w: [x[0] for x in run_tool(
                [raw, "-n", str(n), "-w", str(w), "--", task_shell, "-c", "true"], "rawspawn shell")]
            counts["raw_shell"] = cfg.rtt_n
        if off:
            series["rtt_off"] = lambda n, w: [x[0] for x in run_tool(
                [rtt, "-p", str(off.port), "-n", str(n), "-w", str(w)], "rtt unconfined")]
            counts["rtt_off"] = cfg.rtt_n
        errlog = os.path.join(on.tmp, "sandbox-stderr.log")
        sandbox_fail = {"bwrap": [], "firejail": []}
        if bw:
            series["bwrap"] = lambda n, w: [x[0] for x in run_tool(
                [raw, "-n", str(n), "-w", str(w), "-e", errlog, "--", bw, "--unshare-all", "--die-with-parent",
                 "--ro-bind", "/", "/", "/bin/true"], "rawspawn bwrap", sandbox_fail["bwrap"])]
            counts["bwrap"] = cfg.sandbox_n
        else:
            res.note("7: bwrap not installed (scripts/install-deps.sh bench installs bubblewrap)")
        if fj:
            series["firejail"] = lambda n, w: [x[0] for x in run_tool(
                [raw, "-n", str(n), "-w", str(w), "-e", errlog, "--", fj, "--quiet", "/bin/true"],
                "rawspawn firejail", sandbox_fail["firejail"])]
            counts["firejail"] = cfg.sandbox_n
        else:
            res.note("7: firejail not installed (scripts/install-deps.sh bench installs firejail)")
        samples = {k: [] for k in series}
        rounds = cfg.rounds
        for r in range(rounds):
            for k, fn in series.items():
                n = counts[k] // rounds + (1 if r < counts[k] % rounds else 0)
                if n:
                    samples[k] += fn(n, (20 if k.startswith("rtt") else 5) if r == 0 else 2)
        for k, f in sandbox_fail.items():
            if f:
                try:
                    with open(errlog) as fh:
                        tail = fh.read()[-300:].strip()
                except OSError:
                    tail = ""
                res.note("7: some %s runs failed and were left out: %s; its stderr: %s" % (
                    k, " / ".join(f), tail or "(empty)"))
    finally:
        on.close()
        if off:
            off.close()
    ms = {k: {"p50": pct(v, 50) / 1e6, "p99": pct(v, 99) / 1e6, "n": len(v),
              "mean": statistics.fmean(v) / 1e6} for k, v in samples.items() if v}
    on50, on99 = ms["rtt_on"]["p50"], ms["rtt_on"]["p99"]
    res.add("4", "round trip `true`, POST /command, p50 (n=%d)" % ms["rtt_on"]["n"], on50, "ms",
            "fork+exec+wait /bin/sh -c true, p50", ms["raw_sh"]["p50"], goal="<= 2x raw sh",
            ok=on50 <= 2 * ms["raw_sh"]["p50"])
    res.add("4", "round trip `true`, POST /command, p99", on99, "ms",
            "fork+exec+wait /bin/sh -c true, p99", ms["raw_sh"]["p99"])
    res.add("4", "round trip `true`, POST /command, p50 vs bash", on50, "ms",
            "fork+exec+wait /bin/bash -c true, p50", ms["raw_bash"]["p50"],
            goal="<= 2x raw bash", ok=on50 <= 2 * ms["raw_bash"]["p50"])
    if "raw_shell" in ms:
        # What the runner adds to the shell it runs (docs/design/tasks.md "The task shell"):
        # /bin/bash above is the row earlier runs have; this one is the runner's own shell.
        res.add("4", "round trip `true`, POST /command, p50 vs the runner's shell", on50, "ms",
                "fork+exec+wait %s -c true, p50" % cfg.meta["task_shell"], ms["raw_shell"]["p50"])
    res.add("4", "round trip `true`, POST /v1/tasks, p50", ms["rtt_native"]["p50"], "ms",
            "fork+exec+wait /bin/sh -c true, p50", ms["raw_sh"]["p50"],
            extra={"p99_ms": ms["rtt_native"]["p99"]})
    off50 = ms["rtt_off"]["p50"] if "rtt_off" in ms else None
    if off50 is not None:
        res.add("7", "round trip `true`, confinement on, p50", on50, "ms",
                "same, --insecure-no-confine, p50", off50,
                extra={"overhead_ms": on50 - off50, "p99_on_ms": on99, "p99_off_ms": ms["rtt_off"]["p99"]})
        res.add("7", "round trip `true`, confinement on, p99", on99, "ms",
                "same, --insecure-no-confine, p99", ms["rtt_off"]["p99"])
        res.add("7", "confinement cost per task (on - off), p50", on50 - off50, "ms")
    t50 = ms["raw_true"]["p50"]
    for k, label in (("bwrap", "bwrap --unshare-all --die-with-parent --ro-bind / / /bin/true"),
                     ("firejail", "firejail --quiet /bin/true")):
        if k in ms:
            res.add("7", "%s, p50 (n=%d)" % (label, ms[k]["n"]), ms[k]["p50"], "ms",
                    "fork+exec+wait /bin/true, p50", t50,
                    extra={"overhead_ms": ms[k]["p50"] - t50, "p99_ms": ms[k]["p99"]})
            if off50 is not None:
                res.add("7", "runner confinement cost vs %s cost (p50 deltas)" % k, on50 - off50, "ms",
                        "%s - /bin/true" % k, ms[k]["p50"] - t50)
    res.note("7: bwrap needs a root filesystem to run /bin/true: `--ro-bind / /` is added to the "
             "brief's `bwrap --unshare-all --die-with-parent /bin/true`")
    cfg.meta["latency_ms"] = ms


def relay_run(cfg, gen, own_session=False):
    """The stream's floor: tests/bench/relay.c carries the generator's pipe to curl
    with nothing else (no framing, escaping or log). Returns (seconds, bytes).

    own_session: the generator in a session of its own, as every task is (confinement's
    first step is setsid). With the kernel's autogroup scheduling (on by default) a session
    is one scheduling entity: on a loaded machine a pipeline whose writer sits in another
    session than its reader waits on the other sessions between wake-ups (measured at load
    11-21: this relay 1.3 s per GiB as it was, 6.2-7.0 s with the generator in its own
    session; docs/performance.md §6). The runner's streams always pay that; the floor as it
    was does not."""
    argv = [os.path.join(cfg.tools, "relay"), "--"] + (["setsid"] if own_session else [])
    p = subprocess.Popen(argv + ["/bin/sh", "-c", gen],
                         stdout=subprocess.PIPE, text=True)
    try:
        port = int(p.stdout.readline())
        t0 = time.monotonic()
        c = subprocess.run(["curl", "-sN", "-o", "/dev/null", "-w", "%{http_code} %{size_download}",
                            "http://127.0.0.1:%d/" % port], stdout=subprocess.PIPE, text=True)
        t1 = time.monotonic()
        if p.wait(30) != 0:
            raise BenchError("relay baseline: exit %d" % p.returncode)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    code, size = (c.stdout.split() + ["0", "0"])[:2]
    if c.returncode != 0 or code != "200" or int(size) != cfg.tput_bytes:
        raise BenchError("relay baseline: curl exit %d, HTTP %s, %s bytes (want %d)" % (
            c.returncode, code, size, cfg.tput_bytes))
    return t1 - t0


def bench_throughput(cfg, res, binary):
    """5: streaming throughput of the native API and of execd /command vs a plain pipe.

    Interleaved per repetition: /v1/tasks, /command and the relay (the floor: pipe
    to curl with nothing in between), each followed by the pipe; the order turns by
    one each repetition, so that each series runs in each place once in three (with
    a fixed order the same build measured 0.94x of the relay right after it and
    0.84x after another stream). Every figure is against
    the same statistic of every pipe run, and the runner's also against the relay's."""
    gen = "yes \"$(printf '%%099d' 0)\" | head -c %d" % cfg.tput_bytes
    kinds = (("tasks", "/v1/tasks", json.dumps({"task": gen, "capability": "exec"})),
             ("command", "/command", json.dumps({"command": gen})))
    r = Runner(binary, cfg, name="throughput")
    try:
        t = {"tasks": [], "command": [], "pipe": [], "relay": [], "relay_task": []}
        wire = {"tasks": [], "command": []}
        cpu = {"tasks": [], "command": []}
        def pipe_run():
            t0 = time.monotonic()
            p = subprocess.run(["/bin/sh", "-c", gen + " | cat > /dev/null"])
            t1 = time.monotonic()
            if p.returncode != 0:
                raise BenchError("pipe baseline failed: exit %d" % p.returncode)
            t["pipe"].append(t1 - t0)

        series = list(kinds) + [("relay", None, None), ("relay_task", None, None)]
        for i in range(cfg.tput_reps):
            turn = i % len(series)
            for kind, path, body in series[turn:] + series[:turn]:
                if kind.startswith("relay"):
                    t[kind].append(relay_run(cfg, gen, own_session=kind == "relay_task"))
                    pipe_run()
                    continue
                url = "http://127.0.0.1:%d%s" % (r.port, path)
                c0 = procstat.cpu(r.pid)[0]
                t0 = time.monotonic()
                c = subprocess.run(["curl", "-sN", "-o", "/dev/null", "-w", "%{http_code} %{size_download}",
                                    "-H", "Content-Type: application/json", "-d", body, url],
                                   stdout=subprocess.PIPE, text=True)
                t1 = time.monotonic()
                c1 = procstat.cpu(r.pid)[0]
                code, size = (c.stdout.split() + ["0", "0"])[:2]
                fin = [l for l in r.loglines() if l.get("msg") == "task finished"]
                if c.returncode != 0 or code != "200" or int(size) < cfg.tput_bytes:
                    raise BenchError("curl %s: exit %d, HTTP %s, %s bytes received (want >= %d); runner: %s" % (
                        path, c.returncode, code, size, cfg.tput_bytes,
                        fin[-1] if fin else "no 'task finished' log line"))
                if not fin or fin[-1].get("status") != "succeeded":
                    raise BenchError("throughput task did not succeed: %s" % (
                        fin[-1] if fin else "no 'task finished' log line"))
                t[kind].append(t1 - t0)
                wire[kind].append(int(size))
                cpu[kind].append(c1 - c0)
                pipe_run()
    finally:
        r.close()
    # One statistic for every series (runner, relay, pipe): the best run of
    # the interleaved repetitions (the least disturbed by the machine's other
    # load) by default, or the median (--tput-stat median).
    stat = min if cfg.tput_stat == "best" else statistics.median
    sname = "%s of %d" % (cfg.tput_stat, len(t["relay"]))
    pipe_mbs = cfg.tput_bytes / stat(t["pipe"]) / 1e6
    relay_mbs = cfg.tput_bytes / stat(t["relay"]) / 1e6
    task_relay_mbs = cfg.tput_bytes / stat(t["relay_task"]) / 1e6
    gib = cfg.tput_bytes / float(1 << 30)
    res.add("5", "stream %d MiB of 100-byte lines, relay: pipe -> curl, nothing else, generator in the bench's session (%s)" % (
        cfg.tput_bytes // MIB, sname), relay_mbs, "MB/s",
        "same generator | cat > /dev/null", pipe_mbs,
        extra={"seconds": t["relay"], "baseline_seconds": t["pipe"]})
    res.add("5", "the floor with the generator in a session of its own, as a task's (%s)" % sname,
            task_relay_mbs, "MB/s", "relay (bench's session)", relay_mbs,
            extra={"seconds": t["relay_task"]})
    for kind, label, goal, rgoal in (("tasks", "/v1/tasks -> curl", 0.75, 0.9),
                                     ("command", "execd /command -> curl (one JSON event per line)",
                                      0.4, 0.8)):
        mbs = cfg.tput_bytes / stat(t[kind]) / 1e6
        res.add("5", "stream %d MiB of 100-byte lines, %s (%s)" % (
            cfg.tput_bytes // MIB, label, sname), mbs, "MB/s",
            "same generator | cat > /dev/null", pipe_mbs, goal=">= %.2gx" % goal,
            ok=mbs >= goal * pipe_mbs,
            extra={"seconds": t[kind], "baseline_seconds": t["pipe"], "wire_bytes": wire[kind],
                   "wire_overhead": wire[kind][0] / cfg.tput_bytes,
                   "runner_cpu_s_per_gib": [c / gib for c in cpu[kind]]})
        # The goal is on the floor whose generator sits in a session of its own, as a
        # task's does (docs/design/performance.md, "Which floor is the fair one"); the
        # bench's-session floor is still printed, without a goal.
        res.add("5", "the same, %s vs the relay, generator in its own session (%s)" % (
            label.split(" ->")[0], sname), mbs, "MB/s", "relay, own session", task_relay_mbs,
            goal=">= %.2gx" % rgoal, ok=mbs >= rgoal * task_relay_mbs)
        res.add("5", "the same, %s vs the relay, generator in the bench's session (%s)" % (
            label.split(" ->")[0], sname), mbs, "MB/s", "relay (bench's session)", relay_mbs)
        res.add("5", "runner CPU per GiB, %s (median)" % label.split(" ->")[0],
                statistics.median(cpu[kind]) / gib, "s")


def expected_output(i, size):
    line = ("task%04d-" % i).ljust(99, "abcdefghij"[i % 10]) + "\n"
    reps = size // len(line) + 1
    return line, (line * reps).encode()[:size]


def dechunk(raw):
    out = bytearray()
    pos = 0
    while True:
        eol = raw.index(b"\r\n", pos)
        n = int(raw[pos:eol].split(b";")[0], 16)
        pos = eol + 2
        if n == 0:
            return bytes(out)
        out += raw[pos:pos + n]
        pos += n + 2


def parse_native(raw):
    """Returns (stdout bytes, exit event data) from a raw HTTP response."""
    head, _, body = raw.partition(b"\r\n\r\n")
    status = head.split(b"\r\n")[0]
    if b" 200 " not in status + b" ":
        raise BenchError("HTTP status %r: %r" % (status, body[:300]))
    if b"chunked" in head.lower():
        body = dechunk(body)
    out, err = bytearray(), bytearray()
    exit_ev = None
    for frame in body.split(b"\n\n"):
        ev, data = None, []
        for line in frame.split(b"\n"):
            if line.startswith(b"event:"):
                ev = line[6:].strip().decode()
            elif line.startswith(b"data:"):
                data.append(line[5:].lstrip(b" "))
        if not data:
            continue
        d = json.loads(b"\n".join(data))
        if ev == "stdout":
            out += d["text"].encode() if "text" in d else base64.b64decode(d["data_b64"])
        elif ev == "stderr":
            err += d["text"].encode() if "text" in d else base64.b64decode(d["data_b64"])
        elif ev in ("exit", "error"):
            exit_ev = dict(d, event=ev)
    if exit_ev is not None and err:
        exit_ev["stderr"] = bytes(err[:200]).decode(errors="replace")
    return bytes(out), exit_ev


async def native_task(port, task):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"task": task, "capability": "exec"}).encode()
    w.write(b"POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    await w.drain()
    chunks = []
    while True:
        b = await r.read(262144)
        if not b:
            break
        chunks.append(b)
    w.close()
    return b"".join(chunks), time.monotonic()


async def direct_task(task):
    p = await asyncio.create_subprocess_exec("/bin/sh", "-c", task, stdout=asyncio.subprocess.PIPE,
                                             stdin=asyncio.subprocess.DEVNULL)
    out = await p.stdout.read()
    rc = await p.wait()
    return out, rc, time.monotonic()


async def sample_rss(pid, box, stop):
    while not stop.is_set():
        box[0] = max(box[0], proc_status(pid).get("VmRSS", 0))
        try:
            await asyncio.wait_for(stop.wait(), 0.02)
        except asyncio.TimeoutError:
            pass


def bench_concurrency(cfg, res, name, binary):
    """6: N concurrent tasks of M bytes each, byte-exact, runner peak RSS."""
    n, size = cfg.conc_tasks, cfg.conc_bytes
    tasks = []
    for i in range(n):
        line, exp = expected_output(i, size)
        tasks.append(("yes '%s' | head -c %d" % (line[:-1], size), hashlib.sha256(exp).hexdigest()))

    r = Runner(binary, cfg, extra=["--max-tasks", str(max(n + 44, 64))], name="concurrency-" + name)
    try:
        http(r.port, "GET", "/ping")
        time.sleep(0.3)
        idle = proc_status(r.pid)

        async def go():
            stop = asyncio.Event()
            box = [0]
            sampler = asyncio.ensure_future(sample_rss(r.pid, box, stop))
            t0 = time.monotonic()
            outs = await asyncio.gather(*(native_task(r.port, t) for t, _ in tasks), return_exceptions=True)
            stop.set()
            await sampler
            return t0, outs, box[0]

        t0, outs, sampled_peak = asyncio.run(go())
        after = proc_status(r.pid)
    finally:
        r.close()
    bad, t_end = [], t0
    for i, o in enumerate(outs):
        if isinstance(o, BaseException):
            bad.append("task %d: %r" % (i, o))
            continue
        raw, t = o
        t_end = max(t_end, t)
        try:
            out, ex = parse_native(raw)
        except (BenchError, ValueError, KeyError) as e:
            bad.append("task %d: %s" % (i, e))
            continue
        if not ex or ex.get("event") != "exit" or ex.get("exit_code") != 0:
            bad.append("task %d: terminal event %s" % (i, ex))
        elif hashlib.sha256(out).hexdigest() != tasks[i][1]:
            bad.append("task %d: %d bytes received, checksum differs" % (i, len(out)))
    outs = None
    wall = t_end - t0

    async def go_direct():
        t0 = time.monotonic()
        o = await asyncio.gather(*(direct_task(t) for t, _ in tasks))
        return t0, o

    d0, douts = asyncio.run(go_direct())
    dbad = sum(1 for i, (out, rc, _) in enumerate(douts) if rc != 0 or hashlib.sha256(out).hexdigest() != tasks[i][1])
    dwall = max(t for _, _, t in douts) - d0
    douts = None
    if dbad:
        res.error("6", "direct baseline: %d streams not byte-exact (generator problem?)" % dbad)

    hwm = after.get("VmHWM", 0) / 1024.0
    res.add("6", "%d x %d KiB tasks, streams byte-exact, %s" % (n, size // 1024, name),
            n - len(bad), "", "tasks started", n, goal="all", ok=not bad)
    res.add("6", "runner peak RSS (VmHWM) under %d tasks, %s" % (n, name), hwm, "MiB",
            "same runner idle VmRSS", idle.get("VmRSS", 0) / 1024.0, goal="<= 32 MiB", ok=hwm <= 32,
            extra={"sampled_peak_rss_mib": sampled_peak / 1024.0})
    if not bad:
        res.add("6", "aggregate stream rate, %d tasks, %s" % (n, name), n * size / wall / 1e6, "MB/s",
                "same commands on direct pipes", n * size / dwall / 1e6,
                extra={"seconds": wall, "baseline_seconds": dwall})
    if bad:
        res.error("6", "%d of %d streams wrong (%s): %s" % (len(bad), n, name, "; ".join(bad[:5])))


def count_fds(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return None


def load_json(argv, what):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise BenchError("%s failed (exit %d): %s\n  command: %s" % (
            what, r.returncode, r.stderr.strip()[-2000:], " ".join(argv)))
    if r.stderr.strip():
        log("%s: %s" % (what, r.stderr.strip()))
    try:
        return json.loads(r.stdout)
    except ValueError:
        raise BenchError("%s printed no JSON: %r" % (what, r.stdout[:300]))


def bench_load(cfg, res, binary):
    """8: sustained load, 16 keep-alive clients looping `true`, vs 16 raw spawn loops."""
    rtt = os.path.join(cfg.tools, "rtt")
    raw = os.path.join(cfg.tools, "rawspawn")
    n, secs = cfg.load_clients, cfg.load_seconds
    base = load_json([raw, "-c", str(n), "-d", str(secs), "--", "/bin/sh", "-c", "true"],
                     "rawspawn -c (load baseline)")
    r = Runner(binary, cfg, extra=["--max-tasks", str(max(64, 4 * n))], name="load")
    try:
        http(r.port, "GET", "/ping")
        fd0 = count_fds(r.pid)
        cpu0 = procstat.cpu(r.pid)
        run = load_json([rtt, "-p", str(r.port), "-c", str(n), "-d", str(secs)], "rtt -c (load)")
        cpu1 = procstat.cpu(r.pid)
        time.sleep(0.2)
        fd1 = count_fds(r.pid)
        st = proc_status(r.pid)
        fin = [l for l in r.loglines() if l.get("msg") == "task finished"]
    finally:
        r.close()
    tasks = run["tasks"]
    if run["failed"] or not tasks:
        raise BenchError("load: %d of %d requests failed" % (run["failed"], run["failed"] + tasks))
    bad = [l for l in fin if l.get("status") != "succeeded"]
    if bad:
        raise BenchError("load: %d tasks did not succeed in the runner log: %s" % (len(bad), bad[0]))
    self_cpu, kids_cpu = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
    btasks = base["tasks"]
    label = "%d clients x %d s" % (n, secs)
    blabel = "%d loops fork+exec+wait /bin/sh -c true" % n
    res.add("8", "load: tasks/s, %s, POST /command `true` (keep-alive; %d tasks)" % (label, tasks),
            run["tasks_per_s"], "tasks/s", blabel + ", runs/s", base["tasks_per_s"],
            goal=">= 0.5x", ok=run["tasks_per_s"] >= 0.5 * base["tasks_per_s"],
            extra={"driver": run, "baseline_driver": base,
                   "runner_fds_before": fd0, "runner_fds_after": fd1,
                   "runner_vmhwm_mib": st.get("VmHWM", 0) / 1024.0,
                   "runner_vmrss_mib": st.get("VmRSS", 0) / 1024.0})
    res.add("8", "load: latency p50 during the run", run["p50_ns"] / 1e6, "ms",
            blabel + ", p50", base["p50_ns"] / 1e6)
    res.add("8", "load: latency p99 during the run", run["p99_ns"] / 1e6, "ms",
            blabel + ", p99", base["p99_ns"] / 1e6, extra={"max_ms": run["max_ns"] / 1e6,
                                                           "baseline_max_ms": base["max_ns"] / 1e6})
    res.add("8", "load: runner CPU per task (utime+stime / tasks)", self_cpu / tasks * 1e3, "ms",
            "raw loops' own CPU per spawn (fork+wait)", base["self_cpu_s"] / btasks * 1e3,
            goal="<= 1 ms", ok=self_cpu / tasks * 1e3 <= 1.0,
            extra={"runner_cpu_s": self_cpu, "tasks": tasks,
                   "client_cpu_per_task_ms": run["self_cpu_s"] / tasks * 1e3})
    res.add("8", "load: task-side CPU per task (runner cutime+cstime / tasks)", kids_cpu / tasks * 1e3, "ms",
            "raw loops' children CPU per spawn", base["children_cpu_s"] / btasks * 1e3,
            extra={"runner_children_cpu_s": kids_cpu})
    if fd0 is not None and fd1 is not None and fd1 > fd0:
        res.note("8: runner open fds %d before the load, %d 0.2 s after it (finished task records, "
                 "each with a spool file and a timerfd, are kept up to --retain-count)" % (fd0, fd1))
    res.note("8: CPU from /proc/PID/stat (clock ticks of 1/%d s) read around the load run; "
             "cutime+cstime is the CPU of the task processes the runner reaped (confinement "
             "setup in the child included); the driver's own CPU is %.3f ms per request" % (
                 os.sysconf("SC_CLK_TCK"), run["self_cpu_s"] / tasks * 1e3))


def bench_proxy(cfg, res, binary):
    """9: the port proxy's download throughput vs direct, and the runner's memory."""
    size = cfg.tput_bytes
    r = Runner(binary, cfg, name="proxy")
    try:
        name = os.path.join(r.tmp, "blob")
        with open(name, "wb") as f:
            f.truncate(size)
        os.chmod(name, 0o644)
        script = os.path.join(r.tmp, "proxy_upstreams.py")
        shutil.copy(os.path.join(ROOT, "tests", "integration", "proxy_upstreams.py"), script)
        os.chmod(script, 0o644)
        port, sink = free_port(), free_port()
        for cmd, p in (("/usr/bin/python3 -m http.server %d --bind 127.0.0.1 --directory %s"
                        % (port, r.tmp), port),
                       ("/usr/bin/python3 %s echo %d" % (script, sink), sink)):
            st, data = http(r.port, "POST", "/command", {"command": "exec " + cmd,
                                                          "background": True})
            if st != 200:
                raise BenchError("cannot start a server task: HTTP %d %r" % (st, data[:200]))
            deadline = time.monotonic() + 15
            while True:
                try:
                    socket.create_connection(("127.0.0.1", p), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise BenchError("the server task does not listen on %d" % p)
                    time.sleep(0.05)
        time.sleep(0.2)
        before = proc_status(r.pid)

        def get(url):
            t0 = time.monotonic()
            c = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{size_download}",
                                url], stdout=subprocess.PIPE, text=True)
            t = time.monotonic() - t0
            code, got = (c.stdout.split() + ["0", "0"])[:2]
            if c.returncode != 0 or code != "200" or int(got) != size:
                raise BenchError("curl %s: exit %d, HTTP %s, %s bytes (want %d)" % (
                    url, c.returncode, code, got, size))
            return t

        def put(url):
            t0 = time.monotonic()
            c = subprocess.run(["curl", "-s", "-T", name, url], stdout=subprocess.PIPE, text=True)
            t = time.monotonic() - t0
            try:
                got = json.loads(c.stdout)["bytes"]
            except (ValueError, KeyError, TypeError):
                got = None
            if c.returncode != 0 or got != size:
                raise BenchError("curl -T %s: exit %d, answer %r (want %d bytes)" % (
                    url, c.returncode, c.stdout[:200], size))
            return t

        t_proxy, t_direct, t_up, t_up_direct = [], [], [], []
        for i in range(cfg.tput_reps):
            t_proxy.append(get("http://127.0.0.1:%d/proxy/%d/blob" % (r.port, port)))
            t_direct.append(get("http://127.0.0.1:%d/blob" % port))
            t_up.append(put("http://127.0.0.1:%d/proxy/%d/sink" % (r.port, sink)))
            t_up_direct.append(put("http://127.0.0.1:%d/sink" % sink))
        after = proc_status(r.pid)
    finally:
        r.close()
    mbs = size / statistics.median(t_proxy) / 1e6
    direct = size / statistics.median(t_direct) / 1e6
    res.add("10", "%d MiB GET through /proxy/{port} from a task's server, curl (median of %d)" % (
        size // MIB, len(t_proxy)), mbs, "MB/s", "curl straight to the port", direct,
        extra={"seconds": t_proxy, "baseline_seconds": t_direct})
    res.add("10", "%d MiB PUT through /proxy/{port} to a task that reads it, curl -T (median of %d)" % (
        size // MIB, len(t_up)), size / statistics.median(t_up) / 1e6, "MB/s",
        "curl -T straight to the port", size / statistics.median(t_up_direct) / 1e6,
        extra={"seconds": t_up, "baseline_seconds": t_up_direct})
    hwm, rss0 = after.get("VmHWM", 0) / 1024.0, before.get("VmRSS", 0) / 1024.0
    res.add("10", "runner VmHWM over the proxied downloads and uploads", hwm, "MiB",
            "runner VmRSS before", rss0, goal="< 32 MiB", ok=hwm < 32)
def bench_files(cfg, res, binary):
    """9: files API, 1 GiB download and upload vs nginx on the same file (files_bench.py)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import files_bench
    try:
        f = files_bench.measure(binary, cfg.files_mib, cfg.files_rounds)
    except RuntimeError as e:
        raise BenchError(str(e))
    if not f["ok"]:
        raise BenchError("files: a transfer failed or was not byte-exact (see stderr)")
    size = "%d MiB" % cfg.files_mib
    res.add("9", "files: %s download, GET /files/download (median of %d)" % (size, f["rounds"]),
            f["download_MBps"], "MB/s", "nginx, sendfile on, same file", f["nginx_download_MBps"],
            goal=">= 0.8x", ok=f["download_MBps"] >= 0.8 * f["nginx_download_MBps"],
            extra={"runner_peak_rss_kib": f["runner_peak_rss_kib"]["download"],
                   "seconds": f["seconds"]["download"],
                   "baseline_seconds": f["seconds"]["nginx_download"]})
    res.add("9", "files: %s upload, POST /files/upload multipart (median of %d)" % (size, f["rounds"]),
            f["upload_MBps"], "MB/s", "nginx, client_body_in_file_only, same POST",
            f["nginx_upload_MBps"], goal=">= 0.5x",
            ok=f["upload_MBps"] >= 0.5 * f["nginx_upload_MBps"],
            extra={"runner_peak_rss_kib": f["runner_peak_rss_kib"]["upload"],
                   "seconds": f["seconds"]["upload"],
                   "baseline_seconds": f["seconds"]["nginx_upload"]})
    res.add("9", "files: download vs cat FILE > /dev/null", f["download_MBps"], "MB/s",
            "cat FILE > /dev/null", f["cat_read_MBps"])
    res.add("9", "files: upload vs cat FILE > COPY", f["upload_MBps"], "MB/s",
            "cat FILE > COPY", f["cat_write_MBps"])


def bench_portproxy(cfg, res, binary):
    """11: the port proxy against nginx's reverse proxy, same upstream (portproxy_bench.py)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import portproxy_bench as pb
    q = cfg.quick
    try:
        f = pb.measure(binary, rounds=1 if q else 3, seconds=1 if q else 5,
                       body_mib=32 if q else 1024, ws_mib=32 if q else 1024, tools=cfg.tools,
                       log=log)
    except pb.BenchError as e:
        raise BenchError(str(e))
    for c in (16, 256):
        rr, nn = f["small_c%d_runner" % c], f["small_c%d_nginx" % c]
        res.add("11", "small GETs through /proxy/{port}, wrk -c%d, req/s (median of %d)" % (
            c, f["rounds"]), rr["rps"], "req/s", "nginx reverse proxy (keepalive 32), same upstream",
            nn["rps"], goal=">= 0.9x", ok=rr["rps"] >= 0.9 * nn["rps"],
            extra={"samples": rr["samples"], "baseline_samples": nn["samples"]})
        res.add("11", "the same, p50 latency, %d connections" % c, rr["p50_ms"], "ms",
                "nginx reverse proxy, p50", nn["p50_ms"], goal="<= 1.1x",
                ok=rr["p50_ms"] <= 1.1 * nn["p50_ms"])
        # The rate follows whatever else runs on the machine; CPU per request
        # (/proc, median of the rounds) follows the proxy's own work.
        res.add("11", "the same, the proxy's CPU per request, %d connections" % c,
                rr["cpu_us_per_req"], "us", "nginx reverse proxy (master and worker)",
                nn["cpu_us_per_req"])
    res.add("11", "%d MiB GET through /proxy/{port} (median of %d)" % (f["body_mib"], f["rounds"]),
            f["body_runner_MBps"], "MB/s", "nginx reverse proxy, 64 KiB buffers",
            f["body_nginx_MBps"], goal=">= 0.9x",
            ok=f["body_runner_MBps"] >= 0.9 * f["body_nginx_MBps"],
            extra={"seconds": f["body_runner_seconds"], "baseline_seconds": f["body_nginx_seconds"]})
    res.add("11", "%d MiB WebSocket echo through /proxy/{port} (median of %d)" % (
        f["ws_mib"], f["rounds"]), f["ws_runner_MBps"], "MB/s", "the same straight to the server",
        f["ws_direct_MBps"], extra={"seconds": f["ws_runner_seconds"],
                                    "baseline_seconds": f["ws_direct_seconds"],
                                    "nginx_MBps": f["ws_nginx_MBps"]})
    res.add("11", "the same, through nginx's reverse proxy", f["ws_runner_MBps"], "MB/s",
            "nginx reverse proxy (Upgrade passed on)", f["ws_nginx_MBps"])
    res.add("11", "runner VmHWM over benchmark 11", f["runner_vmhwm_kib"] / 1024.0, "MiB",
            "runner VmRSS before", f["runner_vmrss_before_kib"] / 1024.0)


def bench_audit(cfg, res, binary):
    """15: the cost of the audit trail: on (its default) vs --insecure-no-audit."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import portproxy_bench as pb
    q = cfg.quick
    rounds = 2 if q else 5
    n_rtt = 100 if q else 1000
    n_get = 1000 if q else 10000
    rtt = os.path.join(cfg.tools, "rtt")
    scratch = tempfile.mkdtemp(prefix="forceai-bench-audit-")
    root = os.path.join(scratch, "www")
    os.makedirs(root)
    with open(os.path.join(root, "s.txt"), "w") as f:
        f.write("x" * 64)
    nginx = None
    runners = {}
    try:
        try:
            nginx = pb.Nginx(pb.UPSTREAM_CONF, os.path.join(scratch, "nginx"), root=root)
        except pb.BenchError as e:
            raise BenchError(str(e))
        runners["on"] = Runner(binary, cfg, name="runner (audit on)")
        runners["off"] = Runner(binary, cfg, ["--insecure-no-audit"], name="runner (audit off)")
        rtts = {"on": [], "off": []}
        rates = {"on": [], "off": []}

        def get_rate(port):
            url = "http://127.0.0.1:%d/proxy/%d/s.txt?[1-%d]" % (port, nginx.port, n_get)
            t0 = time.monotonic()
            procs = [subprocess.Popen(["curl", "-sS", url],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                     for _ in range(2)]
            for p in procs:
                _, err = p.communicate(timeout=600)
                if p.returncode != 0:
                    raise BenchError("curl through /proxy: exit %d %s" % (p.returncode, err[-300:]))
            return 2 * n_get / (time.monotonic() - t0)

        for r in range(rounds):
            for k in (("on", "off") if r % 2 == 0 else ("off", "on")):
                port = runners[k].port
                samples = [x[0] for x in run_tool([rtt, "-p", str(port), "-n", str(n_rtt), "-w",
                                                   "20"], "rtt audit %s" % k)]
                rtts[k].append(pct(samples, 50) / 1e6)
                rates[k].append(get_rate(port))
        on = [l for l in runners["on"].loglines() if l.get("audit")]
        if not on:
            raise BenchError("the audited runner wrote no audit event")
        med = {k: statistics.median(v) for k, v in rtts.items()}
        rate = {k: statistics.median(v) for k, v in rates.items()}
        slower = (med["on"] / med["off"] - 1) * 100
        res.add("15", "round trip `true` with the audit trail on, p50 (median of %d rounds x %d)" %
                (rounds, n_rtt), med["on"], "ms", "--insecure-no-audit, p50", med["off"],
                goal="< 5 % slower", ok=slower < 5,
                extra={"samples": rtts["on"], "baseline_samples": rtts["off"],
                       "slower_pct": round(slower, 2)})
        drop = (1 - rate["on"] / rate["off"]) * 100
        res.add("15", "small GETs through /proxy/{port}, 2 curl clients, audit on, req/s "
                "(median of %d rounds x %d)" % (rounds, 2 * n_get), rate["on"], "req/s",
                "--insecure-no-audit", rate["off"], goal="< 5 % slower", ok=drop < 5,
                extra={"samples": rates["on"], "baseline_samples": rates["off"],
                       "slower_pct": round(drop, 2), "audit_events": len(on)})
    finally:
        for rn in runners.values():
            rn.close()
        if nginx:
            nginx.close()
        shutil.rmtree(scratch, ignore_errors=True)


def bench_pyclient(cfg, res, binary):
    """12: the round trip of `true` as a plain Python http.client sees it (pyclient_rtt.py)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import pyclient_rtt as pr
    try:
        f = pr.measure(binary, n=50 if cfg.quick else 300)
    except (RuntimeError, OSError) as e:
        raise BenchError(str(e))
    res.add("12", "round trip `true`, Python http.client, new connection each, POST /command, "
            "p50 of %d" % f["n"], f["p50_ms"], "ms",
            "posix_spawn /bin/sh -c true from the same client, alternating, p50", f["raw_p50_ms"],
            goal="<= 2x", ok=f["ratio"] <= 2, extra={"p90_ms": f["p90_ms"],
                                                      "baseline_p90_ms": f["raw_p90_ms"]})


def bench_reset(cfg, res, binary):
    """13: POST /v1/reset time and peak RSS, 10,000 files and 100 processes (reset_bench.py)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import reset_bench as rb
    q = cfg.quick
    try:
        f = rb.measure(binary, rounds=1 if q else 3, files=1000 if q else 10000,
                       procs=10 if q else 100)
    except (rb.BenchError, OSError, subprocess.SubprocessError) as e:
        raise BenchError(str(e))
    res.add("13", "POST /v1/reset, /workspace of %d files after a task changed 30%% (median of %d)" % (
        f["files"], f["rounds"]), f["files_reset_ms"], "ms",
        "rm -rf + cp -a of the same tree", f["files_cp_ms"],
        extra={"seconds": f["files_reset_s"], "baseline_seconds": f["files_cp_s"]})
    res.add("13", "runner VmHWM over those resets", f["files_vmhwm_kib"] / 1024.0, "MiB",
            extra={"reset_report_peaks_kib": f["files_peaks_kib"]})
    if f["files_peaks_kib"].get("worker_peak_rss_kib"):
        res.add("13", "the reset worker's peak RSS (its own report), %d files" % f["files"],
                f["files_peaks_kib"]["worker_peak_rss_kib"] / 1024.0, "MiB")
    res.add("13", "POST /v1/reset with %d running processes (median of %d)" % (
        f["procs"], f["rounds"]), f["procs_reset_ms"], "ms", extra={"seconds": f["procs_reset_s"]})
    res.add("13", "runner VmHWM over those resets", f["procs_vmhwm_kib"] / 1024.0, "MiB",
            "runner VmRSS before", f["procs_vmrss_before_kib"] / 1024.0,
            extra={"reset_report_peaks_kib": f["procs_peaks_kib"]})


def bench_checkpoints(cfg, res, binary):
    """14: workspace checkpoints, 10,000 files / 500 MiB (checkpoint_bench.py)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import checkpoint_bench as cb
    q = cfg.quick
    try:
        f = cb.measure(binary, files=1000 if q else 10000, mib=20 if q else 500)
    except (cb.BenchError, OSError, subprocess.SubprocessError) as e:
        raise BenchError(str(e))
    size = "%d files / %d MiB" % (f["files"], f["mib"])
    rs = f.get("rsync_a_ms")
    res.add("14", "first checkpoint, %s (stored %d bytes)" % (size, f["first_stored_bytes"]),
            f["first_ms"], "ms", "cp -a of the tree", f["cp_a_ms"],
            extra={"ping_max_ms_during": f["ping_during_first_max_ms"],
                   "cloned_files": f["first_cloned_files"]})
    res.add("14", "second checkpoint, nothing changed (%d files read)" % f["unchanged_read_files"],
            f["unchanged_ms"], "ms", "rsync -a of the tree" if rs else None, rs,
            goal=None if q else "<= 0.1x", ok=None if q or not rs else f["unchanged_ms"] <= 0.1 * rs,
            extra={"rsync_a_unchanged_ms": f.get("rsync_a_unchanged_ms")})
    res.add("14", "checkpoint after 10 files changed (%d read)" % f["changed10_read_files"],
            f["changed10_ms"], "ms")
    res.add("14", "diff of 10 changed files", f["diff_ms"], "ms")
    res.add("14", "restore of 10 changed files", f["restore10_ms"], "ms", "cp -a of the tree",
            f["cp_a_ms"], goal=None if q else "<= 0.1x",
            ok=None if q else f["restore10_ms"] <= 0.1 * f["cp_a_ms"])  # goals: the full size
    res.add("14", "/ping max during the first checkpoint (%d samples)" % f["ping_during_first_n"],
            f["ping_during_first_max_ms"], "ms", "/ping max in the 2 s before", f["ping_idle_max_ms"])


def bench_ckdirty(cfg, res, binary):
    """18: checkpoints that cost what changed, 20,000 and 100,000 small files (ckdirty_bench.py)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import ckdirty_bench as cd
    if not shutil.which("rsync"):
        raise BenchError("rsync is not installed")
    for files in ((2000,) if cfg.quick else (20000, 100000)):
        try:
            f = cd.measure({"after": binary}, files=files, rounds=3 if cfg.quick else 5)
        except (cd.BenchError, OSError, subprocess.SubprocessError) as e:
            raise BenchError(str(e))
        rs, a = f["rsync_a_unchanged_ms"], f["after"]
        for what, label in (("unchanged", "nothing changed"), ("changed10", "10 files changed")):
            ms = a[what + "_ms"]
            res.add("18", "checkpoint of %d files, %s (median of %d; %s)" % (
                files, label, f["rounds"], a["last"][what]), ms, "ms",
                "rsync -a onto an up-to-date copy", rs, goal=None if cfg.quick else "<= 0.1x",
                ok=None if cfg.quick else ms <= 0.1 * rs,
                extra={"all_ms": a[what + "_all"], "rsync_all_ms": f["rsync_all"]})


def bench_code(cfg, res, binary):
    """16: code contexts vs a Jupyter kernel driven by jupyter_client (code_bench.py)."""
    # Debian's python3: jupyter_client and ipykernel are its packages (install-deps bench).
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "code_bench.py")
    argv = ["/usr/bin/python3", script, os.path.abspath(binary)] + (["--quick"] if cfg.quick else [])
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        f = json.loads(p.stdout)
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        raise BenchError("code_bench.py: %s %s" % (e, (p.stderr[-500:] if "p" in dir() else "")))
    ru, ju = f["runner"], f["jupyter"]
    res.add("16", "round trip of `1+1` in a warm Python context, POST /code, p50 of %d" % f["n"],
            ru["rtt_p50_ms"], "ms", "the same through a Jupyter kernel (jupyter_client)",
            ju["rtt_p50_ms"], goal="<= 0.5x", ok=ru["rtt_p50_ms"] <= 0.5 * ju["rtt_p50_ms"],
            extra={"p90_ms": ru["rtt_p90_ms"], "baseline_p90_ms": ju["rtt_p90_ms"]})
    res.add("16", "create a context to its first result (median)", ru["first_result_ms"], "ms",
            "start an ipykernel to its first result", ju["first_result_ms"], goal="<= 0.5x",
            ok=ru["first_result_ms"] <= 0.5 * ju["first_result_ms"])
    res.add("16", "RSS of an idle Python context's interpreter", ru["idle_rss_kib"] / 1024.0,
            "MiB", "an idle ipykernel", ju["idle_rss_kib"] / 1024.0)
    res.add("16", "16 contexts created, one cell in each at once", ru["sixteen_ms"], "ms",
            extra={"errors": ru["sixteen_errors"], "runner_rss_kib": ru["runner_rss_kib"]})


def envd_rtt(port, path, body, ctype, n):
    """p50/p90 (ms) of n round trips on one keep-alive connection: the whole answer read."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    times = []
    for _ in range(n):
        t0 = time.monotonic()
        c.request("POST", path, body=body, headers={"Content-Type": ctype})
        r = c.getresponse()
        data = r.read()
        times.append((time.monotonic() - t0) * 1000)
        if r.status != 200 or not data:
            raise BenchError("%s: HTTP %d %r" % (path, r.status, data[-200:]))
    c.close()
    return times


def connect_env(obj):
    b = json.dumps(obj).encode()
    return struct.pack(">BI", 0, len(b)) + b


def bench_envd(cfg, res, binary):
    """17: E2B's envd face (--envd-listen, docs/design/envd.md) against the runner's own APIs,
    same runner, same run: the round trip of `true` through process.Process/Start vs POST
    /command (one Python client, keep-alive, interleaved in blocks of 10), and a stream of
    tput_mib MiB through Start (base64 in Connect envelopes, curl) vs the relay floor."""
    eport = free_port()
    r = Runner(binary, cfg, extra=("--envd-listen", "127.0.0.1:%d" % eport), name="envd")
    try:
        # As E2B's SDK sends it: commands.run() asks for stdin only with `stdin: true`.
        start = connect_env({"process": {"cmd": "/bin/sh", "args": ["-c", "true"]}, "stdin": False})
        cmd = json.dumps({"command": "true"})
        envd_t, cmd_t = [], []
        for _ in range(max(1, cfg.rtt_n // 10)):
            envd_t += envd_rtt(eport, "/process.Process/Start", start, "application/connect+json", 10)
            cmd_t += envd_rtt(r.port, "/command", cmd, "application/json", 10)
        gen = "yes \"$(printf '%%099d' 0)\" | head -c %d" % cfg.tput_bytes
        body = os.path.join(r.tmp, "start.bin")
        with open(body, "wb") as f:
            f.write(connect_env({"process": {"cmd": "/bin/sh", "args": ["-c", gen]}, "stdin": False}))
        st, rl, rt, wire = [], [], [], []
        for i in range(cfg.tput_reps):
            if i % 2:
                rl.append(relay_run(cfg, gen))
                rt.append(relay_run(cfg, gen, own_session=True))
            t0 = time.monotonic()
            c = subprocess.run(["curl", "-sN", "-o", "/dev/null", "-w", "%{http_code} %{size_download}",
                                "-H", "Content-Type: application/connect+json", "--data-binary",
                                "@" + body, "http://127.0.0.1:%d/process.Process/Start" % eport],
                               stdout=subprocess.PIPE, text=True)
            st.append(time.monotonic() - t0)
            code, size = (c.stdout.split() + ["0", "0"])[:2]
            if c.returncode != 0 or code != "200" or int(size) < cfg.tput_bytes * 4 // 3:
                raise BenchError("envd stream: curl exit %d, HTTP %s, %s bytes" % (
                    c.returncode, code, size))
            wire.append(int(size))
            if not i % 2:
                rt.append(relay_run(cfg, gen, own_session=True))
                rl.append(relay_run(cfg, gen))
    finally:
        r.close()
    e50, c50 = pct(envd_t, 50), pct(cmd_t, 50)
    res.add("17", "round trip of `true`, envd Start (Connect stream), p50 of %d" % len(envd_t),
            e50, "ms", "POST /command, same runner, same client", c50, goal="<= 1.1x",
            ok=e50 <= 1.1 * c50, extra={"p90_ms": pct(envd_t, 90), "baseline_p90_ms": pct(cmd_t, 90)})
    stat = min if cfg.tput_stat == "best" else statistics.median
    mbs, relay_mbs = cfg.tput_bytes / stat(st) / 1e6, cfg.tput_bytes / stat(rl) / 1e6
    task_mbs = cfg.tput_bytes / stat(rt) / 1e6
    # The goal on the own-session floor, as bench 5's (a task's generator is in a session of
    # its own); the bench's-session floor printed beside it, without a goal.
    res.add("17", "stream %d MiB through envd Start (base64 in envelopes, %s of %d) vs the relay, "
            "generator in its own session as a task's" % (cfg.tput_bytes // MIB, cfg.tput_stat, len(st)),
            mbs, "MB/s", "relay, own session", task_mbs, goal=">= 0.8x", ok=mbs >= 0.8 * task_mbs,
            extra={"seconds": st, "baseline_seconds": rt, "wire_bytes": wire})
    res.add("17", "the same vs the relay, generator in the bench's session", mbs, "MB/s",
            "relay (bench's session)", relay_mbs, extra={"baseline_seconds": rl})


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runner", default=os.path.join(ROOT, "build", "forceai-runner"))
    ap.add_argument("--static", default=os.path.join(ROOT, "build", "static", "forceai-runner"),
                    help="static build, measured too when the file exists")
    ap.add_argument("--policy", default=os.path.join(ROOT, "seccomp", "default.json"))
    ap.add_argument("--runner-arg", action="append", default=[], help="extra runner argument (repeatable)")
    ap.add_argument("--tools", default=os.path.join(ROOT, "build", "bench"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench"))
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run of the bench code")
    ap.add_argument("--only", default="", help="comma-separated benchmark numbers (default: all)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a goal is missed")
    ap.add_argument("--ready-runs", type=int)
    ap.add_argument("--rtt-n", type=int)
    ap.add_argument("--sandbox-n", type=int)
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--tput-mib", type=int)
    ap.add_argument("--tput-reps", type=int)
    ap.add_argument("--tput-stat", choices=("best", "median"), default="best",
                    help="statistic of the stream runs (5), the same for runner, relay and pipe")
    ap.add_argument("--conc-tasks", type=int)
    ap.add_argument("--conc-kib", type=int)
    ap.add_argument("--load-seconds", type=int, help="duration of the load run (8)")
    ap.add_argument("--load-clients", type=int, help="concurrent clients of the load run (8)")
    ap.add_argument("--files-mib", type=int, help="file size of the files benchmark (9)")
    ap.add_argument("--files-rounds", type=int, help="rounds of the files benchmark (9)")
    cfg = ap.parse_args()
    # The runner refuses relative paths (design/architecture.md#options-one-set-of-rules): BENCH_POLICY may be one.
    cfg.policy = os.path.abspath(cfg.policy)
    q = cfg.quick
    defaults = dict(ready_runs=(5, 20), rtt_n=(50, 1000), sandbox_n=(10, 200), rounds=(2, 10),
                    tput_mib=(32, 1024), tput_reps=(1, 5), conc_tasks=(16, 256), conc_kib=(256, 1024),
                    load_seconds=(3, 60), load_clients=(16, 16), files_mib=(32, 1024),
                    files_rounds=(1, 3))
    for k, (quick, full) in defaults.items():
        if getattr(cfg, k) is None:
            setattr(cfg, k, quick if q else full)
    cfg.tput_bytes = cfg.tput_mib * MIB
    cfg.conc_bytes = cfg.conc_kib * 1024
    cfg.rounds = max(1, cfg.rounds)
    only = set(x.strip() for x in cfg.only.split(",") if x.strip())
    cfg.runner = os.path.abspath(cfg.runner)
    if not os.access(cfg.runner, os.X_OK):
        sys.exit("bench: runner %s is missing or not executable (make, or BENCH_RUNNER=...)" % cfg.runner)
    static = os.path.abspath(cfg.static) if cfg.static and os.path.exists(cfg.static) else None
    binaries = [("static" if cfg.runner == static else "dev", cfg.runner)] + \
        ([("static", static)] if static and static != cfg.runner else [])
    for t in ("ready", "rawspawn", "rtt"):
        if not os.access(os.path.join(cfg.tools, t), os.X_OK):
            sys.exit("bench: driver %s missing (make bench builds it)" % os.path.join(cfg.tools, t))
    if os.geteuid() != 0:
        log("not root: the runner cannot switch tasks to uid 1000; results may be errors")

    ver = subprocess.run([cfg.runner, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    cfg.meta = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": platform.node(),
        "cpus": os.cpu_count(), "kernel": platform.release(), "quick": q,
        "loadavg_before": " ".join(open("/proc/loadavg").read().split()[:3]),
        "runner": cfg.runner, "runner_version": ver.stdout.strip(), "static": static,
        "params": {k: getattr(cfg, k) for k in defaults},
    }
    res = Results()
    tmpdir = tempfile.mkdtemp(prefix="forceai-bench-")
    t_start = time.monotonic()
    steps = [
        ("1", "start-to-ready", lambda: bench_ready(cfg, res, binaries)),
        ("2", "idle RSS", lambda: bench_rss(cfg, res, binaries)),
        ("3", "binary size", lambda: bench_size(cfg, res, tmpdir)),
        ("4", "round trip + 7 confinement", lambda: bench_latency(cfg, res, cfg.runner)),
        ("5", "throughput", lambda: bench_throughput(cfg, res, static or cfg.runner)),
        ("6", "concurrency", lambda: [bench_concurrency(cfg, res, n, b) for n, b in binaries]),
        ("8", "load", lambda: bench_load(cfg, res, cfg.runner)),
        ("9", "files", lambda: bench_files(cfg, res, cfg.runner)),
        ("10", "port proxy", lambda: bench_proxy(cfg, res, cfg.runner)),
        ("11", "port proxy vs nginx", lambda: bench_portproxy(cfg, res, static or cfg.runner)),
        ("12", "round trip, Python client", lambda: bench_pyclient(cfg, res, static or cfg.runner)),
        ("13", "reset", lambda: bench_reset(cfg, res, static or cfg.runner)),
        ("14", "checkpoints", lambda: bench_checkpoints(cfg, res, static or cfg.runner)),
        ("15", "audit cost", lambda: bench_audit(cfg, res, cfg.runner)),
        ("16", "code contexts", lambda: bench_code(cfg, res, cfg.runner)),
        ("17", "envd face", lambda: bench_envd(cfg, res, static or cfg.runner)),
        ("18", "checkpoints that cost what changed",
         lambda: bench_ckdirty(cfg, res, static or cfg.runner)),
    ]
    try:
        for num, label, fn in steps:
            if only and num not in only and not (num == "4" and "7" in only):
                continue
            t0 = time.monotonic()
            log("%s %s ..." % (num, label))
            try:
                fn()
            except (BenchError, OSError, subprocess.SubprocessError) as e:
                res.error(num, str(e))
            log("%s %s done in %.1f s" % (num, label, time.monotonic() - t0))
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    cfg.meta["loadavg_after"] = " ".join(open("/proc/loadavg").read().split()[:3])
    cfg.meta["seconds"] = round(time.monotonic() - t_start, 1)
    write_reports(res, cfg.meta, cfg.out)
    print_table(res)
    print("results: %s, %s (%.0f s)" % (os.path.join(cfg.out, "results.json"),
                                       os.path.join(cfg.out, "results.md"), cfg.meta["seconds"]))
    missed = [r for r in res.rows if r["ok"] is False]
    if res.errors:
        sys.exit(1)
    if cfg.strict and missed:
        sys.exit(1)


if __name__ == "__main__":
    main()
