"""Red-team round three (issue 33, finding 9), from the attacker's side: a
task swaps a file the runner opens by name, as root, on its loop, for a FIFO
(open() waits for a writer: PID 1 stuck for good, deaf to SIGTERM), a
symlink (to a device, or to a file only root may read) or a huge file.

The engines' version lookup (GET /v1/agent/engines) reads the package.json
beside a CLI found on the runner's PATH; here the CLI lies in an npm prefix
the task user owns. The lookup's stat-then-open gap is raced with
renameat2(RENAME_EXCHANGE) by the task, as the files API's attacks are.
Files read once at start (--mcp-servers, --token-file, --seccomp-policy)
are left as a FIFO by a task of an earlier boot of the same volume.

Every test is bounded: a runner that stops answering is killed (SIGKILL to
its process group) and the swapping task ends by itself."""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from harness import Runner, record_figure

TASK_UID = 1000
FIGURES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "build", "security-round3-opens.json")

# The task's swapper: RENAME_EXCHANGE of two names, as fast as it goes, for
# `secs` seconds; prints the count.
SWAPPER = r"""
import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
a, b, secs = sys.argv[1].encode(), sys.argv[2].encode(), float(sys.argv[3])
SYS_renameat2, AT_FDCWD, RENAME_EXCHANGE = 316, -100, 2
end = time.monotonic() + secs
n = 0
while time.monotonic() < end:
    for _ in range(500):
        if libc.syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
            print("renameat2 failed", ctypes.get_errno()); sys.exit(1)
    n += 500
print("swaps", n)
"""


def figure(name, value):
    record_figure(FIGURES, name, value)


def kill_runner(r):
    """SIGKILL the runner's process group (a runner stuck in open() cannot be
    stopped otherwise); unblock a FIFO reader first is not needed then."""
    if r.proc.poll() is None:
        try:
            os.killpg(r.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        r.proc.wait()


def sigterm_ends(r, timeout=5.0):
    """SIGTERM; seconds until the runner exited, or None (still running)."""
    t0 = time.monotonic()
    r.proc.send_signal(signal.SIGTERM)
    try:
        r.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None
    return time.monotonic() - t0


def ping_ok(r, timeout=2.0):
    try:
        st, _, _ = r.request("GET", "/ping", timeout=timeout)
        return st == 200
    except OSError:
        return False


class EngineVersionLookup(unittest.TestCase):
    """A fake `codex` npm install in the task user's prefix, first on the
    runner's PATH: prefix/bin/codex -> ../lib/node_modules/@openai/codex/
    bin/codex.js, with the package.json the lookup reads beside it."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="forceai-opens-")
        os.chmod(self.dir, 0o755)
        self.prefix = os.path.join(self.dir, "npm")
        self.pkg = os.path.join(self.prefix, "lib", "node_modules", "@openai", "codex")
        os.makedirs(os.path.join(self.pkg, "bin"))
        os.makedirs(os.path.join(self.prefix, "bin"))
        cli = os.path.join(self.pkg, "bin", "codex.js")
        with open(cli, "w") as f:
            f.write("#!/bin/sh\nexit 0\n")
        os.chmod(cli, 0o755)
        os.symlink("../lib/node_modules/@openai/codex/bin/codex.js",
                   os.path.join(self.prefix, "bin", "codex"))
        self.pj = os.path.join(self.pkg, "package.json")
        with open(self.pj, "w") as f:
            json.dump({"name": "@openai/codex", "version": "1.2.3"}, f)
        with open(os.path.join(self.prefix, "swap.py"), "w") as f:
            f.write(SWAPPER)
        # The task user's prefix, as `npm config set prefix ~/.npm-global` makes it.
        for dirpath, dirnames, filenames in os.walk(self.prefix):
            for n in [""] + dirnames + filenames:
                os.chown(os.path.join(dirpath, n), TASK_UID, TASK_UID, follow_symlinks=False)
        self.r = Runner(("--landlock-roots", "/tmp:" + self.dir),
                        env={"PATH": os.path.join(self.prefix, "bin") + ":" +
                             os.environ.get("PATH", "/usr/bin:/bin")})
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.addCleanup(self.r.close)
        self.addCleanup(kill_runner, self.r)

    def task(self, cmd, timeout=30):
        ev = self.r.execd({"command": cmd, "cwd": self.pkg}, timeout=timeout)
        return "".join(e.get("text", "") + "\n" for e in ev if e.get("type") == "stdout"), ev

    def codex(self, timeout=2.0):
        st, _, data = self.r.request("GET", "/v1/agent/engines", timeout=timeout)
        self.assertEqual(st, 200, data)
        body = json.loads(data)
        e = {x["name"]: x for x in body["engines"]}
        self.assertIn("codex", e, body)
        return e["codex"]

    def test_unswapped_version_is_read(self):
        c = self.codex()
        self.assertEqual(c["path"], os.path.join(self.prefix, "bin", "codex"))
        self.assertEqual(c["version"], "1.2.3", c)

    def race(self, name, prepare, secs=6.0, bad_version=None):
        """The task makes `other` (prepare: a shell line run in the package's
        directory) and swaps it with package.json for `secs` seconds; the
        client asks for the engines meanwhile. Returns the figures."""
        out, ev = self.task(prepare)
        self.assertTrue(any(e.get("type") == "execution_complete" for e in ev), ev)
        swapper = {}

        def attack():
            try:
                swapper["out"], _ = self.task(
                    "exec python3 ../../../../swap.py package.json other %s" % secs,
                    timeout=secs + 20)
            except Exception as e:  # a stuck runner: the stream just ends
                swapper["out"] = repr(e)

        th = threading.Thread(target=attack, daemon=True)
        th.start()
        time.sleep(0.5)  # the swapper is going
        answered, versions, worst, hung = 0, {}, 0.0, None
        end = time.monotonic() + secs - 1.5
        while time.monotonic() < end:
            t0 = time.monotonic()
            try:
                c = self.codex(timeout=2.0)
            except OSError as e:
                hung = "GET /v1/agent/engines unanswered after 2 s (%s) after %d answered" % (
                    e.__class__.__name__, answered)
                break
            worst = max(worst, time.monotonic() - t0)
            answered += 1
            v = c.get("version")
            versions[str(v)] = versions.get(str(v), 0) + 1
        ping = ping_ok(self.r)
        th.join(secs + 25)
        stopped = sigterm_ends(self.r) if not hung else None
        if hung or not ping:
            kill_runner(self.r)
        figs = {"answered": answered, "versions": versions, "worst_s": round(worst, 3),
                "swapper": swapper.get("out", "").strip()[:80], "hung": hung,
                "ping_after": ping, "sigterm_exit_s": stopped and round(stopped, 3)}
        figure(name, figs)
        self.assertIsNone(hung, figs)
        self.assertTrue(ping, figs)
        self.assertIsNotNone(stopped, "SIGTERM did not end the runner within 5 s: %s" % figs)
        # a clean exit (under ASan a leak or an error shows as another code)
        self.assertEqual(self.r.proc.returncode, 0, self.r.logtext()[-2000:])
        self.assertGreater(answered, 20, figs)
        if bad_version:
            self.assertNotIn(bad_version, versions, figs)
        self.assertTrue(set(versions) <= {"1.2.3", "None"}, figs)
        return figs

    def test_fifo_swapped_in(self):
        """package.json <-> a FIFO: the runner answers, /ping too, SIGTERM
        ends it (before: open() of the FIFO held PID 1 for good)."""
        self.race("engines_fifo_race", "mkfifo other && echo made")

    def test_blocking_device_symlink_swapped_in(self):
        """package.json <-> a symlink to /dev/ptmx: read() of a fresh
        terminal master never returns (before: the loop stuck)."""
        self.race("engines_ptmx_race", "ln -s /dev/ptmx other && echo made")

    def test_huge_file_swapped_in(self):
        """package.json <-> a 16 MiB one: never read (before: read whole, on
        the loop, past the 1 MiB bound the stat had checked)."""
        self.race("engines_huge_race",
                  "python3 -c \"import json,sys; sys.stdout.write(json.dumps("
                  "{'name':'@openai/codex','version':'HUGE'}) + ' ' * (16 << 20))\" > other"
                  " && echo made", bad_version="HUGE")

    def test_symlink_to_root_only_file(self):
        """package.json replaced by a symlink to a file only root can read:
        not followed (before: read as root, its version shown to clients)."""
        secret_dir = os.path.join(self.dir, "root-only")
        os.mkdir(secret_dir, 0o700)
        with open(os.path.join(secret_dir, "p.json"), "w") as f:
            json.dump({"name": "@openai/codex", "version": "ROOT-ONLY"}, f)
        out, _ = self.task("cat %s/p.json 2>&1; ln -sf %s/p.json package.json && echo linked"
                           % (secret_dir, secret_dir))
        self.assertIn("linked", out)
        self.assertNotIn("ROOT-ONLY", out)  # the task itself cannot read it
        c = self.codex()
        figure("engines_root_only_symlink", {"version": c.get("version")})
        self.assertNotEqual(c.get("version"), "ROOT-ONLY", c)
        self.assertIsNone(c.get("version"), c)
        self.assertTrue(ping_ok(self.r))

    def test_dev_zero_symlink(self):
        """package.json replaced by a symlink to /dev/zero: refused at once."""
        out, _ = self.task("ln -sf /dev/zero package.json && echo linked")
        self.assertIn("linked", out)
        c = self.codex()
        self.assertIsNone(c.get("version"), c)
        self.assertTrue(ping_ok(self.r))


class StartFiles(unittest.TestCase):
    """Files read once at start, left as a FIFO where a task of an earlier
    boot could write (a persistent volume): the runner refuses to start,
    naming the file, instead of hanging before its loop exists."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="forceai-opens-")
        self.fifo = os.path.join(self.dir, "fifo")
        os.mkfifo(self.fifo)
        self.addCleanup(shutil.rmtree, self.dir, True)

    def start(self, name, args):
        r = Runner(tuple(args), ready=False)
        self.addCleanup(r.close)
        self.addCleanup(kill_runner, r)
        t0 = time.monotonic()
        try:
            rc = r.proc.wait(5)
        except subprocess.TimeoutExpired:
            rc = None
        took = time.monotonic() - t0
        log = r.logtext()
        figure(name, {"exit": rc, "seconds": round(took, 3), "log": log.strip()[-200:]})
        self.assertIsNotNone(rc, "still starting after 5 s (stuck opening the FIFO?)")
        self.assertNotEqual(rc, 0, log)
        self.assertIn("FIFO", log)
        return log

    def test_mcp_servers_fifo(self):
        self.start("start_mcp_servers_fifo", ["--mcp-servers", self.fifo])

    def test_token_file_fifo(self):
        self.start("start_token_file_fifo", ["--token-file", self.fifo])

    def test_seccomp_policy_fifo(self):
        self.start("start_seccomp_policy_fifo", ["--seccomp-policy", self.fifo])


class GatewayCA(unittest.TestCase):
    """--gateway-ca in a directory the task user owns. libcurl used to open
    it by name at each TLS connection, on the loop, as root: the task swaps
    it for a FIFO, a client starts an agent, and PID 1 waited in open() for
    good. Now the bundle is read once at start and handed over as bytes."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="forceai-opens-")
        os.chmod(self.dir, 0o755)
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.cadir = os.path.join(self.dir, "ca")
        os.mkdir(self.cadir)
        self.ca = os.path.join(self.cadir, "ca.pem")
        shutil.copyfile("/etc/ssl/certs/ca-certificates.crt", self.ca)
        for p in (self.cadir, self.ca):
            os.chown(p, TASK_UID, TASK_UID)
        # A "gateway" that accepts and never answers: the handshake waits.
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(16)
        self.addCleanup(self.srv.close)
        self.r = Runner(("--landlock-roots", "/tmp:" + self.dir, "--gateway-ca", self.ca),
                        env={"FORCEAI_GATEWAY_URL": "https://127.0.0.1:%d/v1" %
                             self.srv.getsockname()[1], "FORCEAI_MODEL": "test-model"})
        self.addCleanup(self.r.close)
        self.addCleanup(kill_runner, self.r)

    def test_ca_swapped_for_a_fifo(self):
        ev = self.r.execd({"command": "mkfifo ca.fifo && mv -f ca.fifo ca.pem && echo swapped",
                           "cwd": self.cadir})
        self.assertIn("swapped", "".join(e.get("text", "") for e in ev), ev)
        self.assertTrue(os.path.exists(self.ca) and not os.path.isfile(self.ca))
        th = threading.Thread(target=lambda: self.r.native(
            {"task": "hi", "capability": "agent", "cwd": self.r.work}, timeout=8), daemon=True)
        th.start()
        time.sleep(1.0)  # the call connects and starts its handshake
        ping = ping_ok(self.r)
        stopped = sigterm_ends(self.r) if ping else None
        if not ping:
            kill_runner(self.r)
        th.join(15)
        figs = {"ping_after_call": ping, "sigterm_exit_s": stopped and round(stopped, 3)}
        figure("gateway_ca_fifo", figs)
        self.assertTrue(ping, "the runner stopped answering once a gateway call began: %s" % figs)
        self.assertIsNotNone(stopped, figs)
        self.assertEqual(self.r.proc.returncode, 0, self.r.logtext()[-2000:])

    def test_ca_fifo_at_start_is_refused(self):
        os.unlink(self.ca)
        os.mkfifo(self.ca)
        r = Runner(("--gateway-ca", self.ca), ready=False,
                   env={"FORCEAI_GATEWAY_URL": "https://127.0.0.1:1/v1"})
        self.addCleanup(r.close)
        self.addCleanup(kill_runner, r)
        try:
            rc = r.proc.wait(5)
        except subprocess.TimeoutExpired:
            rc = None
        log = r.logtext()
        figure("start_gateway_ca_fifo", {"exit": rc, "log": log.strip()[-200:]})
        # (the baseline starts: it opens the CA only at a connection)
        self.assertIsNotNone(rc, "started with a FIFO as its CA bundle")
        self.assertNotEqual(rc, 0)
        self.assertIn("FIFO", log)


if __name__ == "__main__":
    unittest.main()
