"""Issue 46, "the images and the first steps, as a newcomer met them": the
second newcomer's pass. Each claim that did not hold and each message that
named no fix, checked against the runner and the documents as they are
(docs/design/build.md#the-image-tiers-and-a-newcomers-first-steps). Follows test_newcomer.py (issue 39)."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from harness import RUNNER, Runner, RunnerTest, free_port
from test_newcomer import ROOT, clean_env, readme_blocks, start

RUNNER = os.path.abspath(RUNNER)
README = os.path.join(ROOT, "README.md")
API = os.path.join(ROOT, "docs", "api.md")
IMAGE_README = os.path.join(ROOT, "image", "README.md")
KUBE_README = os.path.join(ROOT, "image", "kubernetes", "README.md")
OSB_README = os.path.join(ROOT, "image", "opensandbox", "README.md")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def section(text, title):
    """The body of the markdown section whose heading starts with title."""
    m = re.search(r"^(#+) %s[^\n]*\n(.*?)(?=^#{1,%d} |\Z)" % (re.escape(title), 6), text,
                  re.S | re.M)
    return m.group(2) if m else ""


# ---- exit status and messages that name the fix ----

class ExitAndMessages(unittest.TestCase):
    def test_policy_not_json_is_configuration_exit_2_with_the_fix(self):
        d = tempfile.mkdtemp(prefix="forceai-pass2-")
        self.addCleanup(shutil.rmtree, d, True)
        bad = os.path.join(d, "policy.json")
        with open(bad, "w") as f:
            f.write('{"defaultAction": "SCMP_ACT_ERRNO",\n')
        rc, err = start([], policy=bad)
        self.assertEqual(rc, 2, err)
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn("invalid JSON at line", err)
        self.assertIn("--seccomp-policy", err)
        self.assertIn("seccomp/default.json", err)

    def test_address_in_use_names_the_fix(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        self.addCleanup(s.close)
        port = s.getsockname()[1]
        rc, err = start(["--listen", "127.0.0.1:%d" % port])
        self.assertEqual(rc, 1, err)
        last = err.splitlines()[-1]
        self.assertIn("Address already in use", last)
        self.assertIn("--listen", last)
        self.assertIn("podman stop forceai-runner", last)
        self.assertIn("another port", last)

    def test_reset_snapshot_over_the_bound_says_raise_or_shrink(self):
        d = tempfile.mkdtemp(prefix="forceai-pass2-root-")
        self.addCleanup(shutil.rmtree, d, True)
        with open(os.path.join(d, "big"), "wb") as f:
            f.write(b"x" * 4096)
        rc, err = start(["--allow-reset", "--reset-snapshot-max", "1024", "--landlock-roots", d])
        self.assertIn(rc, (1, 2), err)
        self.assertIn("raise --reset-snapshot-max or shrink the roots", err)

    def test_unreachable_gateway_says_check_the_url(self):
        """What the task's client prints (the proxy's 502 body) and the
        runner's log both say where to look."""
        r = Runner(["--gateway-url", "http://127.0.0.1:9/v1"], env={"FORCEAI_GATEWAY_KEY": "k"})
        self.addCleanup(r.close)
        ev = r.native({"capability": "chat", "task":
                       'curl -s "$OPENAI_BASE_URL/chat/completions" -H "Authorization: Bearer '
                       '$OPENAI_API_KEY" -d \'{"model": "m", "messages": []}\''})
        out = "".join(e["data"].get("text", "") for e in ev if e["event"] == "stdout")
        body = json.loads(out)
        self.assertEqual(body["error"]["code"], "gateway_unreachable", out)
        self.assertIn("check --gateway-url", body["error"]["message"])
        self.assertIn("FORCEAI_GATEWAY_URL", body["error"]["message"])
        exit_ev = [e for e in ev if e["event"] == "exit"][0]["data"]
        # The status is the task's own (curl -s exits 0): the README says so.
        self.assertEqual(exit_ev["status"], "succeeded")
        self.assertIn("check --gateway-url", r.logtext())
        chat = section(read(README), "A chat task through a gateway")
        self.assertIn("gateway_unreachable", chat)
        self.assertIn("--fail-with-body", chat)


# ---- documents against behaviour ----

class ReadyAndMetrics(RunnerTest):
    def test_ready_names_no_protocol_without_runtime_init(self):
        st, b = self.r.json("GET", "/ready")
        self.assertEqual(st, 200, b)
        self.assertNotIn("runtimeInitProtocol", b)
        row = [l for l in read(API).splitlines() if l.startswith("| `GET /ready`")][0]
        self.assertIn("with `--runtime-init` also", row)

    def test_metrics_watch_lines_are_the_metrics_object(self):
        st, full = self.r.json("GET", "/metrics")
        self.assertEqual(st, 200)
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", self.r.port, timeout=10)
        c.request("GET", "/metrics/watch", headers=self.r.headers())
        resp = c.getresponse()
        line = resp.readline()
        c.close()
        watch = json.loads(line)
        self.assertEqual(sorted(watch), sorted(full))
        for key in ("audit", "otlp_metrics"):
            self.assertIn(key, watch)
        row = [l for l in read(API).splitlines() if l.startswith("| `GET /metrics/watch`")][0]
        self.assertIn("the same object", row)

    def test_files_watch_first_event_is_documented(self):
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", self.r.port, timeout=10)
        c.request("GET", "/files/watch?path=%s" % self.r.work, headers=self.r.headers())
        resp = c.getresponse()
        first = b""
        while b"\n\n" not in first:
            first += resp.readline()
        c.close()
        self.assertIn(b"event: watching", first)
        row = [l for l in read(API).splitlines() if l.startswith("| `GET /files/watch`")][0]
        self.assertIn("`watching`", row)


class ApiExamples(unittest.TestCase):
    def test_examples_name_a_directory_that_exists_where_the_readme_runs(self):
        """docs/api.md's examples work on the README's host runner (/tmp/box,
        no /workspace) as in the image: their paths are $W, set for both."""
        text = read(API)
        curls = [l for l in text.splitlines() if l.startswith("curl ")]
        self.assertTrue(curls)
        for l in curls:
            with self.subTest(line=l):
                self.assertNotIn("/workspace", l)
        self.assertRegex(text, r"\nW=/tmp/box\b")
        self.assertIn("W=/workspace", text)

    def test_file_examples_run_against_the_readme_runner(self):
        """Upload, download, grep of the files block, as written, with W=/tmp/box's
        role played by the runner's writable directory."""
        r = Runner(token="t0k")
        self.addCleanup(r.close)
        block = re.search(r"```sh\n(echo 'TODO: hello' > a.txt\n.*?)\n```", read(API), re.S)
        self.assertTrue(block, "docs/api.md has no files example starting with a.txt")
        lines = [l for l in block.group(1).splitlines() if "/files/watch" not in l]
        script = "\n".join(["set -e", "cd " + r.tmp, "B=%s; H='X-EXECD-ACCESS-TOKEN: t0k'" % r.url,
                            "W=" + r.work] + lines)
        p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("TODO: hello", p.stdout)
        self.assertIn('"matches"', p.stdout)


class SectionReferences(unittest.TestCase):
    """A reference to the design in the image documents names a file and a
    heading that exist (scripts/design_refs.py --check: no old `§N` number
    left), and the ones issue 46 found stale point at the sections about
    what the sentence says (the link's title, the heading it names)."""

    def test_every_reference_exists(self):
        out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "design_refs.py"),
                              "--check", IMAGE_README, KUBE_README, OSB_README],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)

    def test_the_stale_ones_point_at_their_topic(self):
        link = r"\[([^\]]+)\]\([^)]*design[^)]*\)"
        cases = [
            (KUBE_README, r"one per privilege mode \(" + link, "Least privilege"),
            (KUBE_README, r"cannot reach them, " + link, "execd 1.2"),
            (KUBE_README, r"spools in memory: " + link, "state dir"),
            (OSB_README, r"WebSocket; " + link, "port proxy"),
            (OSB_README, r"with the same token \(" + link, "OpenSandbox's server"),
            (OSB_README, r"reach neither form \(" + link, "No API from tasks"),
            (IMAGE_README, r"itself \(" + link + r"\)\. As the main", "No API from tasks"),
        ]
        for path, pattern, topic in cases:
            with self.subTest(pattern=pattern):
                m = re.search(pattern, read(path))
                self.assertTrue(m, pattern)
                self.assertIn(topic, m.group(1))


# ---- the README, followed in order ----

class ReadmeFirstSteps(unittest.TestCase):
    def test_dev_build_is_not_called_fully_static(self):
        text = read(README)
        self.assertNotIn("a small, fully static C program", text)
        run = section(text, "Run the binary you just built")
        self.assertIn("linked against the system's libraries", run)

    def test_run_the_binary_after_make_run(self):
        """The section says to run `make` (make run builds only the static
        binary) and to stop the container or use another port."""
        run = section(read(README), "Run the binary you just built")
        self.assertIn("run `make` first", run)
        self.assertIn("build/static/forceai-runner", run)
        self.assertIn("podman stop forceai-runner", run)
        self.assertIn("another port", run)

    def test_what_local_is_and_how_long_check_takes(self):
        quick = section(read(README), "Quick start")
        self.assertIn("IMAGE_LOCAL_FROM", quick)
        self.assertIn(":local", quick)
        self.assertRegex(quick, r"35-40 minutes on a fresh 2-core machine")
        self.assertIn("tests/README.md", quick)

    def test_pooled_box_how_to_is_linked_and_runs(self):
        self.assertIn("pooled", section(read(README), "More"))
        text = read(KUBE_README)
        self.assertIn("## A pooled box, step by step", text)
        body = re.search(r"<!-- example: pooled -->\n```sh\n(.*?)\n```", text, re.S).group(1)
        port = free_port()
        tmp = tempfile.mkdtemp(prefix="forceai-pooled-")
        os.chmod(tmp, 0o755)
        self.addCleanup(shutil.rmtree, tmp, True)
        root = os.path.join(tmp, "pool")
        body = (body.replace("127.0.0.1:8090", "127.0.0.1:%d" % port)
                .replace("/tmp/pool.log", os.path.join(tmp, "pool.log"))
                .replace("/tmp/pool", root).replace("build/forceai-runner", RUNNER))
        lines = ["set -e", "trap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT", "cd " + ROOT]
        for l in body.splitlines():
            lines.append(l)
            if l.endswith("&"):
                lines.append("for i in $(seq 100); do curl -s -o /dev/null "
                             "http://127.0.0.1:%d/ready && break; sleep 0.1; done" % port)
        p = subprocess.run(["bash", "-c", "\n".join(lines)], capture_output=True, text=True,
                           timeout=120, env=clean_env())
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        out = p.stdout
        self.assertEqual(out.count('"status":"not_initialized"'), 2, out)
        self.assertIn('"status":"initialized"', out)
        self.assertIn("from the image", out)
        self.assertIn('"unbound":true', out)
        self.assertNotIn("left.txt", out.split('"status":"reset"')[1])
        self.assertEqual(os.listdir(root), ["seed.txt"])


# ---- the images ----

class ImageTiers(unittest.TestCase):
    def make_vars(self, *names):
        p = subprocess.run(["make", "-s", "-C", ROOT, "--no-print-directory", "-p", "-n",
                            "IMAGE_ENGINE=podman", "image-sizes"],
                           capture_output=True, text=True, timeout=60)
        out = {}
        for n in names:
            m = re.search(r"^%s \??[:]?= (.*)$" % n, p.stdout, re.M)
            out[n] = m.group(1).strip() if m else None
        return out

    def test_every_tag_has_a_size_and_a_purpose_in_the_table(self):
        v = self.make_vars("IMAGE_TAG", "IMAGE_PYTHON_TAG", "IMAGE_CODE_TAG", "IMAGE_EXECD_TAG",
                           "IMAGE_LOCAL_FROM")
        self.assertEqual(v["IMAGE_LOCAL_FROM"], "$(IMAGE_PYTHON_TAG)", v)
        text = read(IMAGE_README)
        block = re.search(r"<!-- sizes: start -->\n(.*?)<!-- sizes: end -->", text, re.S)
        self.assertTrue(block, "image/README.md has no generated sizes table")
        for key in ("IMAGE_TAG", "IMAGE_PYTHON_TAG", "IMAGE_CODE_TAG", "IMAGE_EXECD_TAG"):
            tag = v[key]
            self.assertTrue(tag, key)
            with self.subTest(tag=tag):
                row = [l for l in block.group(1).splitlines() if l.startswith("| `:%s` |" % tag)]
                self.assertEqual(len(row), 1, block.group(1))
                cells = [c.strip() for c in row[0].strip("|").split(" | ")]
                self.assertGreater(len(cells[1]), 20, "purpose of :%s" % tag)
                self.assertRegex(cells[-1], r"^\d+(\.\d+)? [MG]B\b", "size of :%s" % tag)
        # The claims of the old text are gone.
        self.assertNotIn("3.35 MiB", text)
        self.assertNotRegex(text, r"--include=python3 bookworm")

    def test_the_default_base_is_lean_and_code_has_the_libraries(self):
        script = read(os.path.join(ROOT, "image", "base-python.sh"))
        lean = re.search(r"^python\) tier_include=(\S+) ;;", script, re.M)
        code = re.search(r"^code\) tier_include=(\S+) ;;", script, re.M)
        self.assertTrue(lean and code, "image/base-python.sh has no python/code tiers")
        # python3 and the static bash commands run in (docs/design/tasks.md "The task shell"),
        # none of the code contexts' libraries
        self.assertEqual(lean.group(1).split(","), ["python3", "bash-static"])
        self.assertIn("bash-static", code.group(1).split(","))
        for pkg in ("python3-ipython", "python3-numpy", "python3-pandas", "python3-matplotlib"):
            self.assertIn(pkg, code.group(1).split(","))
        self.assertRegex(script, r"TIER=\$\{TIER:-python\}")

    def test_an_unchanged_tree_builds_no_image(self):
        """Each image is a stamp that depends on its inputs: up to date when
        nothing changed (make -q), out of date when one did."""
        tmp = tempfile.mkdtemp(prefix="forceai-stamps-")
        self.addCleanup(shutil.rmtree, tmp, True)
        runner = os.path.join(tmp, "runner")
        with open(runner, "w") as f:
            f.write("x")
        old = time.time() - 3600
        os.utime(runner, (old, old))
        name = "forceai-test/stamps-%d" % os.getpid()
        stamp_dir = os.path.join(ROOT, "build", "image-stamps", name.replace("/", "+"))
        self.addCleanup(shutil.rmtree, stamp_dir, True)
        args = ["make", "-C", ROOT, "--no-print-directory", "IMAGE_ENGINE=podman",
                "IMAGE_NAME=" + name, "IMAGE_RUNNER_BIN=" + runner]
        stamps = ["build/image-stamps/%s/%s" % (name.replace("/", "+"), t)
                  for t in ("latest", "opensandbox-execd", "python", "code")]
        p = subprocess.run(args + ["-q"] + stamps, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1, "stamps missing: out of date " + p.stderr)
        os.makedirs(stamp_dir)
        for s in stamps:
            open(os.path.join(ROOT, s), "w").close()
        p = subprocess.run(args + ["-q"] + stamps, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, "an unchanged tree rebuilds: " + p.stdout + p.stderr)
        p = subprocess.run(args + ["-n"] + stamps, capture_output=True, text=True, timeout=60)
        self.assertNotIn(" build ", p.stdout)
        os.utime(runner, None)  # a new runner binary: every image is out of date
        for s in stamps:
            p = subprocess.run(args + ["-q", s], capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 1, s)


class RunContainerCurl(unittest.TestCase):
    """image/run-container.sh prints curls that work in the image it runs:
    python3 only where the image has it (not :latest), a code context where
    /code offers python. The engine is a stand-in that runs the dev build on
    the host and answers `exec ... command -v python3` as the image would."""

    def run_with(self, has_python):
        tmp = tempfile.mkdtemp(prefix="forceai-runc-")
        self.addCleanup(shutil.rmtree, tmp, True)
        port = free_port()
        engine = os.path.join(tmp, "engine")
        pidfile = os.path.join(tmp, "pid")
        with open(engine, "w") as f:
            f.write("""#!/bin/sh
case "$1" in
container|inspect) [ "$1 $2" = "inspect -f" ] && { echo true; exit 0; }; exit 1 ;;
rm) exit 0 ;;
exec) exit %d ;;
run) tok=$(printf '%%s\\n' "$@" | sed -n 's/^EXECD_ACCESS_TOKEN=//p')
     EXECD_ACCESS_TOKEN=$tok setsid %s --listen 127.0.0.1:%d --state-dir %s/state \\
         --seccomp-policy %s/seccomp/default.json --landlock-roots %s >%s/log 2>&1 &
     echo $! > %s; echo id ;;
esac
""" % (0 if has_python else 1, RUNNER, port, tmp, ROOT, tmp, tmp, pidfile))
        os.chmod(engine, 0o755)

        def stop():
            try:
                os.kill(int(open(pidfile).read()), 15)
            except (OSError, ValueError):
                pass
        self.addCleanup(stop)
        p = subprocess.run([os.path.join(ROOT, "image", "run-container.sh")], capture_output=True,
                           text=True, timeout=60,
                           env=clean_env({"IMAGE_ENGINE": engine, "PORT": str(port),
                                          "IMAGE": "forceai/runtime-runner:test"}))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        return p.stdout

    def test_minimal_image_gets_no_python3_curl(self):
        out = self.run_with(has_python=False)
        self.assertNotIn("python3", out.split("other images")[0])
        self.assertIn("echo $((6*7))", out)

    def test_python_image_gets_the_python3_curl(self):
        out = self.run_with(has_python=True)
        self.assertIn('python3 -c \\"print(6*7)\\"', out)


if __name__ == "__main__":
    unittest.main()
