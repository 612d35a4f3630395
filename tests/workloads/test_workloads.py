"""What agents run, run (issue 46): real tools as tasks of a runner with the
default policy and the built-in writable roots, each asserted to do its
work: a C build with AddressSanitizer whose leak is reported, strace of the
task's own child, git, a venv with a local package, SQLite with an index
on 200k rows, npm from a local package, mktemp in /var/tmp, a server on ::1
through /proxy, 1,500 threads, ping without file capabilities, and
headless Chromium where the machine has one. Each failed before issue 46's
changes (tests/README.md says how each was checked)."""
import http.client
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import unittest

from harness import ROOT, Runner, free_port


def outputs(ev):
    out = "".join(e.get("text", "") + "\n" for e in ev if e["type"] == "stdout")
    err = "".join(e.get("text", "") + "\n" for e in ev if e["type"] == "stderr")
    return out, err


def status(ev):
    """0 for a command that succeeded, else its exit status (as text)."""
    last = [e for e in ev if e["type"] in ("execution_complete", "error")][-1]
    return 0 if last["type"] == "execution_complete" else last["error"]["evalue"]


class Workloads(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.r = Runner(default_roots=True)
        os.chown(cls.r.work, 1000, 1000)

    @classmethod
    def tearDownClass(cls):
        rc = cls.r.stop()
        cls.r.close()
        if rc != 0:
            raise AssertionError("runner exited %s" % rc)

    def run_task(self, command, timeout_s=120, ok=True):
        ev = self.r.execd({"command": command, "cwd": self.r.work, "timeout": timeout_s * 1000},
                          timeout=timeout_s + 30)
        out, err = outputs(ev)
        if ok:
            self.assertEqual(status(ev), 0, "%s\nstdout: %s\nstderr: %s" % (command, out[-3000:],
                                                                            err[-3000:]))
        return out, err, status(ev)

    def need(self, *tools):
        for t in tools:
            self.assertTrue(shutil.which(t), "%s is not installed (scripts/install-deps.sh)" % t)

    def write(self, name, text, mode=0o644):
        """A file of the task user's, in directories of its own."""
        path = os.path.join(self.r.work, name)
        d = os.path.dirname(path)
        os.makedirs(d, exist_ok=True)
        while d != self.r.work:
            os.chown(d, 1000, 1000)
            d = os.path.dirname(d)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text))
        os.chmod(path, mode)
        os.chown(path, 1000, 1000)
        return path

    def test_c_build_with_asan_reports_the_leak(self):
        """LeakSanitizer stops the world with ptrace: refused, it dies with
        "LeakSanitizer has encountered a fatal error"."""
        self.need("cc")
        self.write("asan/leak.c", """\
            #include <stdio.h>
            #include <stdlib.h>
            void *keep;
            int main(void) {
                char *p = malloc(4321);
                p[0] = 1;
                p = 0;
                puts("ran");
                fflush(stdout); /* LeakSanitizer ends the process with _exit */
                return 0;
            }
        """)
        out, err, st = self.run_task("cd asan && cc -g -fsanitize=address -o leak leak.c && "
                                     "./leak", ok=False)
        self.assertIn("ran", out)
        self.assertNotIn("fatal error", err)
        self.assertIn("ERROR: LeakSanitizer: detected memory leaks", err)
        self.assertIn("4321 byte(s) leaked in 1 allocation(s)", err)
        self.assertEqual(st, "1", err[-2000:])  # LeakSanitizer's exit code

    def test_strace_of_the_tasks_own_child(self):
        self.need("strace")
        out, err, _ = self.run_task("strace -f -qq -e trace=execve,openat -o trace.txt "
                                    "sh -c 'cat /etc/hostname >/dev/null'; cat trace.txt")
        self.assertIn("execve(", out)
        self.assertIn('openat(AT_FDCWD, "/etc/hostname"', out)

    def test_git_init_commit_gc(self):
        self.need("git")
        out, _, _ = self.run_task(
            "rm -rf repo && git init -q repo && cd repo && git config user.email a@b && "
            "git config user.name a && seq 1000 > f && git add f && git commit -qm one && "
            "echo 1001 >> f && git commit -qam two && git gc -q && git log --oneline | wc -l && "
            "git worktree add -q ../wt2 HEAD~1 && wc -l < ../wt2/f")
        self.assertEqual(out.split(), ["2", "1000"])

    def test_venv_with_a_local_package(self):
        # A setup.py package: Debian's venv has setuptools but no wheel,
        # and --no-index leaves no way to fetch a PEP 517 backend.
        self.write("pkg/setup.py", "from setuptools import setup\n"
                   "setup(name='localpkg', version='1.0', packages=['localpkg'])\n")
        self.write("pkg/localpkg/__init__.py", "def hello():\n    return 'hello from localpkg'\n")
        out, _, _ = self.run_task(
            "rm -rf venv && /usr/bin/python3 -m venv venv && "
            "venv/bin/pip install -q --no-index ./pkg && "
            "venv/bin/python -c 'import localpkg; print(localpkg.hello())'", timeout_s=300)
        self.assertIn("hello from localpkg", out)

    def test_sqlite_index_on_200k_rows_with_temp_files(self):
        """SQLite's temp files go to the first writable of SQLITE_TMPDIR,
        TMPDIR, /var/tmp, /usr/tmp, /tmp (access(W_OK)): /var/tmp, which
        Landlock refused while access() said yes."""
        self.write("sq.py", """\
            import os, sqlite3
            os.environ.pop("TMPDIR", None)
            os.environ.pop("SQLITE_TMPDIR", None)
            db = sqlite3.connect("big.db")
            db.execute("PRAGMA temp_store = FILE")
            db.execute("PRAGMA cache_size = -64")  # 64 KiB: the sort spills to disk
            db.execute("DROP TABLE IF EXISTS t")
            db.execute("CREATE TABLE t (k TEXT, v INTEGER)")
            db.executemany("INSERT INTO t VALUES (?, ?)",
                           ((os.urandom(12).hex(), i) for i in range(200000)))
            db.execute("CREATE INDEX tk ON t (k)")
            db.commit()
            print("rows", db.execute("SELECT count(*) FROM t INDEXED BY tk").fetchone()[0])
            print("vacuum", db.execute("VACUUM").fetchall())
        """)
        out, _, _ = self.run_task("python3 sq.py", timeout_s=300)
        self.assertIn("rows 200000", out)

    def test_mktemp_in_var_tmp(self):
        out, _, _ = self.run_task("f=$(mktemp -p /var/tmp) && echo data > $f && cat $f && "
                                  "rm $f && d=$(mktemp -d -p /var/tmp) && rmdir $d && echo ok")
        self.assertEqual(out.split(), ["data", "ok"])

    def test_npm_install_from_a_local_package(self):
        """No network: a package packed here and installed from its tarball
        and from its directory, with npm's cache in the task user's HOME."""
        self.need("npm")
        self.write("lib/package.json", json.dumps({"name": "locallib", "version": "1.0.0",
                                                   "main": "index.js"}))
        self.write("lib/index.js", "module.exports = () => 'hello from locallib';\n")
        self.write("app/package.json", json.dumps({"name": "app", "version": "1.0.0",
                                                   "private": True}))
        out, _, _ = self.run_task(
            "cd lib && npm pack -q --offline >/dev/null && cd ../app && "
            "npm install -q --offline --no-audit --no-fund ../lib/locallib-1.0.0.tgz && "
            "node -e 'console.log(require(\"locallib\")())' && "
            "npm install -q --offline --no-audit --no-fund ../lib && ls -l node_modules",
            timeout_s=300)
        self.assertIn("hello from locallib", out)

    def test_server_on_ipv6_loopback_through_proxy(self):
        """Node resolves localhost to ::1: a server there only is the box's
        too. One on 127.0.0.1 only still answers, and nobody: 502."""
        port6, port4 = free_port(), free_port()
        self.write("srv.py", """\
            import http.server, socket, sys
            class S(http.server.ThreadingHTTPServer):
                address_family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
            class H(http.server.BaseHTTPRequestHandler):
                def do_GET(self):
                    body = ("served on %s %s" % (sys.argv[1], self.path)).encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                def log_message(self, *a):
                    pass
            S((sys.argv[1], int(sys.argv[2])), H).serve_forever()
        """)
        threads = [threading.Thread(target=self.r.execd, daemon=True, kwargs={"timeout": 90},
                                    args=({"command": "exec python3 srv.py %s %d" % (a, p),
                                           "cwd": self.r.work, "timeout": 60000},))
                   for a, p in (("::1", port6), ("127.0.0.1", port4))]
        for t in threads:
            t.start()
        self.addCleanup(self.r.request, "POST", "/v1/reset")
        for a, p in (("::1", port6), ("127.0.0.1", port4)):
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                st, _, body = self.r.request("GET", "/proxy/%d/x?y=1" % p)
                if st == 200:
                    break
                time.sleep(0.1)
            self.assertEqual((st, body.decode()), (200, "served on %s /x?y=1" % a))
        # Pooled and new connections alike, several in a row.
        for _ in range(5):
            c = http.client.HTTPConnection("127.0.0.1", self.r.port, timeout=10)
            c.request("GET", "/proxy/%d/again" % port6, headers=self.r.headers())
            self.assertEqual(c.getresponse().read(), b"served on ::1 /again")
            c.close()
        st, _, body = self.r.request("GET", "/proxy/%d/" % free_port())
        self.assertEqual(st, 502, body)
        for t in threads:
            t.join(0)
        self.stop_tasks()

    def stop_tasks(self):
        st, lst = self.r.json("GET", "/v1/tasks")
        for t in lst.get("tasks", []):
            if t.get("status") == "running":
                self.r.request("DELETE", "/v1/tasks/" + t["id"])

    def test_1500_threads(self):
        self.write("threads.py", """\
            import threading
            stop = threading.Event()
            ts = [threading.Thread(target=stop.wait) for _ in range(1500)]
            try:
                for t in ts:
                    t.start()
            except RuntimeError as e:
                print("failed at", threading.active_count(), e)
            print("threads", threading.active_count())
            stop.set()
            ts = [t for t in ts if t.ident]
            for t in ts:
                t.join()
        """)
        out, _, _ = self.run_task("python3 threads.py")
        self.assertIn("threads 1501", out)
        out, _, _ = self.run_task("ulimit -u; ulimit -n")
        nproc, nofile = out.split()
        self.assertGreaterEqual(int(nproc), 4096)
        # The runner lowers a built-in default to its own hard limit when it
        # may not raise it (no CAP_SYS_RESOURCE): this machine's may be lower.
        import resource
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        self.assertGreaterEqual(int(nofile), min(65536, hard))
        self.assertGreater(int(nofile), 4096)

    def test_headless_chromium(self):
        """A browser an image carries runs headless with the flags the
        runner cannot spare it (no user namespaces: --no-sandbox)."""
        names = ("chromium", "chromium-browser", "google-chrome", "chrome", "headless_shell")
        exe = next((shutil.which(n) for n in names if shutil.which(n)), None)
        if not exe:
            self.skipTest("no Chromium on this machine (none of %s on PATH); no image of the "
                          "project carries one (docs/design/confinement.md#where-standard-tools-write-ping-chromium)" % ", ".join(names))
        out, err, _ = self.run_task("%s --headless --no-sandbox --disable-gpu --dump-dom "
                                    "'data:text/html,<p>rendered-by-chromium</p>'" % exe)
        self.assertIn("rendered-by-chromium", out, err[-2000:])


class Ping(unittest.TestCase):
    """ping without file capabilities (image/install.sh): Debian's ping
    carries cap_net_raw=ep, which the kernel refuses to exec under the
    tasks' empty bounding set (126); the same bytes without the capability
    use an ICMP datagram socket. The whole exchange runs in a network
    namespace of its own whose ping_group_range lets every group ping (what
    image/kubernetes/*.yaml and image/run-container.sh set)."""

    def test_ping_without_file_capabilities(self):
        ping = shutil.which("ping")
        self.assertTrue(ping, "ping is not installed (iputils-ping; scripts/install-deps.sh)")
        helper = os.path.join(ROOT, "tests", "workloads", "ping_netns.py")
        p = subprocess.run(["unshare", "--net", sys.executable, helper, ping],
                           capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tests", "lib")))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        res = json.loads(p.stdout.strip().splitlines()[-1])
        print("\nping:", res)
        if res["file_caps"]:
            self.assertEqual(res["as_shipped"], 126, res)
        self.assertEqual(res["stripped"], 0, res)
        self.assertIn("1 received", res["stripped_out"])


if __name__ == "__main__":
    unittest.main()
