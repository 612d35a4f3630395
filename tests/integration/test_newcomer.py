"""Issue 39, "the first five minutes": the README's worked examples run as
written (read from its fenced blocks, not copied here), and each claim and
message a newcomer met that did not hold or did not name the fix
(docs/design/build.md#errors-that-name-the-fix-and-where-the-reference-lives)."""
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import unittest

from harness import POLICY, RUNNER, Runner, RunnerTest, free_port, nonroot_files, slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNNER = os.path.abspath(RUNNER)
README = os.path.join(ROOT, "README.md")
CONFIG = os.path.join(ROOT, "docs", "configuration.md")
sys.path.insert(0, os.path.join(ROOT, "tests", "gateway"))


def clean_env(extra=None):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("FORCEAI_") and k != "EXECD_ACCESS_TOKEN"}
    e.update(extra or {})
    return e


def start(args, env=None, timeout=5, policy=True, preexec=None, binary=None):
    """The runner's exit status and stderr, or (None, stderr so far) when it
    still runs after `timeout` (it is killed)."""
    tmp = tempfile.mkdtemp(prefix="forceai-newcomer-")
    os.chmod(tmp, 0o777)
    cmd = [binary or RUNNER, "--listen", "127.0.0.1:%d" % free_port(),
           "--state-dir", os.path.join(tmp, "state")]
    if policy:
        cmd += ["--seccomp-policy", policy if isinstance(policy, str) else POLICY]
    p = subprocess.Popen(cmd + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=clean_env(env), preexec_fn=preexec, cwd=tmp)
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        rc = None
    shutil.rmtree(tmp, True)
    return rc, err.strip()


# ---- the README's examples, as written ----

def readme_blocks():
    """{("example"|"output", name): text} of the blocks marked in README.md."""
    text = open(README, encoding="utf-8").read()
    out = {}
    for kind, name, body in re.findall(
            r"<!-- (example|output): ([a-z-]+) -->\n```[a-z]*\n(.*?)\n```", text, re.S):
        out[(kind, name)] = body
    return out


def mask(text):
    """What varies from run to run: ids, numbers."""
    text = re.sub(r"[0-9a-f]{32}", "ID", text)
    return re.sub(r"\d+", "N", text)


def lines(text):
    return sorted(mask(l) for l in text.splitlines() if l.strip())


class ReadmeExamples(unittest.TestCase):
    """Each example of README.md run by bash as written; what changes: the
    port (a free one for 8080), the runner's log file and binary (the one
    under test), and a wait for the runner to be ready after each line that
    starts it in the background (a reader waits by reading the log)."""

    def setUp(self):
        self.blocks = readme_blocks()
        self.port = free_port()
        self.tmp = tempfile.mkdtemp(prefix="forceai-readme-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def script(self, names):
        s = ["set -e", "trap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT", "cd " + ROOT]
        for name in names:
            self.assertIn(("example", name), self.blocks, "README has no example " + name)
            body = self.blocks[("example", name)]
            body = body.replace("127.0.0.1:8080", "127.0.0.1:%d" % self.port)
            body = body.replace("/tmp/runner.log", os.path.join(self.tmp, "runner.log"))
            body = body.replace("build/forceai-runner", RUNNER)
            s.append("echo '@@%s'" % name)
            for line in body.splitlines():
                s.append(line)
                if line.endswith("&") and RUNNER in line:
                    s.append("for i in $(seq 100); do curl -sf -o /dev/null "
                             "http://127.0.0.1:%d/ping && break; sleep 0.1; done" % self.port)
        return "\n".join(s) + "\n"

    def run_script(self, names, env=None):
        p = subprocess.run(["bash", "-c", self.script(names)], capture_output=True, text=True,
                           timeout=120, env=clean_env(env))
        log = ""
        try:
            log = open(os.path.join(self.tmp, "runner.log")).read()[-3000:]
        except OSError:
            pass
        self.assertEqual(p.returncode, 0, "%s\n%s\nrunner log: %s" % (p.stdout, p.stderr, log))
        parts = re.split(r"^@@([a-z-]+)\n", p.stdout, flags=re.M)
        return dict(zip(parts[1::2], parts[2::2]))

    def test_start_task_execd_and_mcp(self):
        out = self.run_script(["start", "native", "execd", "mcp-session", "mcp-stateless"])
        for name in ("native", "execd", "mcp-session", "mcp-stateless"):
            with self.subTest(example=name):
                self.assertIn(("output", name), self.blocks)
                self.assertEqual(lines(out[name]), lines(self.blocks[("output", name)]),
                                 "README's output of %s, ids and numbers aside" % name)

    def test_chat_through_a_gateway(self):
        from test_gateway import TestGateway, status
        key = "sk-" + os.urandom(8).hex()
        gw = TestGateway(key=key)
        self.addCleanup(gw.close)
        gw.script(status(200, {
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "Hello!"}}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}}))
        blocks = self.blocks
        # The chat example follows the first one, whose first line made /tmp/box
        # (a fresh machine has none): a reader has run it, so this test runs it too.
        mkdir = blocks[("example", "start")].splitlines()[0]
        self.assertTrue(mkdir.startswith("mkdir -p /tmp/box"), mkdir)
        blocks[("example", "chat")] = mkdir + "\n" + blocks[("example", "chat")].replace(
            "https://gateway.example/v1", gw.url).replace("sk-your-key", key)
        token = os.urandom(16).hex()
        out = self.run_script(["chat"], env={"EXECD_ACCESS_TOKEN": token})["chat"]
        self.assertIn("Hello!", out)
        self.assertEqual(len(gw.requests), 1, gw.requests)
        got = set(mask(l) for l in out.splitlines())
        for l in self.blocks[("output", "chat")].splitlines():
            if l.strip():
                self.assertIn(mask(l), got, "README's chat output line not printed")

    def test_common_options_are_the_references(self):
        """The README's common options are options, with their variables, as
        docs/configuration.md and --help have them."""
        text = open(README, encoding="utf-8").read()
        table = re.search(r"^## Common options\n(.*?)(?=^## )", text, re.S | re.M).group(1)
        ref = open(CONFIG, encoding="utf-8").read()
        helptext = subprocess.run([RUNNER, "--help"], capture_output=True, text=True,
                                  timeout=10).stdout
        rows = [l for l in table.splitlines() if l.startswith("| `--")]
        self.assertGreaterEqual(len(rows), 6)
        for row in rows:
            cells = row.split(" | ")
            opt = re.match(r"\| `(--[a-z0-9-]+)", row).group(1)
            with self.subTest(option=opt):
                self.assertIn("  %s " % opt, helptext)
                refrow = [l for l in ref.splitlines() if l.startswith("| `%s " % opt)]
                self.assertTrue(refrow, opt)
                for var in re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[1]):
                    self.assertIn(var, refrow[0])

    def test_readme_reads_in_one_sitting(self):
        n = len(open(README, encoding="utf-8").read().splitlines())
        self.assertLess(n, 200, "README.md has %d lines" % n)
        self.assertNotIn("## Layout", open(README).read())


# ---- claims that did not hold ----

class QueryErrors(RunnerTest):
    """A bad query parameter is 400 INVALID_QUERY on every route, a missing
    one MISSING_QUERY, and the message names the parameter."""

    def get(self, path):
        st, h, data = self.r.request("GET", path)
        return st, json.loads(data)

    def test_grep_and_watch(self):
        w = self.r.work
        cases = [
            ("/files/grep?path=%s&pattern=(" % w, "INVALID_QUERY", "pattern"),
            ("/files/grep?path=%s&pattern=a&max_results=abc" % w, "INVALID_QUERY", "max_results"),
            ("/files/watch?path=%s&recursive=maybe" % w, "INVALID_QUERY", "recursive"),
            ("/files/watch", "MISSING_QUERY", "path"),
            ("/files/watch?recursive=true", "MISSING_QUERY", "path"),
            ("/command?limit=abc", "INVALID_QUERY", "limit"),
            ("/command?running=maybe", "INVALID_QUERY", "running"),
        ]
        for path, code, param in cases:
            with self.subTest(path=path):
                st, b = self.get(path)
                self.assertEqual((st, b["code"]), (400, code), b)
                self.assertIn("'%s'" % param, b["message"])


class ZeroAndRetention(unittest.TestCase):
    """--grace-ms 0 and --retain-ms 0 do what docs/configuration.md's 0
    column says; records past --retain-count go at the next tick."""

    def test_grace_zero_kills_at_once(self):
        r = Runner(["--grace-ms", "0"])
        self.addCleanup(r.close)
        import threading
        ev = []
        th = threading.Thread(target=lambda: ev.extend(
            r.native({"task": "trap '' TERM; sleep 30"})))
        th.start()
        for _ in range(100):
            st, b = r.json("GET", "/v1/tasks?state=running")
            if b["tasks"]:
                break
            time.sleep(0.05)
        t0 = time.monotonic()
        r.request("DELETE", "/v1/tasks/" + b["tasks"][0]["id"])
        th.join(10)
        self.assertLess(time.monotonic() - t0, slow(1.5))
        self.assertEqual(ev[-1]["event"], "exit")

    def test_retain_zero_and_count(self):
        r = Runner(["--retain-ms", "0"])
        self.addCleanup(r.close)
        tid = r.native({"task": "true"})[0]["data"]["task_id"]
        time.sleep(2.2)
        self.assertEqual(r.json("GET", "/v1/tasks/" + tid)[0], 404)
        r2 = Runner(["--retain-count", "1"])
        self.addCleanup(r2.close)
        for _ in range(3):
            r2.native({"task": "true"})
        time.sleep(2.2)
        self.assertEqual(len(r2.json("GET", "/v1/tasks?state=finished")[1]["tasks"]), 1)
        row = [l for l in open(CONFIG).read().splitlines() if l.startswith("| `--retain-count")]
        self.assertIn("next tick", row[0])


class AllowedOrigins(unittest.TestCase):
    def test_a_list_replaces_the_localhost_forms(self):
        r = Runner(["--mcp-allowed-origins", "https://ide.example.com"], token="t0k")
        self.addCleanup(r.close)
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})
        h = {"Accept": "application/json, text/event-stream",
             "MCP-Protocol-Version": "2026-07-28", "Content-Type": "application/json"}
        st, _, _ = r.request("POST", "/mcp", body, dict(h, Origin="http://localhost:3000"))
        self.assertEqual(st, 403)
        self.assertIn("replaces the localhost forms", open(CONFIG).read())


class ExitStatus(unittest.TestCase):
    """One rule (docs/configuration.md, Exit status): a file an option names
    that cannot be read is a configuration error, exit 2, with the fix."""

    def test_unreadable_files_exit_2_with_the_fix(self):
        cases = [
            (["--token-file", "/nonexistent/token"], {}, "--token-file", None),
            (["--mcp-servers", "/nonexistent/mcp.json"], {}, "--mcp-servers", "cannot open"),
            ([], {"FORCEAI_MCP_SERVERS": "/nonexistent/mcp.json"}, "FORCEAI_MCP_SERVERS",
             "cannot open"),
            (["--gateway-url", "http://127.0.0.1:9/v1", "--gateway-ca", "/nonexistent/ca.pem"],
             {}, "--gateway-ca", "cannot open"),
        ]
        for args, env, names, says in cases:
            with self.subTest(args=args, env=env):
                rc, err = start(args, env)
                self.assertEqual(rc, 2, err)
                self.assertEqual(len(err.splitlines()), 1, err)
                self.assertIn(names, err)
                self.assertNotIn("line -1", err)
                if says:
                    self.assertIn(says, err)

    def test_missing_policy_names_the_option_and_the_repositorys(self):
        rc, err = start([], policy="/nonexistent/seccomp.json")
        self.assertEqual(rc, 2, err)
        self.assertIn("--seccomp-policy", err)
        self.assertIn("seccomp/default.json", err)
        rc, err = start([], env={"FORCEAI_SECCOMP_POLICY": "/nonexistent/seccomp.json"},
                        policy=False)
        self.assertEqual(rc, 2, err)
        self.assertIn("FORCEAI_SECCOMP_POLICY", err)


# ---- messages that must name the fix ----

class StartMessages(unittest.TestCase):
    def test_abbreviations_refused_naming_the_option(self):
        rc, err = start(["--gateway-key", "sk-x"])
        self.assertEqual(rc, 2, err)
        self.assertIn("--gateway-key-file", err)
        self.assertIn("spelled in full", err)
        self.assertNotIn("sk-x", err)  # a key given by mistake is not echoed
        rc, err = start(["--gateway", "http://gw/v1"])
        self.assertEqual(rc, 2, err)
        for o in ("--gateway-url", "--gateway-key-file", "--gateway-ca"):
            self.assertIn(o, err)

    def test_ping_names_the_address(self):
        port = free_port()
        p = subprocess.run([RUNNER, "--ping", "--listen", "0.0.0.0:%d" % port],
                           capture_output=True, text=True, timeout=10, env=clean_env())
        self.assertEqual(p.returncode, 1)
        self.assertIn("http://127.0.0.1:%d/ping" % port, p.stderr)
        self.assertIn("--listen", p.stderr)

    def test_nonroot_token_file_names_the_variable(self):
        binary, policy = (os.path.abspath(p) for p in nonroot_files())
        d = tempfile.mkdtemp(prefix="forceai-newcomer-tok-")
        self.addCleanup(shutil.rmtree, d, True)
        os.chmod(d, 0o755)
        tok = os.path.join(d, "token")
        with open(tok, "w") as f:
            f.write("tok\n")
        os.chown(tok, 1000, 1000)
        os.chmod(tok, 0o400)

        def drop():
            os.setgroups([])
            os.setgid(1000)
            os.setuid(1000)
        rc, err = start(["--token-file", tok], preexec=drop, binary=binary, policy=policy)
        self.assertEqual(rc, 2, err)
        self.assertIn("EXECD_ACCESS_TOKEN", err)
        self.assertNotIn("chown root", err)
        # The advice followed (root's, 0400): the runner cannot read it.
        os.chown(tok, 0, 0)
        rc, err = start(["--token-file", tok], preexec=drop, binary=binary, policy=policy)
        self.assertEqual(rc, 2, err)
        self.assertIn("Permission denied", err)
        self.assertIn("EXECD_ACCESS_TOKEN", err)


class McpMessages(RunnerTest):
    runner_kwargs = {"token": "s3cret"}
    H = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
         "MCP-Protocol-Version": "2026-07-28"}

    def test_wrong_bearer_is_a_jsonrpc_error(self):
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", self.r.port, timeout=10)
        c.request("POST", "/mcp", body, dict(self.H, Authorization="Bearer wrong"))
        resp = c.getresponse()
        b = json.loads(resp.read())
        c.close()
        self.assertEqual(resp.status, 401)
        self.assertEqual(b["jsonrpc"], "2.0")
        self.assertIsNone(b["id"])
        self.assertIsInstance(b["error"]["code"], int)
        self.assertIn("Authorization: Bearer", b["error"]["message"])

    def test_unknown_tool_is_named(self):
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "no_such_tool", "arguments": {},
                           "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}}
        st, _, data = self.r.request("POST", "/mcp", body, self.H)
        b = json.loads(data)
        self.assertIn("no_such_tool", b["error"]["message"])

    def test_engines_say_why_unavailable(self):
        st, b = self.r.json("GET", "/v1/agent/engines")
        builtin = [e for e in b["engines"] if e["name"] == "builtin"][0]
        self.assertFalse(builtin["available"])
        self.assertIn("--gateway-url", builtin.get("error", ""))


class MakeRun(unittest.TestCase):
    def test_make_run_runs_the_gateways_image(self):
        """`make run` starts :local (python3 in it), and says how to run the
        minimal one (read from make's plan, no image is built)."""
        p = subprocess.run(["make", "-n", "-C", ROOT, "--no-print-directory", "run-container",
                            "IMAGE_ENGINE=podman"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("IMAGE=forceai/runtime-runner:local ", p.stdout)
        self.assertIn("IMAGE_RUN_TAG=latest", open(os.path.join(ROOT, "image",
                                                                "run-container.sh")).read())


if __name__ == "__main__":
    unittest.main()
