"""Test harness: start the real runner, talk to it over HTTP (curl and raw
sockets), parse both event-stream formats. Python standard library only."""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNNER = os.environ.get("RUNNER_BIN", os.path.join(ROOT, "build", "forceai-runner"))
POLICY = os.path.join(ROOT, "seccomp", "default.json")


def reachable_by_others(path):
    """Whether a process of another uid can reach path: every directory on
    the way searchable by others (a clone in root's 0700 home is not)."""
    path = os.path.realpath(path)
    d = os.path.dirname(path)
    while True:
        if not os.stat(d).st_mode & 0o001:
            return False
        if d == "/":
            return True
        d = os.path.dirname(d)


_nonroot_dir = None


def nonroot_dir():
    """A root-owned 0755 directory another uid can reach: ROOT/build when the
    clone is reachable, else one made once under /var/tmp (removed at exit)."""
    global _nonroot_dir
    build = os.path.join(ROOT, "build")
    if reachable_by_others(os.path.join(build, "x")):
        return build
    if _nonroot_dir is None:
        import atexit
        _nonroot_dir = tempfile.mkdtemp(prefix="forceai-nonroot-", dir="/var/tmp")
        os.chmod(_nonroot_dir, 0o755)
        atexit.register(shutil.rmtree, _nonroot_dir, True)
    return _nonroot_dir


def nonroot_files():
    """The runner binary and the default policy as a non-root runner (wrap=)
    can open them: where they are, or copies in nonroot_dir()."""
    if reachable_by_others(RUNNER) and reachable_by_others(POLICY):
        return RUNNER, POLICY
    d = os.path.join(nonroot_dir(), "files")
    binary, policy = os.path.join(d, os.path.basename(RUNNER)), os.path.join(d, "default.json")
    if not os.path.exists(binary) or os.path.getmtime(binary) < os.path.getmtime(RUNNER):
        os.makedirs(d, 0o755, exist_ok=True)
        shutil.copy2(RUNNER, binary)
        shutil.copy2(POLICY, policy)
    return binary, policy


_client_node = None


def client_node():
    """A Node.js of at least version 20 for the real clients (the OpenSandbox
    SDK, the Gemini CLI and @google/genai need it): the machine's when it is
    new enough (Node.js 20 here), else the pinned Node.js 22 that
    tests/mcp/setup.sh installs from the npm registry (Debian 12's own
    nodejs is 18)."""
    global _client_node
    if _client_node:
        return _client_node
    node = shutil.which("node")
    if node:
        v = subprocess.run([node, "-p", "process.versions.node"], capture_output=True, text=True)
        if v.returncode == 0 and int(v.stdout.split(".")[0] or 0) >= 20:
            _client_node = node
            return node
    setup = os.path.join(ROOT, "tests", "mcp", "setup.sh")
    p = subprocess.run([setup], capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError("no Node.js >= 20 (%s): %s" % (node or "none", p.stderr[-2000:]))
    _client_node = p.stdout.strip().splitlines()[-1]
    return _client_node


def rss_is_meaningful():
    """RSS bounds hold for the real build; ASan's shadow memory and
    valgrind's own heap make the figure meaningless, so memory-bound
    assertions are checked in the plain stage of make check."""
    return not os.environ.get("RUNNER_WRAP") and "asan" not in RUNNER


# How much slower than the plain build the runner under test is: bounds on
# responsiveness (an answer "at once", a round trip) are multiplied by it.
# valgrind runs the runner ~10-30x slower and ASan ~2x; a bound that is a
# contract (execd waits 1 s, a timeout of N s) is not scaled past it.
TIME_SCALE = float(os.environ.get("TEST_TIME_SCALE") or
                   (4 if os.environ.get("RUNNER_WRAP") else 2 if "asan" in RUNNER else 1))


def slow(seconds, cap=None):
    """A responsiveness bound scaled for the build under test (at most cap)."""
    s = seconds * TIME_SCALE
    return min(s, cap) if cap is not None else s


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Runner:
    """One runner process on a loopback port with a private state dir."""

    def __init__(self, args=(), env=None, main=None, pid1=False, token=None, wrap=None,
                 ready=True, owner=None, state_dir=True, default_roots=False):
        """owner: a uid the scratch directory is handed to (a non-root runner
        under `wrap`, e.g. setpriv, must create its state dir there);
        state_dir=False: no --state-dir (the runner picks its default);
        default_roots=True: no --landlock-roots (the built-in writable roots,
        which hold the scratch directory under /tmp)."""
        self.port = free_port()
        self.tmp = tempfile.mkdtemp(prefix="forceai-test-")
        os.chmod(self.tmp, 0o755)
        if owner is not None:
            os.chown(self.tmp, owner, owner)
        self.state = os.path.join(self.tmp, "state")
        self.work = os.path.join(self.tmp, "work")
        os.mkdir(self.work)
        os.chmod(self.work, 0o777)
        self.token = token
        # A runner of another uid (wrap=) cannot reach a clone in root's home.
        self.binary, policy = nonroot_files() if wrap else (RUNNER, POLICY)
        cmd = [self.binary, "--listen", "127.0.0.1:%d" % self.port] + \
            (["--state-dir", self.state] if state_dir else []) + \
            ["--seccomp-policy", policy] + \
            ([] if default_roots else ["--landlock-roots", "/tmp:" + self.tmp])
        cmd += list(args)
        if os.environ.get("RUNNER_EXTRA_ARGS"):
            cmd += os.environ["RUNNER_EXTRA_ARGS"].split()
        if main:
            cmd += ["--"] + list(main)
        if pid1:
            cmd = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"] + cmd
        if wrap:
            cmd = list(wrap) + cmd
        if os.environ.get("RUNNER_WRAP") and not pid1:
            # e.g. valgrind: it runs the runner itself, not unshare
            cmd = os.environ["RUNNER_WRAP"].split() + cmd
        e = dict(os.environ)
        if env:
            e.update(env)
        if token:
            e["EXECD_ACCESS_TOKEN"] = token
        self.log_path = os.path.join(self.tmp, "runner.log")
        self.log = open(self.log_path, "wb")
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log, env=e,
                                     start_new_session=True)
        self.url = "http://127.0.0.1:%d" % self.port
        self.wrap = list(wrap) if wrap else None
        self._host_pid = None
        if ready:  # ready=False: the caller waits (e.g. a main child that exits at once)
            self.wait_ready()

    def wait_ready(self, timeout=60 if os.environ.get("RUNNER_WRAP") else 10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("runner exited %s:\n%s" % (self.proc.returncode, self.logtext()))
            try:
                st, _, _ = self.request("GET", "/ping", timeout=1)
                if st == 200:
                    return
            except OSError:
                pass
            time.sleep(0.01)
        raise RuntimeError("runner not ready:\n" + self.logtext())

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

    def runner_pid(self):
        """The runner's own pid (differs from proc.pid under unshare)."""
        for l in self.loglines():
            if l.get("msg") == "ready":
                return l["pid"]
        return None

    def headers(self, extra=None):
        h = {}
        if self.token:
            h["X-EXECD-ACCESS-TOKEN"] = self.token
        if extra:
            h.update(extra)
        return h

    def request(self, method, path, body=None, headers=None, timeout=30):
        """Plain request over a raw socket; returns (status, headers, body bytes)."""
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=self.headers(headers))
        r = c.getresponse()
        data = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        c.close()
        return r.status, hdrs, data

    def json(self, method, path, body=None, headers=None):
        st, h, data = self.request(method, path, body, headers)
        return st, (json.loads(data) if data else None)

    def curl(self, *args, timeout=60, input=None):
        """Run curl against the runner; returns CompletedProcess (bytes)."""
        cmd = ["curl", "-sS", "-N", "--max-time", str(timeout)]
        for k, v in self.headers().items():
            cmd += ["-H", "%s: %s" % (k, v)]
        cmd += list(args)
        return subprocess.run(cmd, capture_output=True, timeout=timeout + 10, input=input)

    def execd(self, body, path="/command", timeout=60):
        """POST a command; returns the list of execd events (raw JSON frames)."""
        r = self.curl("-H", "Content-Type: application/json", "-d", json.dumps(body),
                      self.url + path, timeout=timeout)
        return parse_execd(r.stdout)

    def native(self, body, timeout=60):
        r = self.curl("-H", "Content-Type: application/json", "-d", json.dumps(body),
                      self.url + "/v1/tasks", timeout=timeout)
        return parse_sse(r.stdout)

    def rss_kib(self, pid=None):
        pid = pid or self.host_pid()
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return None

    def host_pid(self):
        """Pid of the runner process in our pid namespace."""
        if getattr(self, "wrap", None):
            return self._wrapped_host_pid()
        if os.path.basename(self.proc.args[0]) != "unshare":
            return self.proc.pid
        # unshare --fork: the runner is unshare's only child.
        kids = open("/proc/%d/task/%d/children" % (self.proc.pid, self.proc.pid)).read().split()
        return int(kids[0])

    def _wrapped_host_pid(self, timeout=5):
        """With wrap=[...] the runner is the wrapper itself once it exec'd
        (setpriv) or a descendant (maybe under unshare too): the shallowest
        process running RUNNER."""
        if self._host_pid:
            return self._host_pid
        exe = os.path.realpath(self.binary)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if os.readlink("/proc/%d/exe" % self.proc.pid) == exe:
                    self._host_pid = self.proc.pid
                    return self.proc.pid
            except OSError:
                pass
            level = [self.proc.pid]
            while level:
                nxt = []
                for pid in level:
                    try:
                        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
                            kids = [int(k) for k in f.read().split()]
                    except OSError:
                        kids = []
                    for k in kids:
                        try:
                            if os.readlink("/proc/%d/exe" % k) == exe:
                                self._host_pid = k
                                return k
                        except OSError:
                            pass
                    nxt += kids
                level = nxt
            if time.monotonic() > deadline:
                raise RuntimeError("runner process not found under the wrapper")
            time.sleep(0.01)

    def signal_runner(self, sig):
        """Send sig to the runner itself. Under pid1=True, Runner.proc is
        unshare, which blocks SIGTERM/SIGINT; under wrap it is the wrapper."""
        os.kill(self.host_pid(), sig)

    def shutdown(self, sig=signal.SIGTERM, timeout=15):
        """Signal the runner itself and wait; returns the exit status of the
        top process (unshare and the wrappers pass the runner's status on)."""
        if self.proc.poll() is None:
            try:
                self.signal_runner(sig)
                self.proc.wait(timeout)
            except (subprocess.TimeoutExpired, OSError, RuntimeError, IndexError, ValueError):
                pass  # (it may have exited meanwhile: no pid to find)
        if self.proc.poll() is None:
            try:
                os.kill(self.host_pid(), signal.SIGKILL)
            except (OSError, RuntimeError, IndexError, ValueError):
                pass
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def stop(self, sig=signal.SIGTERM, timeout=15):
        if self.proc.poll() is None:
            try:
                # Under unshare the runner is unshare's child: signal it
                # directly (unshare does not forward).
                if os.path.basename(self.proc.args[0]) == "unshare":
                    os.kill(self.host_pid(), sig)
                else:
                    self.proc.send_signal(sig)
            except (ProcessLookupError, OSError, IndexError, ValueError):
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def close(self):
        self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def parse_execd(data):
    """execd framing: JSON object + blank line, no data: prefix."""
    events = []
    text = data.decode("utf-8", errors="strict")
    assert text == "" or text.endswith("\n\n"), "stream does not end with a blank line: %r" % text[-80:]
    for frame in text.split("\n\n"):
        if frame.strip():
            events.append(json.loads(frame))
    return events


def parse_sse(data):
    """Standard SSE: returns list of dicts {id, event, data(parsed JSON)}; comments dropped."""
    events = []
    for block in data.decode("utf-8").split("\n\n"):
        ev = {}
        datalines = []
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            k, _, v = line.partition(":")
            v = v[1:] if v.startswith(" ") else v
            if k == "data":
                datalines.append(v)
            else:
                ev[k] = v
        if datalines:
            ev["data"] = json.loads("\n".join(datalines))
        if ev:
            events.append(ev)
    return events


def pid_running(pid):
    """pid exists and is not a zombie. Race-free: a process that goes away
    between two reads of /proc counts as gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return st[st.rindex(")") + 2] != "Z"


def proc_table():
    """{pid: (ppid, state, comm)} of every process we can see (zombies included)."""
    t = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        rest = st[st.rindex(")") + 2:].split()
        t[int(d)] = (int(rest[1]), rest[0], st[st.index("(") + 1:st.rindex(")")])
    return t


def proc_children(pid):
    """[(pid, state, comm)] of pid's children, zombies included (state "Z")."""
    return [(p, st, comm) for p, (pp, st, comm) in proc_table().items() if pp == pid]


def assert_clean_exit(r):
    """SIGTERM the runner: it must exit 0 (under ASan or valgrind an error or a leak shows as
    another code)."""
    rc = r.stop()
    if rc != 0:
        raise AssertionError("runner exited %s; log tail:\n%s" % (rc, r.logtext()[-3000:]))


def zombies():
    """Pids in Z state visible to us."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    st = f.read()
                if st[st.rindex(")") + 2] == "Z":
                    out.append(int(d))
            except (OSError, ValueError):
                pass
    return out


class RunnerTest(unittest.TestCase):
    """Base class: self.r is a fresh runner for each test class."""
    runner_args = ()
    runner_kwargs = {}

    @classmethod
    def setUpClass(cls):
        cls.r = Runner(cls.runner_args, **cls.runner_kwargs)

    @classmethod
    def tearDownClass(cls):
        # A clean SIGTERM shutdown exits 0. Under ASan (leaks) or valgrind
        # (--error-exitcode) a memory error shows here as another code.
        rc = cls.r.stop()
        log = cls.r.logtext()
        cls.r.close()
        if rc != 0:
            raise AssertionError("runner exited %s after SIGTERM; log tail:\n%s" % (rc, log[-4000:]))


def record_figure(path, name, value):
    """Print a measured figure (the test log shows it) and keep it in the
    JSON file at path (build/...), next to the others of its suite."""
    print("\n[figure] %s: %s" % (name, json.dumps(value)), flush=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    import fcntl
    # Shards of a suite (TEST_SHARDS) write the same file: one at a time, replaced whole.
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            data = {}
        data[name] = value
        with open(path + ".tmp", "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(path + ".tmp", path)


def run_node_suite(here, test_file, runner_args, env=None, node_args=()):
    """The real-client suites' driver (tests/code, tests/e2b): installs the suite's pinned npm
    clients (here/setup.sh), starts a runner with runner_args, runs `node --test` on test_file
    with env, prints the TAP output and 'N passed, N failed', and exits non-zero when a test
    failed, none passed, setup or the runner's start failed, or the runner exited badly."""
    import re
    import sys
    setup = subprocess.run([os.path.join(here, "setup.sh")], capture_output=True, text=True,
                           timeout=1800)
    if setup.returncode != 0:
        sys.stderr.write(setup.stderr)
        print("0 passed, 1 failed")
        sys.exit(1)
    try:
        r = Runner(runner_args)
    except RuntimeError as e:  # no face to test: a failure, with the runner's words
        sys.stderr.write("%s\n" % e)
        print("0 passed, 1 failed")
        sys.exit(1)
    env = dict(os.environ, RUNNER_URL=r.url, **(env or {}))
    try:
        p = subprocess.run([client_node(), "--test", *node_args, os.path.join(here, test_file)],
                           cwd=here, capture_output=True, text=True, timeout=600, env=env)
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
    finally:
        rc = r.stop()
        r.close()
    passed = re.search(r"^# pass (\d+)", p.stdout, re.M)
    failed = re.search(r"^# fail (\d+)", p.stdout, re.M)
    n_pass = int(passed.group(1)) if passed else 0
    n_fail = int(failed.group(1)) if failed else 1
    if (p.returncode != 0 or rc != 0) and n_fail == 0:
        n_fail = 1
    print("%d passed, %d failed" % (n_pass, n_fail))
    sys.exit(0 if n_fail == 0 and n_pass > 0 else 1)
