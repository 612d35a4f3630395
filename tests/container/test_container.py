#!/usr/bin/env python3
"""Container tests of forceai/runtime-runner (issues 7 and 11), with podman as root.

Builds the images from a clean copy of the repository with no network at all
(unshare --net), runs them as real containers and checks, through the
endpoint published on a loopback port:
  - the runner is PID 1; no zombie after a task double-forks 100 orphans, nor
    after 100 orphans are reparented to PID 1 from outside a task;
  - tasks run as the unprivileged user with seccomp, no_new_privs and no
    capabilities, and /v1/hardening says so;
  - `podman stop` with a running task: the task tree gets SIGTERM, the
    container exits within the grace period with exit code 0;
  - the BASE-built Python variant runs python3 -c "print(6*7)" and streams 42 and
    stays lean; the :code tier's code contexts import numpy, pandas, matplotlib;
    image/README.md's sizes table is the built images' (image/sizes.sh --check);
  - the OpenSandbox drop-in: the runner as child of a bootstrap-like PID 1
    wrapper (subreaper mode), and the replacement execd image (/execd +
    /bootstrap.sh) installed the way OpenSandbox's Docker and Kubernetes
    runtimes install it, with the runner as PID 1 on port 44772;
  - least privilege: real tasks, the files API and tree kills with exactly
    the documented --cap-drop ALL --cap-add line; every partial set refused
    at start with the missing capabilities named;
  - non-root mode (--user 1000:1000 --cap-drop ALL, no-new-privileges) and
    read-only mode (--read-only, tmpfs /tmp, volume /workspace): tasks, the
    /v1/hardening report, 403 for another uid, the state dir fallback;
  - image/kubernetes/*.yaml through `podman kube play` with a token Secret:
    probes, tasks, `podman kube down`;
and prints figures: image sizes, start-to-ready median of 10, idle RSS.

Environment: IMAGE_ENGINE (podman), IMAGE_NAME (forceai/runtime-runner),
RUNNER_BIN (build/static/forceai-runner), CT_REUSE_IMAGES=1 (skip the builds
when the images exist), CT_KEEP=1 (keep containers for debugging).
Prints one line per check and last `N passed, N failed`; exits 1 on failure.
"""

import hashlib
import json
import re
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ENGINE = os.environ.get("IMAGE_ENGINE", "podman")
NAME = os.environ.get("IMAGE_NAME", "forceai/runtime-runner")
IMG = NAME + ":latest"
IMG_PY = NAME + ":python"
IMG_CODE = NAME + ":code"
IMG_EXECD = NAME + ":opensandbox-execd"
BASE_PY = "localhost/forceai-base-python:bookworm"
BASE_CODE = "localhost/forceai-base-code:bookworm"
RUNNER_BIN = os.environ.get("RUNNER_BIN", os.path.join(ROOT, "build/static/forceai-runner"))
TOKEN = "ct-" + os.urandom(12).hex()
GRACE_S = 5.0  # the runner's default --grace-ms
PREFIX = "forceai-ct-%d-" % os.getpid()

passed = 0
failed = 0
figures = []
containers = []
tmpdirs = []


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        # on success only a short one-line detail (a figure, a value) is shown
        if "\n" in detail or len(detail) > 160:
            detail = ""
        print("ok   - %s%s" % (name, (": " + detail) if detail else ""), flush=True)
    else:
        failed += 1
        print("FAIL - %s%s" % (name, (": " + detail) if detail else ""), flush=True)
    return ok


def figure(name, value):
    figures.append((name, value))
    print("     # %s: %s" % (name, value), flush=True)


def sh(cmd, timeout=600, input=None, env=None):
    """Run a command (list); return CompletedProcess (text, never raises)."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              input=input, env=env)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(cmd, 124, e.stdout or "", "timeout: %s" % e)
    except OSError as e:
        return subprocess.CompletedProcess(cmd, 127, "", str(e))


def eng(*args, timeout=600):
    return sh([ENGINE] + list(args), timeout=timeout)


def tail(s, n=600):
    s = (s or "").strip()
    return s[-n:]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def image_size(ref):
    r = eng("image", "inspect", "--format", "{{.Size}}", ref)
    try:
        return int(r.stdout.strip())
    except ValueError:
        return None


def mib(n):
    return "%d bytes (%.2f MiB)" % (n, n / 1048576.0)


# --- HTTP ------------------------------------------------------------------------------

CURRENT = object()  # token argument: the suite's TOKEN at call time


def http(method, url, body=None, token=CURRENT, timeout=30, headers=None):
    """Returns (status, headers, body bytes); status 0 on connection errors."""
    if token is CURRENT:
        token = TOKEN
    h = dict(headers or {})
    if token:
        h["X-EXECD-ACCESS-TOKEN"] = token
    data = None
    if body is not None:
        data = json.dumps(body).encode() if not isinstance(body, bytes) else body
        h.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers or {}), e.read()
    except (urllib.error.URLError, OSError, ConnectionError) as e:
        return 0, {}, str(e).encode()


def frames(body):
    """execd /command stream: JSON objects separated by blank lines."""
    out = []
    for chunk in body.decode("utf-8", "replace").replace("\r\n", "\n").split("\n\n"):
        chunk = chunk.strip()
        if not chunk:
            continue
        if chunk.startswith("data:"):  # tolerate an SSE-style prefix
            chunk = chunk[5:].strip()
        try:
            out.append(json.loads(chunk))
        except ValueError:
            out.append({"type": "?unparsed", "text": chunk})
    return out


def sse(body):
    """Standard SSE: list of (event, data-json-or-text)."""
    out = []
    for block in body.decode("utf-8", "replace").replace("\r\n", "\n").split("\n\n"):
        ev, data = "message", []
        for line in block.split("\n"):
            if line.startswith(":") or not line:
                continue
            k, _, v = line.partition(":")
            v = v[1:] if v.startswith(" ") else v
            if k == "event":
                ev = v
            elif k == "data":
                data.append(v)
        if data:
            d = "\n".join(data)
            try:
                d = json.loads(d)
            except ValueError:
                pass
            out.append((ev, d))
    return out


def run_command(port, command, timeout=60, **extra):
    body = {"command": command}
    body.update(extra)
    st, _, raw = http("POST", "http://127.0.0.1:%d/command" % port, body, timeout=timeout)
    return st, frames(raw) if st == 200 else raw


def stdout_lines(events):
    return [e.get("text", "").rstrip("\n") for e in events if e.get("type") == "stdout"]


def terminal(events):
    for e in events:
        if e.get("type") in ("execution_complete", "error"):
            return e
    return None


def wait_ping(port, deadline_s=15.0, token=CURRENT):
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        st, _, _ = http("GET", "http://127.0.0.1:%d/ping" % port, token=token, timeout=1)
        if st == 200:
            return time.monotonic() - t0
        time.sleep(0.01)
    return None


# --- containers ----------------------------------------------------------------------

def run_container(suffix, image, args=(), run_flags=(), port=None, cport=8080, env=None):
    name = PREFIX + suffix
    containers.append(name)
    cmd = ["run", "-d", "--name", name]
    if port:
        cmd += ["-p", "127.0.0.1:%d:%d" % (port, cport)]
    for k, v in (env or {"EXECD_ACCESS_TOKEN": TOKEN}).items():
        cmd += ["-e", "%s=%s" % (k, v)]
    cmd += list(run_flags) + [image] + list(args)
    r = eng(*cmd, timeout=120)
    return name, r


def logs(name):
    r = eng("logs", name, timeout=30)
    return (r.stdout or "") + (r.stderr or "")


def proc_table(name):
    """[(pid, ppid, state, comm)] of every process in the container, from
    /proc (works in images without ps)."""
    r = eng("exec", name, "sh", "-c", "cat /proc/[0-9]*/stat 2>/dev/null", timeout=60)
    rows = []
    for line in r.stdout.splitlines():
        try:
            lp, rp = line.index("("), line.rindex(")")
            pid = int(line[:lp])
            comm = line[lp + 1:rp]
            rest = line[rp + 2:].split()
            rows.append((pid, int(rest[1]), rest[0], comm))
        except (ValueError, IndexError):
            continue
    return rows


def busybox_ps(name):
    r = eng("exec", name, "ps", "-o", "pid,ppid,stat,comm", timeout=60)
    rows = []
    for line in r.stdout.splitlines()[1:]:
        f = line.split(None, 3)
        if len(f) == 4:
            rows.append((int(f[0]), int(f[1]), f[2], f[3]))
    return rows, r


def wait_gone(name, comm, timeout=15.0, table=proc_table):
    t0 = time.monotonic()
    rows = []
    while time.monotonic() - t0 < timeout:
        rows = table(name)
        if isinstance(rows, tuple):
            rows = rows[0]
        if not [r for r in rows if r[3] == comm and r[2] != "Z"]:
            return rows
        time.sleep(0.2)
    return rows


def stop_and_measure(name, timeout=20):
    t0 = time.monotonic()
    r = eng("stop", "-t", str(timeout), name, timeout=timeout + 30)
    dt = time.monotonic() - t0
    code = eng("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
    return dt, code, r


# --- the tests -------------------------------------------------------------------------

def t_prereqs():
    ok = check("running as root", os.geteuid() == 0, "podman here needs root")
    ok &= check("%s available" % ENGINE, shutil.which(ENGINE) is not None)
    have = os.path.isfile(RUNNER_BIN) and os.access(RUNNER_BIN, os.X_OK)
    ok &= check("runner binary present", have, RUNNER_BIN + ("" if have else " (run `make static`)"))
    if have:
        f = sh(["file", "-L", RUNNER_BIN])
        if f.returncode == 0:
            check("runner binary is static", "statically linked" in f.stdout or "static-pie" in f.stdout,
                  f.stdout.strip().split(":", 1)[-1].strip()[:120])
    return ok


def clean_copy():
    """The repository's sources (tracked + untracked, not ignored, no build/),
    plus the static binary: what a clean checkout has after `make static`."""
    dst = tempfile.mkdtemp(prefix="forceai-ct-src-")
    tmpdirs.append(dst)
    r = sh(["git", "-C", ROOT, "ls-files", "-co", "--exclude-standard", "-z"])
    files = [f for f in r.stdout.split("\0") if f] if r.returncode == 0 else []
    if not files:
        for dp, dn, fn in os.walk(ROOT):
            rel = os.path.relpath(dp, ROOT)
            dn[:] = [d for d in dn if not (rel == "." and d in (".git", "build"))]
            files += [os.path.normpath(os.path.join(rel, f)) for f in fn]
    for f in files:
        if f.startswith("build/") or "/node_modules/" in f or f.startswith(".git/"):
            continue
        src = os.path.join(ROOT, f)
        if not os.path.lexists(src):
            continue
        d = os.path.join(dst, f)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        if os.path.islink(src):
            os.symlink(os.readlink(src), d)
        elif os.path.isfile(src):
            shutil.copy2(src, d)
    os.makedirs(os.path.join(dst, "build/static"))
    shutil.copy2(RUNNER_BIN, os.path.join(dst, "build/static/forceai-runner"))
    return dst


def offline(cmd):
    """Run a command with no network at all (a new empty net namespace)."""
    if shutil.which("unshare") and sh(["unshare", "--net", "true"]).returncode == 0:
        return ["unshare", "--net", "--"] + cmd, True
    return cmd, False


def build_args():
    ver = "0.0.0-dev"
    try:
        with open(os.path.join(ROOT, "runner/core/version.h")) as f:
            for line in f:
                if "FORCEAI_RUNNER_VERSION \"" in line:
                    ver = line.split('"')[1]
    except OSError:
        pass
    return ["--build-arg", "VERSION=" + ver, "--build-arg", "REVISION=container-test"]


def t_build():
    if os.environ.get("CT_REUSE_IMAGES") == "1" and image_size(IMG) and image_size(IMG_EXECD):
        check("image build skipped (CT_REUSE_IMAGES=1)", True)
        return True
    src = clean_copy()
    r = sh([os.path.join(src, "image/stage-rootfs.sh")], timeout=120)
    if not check("stage-rootfs.sh in a clean copy", r.returncode == 0, tail(r.stderr + r.stdout, 300)):
        return False
    flags = ["--pull=never", "--network", "none", "--layers=false"]
    t0 = time.monotonic()
    cmd, isolated = offline([ENGINE, "build"] + flags + build_args() +
                            ["-f", "Containerfile", "-t", IMG, src])
    r = sh(cmd, timeout=600)
    dt = time.monotonic() - t0
    check("default image builds offline%s" % (" (empty network namespace)" if isolated else ""),
          r.returncode == 0, tail(r.stderr, 800) if r.returncode else "%.1f s" % dt)
    if r.returncode == 0:
        figure("default image build time (offline, vfs)", "%.1f s" % dt)
    cmd, _ = offline([ENGINE, "build"] + flags + build_args() +
                     ["-f", "image/opensandbox/Containerfile", "-t", IMG_EXECD, src])
    r2 = sh(cmd, timeout=600)
    check("OpenSandbox execd image builds offline", r2.returncode == 0, tail(r2.stderr, 800) if r2.returncode else "")
    prune()
    return r.returncode == 0


def prune():
    """Drop the images our rebuilds left untagged (only ours: by label)."""
    eng("image", "prune", "-f", "--filter", "label=io.forceai.runner.image", timeout=120)


def t_image_contents():
    r = eng("image", "inspect", IMG)
    try:
        cfg = json.loads(r.stdout)[0]["Config"]
    except (ValueError, IndexError, KeyError):
        check("image inspect", False, tail(r.stderr))
        return
    check("ENTRYPOINT is /sbin/forceai-runner", cfg.get("Entrypoint") == ["/sbin/forceai-runner"],
          str(cfg.get("Entrypoint")))
    check("no CMD (no stray runner arguments)", not cfg.get("Cmd"), str(cfg.get("Cmd")))
    check("EXPOSE 8080", "8080/tcp" in (cfg.get("ExposedPorts") or {}))
    check("STOPSIGNAL SIGTERM", cfg.get("StopSignal") in ("SIGTERM", "15"), str(cfg.get("StopSignal")))
    labels = cfg.get("Labels") or {}
    want = ["title", "description", "source", "licenses", "version"]
    miss = [k for k in want if not labels.get("org.opencontainers.image." + k)]
    check("OCI labels org.opencontainers.image.*", not miss, "missing %s" % miss if miss else
          "version=%s" % labels.get("org.opencontainers.image.version"))

    script = r"""
set -e
stat -c '%u:%g %a %n' /workspace /tmp /run /home/agent /sbin/forceai-runner
grep -E '^(root|agent):' /etc/passwd
grep -E '^agent:' /etc/group
test -s /etc/ssl/certs/ca-certificates.crt && echo ca-ok
sha256sum /etc/forceai-runner/seccomp.json
readlink /bin/sh
"""
    r = eng("run", "--rm", "--network", "none", "--entrypoint", "/bin/sh", IMG, "-c", script, timeout=60)
    out = r.stdout
    check("layout: /workspace 1000:1000, /tmp 1777, /run 755",
          "1000:1000 755 /workspace" in out and "0:0 1777 /tmp" in out and "0:0 755 /run" in out,
          tail(out + r.stderr, 400))
    check("layout: agent user 1000:1000 home /home/agent",
          "agent:x:1000:1000:" in out and ":/home/agent:" in out and "agent:x:1000:" in out
          and "1000:1000 750 /home/agent" in out)
    check("layout: CA certificates", "ca-ok" in out)
    try:
        with open(os.path.join(ROOT, "seccomp/default.json"), "rb") as f:
            want_sum = hashlib.sha256(f.read()).hexdigest()
    except OSError:
        want_sum = "?"
    check("layout: seccomp policy = seccomp/default.json", want_sum in out)
    check("layout: static busybox shell userland", out.strip().endswith("busybox"))


def t_size():
    n = image_size(IMG)
    if n is None:
        check("default image size", False, "no image")
        return
    figure("default image size (uncompressed)", mib(n))
    check("default image <= 6 MiB", n <= 6 * 1048576, mib(n))
    n2 = image_size(IMG_EXECD)
    if n2:
        figure("OpenSandbox execd image size", mib(n2))


def t_main():
    port = free_port()
    name, r = run_container("main", IMG, port=port)
    if not check("container starts, published on 127.0.0.1:%d" % port, r.returncode == 0, tail(r.stderr)):
        return
    dt = wait_ping(port)
    if not check("GET /ping through the published loopback port", dt is not None,
                 "%.0f ms" % (dt * 1000) if dt is not None else tail(logs(name))):
        return
    time.sleep(0.5)
    st = eng("exec", name, "cat", "/proc/1/status").stdout
    rss = [l.split(":", 1)[1].strip() for l in st.splitlines() if l.startswith("VmRSS:")]
    figure("runner RSS, idle, in the container", rss[0] if rss else "?")

    comm = eng("exec", name, "cat", "/proc/1/comm").stdout.strip()
    cmdline = eng("exec", name, "cat", "/proc/1/cmdline").stdout.split("\0")[0]
    check("runner is PID 1", comm == "forceai-runner" and cmdline == "/sbin/forceai-runner",
          "comm=%r argv0=%r" % (comm, cmdline))

    st, _, _ = http("POST", "http://127.0.0.1:%d/command" % port, {"command": "id"}, token=None)
    check("a request without the token is refused", st in (401, 403), "HTTP %s" % st)

    st, ev = run_command(port, "id -u; id -g; id -un; "
                         "grep -E '^(Seccomp|NoNewPrivs|CapInh|CapPrm|CapEff|CapBnd|CapAmb):' /proc/self/status")
    lines = stdout_lines(ev) if st == 200 else []
    kv = {}
    for l in lines:
        if ":" in l:
            k, v = l.split(":", 1)
            kv[k.strip()] = v.strip()
    term = terminal(ev) if st == 200 else None
    check("task runs through the endpoint (POST /command)", st == 200 and term is not None
          and term.get("type") == "execution_complete", "HTTP %s %s" % (st, tail(str(ev), 300)))
    check("task runs as the unprivileged user 1000:1000",
          lines[:3] == ["1000", "1000", "agent"], str(lines[:3]))
    caps = [kv.get(k) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")]
    check("task has no capabilities (all five sets empty)",
          all(c is not None and int(c, 16) == 0 for c in caps), str(caps))
    check("task is under seccomp (Seccomp: 2) with no_new_privs",
          kv.get("Seccomp") == "2" and kv.get("NoNewPrivs") == "1",
          "Seccomp=%s NoNewPrivs=%s" % (kv.get("Seccomp"), kv.get("NoNewPrivs")))

    st, _, raw = http("GET", "http://127.0.0.1:%d/v1/hardening" % port)
    try:
        rep = json.loads(raw)
    except ValueError:
        rep = None
    check("GET /v1/hardening returns JSON", st == 200 and isinstance(rep, dict), "HTTP %s" % st)
    if isinstance(rep, dict):
        ok_s, why_s = hardening_seccomp(rep)
        check("hardening report: seccomp in force", ok_s, why_s)
        ok_c, why_c = hardening_no_caps(rep)
        check("hardening report: tasks have no capabilities", ok_c, why_c)
        check("hardening report: init_mode pid1", rep.get("init_mode") == "pid1", str(rep.get("init_mode")))
        check("hardening report: websocket true (the image serves PTY sessions)",
              rep.get("websocket") is True, str(rep.get("websocket")))
        print("     # hardening report: %s" % json.dumps(rep, sort_keys=True)[:1500])

    st, _, raw = http("POST", "http://127.0.0.1:%d/v1/tasks" % port,
                      {"task": "echo native-$((6*7))", "capability": "exec"}, timeout=60)
    evs = sse(raw) if st == 200 else []
    out = "".join((d.get("text") or d.get("data") or "") if isinstance(d, dict) else "" for e, d in evs if e == "stdout")
    ex = [d for e, d in evs if e == "exit"]
    check("native POST /v1/tasks streams stdout and exit 0",
          st == 200 and "native-42" in out and ex and ex[0].get("exit_code") == 0,
          "HTTP %s %s" % (st, tail(raw.decode("utf-8", "replace"), 300)))

    t_pty_ws(port)
    t_watch(port)
    t_zombies(name, port, pid1_comm="forceai-runner")
    return name, port


def t_execd12(port, label):
    """OpenSandbox execd 1.2 through an image: argv, token-free /ready,
    EXECD_ENVS written the way the SDK's commands.set_env writes it (a
    command appending KEY='value' to $EXECD_ENVS) and seen by the next
    command, GET /session."""
    st, ev = run_command(port, None, argv=["printf", "%s|", "a b", "$HOME"])
    check("%s: argv runs without a shell" % label, stdout_lines(ev) == ["a b|$HOME|"] if st == 200
          else False, "HTTP %s %s" % (st, tail(str(ev), 200)))
    st, _, raw = http("GET", "http://127.0.0.1:%d/ready" % port, token=None)
    check("%s: GET /ready without a token" % label,
          st == 200 and b'"initialized":true' in raw, "HTTP %s %r" % (st, raw[:200]))
    st, ev = run_command(port, "printf \"%s='%s'\\n\" SDK_VAR \"set by sdk\" >> \"$EXECD_ENVS\" && echo appended")
    ok = st == 200 and stdout_lines(ev) == ["appended"]
    st, ev = run_command(port, 'echo "[$SDK_VAR]"', envs={"OTHER": "x"})
    check("%s: EXECD_ENVS appended by a command is read by the next one" % label,
          ok and st == 200 and stdout_lines(ev) == ["[set by sdk]"], tail(str(ev), 300))
    st, _, raw = http("POST", "http://127.0.0.1:%d/session" % port, {})
    sid = json.loads(raw).get("session_id") if st == 200 else None
    st, _, raw = http("GET", "http://127.0.0.1:%d/session" % port)
    check("%s: GET /session lists the session" % label,
          st == 200 and sid and sid in raw.decode(), "HTTP %s %r" % (st, raw[:200]))


def t_watch(port, label="image"):
    """GET /files/watch from a client outside the box while a task creates,
    writes, renames and deletes files in /workspace."""
    run_command(port, "mkdir -p /workspace/w")  # the directory first: the watch needs it
    buf = b""
    want = {("create", "/workspace/w/a"), ("write", "/workspace/w/a"),
            ("rename", "/workspace/w/b"), ("remove", "/workspace/w/b")}
    seen = set()
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    try:
        sock.sendall(("GET /files/watch?path=/workspace/w&recursive=true HTTP/1.1\r\nHost: x\r\n"
                      "X-EXECD-ACCESS-TOKEN: %s\r\n\r\n" % TOKEN).encode())
        while b"watching" not in buf:
            d = sock.recv(65536)
            if not d:
                break
            buf += d
        run_command(port, "cd /workspace/w && echo x > a && mv a b && rm b")
        end = time.monotonic() + 15
        while not want <= seen and time.monotonic() < end:
            try:
                d = sock.recv(65536)
            except socket.timeout:
                break
            if not d:
                break
            buf += d
            for m in re.finditer(rb'data: (\{[^\n]*\})', buf):
                try:
                    e = json.loads(m.group(1))
                except ValueError:
                    continue
                seen.add((e.get("type"), e.get("path")))
    finally:
        sock.close()
    check("%s: GET /files/watch sees a task's create, write, rename, remove" % label,
          want <= seen, "missing %s" % sorted(want - seen))


def t_pty_ws(port, label="image"):
    """A PTY session through the image with a real WebSocket client (Debian's
    python3-websockets): echo, resize, Ctrl-C, takeover, exit."""
    r = sh(["/usr/bin/python3", os.path.join(ROOT, "tests", "container", "pty_client.py"),
            str(port), TOKEN], timeout=120)
    try:
        res = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        res = {"error": [False, tail(r.stdout + r.stderr)]}
    for st in ("echo", "viewer", "resize", "ctrl_c", "takeover", "exit"):
        ok, detail = res.get(st, [False, "not reached: %s" % res.get("error")])
        check("PTY WebSocket through the %s: %s" % (label, st), ok, str(detail)[-200:])


def multipart(parts, boundary="ctBoUnDaRy"):
    """parts: [(name, filename or None, bytes)] -> (body, content type)."""
    out = b""
    for n, fn, content in parts:
        cd = 'Content-Disposition: form-data; name="%s"' % n
        if fn is not None:
            cd += '; filename="%s"' % fn
        out += b"--" + boundary.encode() + b"\r\n" + cd.encode() + b"\r\n\r\n" + content + b"\r\n"
    return out + b"--" + boundary.encode() + b"--\r\n", "multipart/form-data; boundary=" + boundary


def sleeps_alive(name, marker):
    """Processes of the container whose command line holds marker (not zombies)."""
    r = eng("exec", name, "sh", "-c",
            "for p in /proc/[0-9]*; do tr '\\0' ' ' <$p/cmdline 2>/dev/null; echo; done", timeout=60)
    return [l for l in r.stdout.splitlines() if marker in l]


def wait_no_marker(name, marker, timeout=10.0):
    t0 = time.monotonic()
    left = sleeps_alive(name, marker)
    while left and time.monotonic() - t0 < timeout:
        time.sleep(0.2)
        left = sleeps_alive(name, marker)
    return left


def workload(name, port, label, uid=1000, gid=1000, root="/workspace"):
    """Real work through the API, the way a client uses a box: an exec task
    (identity, stdio reopened through /dev/stderr and /proc/self/fd), the
    files API (upload, download, info, mkdir, chmod, mv, delete; the owner
    of what it writes), the kill of a task tree with a setsid() grandchild
    (DELETE /command), a native task's timeout, an execd session. Returns
    the number of failed checks."""
    base = "http://127.0.0.1:%d" % port
    bad0 = failed

    st, ev = run_command(port, "id -u; id -g; echo to-stderr >/dev/stderr; echo to-fd1 >/proc/self/fd/1")
    out = stdout_lines(ev) if st == 200 else []
    err = [e.get("text", "").rstrip("\n") for e in ev if e.get("type") == "stderr"] if st == 200 else []
    term = terminal(ev) if st == 200 else None
    check("%sexec task runs as %d:%d, reopens its stdio" % (label, uid, gid),
          out == [str(uid), str(gid), "to-fd1"] and err == ["to-stderr"] and term is not None
          and term.get("type") == "execution_complete",
          "HTTP %s out=%s err=%s term=%s" % (st, out, err, tail(json.dumps(term), 300)))

    d = root + "/ct-%s%d" % (re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-") or "w", os.getpid())
    payload = os.urandom(70000)
    st, _, raw = http("POST", base + "/directories", {d: {"mode": 755}})
    check("%sfiles API: mkdir %s" % (label, d), st == 200, "HTTP %s %s" % (st, tail(raw.decode(errors="replace"))))
    body, ct = multipart([("metadata", "metadata", json.dumps({"path": d + "/up.bin", "mode": 640}).encode()),
                          ("file", "up.bin", payload)])
    st, _, raw = http("POST", base + "/files/upload", body, headers={"Content-Type": ct}, timeout=60)
    check("%sfiles API: upload" % label, st == 200, "HTTP %s %s" % (st, tail(raw.decode(errors="replace"))))
    st, _, raw = http("GET", base + "/files/download?path=" + urllib.request.quote(d + "/up.bin"), timeout=60)
    check("%sfiles API: download returns the uploaded bytes" % label, st == 200 and raw == payload,
          "HTTP %s, %d bytes" % (st, len(raw)))
    st, _, raw = http("POST", base + "/files/permissions", {d + "/up.bin": {"mode": 600}})
    ok_perm = st == 200
    st, _, raw2 = http("POST", base + "/files/mv", [{"src": d + "/up.bin", "dest": d + "/moved.bin"}])
    ok_mv = st == 200
    st, ev = run_command(port, "stat -c '%u:%g %a' " + d + " " + d + "/moved.bin")
    lines = stdout_lines(ev) if st == 200 else []
    check("%sfiles API: chmod, mv; what it wrote is owned by %d:%d" % (label, uid, gid),
          ok_perm and ok_mv and lines == ["%d:%d 755" % (uid, gid), "%d:%d 600" % (uid, gid)],
          "chmod ok=%s mv ok=%s %s %s" % (ok_perm, ok_mv, lines, tail(raw.decode(errors="replace") + raw2.decode(errors="replace"))))
    st, _, raw = http("GET", base + "/files/info?path=" + urllib.request.quote(d + "/moved.bin"))
    check("%sfiles API: info" % label, st == 200 and b"moved.bin" in raw, "HTTP %s %s" % (st, tail(raw.decode(errors="replace"))))
    st1, _, _ = http("DELETE", base + "/files?path=" + urllib.request.quote(d + "/moved.bin"))
    st2, _, _ = http("DELETE", base + "/directories?path=" + urllib.request.quote(d))
    st3, _, _ = http("GET", base + "/files/info?path=" + urllib.request.quote(d))
    check("%sfiles API: delete file and directory" % label, st1 == 200 and st2 == 200 and st3 == 404,
          "HTTP %s %s then info %s" % (st1, st2, st3))

    marker = "31.4159%d" % os.getpid()
    st, ev = run_command(port, "(setsid sleep %s &); sleep %s & sleep %s" % (marker, marker, marker),
                         background=True)
    cid = ev[0].get("text") if st == 200 and ev and ev[0].get("type") == "init" else None
    t0 = time.monotonic()
    seen = []
    while cid and len(seen) < 3 and time.monotonic() - t0 < 5:
        seen = sleeps_alive(name, marker)
        time.sleep(0.1)
    stk, _, _ = http("DELETE", base + "/command?id=%s" % cid) if cid else (0, None, None)
    left = wait_no_marker(name, marker)
    check("%skill of a task tree (DELETE /command, setsid grandchild)" % label,
          cid and len(seen) == 3 and stk == 200 and not left,
          "id=%s seen=%d DELETE %s left=%s" % (cid, len(seen), stk, left))

    marker = "27.1828%d" % os.getpid()
    st, _, raw = http("POST", base + "/v1/tasks", {"task": "sleep %s & sleep %s" % (marker, marker),
                                                     "capability": "exec", "timeout_ms": 800}, timeout=30)
    ex = [dd for e, dd in sse(raw) if e == "exit"] if st == 200 else []
    left = wait_no_marker(name, marker)
    check("%snative task timeout kills the tree" % label,
          ex and ex[0].get("status") == "timeout" and not left,
          "HTTP %s exit=%s left=%s" % (st, ex[:1], left))

    st, _, raw = http("POST", base + "/session", {})
    sid = None
    try:
        sid = json.loads(raw).get("session_id") or json.loads(raw).get("id")
    except (ValueError, AttributeError):
        pass
    st2, _, raw2 = http("POST", base + "/session/%s/run" % sid, {"command": "id -u"}) if sid else (0, None, b"")
    check("%sexecd session runs a command" % label, st == 200 and st2 == 200 and str(uid).encode() in raw2,
          "HTTP %s %s / %s %s" % (st, tail(raw.decode(errors="replace"), 200), st2, tail(raw2.decode(errors="replace"), 200)))
    if sid:
        http("DELETE", base + "/session/%s" % sid)
    return failed - bad0


def hardening_seccomp(rep):
    """Is seccomp in force according to the report? The runner's format:
    {"confinement_enabled": true, "seccomp": {"allowed_syscalls": N, "policy": ...}}"""
    sc = rep.get("seccomp")
    if rep.get("confinement_enabled") is False or rep.get("enabled") is False:
        return False, "confinement disabled"
    if isinstance(sc, dict) and (sc.get("allowed_syscalls") or 0) > 0 and sc.get("policy"):
        return True, "policy %s, %s syscalls allowed, %s" % (sc.get("policy"), sc.get("allowed_syscalls"),
                                                          sc.get("architecture"))
    for k, v in walk(rep):
        if "seccomp" in k.lower():
            if v is True or (isinstance(v, str) and v.lower() in ("enabled", "filter", "on", "active", "2")):
                return True, "%s=%s" % (k, v)
            if isinstance(v, dict):
                for kk in ("enabled", "active", "loaded", "in_force", "enforced"):
                    if v.get(kk) is True:
                        return True, "%s.%s=true" % (k, kk)
                if v.get("mode") in ("filter", 2, "2"):
                    return True, "%s.mode=%s" % (k, v.get("mode"))
                if v.get("syscalls") or v.get("rules") or v.get("default_action") or v.get("defaultAction"):
                    return True, "%s (policy loaded)" % k
    return False, "no seccomp entry in force"


def hardening_no_caps(rep):
    caps = rep.get("capabilities")
    if isinstance(caps, str):
        ok = caps.startswith("all dropped") and all(
            s in caps for s in ("bounding", "effective", "permitted", "inheritable", "ambient"))
        return ok and rep.get("no_new_privs") is True, "%r, no_new_privs=%s" % (caps, rep.get("no_new_privs"))
    none_vals = (None, 0, "0", "", "none", "0000000000000000", [], {}, False)
    seen = []
    for k, v in walk(rep):
        kl = k.lower().rsplit(".", 1)[-1]
        if re.search(r"(^|_)(cap|caps|capabilities)($|_)", kl) or kl.startswith("cap"):
            if isinstance(v, dict):
                if all(vv in none_vals or vv in ("empty", "cleared", "dropped") for vv in v.values()):
                    seen.append(k)
                    continue
                return False, "%s=%s" % (k, v)
            if v in none_vals or v in ("empty", "cleared", "dropped", "all dropped") or v is True and "drop" in kl:
                seen.append(k)
                continue
            return False, "%s=%s" % (k, v)
    return (True, "keys: %s" % ", ".join(seen)) if seen else (False, "no capability entry in the report")


def walk(o, prefix=""):
    if isinstance(o, dict):
        for k, v in o.items():
            key = prefix + "." + k if prefix else k
            yield key, v
            if isinstance(v, dict):
                yield from walk(v, key)


ORPHAN_TASK = "for i in $(seq 100); do (sleep 1 &); done; echo spawned; sleep 3; echo done"


def orphan_task(name, port):
    """Run a task that double-forks 100 orphans (sleep 1) and keeps running
    for 3 s after they are spawned. Returns (table with the most orphans
    alive, table 1.3 s later: they have exited, the task still runs, status,
    task events)."""
    res = {}

    def go():
        res["r"] = run_command(port, ORPHAN_TASK, timeout=60)

    th = threading.Thread(target=go, daemon=True)
    t0 = time.monotonic()
    th.start()
    best, n_best, seen = [], -1, set()
    while time.monotonic() - t0 < 2.5:
        rows = proc_table(name)
        live = [r for r in rows if r[3] == "sleep" and r[2] != "Z"]
        seen.update(r[0] for r in live)
        if len(live) > n_best:
            best, n_best = rows, len(live)
        if len(live) >= 101:  # 100 orphans + the task's own sleep
            break
        time.sleep(0.02)
    time.sleep(1.3)
    mid = proc_table(name)
    th.join(30)
    st, ev = res.get("r", (0, []))
    return best, mid, st, ev, len(seen)


def describe_parents(rows, comm="sleep"):
    parents = {}
    for r in rows:
        if r[3] != comm:
            continue
        pc = [x[3] for x in rows if x[0] == r[1]]
        key = (r[1], pc[0] if pc else "?")
        parents[key] = parents.get(key, 0) + 1
    return ", ".join("pid %d (%s) x%d" % (p, c, n) for (p, c), n in parents.items()) or "none"


def t_zombies(name, port, pid1_comm, use_busybox_ps=True, label=""):
    # 1. a task double-forks 100 orphans; they exit while the task still runs
    alive, mid, st, ev, n_seen = orphan_task(name, port)
    lines = stdout_lines(ev) if st == 200 else []
    n_alive = len([r for r in alive if r[3] == "sleep" and r[2] != "Z"])
    print("     # %s%d sleep processes seen in all, at most %d at once; their parents then: %s" % (
        label, n_seen, n_alive, describe_parents(alive)))
    check("%stask double-forks 100 orphans and finishes" % label, st == 200 and lines == ["spawned", "done"]
          and n_seen >= 100, "HTTP %s, %d sleep processes seen, output %s" % (st, n_seen, lines))
    z = [r for r in mid if r[2] == "Z"]
    check("%sno zombie once the orphans exited, task still running" % label, mid and not z,
          "%d zombies: %s" % (len(z), z[:3]) if z else "%d processes" % len(mid))
    rows = wait_gone(name, "sleep", 20)
    z = [r for r in rows if r[2] == "Z"]
    check("%sno zombie after the task (/proc)" % label, not z and rows,
          "%d zombies: %s" % (len(z), z[:5]) if z else "%d processes left" % len(rows))
    if use_busybox_ps:
        bx, r = busybox_ps(name)
        zb = [x for x in bx if "Z" in x[2]]
        check("%s`ps` in the container shows no Z" % label, r.returncode == 0 and not zb,
              (r.stdout.strip().replace("\n", " | ")[:300]) if zb or r.returncode else
              "%d processes" % len(bx))

    # 2. 100 orphans reparented to PID 1 from outside any task
    r = eng("exec", name, "sh", "-c", "for i in $(seq 100); do (sleep 1 &); done", timeout=60)
    rows = proc_table(name)
    to1 = [x for x in rows if x[3] == "sleep" and x[1] == 1]
    rows = wait_gone(name, "sleep", 20)
    z = [x for x in rows if x[2] == "Z"]
    check("%s100 orphans reparented to PID 1 (%s) are reaped" % (label, pid1_comm),
          r.returncode == 0 and not z, "%d were children of PID 1; %d zombies left" % (len(to1), len(z)))


def t_stop():
    port = free_port()
    name, r = run_container("stop", IMG, port=port)
    if not check("stop test: container starts", r.returncode == 0 and wait_ping(port) is not None,
                 tail(r.stderr)):
        return
    # the leader lingers 0.5 s in its trap: the runner SIGKILLs what is left
    # of the tree as soon as the leader exits, which would race the others' traps
    script = ("trap 'echo parent-TERM >> /workspace/term.log; sleep 0.5; exit 0' TERM; "
              "(trap 'echo child-TERM >> /workspace/term.log; exit 0' TERM; "
              "while :; do sleep 0.1; done) & "
              "(setsid sh -c \"trap 'echo setsid-TERM >> /workspace/term.log; exit 0' TERM; "
              "while :; do sleep 0.1; done\" &); "
              "echo started; while :; do sleep 0.1; done")
    got = {"events": [], "started": threading.Event()}

    def stream():
        req = urllib.request.Request("http://127.0.0.1:%d/command" % port, method="POST",
                                     data=json.dumps({"command": script}).encode(),
                                     headers={"X-EXECD-ACCESS-TOKEN": TOKEN,
                                              "Content-Type": "application/json"})
        buf = b""
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                while True:
                    chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
                    if not chunk:
                        break
                    buf += chunk
                    if b"started" in buf:
                        got["started"].set()
        except Exception as e:  # the connection ends with the container
            got["error"] = str(e)
        got["events"] = frames(buf)
        got["started"].set()

    th = threading.Thread(target=stream, daemon=True)
    th.start()
    got["started"].wait(20)
    time.sleep(0.5)
    dt, code, r = stop_and_measure(name, timeout=20)
    th.join(10)
    figure("podman stop with a running task", "%.2f s, ExitCode %s" % (dt, code))
    check("podman stop: container exits within the grace period (%.0f s)" % GRACE_S,
          r.returncode == 0 and dt <= GRACE_S + 1.5, "%.2f s" % dt)
    check("podman stop: exit code 0 (runner's clean SIGTERM shutdown)", code == "0", "ExitCode %s" % code)
    out_dir = tempfile.mkdtemp(prefix="forceai-ct-stop-")
    tmpdirs.append(out_dir)
    cp = eng("cp", name + ":/workspace/term.log", os.path.join(out_dir, "term.log"))
    txt = ""
    if cp.returncode == 0:
        with open(os.path.join(out_dir, "term.log")) as f:
            txt = f.read()
    check("podman stop: the task's shell got SIGTERM", "parent-TERM" in txt, repr(txt) or tail(cp.stderr))
    check("podman stop: the task's child got SIGTERM", "child-TERM" in txt, repr(txt))
    check("podman stop: the task's setsid() grandchild got SIGTERM", "setsid-TERM" in txt, repr(txt))
    last = got["events"][-1] if got["events"] else None
    print("     # last event of the interrupted task stream: %s" % json.dumps(last)[:300])
    print("     # runner log tail: %s" % tail(logs(name), 400).replace("\n", " | "))


def t_start_latency():
    times, inner = [], []
    for i in range(10):
        port = free_port()
        name = PREFIX + "lat%d" % i
        containers.append(name)
        t0 = time.monotonic()
        r = eng("run", "-d", "--name", name, "-p", "127.0.0.1:%d:8080" % port,
                "-e", "EXECD_ACCESS_TOKEN=" + TOKEN, IMG)
        if r.returncode != 0:
            break
        dt = wait_ping(port, 15)
        if dt is None:
            break
        times.append(time.monotonic() - t0)
        # the runner's own share: container started (runtime) -> "ready" logged
        started = eng("inspect", "--format", "{{.State.StartedAt.UnixNano}}", name).stdout.strip()
        for line in logs(name).splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("msg") == "ready" and started.isdigit():
                inner.append(rec["ts"] - int(started) / 1e6)
                break
        eng("rm", "-f", "-t", "0", name)
    ok = check("start to /ping ready, 10 containers", len(times) == 10, "%d/10" % len(times))
    if times:
        figure("container start (podman run -d) to /ping ready, median of %d" % len(times),
               "%.0f ms (min %.0f, max %.0f)" % (statistics.median(times) * 1000,
                                                 min(times) * 1000, max(times) * 1000))
    if inner:
        figure("container StartedAt to the runner's 'ready' log line, median of %d" % len(inner),
               "%.0f ms" % statistics.median(inner))
    return ok


def build_tier(tier, img, base):
    """image/base-python.sh TIER=tier, then the runner's Containerfile on it,
    offline from a clean copy (skipped with CT_REUSE_IMAGES=1 when built)."""
    if os.environ.get("CT_REUSE_IMAGES") == "1" and image_size(img):
        return True
    r = sh([os.path.join(ROOT, "image/base-python.sh"), base], timeout=1800,
           env=dict(os.environ, ENGINE=ENGINE, TIER=tier))
    if not check("local %s base (debootstrap cache + import)" % tier, r.returncode == 0,
                 tail(r.stderr, 400)):
        return False
    src = clean_copy()
    r = sh([os.path.join(src, "image/stage-rootfs.sh")], timeout=120)
    cmd, isolated = offline([ENGINE, "build", "--pull=never", "--network", "none", "--layers=false"]
                            + build_args() + ["--build-arg", "BASE=" + base,
                                              "-f", "Containerfile", "-t", img, src])
    t0 = time.monotonic()
    r = sh(cmd, timeout=1800)
    if not check("BASE=%s variant builds offline" % base, r.returncode == 0,
                 tail(r.stderr, 600) if r.returncode else "%.1f s" % (time.monotonic() - t0)):
        return False
    prune()
    n, b = image_size(img), image_size(base)
    if n and b:
        figure("%s size / its base / extra layer" % img, "%s / %s / %s" % (mib(n), mib(b), mib(n - b)))
    return True


def t_python():
    if not build_tier("python", IMG_PY, BASE_PY):
        return
    r = eng("run", "--rm", "--network", "none", "--entrypoint", "/bin/sh", IMG_PY, "-c",
            "readlink -f /bin/sh; grep -c '^agent:x:1000:1000:' /etc/passwd; stat -c '%u:%g' /workspace")
    check("BASE variant keeps the base's shell and adds the agent user",
          r.stdout.split() == ["/usr/bin/dash", "1", "1000:1000"], tail(r.stdout + r.stderr, 200))
    port = free_port()
    name, r = run_container("py", IMG_PY, port=port)
    if not check("Python variant: container starts", r.returncode == 0 and wait_ping(port) is not None,
                 tail(r.stderr) or tail(logs(name))):
        return
    st, ev = run_command(port, 'python3 -c "print(6*7)"')
    lines = stdout_lines(ev) if st == 200 else []
    term = terminal(ev) if st == 200 else None
    check('Python variant: python3 -c "print(6*7)" streams 42 (/command)',
          lines == ["42"] and term and term.get("type") == "execution_complete",
          "HTTP %s %s" % (st, tail(str(ev), 300)))
    st, _, raw = http("POST", "http://127.0.0.1:%d/v1/tasks" % port,
                      {"task": 'python3 -c "print(6*7)"', "capability": "exec"}, timeout=60)
    evs = sse(raw) if st == 200 else []
    out = "".join((d.get("text") or d.get("data") or "") if isinstance(d, dict) else "" for e, d in evs if e == "stdout")
    check('Python variant: python3 -c "print(6*7)" streams 42 (/v1/tasks)', out.strip() == "42",
          "HTTP %s %r" % (st, tail(raw.decode("utf-8", "replace"), 300)))
    comm = eng("exec", name, "cat", "/proc/1/comm").stdout.strip()
    check("Python variant: runner is PID 1", comm == "forceai-runner", comm)
    # The task shell (docs/design/tasks.md "The task shell"): the static bash, under bash's
    # name; C.UTF-8 in the locale archive for a deployment that sets LANG (one map, not a
    # dozen files per program start).
    st, ev = run_command(port, 'readlink /proc/$$/exe; echo "$0 $BASH"; '
                         'localedef --list-archive')
    lines = stdout_lines(ev) if st == 200 else []
    check("Python variant: commands run in the static bash as /bin/bash, C.utf8 in the archive",
          lines[:2] == ["/usr/bin/bash-static", "/bin/bash /bin/bash"] and
          "C.utf8" in lines[2:], "HTTP %s %s" % (st, tail(str(ev), 400)))
    # Lean (issue 46): python3 only; code contexts' libraries are the :code tag's.
    st, _, raw = http("GET", "http://127.0.0.1:%d/code/languages" % port, timeout=30)
    check("Python variant is lean: /code/languages does not offer python (that is :code)",
          st == 200 and "python" not in (json.loads(raw or b"{}").get("languages") or []),
          "HTTP %s %r" % (st, raw[:300]))
    n = image_size(IMG_PY)
    check("Python variant <= 250 MB (python3 only)", n is not None and n <= 250e6, mib(n or 0))
    t_local_seed_tasks()


def t_code():
    """:code, the tier for code contexts (issue 35, split out in issue 46): IPython,
    numpy, pandas and matplotlib, so /code offers python and a cell's state and
    last value come back."""
    if not build_tier("code", IMG_CODE, BASE_CODE):
        return
    port = free_port()
    name, r = run_container("code", IMG_CODE, port=port)
    if not check(":code: container starts", r.returncode == 0 and wait_ping(port) is not None,
                 tail(r.stderr) or tail(logs(name))):
        return
    st, _, raw = http("GET", "http://127.0.0.1:%d/code/languages" % port, timeout=30)
    check(":code: /code/languages offers python", st == 200 and
          "python" in (json.loads(raw or b"{}").get("languages") or []), "HTTP %s %r" % (st, raw[:300]))
    st, _, raw = http("POST", "http://127.0.0.1:%d/code" % port,
                      {"context": {"language": "python"},
                       "code": "import numpy as np, pandas as pd, matplotlib\n"
                               "int(np.arange(4).sum()) + len(pd.DataFrame({'a': [1, 2]}))"},
                      timeout=120)
    results = [json.loads(x) for x in raw.decode("utf-8", "replace").split("\n\n") if x.strip()] \
        if st == 200 else []
    texts = [e.get("results", {}).get("text/plain") for e in results if e.get("type") == "result"]
    check(":code: a code context imports numpy, pandas, matplotlib; its last value is 8",
          texts == ["8"], "HTTP %s %r" % (st, tail(raw.decode("utf-8", "replace"), 400)))


def t_sizes_table():
    """image/README.md's sizes table is the built images' (issue 46: figures
    generated, never typed): image/sizes.sh --check, 5% either way."""
    r = sh([os.path.join(ROOT, "image/sizes.sh"), "--check"], timeout=120,
           env=dict(os.environ, ENGINE=ENGINE, IMAGE=NAME))
    check("image/README.md's sizes table matches the built images (make image-sizes)",
          r.returncode == 0, tail(r.stderr, 400))


def t_local_seed_tasks():
    """The image `make image` tags :local (the gateway's default
    FORCEAI_RUNTIME_RUNNER_IMAGE) is the Python variant: the seed's example
    tasks, as a new user runs them — `echo hello`, and `python3 -c
    "print(6*7)"` with capability chat, which needs the gateway the stack
    configures (a test gateway on the host here; host network so the box can
    reach it on loopback)."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "gateway"))
    from test_gateway import TestGateway  # noqa: E402
    r = sh(["make", "-s", "-n", "-C", ROOT, "image-build", "IMAGE_NAME=" + NAME])
    check("make image tags the Python variant :local",
          ("tag %s:python %s:local" % (NAME, NAME)) in r.stdout, tail(r.stdout + r.stderr, 300))
    gw = TestGateway(key="ct-gw-key")
    port = free_port()
    try:
        name, r = run_container("local", IMG_PY, run_flags=["--network", "host"], env={
            "EXECD_ACCESS_TOKEN": TOKEN, "FORCEAI_RUNNER_LISTEN": "127.0.0.1:%d" % port,
            "FORCEAI_GATEWAY_URL": gw.url, "FORCEAI_GATEWAY_KEY": "ct-gw-key"})
        if not check(":local image with a gateway: container starts",
                     r.returncode == 0 and wait_ping(port) is not None,
                     tail(r.stderr) or tail(logs(name))):
            return
        for task, cap, want in (("echo hello", "exec", "hello"),
                                ('python3 -c "print(6*7)"', "chat", "42")):
            st, _, raw = http("POST", "http://127.0.0.1:%d/v1/tasks" % port,
                              {"task": task, "capability": cap}, timeout=60)
            evs = sse(raw) if st == 200 else []
            out = "".join((d.get("text") or "") if isinstance(d, dict) else ""
                          for e, d in evs if e == "stdout")
            ex = [d for e, d in evs if e == "exit"]
            check(":local image: seed task %r (capability %s) prints %s" % (task, cap, want),
                  out.strip() == want and ex and ex[0].get("exit_code") == 0,
                  "HTTP %s %s" % (st, tail(raw.decode("utf-8", "replace"), 300)))
    finally:
        gw.close()


def t_dropin_wrapper():
    """(a) OpenSandbox classic topology: a bootstrap-like wrapper is PID 1 and
    the runner is its child (the sandbox entrypoint)."""
    port = free_port()
    wrapper = os.path.join(ROOT, "image/opensandbox/classic-bootstrap.sh")
    name, r = run_container("wrap", IMG, port=port,
                            run_flags=["-v", wrapper + ":/opt/opensandbox/bootstrap.sh:ro",
                                       "--entrypoint", "/opt/opensandbox/bootstrap.sh"],
                            args=["/sbin/forceai-runner"])
    if not check("drop-in (wrapper PID 1): container starts", r.returncode == 0 and wait_ping(port) is not None,
                 tail(r.stderr) or tail(logs(name))):
        return
    rows = proc_table(name)
    pid1 = [x for x in rows if x[0] == 1]
    runner = [x for x in rows if x[3] == "forceai-runner"]
    check("drop-in: the wrapper is PID 1, the runner its child",
          pid1 and pid1[0][3] != "forceai-runner" and runner and runner[0][1] == 1,
          "pid1=%s runner=%s" % (pid1[:1], runner[:1]))
    st, _, raw = http("GET", "http://127.0.0.1:%d/v1/hardening" % port)
    try:
        mode = json.loads(raw).get("init_mode")
    except (ValueError, AttributeError):
        mode = None
    check("drop-in: hardening report says subreaper", mode == "subreaper", str(mode))
    st, ev = run_command(port, "id -u")
    check("drop-in: serves tasks as uid 1000", st == 200 and stdout_lines(ev) == ["1000"],
          "HTTP %s %s" % (st, tail(str(ev), 200)))
    # orphans of a task must stay with the runner (subreaper), not go to PID 1
    alive, mid, st, ev, _ = orphan_task(name, port)
    sleeps = [x for x in alive if x[3] == "sleep" and x[2] != "Z"]
    on_wrapper = [x for x in sleeps if x[1] == 1]
    print("     # drop-in: %d orphans seen alive; parents: %s" % (len(sleeps), describe_parents(alive)))
    check("drop-in: a task's 100 orphans are not reparented to the wrapper (PID 1)",
          st == 200 and len(sleeps) >= 90 and not on_wrapper,
          "%d seen, %d under PID 1" % (len(sleeps), len(on_wrapper)))
    z = [x for x in mid if x[2] == "Z"]
    check("drop-in: no zombie once the orphans exited", mid and not z, "%d zombies" % len(z))
    rows = wait_gone(name, "sleep", 20)
    z = [x for x in rows if x[2] == "Z"]
    check("drop-in: no zombie after the task", not z, "%d zombies" % len(z))
    dt, code, r = stop_and_measure(name)
    check("drop-in: podman stop exits 0 within the grace period", code == "0" and dt <= GRACE_S + 1.5,
          "%.2f s, ExitCode %s" % (dt, code))


# The command the server's Kubernetes runtime gives its init container
# (services/k8s/provider_common.py, _build_execd_init_container), as it
# stands: the image must provide /bin/sh, cp, chmod, test and WORKDIR /.
K8S_INIT = ("cp ./execd /opt/opensandbox/execd && cp ./bootstrap.sh /opt/opensandbox/bootstrap.sh && "
            "chmod +x /opt/opensandbox/execd && chmod +x /opt/opensandbox/bootstrap.sh && "
            "(cp /usr/local/bin/bwrap /opt/opensandbox/bwrap && chmod +x /opt/opensandbox/bwrap || true) && "
            "(test ! -e /usr/local/libexec/opensandbox-session-gate || "
            "(cp /usr/local/libexec/opensandbox-session-gate /opt/opensandbox/opensandbox-session-gate && "
            "chmod 0555 /opt/opensandbox/opensandbox-session-gate)) && "
            "(test ! -e /usr/local/libexec/opensandbox-launcher || "
            "(cp /usr/local/libexec/opensandbox-launcher /opt/opensandbox/opensandbox-launcher && "
            "chmod 0555 /opt/opensandbox/opensandbox-launcher))")

# What the server's Docker runtime sets on every sandbox by default
# (config.py DockerConfig: cap_drop, no_new_privileges, pids_limit;
# container_ops.py: OPENSANDBOX_ID, EXECD_INIT=1 with execd_run_as_init).
# Docker's default set minus these drops is podman's default set.
OSB_DOCKER_FLAGS = ["--cap-drop", "AUDIT_WRITE,MKNOD,NET_ADMIN,NET_RAW,SYS_ADMIN,SYS_MODULE,SYS_PTRACE,"
                    "SYS_TIME,SYS_TTY_CONFIG", "--security-opt", "no-new-privileges", "--pids-limit", "4096",
                    "-e", "OPENSANDBOX_ID=forceai-ct-box", "-e", "EXECD_INIT=1"]


def t_execd_image_nonroot():
    """The Kubernetes layout with the sandbox container run as a template's
    securityContext may run it (runAsNonRoot, runAsUser 1000, runAsGroup
    2000: the server's e2e-subpath-nonroot template) over an emptyDir (0777):
    the bootstrap does without root, the runner starts in non-root mode, the
    SDK's set_env file is the task user's and private."""
    vol = tempfile.mkdtemp(prefix="forceai-ct-osbnr-")
    os.chmod(vol, 0o777)
    tmpdirs.append(vol)
    r = eng("run", "--rm", "--network", "none", "-v", vol + ":/opt/opensandbox", "--entrypoint", "/bin/sh",
            IMG_EXECD, "-c", K8S_INIT, timeout=120)
    if not check("execd image (k8s layout, non-root): init container installs", r.returncode == 0, tail(r.stderr)):
        return
    port = free_port()
    name, r = run_container("osb-k8s-nr", BASE_PY, port=port, cport=44772,
                            env={"EXECD_ACCESS_TOKEN": TOKEN, "EXECD": "/opt/opensandbox/execd",
                                 "OPENSANDBOX_ID": "forceai-ct-box"},
                            run_flags=["--user", "1000:2000", "-v", vol + ":/opt/opensandbox",
                                       "--entrypoint", "/opt/opensandbox/bootstrap.sh"],
                            args=["tail", "-f", "/dev/null"])
    ready = r.returncode == 0 and wait_ping(port) is not None
    if not check("execd image (k8s layout, runAsUser 1000, runAsGroup 2000): serves on 44772", ready,
                 tail(r.stderr) or tail(logs(name))):
        return
    st, ev = run_command(port, "id -u; id -g; stat -c '%u %a' \"$EXECD_ENVS\"; "
                         "printf \"%s='%s'\\n\" NR_VAR 'a b' >>\"$EXECD_ENVS\"")
    lines = stdout_lines(ev) if st == 200 else []
    check("execd image (non-root): tasks run as 1000:2000", lines[:2] == ["1000", "2000"], str(lines))
    check("execd image (non-root): EXECD_ENVS is the task user's and private (0600)",
          lines[2:3] == ["1000 600"], str(lines))
    st, ev = run_command(port, 'python3 -c "import os; print(os.environ.get(\'NR_VAR\'))"')
    check("execd image (non-root): a set_env line reaches the next command",
          st == 200 and stdout_lines(ev) == ["a b"], "HTTP %s %s" % (st, tail(str(ev), 200)))
    dt, code, r = stop_and_measure(name)
    check("execd image (non-root): podman stop within the grace period", dt <= GRACE_S + 1.5,
          "%.2f s, ExitCode %s" % (dt, code))


def t_execd_image():
    """(b) the replacement execd image, installed as OpenSandbox installs execd:
    Kubernetes (init container copies into a shared volume) into the plain
    Python base (no runner, no policy, no CA bundle), and Docker (files copied
    out of/into containers) into the default busybox image; the sandbox starts
    with /opt/opensandbox/bootstrap.sh ENTRYPOINT..., the runner becomes PID 1."""
    if not image_size(IMG_EXECD):
        check("execd image present", False)
        return
    fake_ca = "-----BEGIN CERTIFICATE-----\nZm9yY2VhaS10ZXN0LWNh\n-----END CERTIFICATE-----\n"

    # Kubernetes path
    vol = tempfile.mkdtemp(prefix="forceai-ct-osb-")
    os.chmod(vol, 0o755)  # as an emptyDir: tasks may look inside (EXECD_ENVS)
    tmpdirs.append(vol)
    r = eng("run", "--rm", "--network", "none", "-v", vol + ":/opt/opensandbox", "--entrypoint", "/bin/sh",
            IMG_EXECD, "-c", K8S_INIT, timeout=120)
    check("execd image: Kubernetes init-container script installs /execd and /bootstrap.sh",
          r.returncode == 0 and os.access(os.path.join(vol, "execd"), os.X_OK)
          and os.access(os.path.join(vol, "bootstrap.sh"), os.X_OK), tail(r.stderr))
    with open(os.path.join(vol, "mitmproxy-ca-cert.pem"), "w") as f:
        f.write(fake_ca)
    if image_size(BASE_PY):
        port = free_port()
        name, r = run_container("osb-k8s", BASE_PY, port=port, cport=44772,
                                env={"EXECD_ACCESS_TOKEN": TOKEN, "EXECD": "/opt/opensandbox/execd",
                                     "OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT": "true"},
                                run_flags=["-v", vol + ":/opt/opensandbox",
                                           "--entrypoint", "/opt/opensandbox/bootstrap.sh"],
                                args=["tail", "-f", "/dev/null"])
        ready = r.returncode == 0 and wait_ping(port) is not None
        if check("execd image (k8s layout, plain python base): serves on 44772", ready,
                 tail(r.stderr) or tail(logs(name))):
            comm = eng("exec", name, "cat", "/proc/1/comm").stdout.strip()
            check("execd image: runner (/opt/opensandbox/execd) is PID 1", comm == "execd", comm)
            rows = proc_table(name)
            main = [x for x in rows if x[3] == "tail"]
            check("execd image: the entrypoint is the runner's main child", main and main[0][1] == 1,
                  str(main[:1]))
            st, ev = run_command(port, 'python3 -c "print(6*7)"; id -u; '
                                 "grep -E '^(Seccomp|CapEff):' /proc/self/status")
            lines = stdout_lines(ev) if st == 200 else []
            seccomp_on = any(l.startswith("Seccomp:") and l.split(":", 1)[1].strip() == "2" for l in lines)
            check("execd image: task runs confined with the embedded policy (42, uid 1000, seccomp)",
                  lines[:2] == ["42", "1000"] and seccomp_on, str(lines))
            t_execd12(port, "execd image")
            check("execd image: embedded seccomp policy written",
                  os.path.getsize(os.path.join(vol, "forceai-seccomp.json")) > 0
                  if os.path.exists(os.path.join(vol, "forceai-seccomp.json")) else False)
            lg = logs(name)
            check("execd image: egress MITM CA picked up", "mitm CA ready at /opt/opensandbox/mitmproxy-ca-cert.pem" in lg,
                  tail(lg, 300))
            t_zombies(name, port, pid1_comm="execd", use_busybox_ps=False, label="execd image: ")
            dt, code, r = stop_and_measure(name)
            figure("execd image: podman stop (main child tail -f)", "%.2f s, ExitCode %s" % (dt, code))
            check("execd image: podman stop exits within the grace period", dt <= GRACE_S + 1.5,
                  "%.2f s, ExitCode %s" % (dt, code))
        t_execd_image_nonroot()
    else:
        check("execd image (k8s layout): python base present", False, "run `make image-python`")

    # Docker path: files copied out of an execd-image container, into the sandbox
    top = tempfile.mkdtemp(prefix="forceai-ct-osbd-")
    tmpdirs.append(top)
    tmp = os.path.join(top, "opt", "opensandbox")
    os.makedirs(tmp)
    src = PREFIX + "osb-src"
    containers.append(src)
    eng("create", "--name", src, IMG_EXECD, "tail", "-f", "/dev/null")
    c1 = eng("cp", src + ":/execd", os.path.join(tmp, "execd"))
    c2 = eng("cp", src + ":/bootstrap.sh", os.path.join(tmp, "bootstrap.sh"))
    with open(os.path.join(tmp, "mitmproxy-ca-cert.pem"), "w") as f:
        f.write(fake_ca)
    port = free_port()
    name = PREFIX + "osb-docker"
    containers.append(name)
    cr = eng("create", "--name", name, "-p", "127.0.0.1:%d:44772" % port, "-e", "EXECD_ACCESS_TOKEN=" + TOKEN,
             "-e", "EXECD=/opt/opensandbox/execd", "-e", "OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT=true",
             *OSB_DOCKER_FLAGS, "--entrypoint", "/opt/opensandbox/bootstrap.sh", IMG, "tail", "-f", "/dev/null")
    ok = c1.returncode == 0 and c2.returncode == 0 and cr.returncode == 0
    cp = eng("cp", os.path.join(top, "opt"), name + ":/")
    ok = ok and cp.returncode == 0
    s = eng("start", name)
    ready = ok and s.returncode == 0 and wait_ping(port) is not None
    if check("execd image (docker layout, busybox image): serves on 44772", ready,
             tail(c1.stderr + c2.stderr + cr.stderr + cp.stderr + s.stderr) or tail(logs(name))):
        comm = eng("exec", name, "cat", "/proc/1/comm").stdout.strip()
        check("execd image (docker layout): runner is PID 1", comm == "execd", comm)
        r = eng("exec", name, "sh", "-c", "tail -c 200 /opt/opensandbox/merged-ca-certificates.pem; "
                "head -c 27 /opt/opensandbox/merged-ca-certificates.pem")
        check("execd image: merged CA bundle = system bundle + MITM CA",
              "Zm9yY2VhaS10ZXN0LWNh" in r.stdout and "BEGIN CERTIFICATE" in r.stdout, tail(r.stdout + r.stderr, 200))
        st, ev = run_command(port, "id -u")
        check("execd image (docker layout): serves tasks", st == 200 and stdout_lines(ev) == ["1000"],
              "HTTP %s %s" % (st, tail(str(ev), 200)))
        dt, code, r = stop_and_measure(name)
        check("execd image (docker layout): podman stop within the grace period", dt <= GRACE_S + 1.5,
              "%.2f s, ExitCode %s" % (dt, code))


# --- least privilege, non-root and read-only modes, Kubernetes (issue 11) ---------------

def documented_caps():
    """The two minimal capability lines as documented (docs/configuration.md and
    image/README.md must say the same): the image as shipped, with reset on,
    and FORCEAI_ALLOW_RESET=0. The tests run exactly these."""
    found = {}
    for doc in ("image/README.md", "docs/configuration.md"):
        lines = {}
        try:
            with open(os.path.join(ROOT, doc)) as f:
                for line in f:
                    m = re.search(r"--cap-drop ALL --cap-add ([A-Z_]+(?:,[A-Z_]+)*)", line)
                    if not m:
                        continue
                    if "FORCEAI_ALLOW_RESET=0" in line:
                        lines["base"] = m.group(1)
                    elif "reset on" in line:
                        lines["reset"] = m.group(1)
        except OSError:
            pass
        found[doc] = lines
    want = found["image/README.md"]
    ok = set(want) == {"base", "reset"} and found["docs/configuration.md"] == want
    check("the minimal capability lines (reset on; FORCEAI_ALLOW_RESET=0) are documented, the same "
          "in docs/configuration.md and image/README.md", ok, str(found))
    return {k: v.split(",") for k, v in want.items()} if ok else None


def reset_check(name, port, label, uid=1000):
    """What a tenant leaves in the writable roots and /dev/shm is gone after
    POST /v1/reset, and the image's own content is back."""
    base = "http://127.0.0.1:%d" % port
    st, ev = run_command(port, "echo x >/workspace/tenant-file; mkdir -p /tmp/tenant-dir/d; "
                         "chmod 0 /tmp/tenant-dir; echo y >$HOME/tenant-home 2>/dev/null; "
                         "echo z >/dev/shm/tenant-shm; echo done")
    made = stdout_lines(ev) if st == 200 else []
    st, _, raw = http("POST", base + "/v1/reset", {}, timeout=120)
    try:
        rep = json.loads(raw)
    except ValueError:
        rep = {}
    st2, ev = run_command(port, "ls -A /workspace /tmp /dev/shm $HOME 2>&1 | grep -c tenant-; id -u")
    after = stdout_lines(ev) if st2 == 200 else []
    check("%sPOST /v1/reset removes what a tenant left (roots, /dev/shm)" % label,
          made == ["done"] and st == 200 and rep.get("status") == "reset"
          and after == ["0", str(uid)],
          "task %s; reset HTTP %s %s; after %s" % (made, st, tail(raw.decode(errors="replace"), 300),
                                                  after))


def hardening(port):
    st, _, raw = http("GET", "http://127.0.0.1:%d/v1/hardening" % port)
    try:
        return json.loads(raw) if st == 200 else None
    except ValueError:
        return None


def wait_exit(name, timeout=15.0):
    """The container's exit code once it stopped (None while it runs)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        r = eng("inspect", "--format", "{{.State.Running}} {{.State.ExitCode}}", name)
        f = r.stdout.split()
        if len(f) == 2 and f[0] == "false":
            return int(f[1])
        time.sleep(0.1)
    return None


def t_least_privilege(doc):
    """The root runner with exactly the documented capabilities runs real work
    (and, with reset on, a reset); with any one of them missing it refuses to
    start, naming it."""
    if not doc:
        return
    runs = [("minimal caps (reset on): ", doc["reset"], {"EXECD_ACCESS_TOKEN": TOKEN}),
            ("minimal caps (FORCEAI_ALLOW_RESET=0): ", doc["base"],
             {"EXECD_ACCESS_TOKEN": TOKEN, "FORCEAI_ALLOW_RESET": "0"})]
    for label, caps, env in runs:
        flags = ["--cap-drop", "ALL", "--cap-add", ",".join(caps)]
        port = free_port()
        name, r = run_container("caps%d" % len(caps), IMG, port=port, run_flags=flags, env=env)
        ready = r.returncode == 0 and wait_ping(port) is not None
        if not check("%sroot runner starts with exactly --cap-drop ALL --cap-add %s" % (label, ",".join(caps)),
                     ready, tail(r.stderr) or tail(logs(name))):
            continue
        rep = hardening(port) or {}
        ident = rep.get("identity") or {}
        rc_ = (ident.get("runner_capabilities") or {})
        check("%s/v1/hardening says root mode, nothing missing" % label,
              ident.get("mode") == "root" and rc_.get("missing_for_root_mode") == []
              and sorted(rc_.get("effective") or []) == sorted("CAP_" + c for c in caps)
              and sorted(rc_.get("required_for_root_mode") or []) == sorted("CAP_" + c for c in caps),
              json.dumps(ident)[:400])
        ok_c, why_c = hardening_no_caps(rep)
        check("%stasks have no capabilities (report)" % label, ok_c, why_c)
        workload(name, port, label)
        if "FORCEAI_ALLOW_RESET" not in env:
            reset_check(name, port, label)
        dt, code, _ = stop_and_measure(name)
        check("%spodman stop exits 0" % label, code == "0", "%.2f s, ExitCode %s" % (dt, code))

    # The set from the issue (ready, then exit 126 for every task before the
    # start-up check), and each capability of each minimal set missing alone.
    base, full = doc["base"], doc["reset"]
    cases = [(["SETUID", "SETGID", "SETPCAP"], base, "0")]
    cases += [([c for c in base if c != m], base, "0") for m in base]
    cases += [([c for c in full if c != m], full, "1") for m in full if m not in base]
    for i, (have, need, reset) in enumerate(cases):
        missing = [c for c in need if c not in have]
        name, r = run_container("partial%d" % i, IMG, port=free_port(),
                                run_flags=["--cap-drop", "ALL", "--cap-add", ",".join(have)],
                                env={"EXECD_ACCESS_TOKEN": TOKEN, "FORCEAI_ALLOW_RESET": reset})
        code = wait_exit(name)
        lg = logs(name)
        named = all(("CAP_" + m) in lg for m in missing) and not any(
            ("CAP_" + c) in lg.split("the minimal set")[0] for c in have)
        check("partial caps %s (reset %s): refuses to start (exit 1), naming %s, never ready" % (
              ",".join(have), "on" if reset == "1" else "off", ",".join("CAP_" + m for m in missing)),
              r.returncode == 0 and code == 1 and named and '"ready"' not in lg,
              "exit %s: %s" % (code, tail(lg, 400)))


NONROOT = ["--user", "1000:1000", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]


def check_nonroot_report(rep, label, state_dir="/tmp/forceai-runner-1000", in_memory=True):
    """in_memory: the state dir (the /tmp fallback, inside the /tmp root) is not
    used in non-root mode: spools live in memory (design/security.md#the-state-dir-is-out-of-the-tasks-reach-in-every-mode)."""
    ident = (rep or {}).get("identity") or {}
    ll = (rep or {}).get("landlock") or {}
    sd = (rep or {}).get("state_dir") or {}
    check("%s/v1/hardening: identity non-root (uid 1000, no capabilities), with the reason" % label,
          ident.get("mode") == "non-root" and ident.get("runner_uid") == 1000
          and ident.get("task_uid") == 1000 and "403" in (ident.get("reason") or "")
          and (ident.get("runner_capabilities") or {}).get("effective") == [],
          json.dumps(ident)[:500])
    check("%s/v1/hardening: what is in force (seccomp, no_new_privs, Landlock scoped, rlimits, tree kill)" % label,
          hardening_seccomp(rep or {})[0] and rep.get("no_new_privs") is True
          and ll.get("abi") and "every task" in (ll.get("scoped") or "")
          and (rep.get("rlimits") or {}).get("nproc") and rep.get("tree_kill"),
          json.dumps({k: (rep or {}).get(k) for k in ("no_new_privs", "landlock", "rlimits", "tree_kill")})[:500])
    ti = (rep or {}).get("task_identities") or {}
    check("%s/v1/hardening: task identities: the runner's own only" % label,
          (ti.get("uids") or "").startswith("1000 only") and (ti.get("gids") or "").startswith("1000 only"),
          str(ti))
    check("%s/v1/hardening: capabilities and securebits say why nothing is dropped or locked" % label,
          (rep.get("capabilities") or "").startswith("none: the runner's bounding set is empty")
          and "CAP_SETPCAP" in (rep.get("securebits") or ""),
          "%r / %r" % (rep.get("capabilities"), rep.get("securebits")))
    if in_memory:
        check("%sstate dir %s lies in a writable root: not used, state in memory, says why"
              % (label, state_dir),
              sd.get("path") is None and sd.get("not_used") == state_dir
              and sd.get("in_memory") is True and "writable root" in (sd.get("why") or ""), str(sd))
    else:
        check("%sstate dir %s, outside the writable roots" % (label, state_dir),
              sd.get("path") == state_dir and sd.get("in_memory") is False, str(sd))


def nonroot_extras(name, port, label):
    """What non-root mode must refuse or keep out of reach."""
    base = "http://127.0.0.1:%d" % port
    st, _, raw = http("POST", base + "/command", {"command": "id", "uid": 1001})
    check("%sa task as another uid is refused with 403 and says why" % label,
          st == 403 and b"non-root mode" in raw, "HTTP %s %s" % (st, tail(raw.decode(errors="replace"), 200)))
    st, _, raw = http("POST", base + "/command", {"command": "id", "uid": 0})
    check("%sa root task is refused with 403" % label, st == 403, "HTTP %s" % st)
    # Same uid as the runner: Landlock's scoping keeps its signals inside the task.
    st, ev = run_command(port, "kill -TERM 1; echo rc=$?")
    out = stdout_lines(ev) if st == 200 else []
    time.sleep(0.3)
    check("%sa task cannot signal the runner (same uid), which keeps serving" % label,
          out[-1:] == ["rc=1"] and wait_ping(port, 3) is not None, str(out))
    # A process exec'd into the box (as a probe is) has the token in its
    # environment; a task must not be able to read it.
    marker = "16.1803%d" % os.getpid()
    ex = eng("exec", "-d", name, "sleep", marker)
    scan = ("for p in /proc/[0-9]*; do tr '\\0' '\\n' <$p/environ 2>/dev/null; done "
            "| grep -c '^EXECD_ACCESS_TOKEN='")
    # control: the same scan from outside the tasks (podman exec, same uid) finds it
    ctl = eng("exec", name, "sh", "-c", scan)
    st, ev = run_command(port, scan + "; tr '\\0' ' ' </proc/1/environ 2>/dev/null | wc -c")
    out = stdout_lines(ev) if st == 200 else []
    alive = sleeps_alive(name, marker)
    check("%sno task can read the token from another process's environment (exec'd process, runner)" % label,
          ex.returncode == 0 and alive and ctl.stdout.strip() not in ("", "0") and out[:1] == ["0"],
          "exec'd alive=%d, podman exec saw %s, the task saw %s" % (len(alive), ctl.stdout.strip(), out))


def t_nonroot():
    """--user 1000:1000 --cap-drop ALL --security-opt no-new-privileges."""
    port = free_port()
    name, r = run_container("nonroot", IMG, port=port, run_flags=NONROOT)
    if not check("non-root: starts with %s" % " ".join(NONROOT),
                 r.returncode == 0 and wait_ping(port) is not None, tail(r.stderr) or tail(logs(name))):
        return
    rep = hardening(port)
    check_nonroot_report(rep, "non-root: ")
    print("     # non-root hardening report: %s" % json.dumps(rep, sort_keys=True))
    workload(name, port, "non-root: ")
    nonroot_extras(name, port, "non-root: ")
    reset_check(name, port, "non-root: ")
    dt, code, _ = stop_and_measure(name)
    check("non-root: podman stop exits 0", code == "0", "%.2f s, ExitCode %s" % (dt, code))

    # The fallback state dir in a shared /tmp: never one someone else made.
    for what, prep in (("owned by root", lambda d: os.mkdir(d, 0o777)),
                       ("a symlink", lambda d: os.symlink("/tmp", d))):
        tmp = tempfile.mkdtemp(prefix="forceai-ct-tmp-")
        tmpdirs.append(tmp)
        os.chmod(tmp, 0o1777)
        prep(os.path.join(tmp, "forceai-runner-1000"))
        name, r = run_container("nonroot-sd%d" % len(what), IMG, port=free_port(),
                                run_flags=NONROOT + ["-v", tmp + ":/tmp"])
        code = wait_exit(name)
        lg = logs(name)
        check("non-root: a /tmp/forceai-runner-1000 %s is refused (exit 1, says why)" % what,
              code == 1 and "forceai-runner-1000" in lg and '"ready"' not in lg,
              "exit %s: %s" % (code, tail(lg, 300)))

    # A token file the runner can read, its tasks could read: refused. The
    # Kubernetes way to let a non-root runner read a Secret file is fsGroup:
    # root-owned, 0440, a group outside the task ids, which the owner-only
    # check accepts; in non-root mode the tasks have that group too.
    d = tempfile.mkdtemp(prefix="forceai-ct-tok-")
    tmpdirs.append(d)
    tok = os.path.join(d, "token")
    with open(tok, "w") as f:
        f.write(TOKEN)
    os.chown(tok, 0, 200)
    os.chmod(tok, 0o440)
    name, r = run_container("nonroot-tokfile", IMG, port=free_port(),
                            run_flags=NONROOT + ["--group-add", "200", "-v", tok + ":/run/token:ro"],
                            env={"FORCEAI_RUNNER_TOKEN_FILE": "/run/token"})
    code = wait_exit(name)
    lg = logs(name)
    check("non-root: --token-file (root:200 0440, fsGroup-style) is refused (exit 2, a "
          "configuration error), pointing at EXECD_ACCESS_TOKEN",
          code == 2 and "EXECD_ACCESS_TOKEN" in lg and '"ready"' not in lg, "exit %s: %s" % (code, tail(lg, 300)))


def t_readonly(doc):
    """--read-only with only a tmpfs on /tmp and a volume on /workspace (no
    tmpfs on /run: that is what a read-only Kubernetes pod gets), in root
    mode with the minimal capabilities (the image as shipped, reset on) and
    in non-root mode."""
    modes = [("read-only non-root: ", NONROOT, "/tmp/forceai-runner-1000", 1000)]
    if doc:
        modes.append(("read-only root: ", ["--cap-drop", "ALL", "--cap-add", ",".join(doc["reset"])],
                      "/tmp/forceai-runner-0", 1000))
    for i, (label, flags, sd, uid) in enumerate(modes):
        vol = PREFIX + "ws%d" % i
        port = free_port()
        ro = ["--read-only", "--read-only-tmpfs=false", "--tmpfs", "/tmp:rw,mode=1777",
              "-v", vol + ":/workspace"]
        name, r = run_container("ro%d" % i, IMG, port=port, run_flags=flags + ro)
        ok = check("%sstarts with %s" % (label, " ".join(ro)),
                   r.returncode == 0 and wait_ping(port) is not None, tail(r.stderr) or tail(logs(name)))
        if ok:
            rep = hardening(port) or {}
            if flags is NONROOT:
                check_nonroot_report(rep, label, sd)
            else:
                s = rep.get("state_dir") or {}
                check("%sstate dir falls back to %s" % (label, sd), s.get("path") == sd, str(s))
            st, ev = run_command(port, "touch /etc/x 2>/dev/null && echo rootfs-writable || echo rootfs-ro; id -u")
            check("%sthe root filesystem is read-only for tasks; id -u is %d" % (label, uid),
                  stdout_lines(ev) == ["rootfs-ro", str(uid)] if st == 200 else False,
                  str(stdout_lines(ev) if st == 200 else ev))
            workload(name, port, label)
            reset_check(name, port, label)
        eng("rm", "-f", "-t", "0", name)
        eng("volume", "rm", "-f", vol)


KUBE_DIR = os.path.join(ROOT, "image", "kubernetes")


def podman_version():
    r = eng("version", "--format", "{{.Client.Version}}")
    try:
        return tuple(int(x) for x in r.stdout.strip().split("-")[0].split(".")[:2])
    except ValueError:
        return (0, 0)


def kube_secret_yaml(token):
    import base64
    return ("apiVersion: v1\nkind: Secret\nmetadata:\n  name: forceai-runner-token\ntype: Opaque\n"
            "data:\n  token: %s\n" % base64.b64encode(token.encode()).decode())


def pod_ip(pod):
    infra = eng("pod", "inspect", pod, "--format", "{{.InfraContainerID}}").stdout.strip()
    r = eng("inspect", infra, "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}")
    return r.stdout.strip()


class PodPort:
    """The pod's own address (kube play publishes nothing without hostPort):
    http() and friends take a port, so route 127.0.0.1:<local> to it."""

    def __init__(self, ip, port=8080):
        self.ip, self.port = ip, port
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(16)
        self.local = self.srv.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            try:
                u = socket.create_connection((self.ip, self.port), timeout=10)
            except OSError:
                c.close()
                continue
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b):
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        for s_ in (a, b):
            try:
                s_.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self):
        self.srv.close()


def kube_cleanup(path, pod):
    eng("kube", "down", path, timeout=120)
    eng("pod", "rm", "-f", pod, timeout=60)
    eng("secret", "rm", "forceai-runner-token")
    eng("volume", "rm", "-f", "forceai-runner-token")


def t_kube():
    """Each manifest of image/kubernetes/ as real Kubernetes YAML through
    `podman kube play`, with a Secret holding the token: probes, a task and
    the files API through the pod, then `podman kube down`."""
    try:
        import yaml
    except ImportError:
        check("python3-yaml available (scripts/install-deps.sh check)", False)
        return
    global TOKEN
    saved = TOKEN
    ver = podman_version()
    for fname, mode in (("runner-root.yaml", "root"), ("runner-restricted.yaml", "non-root")):
        path = os.path.join(KUBE_DIR, fname)
        try:
            with open(path) as f:
                doc = yaml.safe_load(f)
            pod = doc["metadata"]["name"]
            ctr_spec = doc["spec"]["containers"][0]
        except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
            check("%s parses as a Pod" % fname, False, str(e))
            continue
        label = "kube %s: " % fname
        ctr = pod + "-" + ctr_spec["name"]
        psc = doc["spec"].get("securityContext") or {}
        csc = ctr_spec.get("securityContext") or {}
        env = {e["name"]: e for e in ctr_spec.get("env") or []}
        grace_ms = int((env.get("FORCEAI_RUNNER_GRACE_MS") or {}).get("value") or 5000)
        tgps = doc["spec"].get("terminationGracePeriodSeconds", 30)
        check("%sterminationGracePeriodSeconds %s > --grace-ms %d ms + a margin" % (label, tgps, grace_ms),
              tgps * 1000 >= grace_ms + 2000, "")
        rprobe, lprobe = ctr_spec.get("readinessProbe") or {}, ctr_spec.get("livenessProbe") or {}
        check("%sreadiness probe is an httpGet of the token-free /ready on 8080" % label,
              (rprobe.get("httpGet") or {}) == {"path": "/ready", "port": 8080}, str(rprobe)[:300])
        check("%sliveness probe runs `forceai-runner --ping`" % label,
              (lprobe.get("exec") or {}).get("command") == ["/sbin/forceai-runner", "--ping"],
              str(lprobe)[:300])
        if mode == "root":
            reset_on = (env.get("FORCEAI_ALLOW_RESET") or {}).get("value", "1") != "0"
            line = (documented_caps_cache or {}).get("reset" if reset_on else "base") or []
            want_caps = sorted("CAP_" + c for c in line)
            got = sorted("CAP_" + c for c in (csc.get("capabilities") or {}).get("add") or [])
            check("%sadds exactly the documented capabilities to drop ALL (reset %s)" % (
                  label, "on" if reset_on else "off"),
                  want_caps and got == want_caps and (csc.get("capabilities") or {}).get("drop") == ["ALL"],
                  str(csc.get("capabilities")))
        else:
            restricted = (psc.get("runAsNonRoot") is True and csc.get("allowPrivilegeEscalation") is False
                          and (csc.get("capabilities") or {}).get("drop") == ["ALL"]
                          and not (csc.get("capabilities") or {}).get("add")
                          and (psc.get("seccompProfile") or csc.get("seccompProfile") or {}).get("type")
                          in ("RuntimeDefault", "Localhost")
                          and csc.get("readOnlyRootFilesystem") is True
                          and all("emptyDir" in v for v in doc["spec"].get("volumes") or []))
            check("%ssatisfies the restricted Pod Security Standard (non-root, no escalation, drop ALL, "
                  "RuntimeDefault seccomp, read-only root with emptyDirs)" % label, restricted,
                  json.dumps({"pod": psc, "container": csc})[:400])

        TOKEN = "kube-" + os.urandom(12).hex()
        kube_cleanup(path, pod)
        notes = []
        # The token Secret, as Kubernetes YAML.
        sec = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
        tmpdirs.append(sec.name)
        sec.write(kube_secret_yaml(TOKEN))
        sec.close()
        uses_env = any((e.get("valueFrom") or {}).get("secretKeyRef") for e in env.values())
        if uses_env and ver < (4, 4):
            # podman 4.3 stores a kube Secret as YAML but reads secretKeyRef as
            # a JSON map of base64 values: give it that (same name, same key).
            import base64
            js = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
            tmpdirs.append(js.name)
            json.dump({"token": base64.b64encode(TOKEN.encode()).decode()}, js)
            js.close()
            r = eng("secret", "create", "forceai-runner-token", js.name)
            notes.append("podman %d.%d: secretKeyRef secret created as a JSON map" % ver)
        else:
            r = eng("kube", "play", sec.name, timeout=120)
        if not check("%sthe token Secret is created" % label, r.returncode == 0, tail(r.stderr)):
            continue
        if not uses_env and ver < (4, 5):
            # podman < 4.5 fills the Secret volume (a named volume) with the
            # data still base64-encoded and ignores defaultMode: prepare the
            # file as kubelet writes it (decoded value, root:root 0400).
            eng("volume", "create", "forceai-runner-token")
            mp = eng("volume", "inspect", "forceai-runner-token", "--format", "{{.Mountpoint}}").stdout.strip()
            if mp:
                with open(os.path.join(mp, "token"), "w") as f:
                    f.write(TOKEN)
                os.chmod(os.path.join(mp, "token"), 0o400)
                os.chown(os.path.join(mp, "token"), 0, 0)
                os.chmod(mp, 0o755)
            notes.append("podman %d.%d: Secret volume prepared as kubelet writes it (0400)" % ver)
        r = eng("kube", "play", path, timeout=180)
        if not check("%spodman kube play (the YAML unchanged)%s" % (label, " [%s]" % "; ".join(notes) if notes else ""),
                     r.returncode == 0, tail(r.stderr + r.stdout, 600)):
            kube_cleanup(path, pod)
            continue
        if not uses_env:
            # podman < 4.5 rewrote the file with the undecoded value: the
            # runner took whatever the Secret volume holds.
            got = eng("exec", ctr, "cat", "/var/run/secrets/forceai/token").stdout
            mode_ = eng("exec", ctr, "stat", "-c", "%a %u", "/var/run/secrets/forceai/token").stdout.strip()
            check("%sthe token file from the Secret volume is root-owned 0400" % label, mode_ == "400 0", mode_)
            if got.strip() and got.strip() != TOKEN:
                TOKEN = got.strip()
                print("     # podman wrote the Secret's data undecoded: the runner's token is that text")
        ip = pod_ip(pod)
        fwd = PodPort(ip) if ip else None
        port = fwd.local if fwd else 0
        ready = port and wait_ping(port, 20) is not None
        if check("%spod serves /ping with the token (pod IP %s)" % (label, ip), ready, tail(logs(ctr))):
            # /ping and /ready need no token (execd 1.2); everything else does.
            st, _, _ = http("GET", "http://127.0.0.1:%d/v1/hardening" % port, token="wrong")
            check("%s/v1/hardening with a wrong token gets 401" % label, st == 401, "HTTP %s" % st)
            hc = eng("healthcheck", "run", ctr, timeout=60)
            check("%sliveness probe (podman healthcheck run) passes" % label,
                  hc.returncode == 0, tail(hc.stdout + hc.stderr))
            # The readiness probe as the kubelet sends it: to the pod's IP, no token.
            hg = ctr_spec["readinessProbe"]["httpGet"]
            st, _, raw = http("GET", "http://127.0.0.1:%d%s" % (port, hg["path"]), token=None)
            try:
                rj = json.loads(raw)
            except ValueError:
                rj = {}
            check("%sreadiness httpGet %s without a token: 200 initialized" % (label, hg["path"]),
                  st == 200 and rj.get("initialized") is True, "HTTP %s %r" % (st, raw[:200]))
            st, _, _ = http("GET", "http://127.0.0.1:%d/ping" % port, token=None)
            st2, _, _ = http("GET", "http://127.0.0.1:%d/v1/hardening" % port, token=None)
            check("%s/ping needs no token, /v1/hardening still does" % label,
                  st == 200 and st2 == 401, "HTTP %s, %s" % (st, st2))
            st, ev = run_command(port, "id -u; id -g")
            check("%sa task runs through the pod as 1000:1000" % label,
                  st == 200 and stdout_lines(ev) == ["1000", "1000"], str(ev)[:300])
            rep = hardening(port) or {}
            check("%s/v1/hardening identity mode %s" % (label, mode),
                  (rep.get("identity") or {}).get("mode") == mode, json.dumps(rep.get("identity"))[:300])
            if mode == "non-root":
                check_nonroot_report(rep, label, "/run/forceai-runner/state", in_memory=False)
            workload(ctr, port, label)
            if mode == "non-root":
                reset_check(ctr, port, label)
        if fwd:
            fwd.close()
        r = eng("kube", "down", path, timeout=120)
        gone = eng("pod", "exists", pod).returncode != 0
        check("%spodman kube down" % label, r.returncode == 0 and gone, tail(r.stderr))
        kube_cleanup(path, pod)
    TOKEN = saved


documented_caps_cache = None


def cleanup():
    if os.environ.get("CT_KEEP") == "1":
        print("     # kept containers: %s" % " ".join(containers))
        return
    for c in containers:
        eng("rm", "-f", "-t", "0", c, timeout=60)
    for d in tmpdirs:
        shutil.rmtree(d, ignore_errors=True)


def main():
    # CT_ONLY=main,python,...: only those parts (after the build); for a quick local run.
    only = set(filter(None, os.environ.get("CT_ONLY", "").split(",")))

    def want(part):
        return not only or part in only

    try:
        if t_prereqs() and t_build():
            if want("contents"):
                t_image_contents()
                t_size()
            if want("main"):
                t_main()
            if want("stop"):
                t_stop()
                t_start_latency()
            if want("python"):
                t_python()
                t_dropin_wrapper()
            if want("code"):
                t_code()
            if want("sizes"):
                t_sizes_table()
            if want("execd"):
                t_execd_image()
            if want("privilege"):
                global documented_caps_cache
                documented_caps_cache = documented_caps()
                t_least_privilege(documented_caps_cache)
                t_nonroot()
                t_readonly(documented_caps_cache)
            if want("kube"):
                t_kube()
    finally:
        cleanup()
    if figures:
        print("figures:")
        for k, v in figures:
            print("  %s: %s" % (k, v))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
