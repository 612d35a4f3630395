"""Helpers of the fault and load suite (tests/fault): scale, what the runner
holds (fds, RSS, descendants, zombies), raw streaming clients, and the
figures each test records (build/fault/figures.json, and printed)."""
import json
import os
import socket
import time

from harness import RUNNER, ROOT

SOAK = os.environ.get("SOAK") == "1"
# Sanitizer or valgrind builds use more memory: RSS bounds are skipped there.
INSTRUMENTED = "asan" in RUNNER or bool(os.environ.get("RUNNER_WRAP"))
FIGURES = os.path.join(ROOT, "build", "fault", "figures.json")


def scale(check, soak):
    """The check-sized value, or the full one under SOAK=1 (make soak)."""
    return soak if SOAK else check


def record(test, **figures):
    """Keep a test's figures (printed, and merged into FIGURES)."""
    os.makedirs(os.path.dirname(FIGURES), exist_ok=True)
    try:
        with open(FIGURES) as f:
            allf = json.load(f)
    except (OSError, ValueError):
        allf = {}
    figures["scale"] = "soak" if SOAK else "check"
    figures["runner"] = os.path.relpath(RUNNER, ROOT) if RUNNER.startswith(ROOT) else RUNNER
    allf[test] = figures
    with open(FIGURES, "w") as f:
        json.dump(allf, f, indent=1, sort_keys=True)
    print("\n    figures %s: %s" % (test, json.dumps(figures, sort_keys=True)), flush=True)


# ---- what the runner holds ----

SPARE = "forceai-spare"  # the spare shim (runner/task/prefork.h): no task's, at most one


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return ""


def spare_of(pid):
    """The runner's spare shim, a child waiting for the next task, or None."""
    for k in os.listdir("/proc"):
        if k.isdigit():
            f = stat_fields(int(k))
            if f and f[1] == pid and comm(int(k)) == SPARE:
                return int(k)
    return None


def fd_count(pid):
    """The runner's fds, less the one socket it holds to its spare shim (a spare exists from
    the first task on: what a test counts is what requests and tasks leave behind)."""
    return len(os.listdir("/proc/%d/fd" % pid)) - (1 if spare_of(pid) else 0)


def status_kib(pid, key):
    """VmRSS, VmHWM (peak RSS), ... of pid in KiB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return None


def stat_fields(pid):
    """(state, ppid, starttime) from /proc/PID/stat, or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
    except OSError:
        return None
    rest = st[st.rindex(")") + 2:].split()
    return rest[0], int(rest[1]), int(rest[19])


def all_procs():
    """{pid: (state, ppid, starttime)} of every visible process."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            f = stat_fields(int(d))
            if f:
                out[int(d)] = f
    return out


def descendants(root):
    """{pid: starttime} of every process below root (root excluded), the runner's spare shim
    (no task's: test_prefork.py checks its own life) left out."""
    procs = all_procs()
    kids = {}
    for pid, (_, ppid, _) in procs.items():
        if not (ppid == root and comm(pid) == SPARE):
            kids.setdefault(ppid, []).append(pid)
    out, todo = {}, [root]
    while todo:
        p = todo.pop()
        for k in kids.get(p, ()):
            if k not in out:
                out[k] = procs[k][2]
                todo.append(k)
    return out


def alive(pids):
    """Those of {pid: starttime} still running (same start time: not a reused pid)
    and not zombies; the runner's spare shim is no task's (taken into pids while it was still
    starting, before it named itself)."""
    out = []
    for pid, start in pids.items():
        f = stat_fields(pid)
        if f and f[2] == start and f[0] != "Z" and comm(pid) != SPARE:
            out.append(pid)
    return out


def zombies_below(root):
    procs = all_procs()
    below = descendants(root)
    return [p for p in below if procs.get(p, ("?",))[0] == "Z"]


def procs_of_uid(uid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/status" % d) as f:
                    for line in f:
                        if line.startswith("Uid:"):
                            if int(line.split()[1]) == uid:
                                out.append(int(d))
                            break
            except OSError:
                pass
    return out


def _start_and_uid(pid):
    """(starttime in clock ticks since boot, real uid) of pid, or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
        with open("/proc/%d/status" % pid) as f:
            uid = next(int(l.split()[1]) for l in f if l.startswith("Uid:"))
    except (OSError, StopIteration, ValueError):
        return None
    return int(st[st.rindex(")") + 2:].split()[19]), uid


def procs_alive_together(uid):
    """The processes of uid that were all alive at one instant: listing
    /proc is not atomic (a fork bomb replaces processes while the listing
    runs, so a plain count can hold more than ever existed at once). Kept:
    those started before the scan began and still the same process (same
    start time) after it ended, so alive through the whole scan."""
    hz = os.sysconf("SC_CLK_TCK")
    t0 = int(time.clock_gettime(time.CLOCK_BOOTTIME) * hz) - 1
    seen = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            v = _start_and_uid(int(d))
            if v and v[1] == uid and v[0] < t0:
                seen[int(d)] = v[0]
    return [p for p, start in seen.items() if (_start_and_uid(p) or (None,))[0] == start]


def wait_for(cond, timeout, step=0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(step)


def percentile(values, p):
    v = sorted(values)
    if not v:
        return None
    k = min(len(v) - 1, max(0, int(round(p / 100.0 * (len(v) - 1)))))
    return v[k]


# ---- raw HTTP ----

def request_bytes(method, path, body=None, headers=None):
    h = "%s %s HTTP/1.1\r\nHost: x\r\n" % (method, path)
    for k, v in (headers or {}).items():
        h += "%s: %s\r\n" % (k, v)
    if body is not None:
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        h += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        return h.encode() + b"\r\n" + body
    return h.encode() + b"\r\n"


def rst_close(sock):
    """Abortive close: the peer sees a reset, as when a client dies."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    except OSError:
        pass
    sock.close()


class Stream:
    """A streamed response read incrementally from a raw socket: the head,
    then the chunked body (dechunked), as bytes."""

    def __init__(self, port, method, path, body=None, headers=None, timeout=60):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.sendall(request_bytes(method, path, body, headers))
        self.buf = b""
        self.status = None
        self.headers = {}
        self.chunk_left = 0
        self.done = False     # the terminating 0-size chunk was seen
        self.body_bytes = 0

    def _fill(self, n=262144):
        c = self.sock.recv(n)
        if not c:
            raise EOFError("connection closed")
        self.buf += c

    def read_head(self):
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        self.status = int(lines[0].split()[1])
        for l in lines[1:]:
            k, _, v = l.partition(b":")
            self.headers[k.strip().lower().decode()] = v.strip().decode()
        return self.status

    def read_some(self):
        """Next piece of the body (b"" at the end)."""
        if self.status is None:
            self.read_head()
        if self.headers.get("transfer-encoding") != "chunked":
            if self.done:
                return b""
            n = int(self.headers.get("content-length", "0"))
            while len(self.buf) < n:
                self._fill()
            self.done = True
            out, self.buf = self.buf[:n], self.buf[n:]
            return out
        while True:
            if self.done:
                return b""
            if self.chunk_left == 0:
                while b"\r\n" not in self.buf:
                    self._fill()
                line, _, self.buf = self.buf.partition(b"\r\n")
                if not line:
                    continue  # the CRLF after a chunk
                size = int(line.split(b";")[0], 16)
                if size == 0:
                    self.done = True
                    return b""
                self.chunk_left = size
            if not self.buf:
                self._fill()
            take = self.buf[:self.chunk_left]
            self.buf = self.buf[len(take):]
            self.chunk_left -= len(take)
            self.body_bytes += len(take)
            return take

    def read_all(self):
        out = []
        while True:
            p = self.read_some()
            if not p:
                return b"".join(out)
            out.append(p)

    def close(self, abortive=False):
        if abortive:
            rst_close(self.sock)
        else:
            self.sock.close()


class SSEParser:
    """Incremental parser of the native API's SSE (id/event/data frames)."""

    def __init__(self):
        self.pending = b""

    def feed(self, data):
        self.pending += data
        out = []
        while b"\n\n" in self.pending:
            block, _, self.pending = self.pending.partition(b"\n\n")
            ev, datal = {}, []
            for line in block.split(b"\n"):
                if not line or line.startswith(b":"):
                    continue
                k, _, v = line.partition(b":")
                v = v[1:] if v.startswith(b" ") else v
                if k == b"data":
                    datal.append(v)
                else:
                    ev[k.decode()] = v.decode()
            if datal:
                ev["data"] = json.loads(b"\n".join(datal))
            if ev:
                out.append(ev)
        return out


class ExecdParser:
    """Incremental parser of execd frames (a JSON object + a blank line)."""

    def __init__(self):
        self.pending = b""

    def feed(self, data):
        self.pending += data
        out = []
        while b"\n\n" in self.pending:
            frame, _, self.pending = self.pending.partition(b"\n\n")
            if frame.strip():
                out.append(json.loads(frame))
        return out
