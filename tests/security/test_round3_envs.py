"""Red-team round three (issue 33, findings 5 and 8), from the attacker's side:
a task writes OpenSandbox's EXECD_ENVS file (every task may: the SDK's
set_env appends to it) to hijack the runner's own tasks — the stdio MCP
servers, chat tasks, tool commands — or to make every later task start
freeze the loop; and a task tries to restart an MCP server into its own
code by other means (a program planted in a PATH directory it can write).
docs/design/wire.md#opensandbox-execd-12, design/mcp-tools.md#the-images-own-mcp-servers."""
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

from harness import Runner, parse_execd, record_figure

TASK_UID = 1000
TOKEN = "round3-envs-token-" + os.urandom(6).hex()
FIGURES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))), "build", "figures", "round3_envs.json")
ACCEPT = "application/json, text/event-stream"

# A stdio MCP server that tells what it was started with.
SERVER = r'''#!/usr/bin/env python3
import json, os, sys
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    mid, method = m.get("id"), m.get("method")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
            "serverInfo": {"name": "probe", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [
            {"name": "info", "description": "what I run with", "inputSchema": {"type": "object"}}]}})
    elif method == "tools/call":
        info = {"pid": os.getpid(), "uid": os.getuid(), "cwd": os.getcwd(),
                "exe": os.path.realpath("/proc/self/exe"),
                "no_user_site": sys.flags.no_user_site,
                "env": {k: os.environ.get(k) for k in (
                    "HOME", "PATH", "BASH_ENV", "LD_PRELOAD", "NODE_OPTIONS", "PYTHONPATH",
                    "PYTHONNOUSERSITE", "EXECD_ENVS", "ORDINARY")}}
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "content": [{"type": "text", "text": json.dumps(info)}]}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no"}})
'''


def stdout_text(events):
    return "".join(e.get("text", "") + "\n" for e in events if e.get("type") == "stdout")


class McpClient:
    def __init__(self, r):
        self.r = r
        st, hd, b = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                               "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                          "clientInfo": {"name": "t", "version": "1"}}})
        assert st == 200, b
        self.sid = hd["mcp-session-id"]

    def post(self, msg, sid=None):
        h = {"Content-Type": "application/json", "Accept": "application/json"}
        if sid:
            h["Mcp-Session-Id"] = sid
        st, hd, data = self.r.request("POST", "/mcp", json.dumps(msg), h, timeout=60)
        return st, hd, json.loads(data) if data.strip() else None

    def call(self, name, args=None):
        st, _, b = self.post({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                              "params": {"name": name, "arguments": args or {}}}, sid=self.sid)
        assert st == 200, (st, b)
        return b


def server_info(mcp):
    b = mcp.call("probe__info")
    res = b.get("result") or {}
    if res.get("isError"):
        return None, res
    return json.loads(res["content"][0]["text"]), res


class Box:
    """The files a box has: a trusted directory (root's, outside the tasks'
    Landlock roots) with the EXECD_ENVS file as OpenSandbox's bootstrap
    leaves it (the task user's, 0600) and the MCP server, and a playground
    under /tmp that tasks may write."""

    def __init__(self, tc):
        self.base = tempfile.mkdtemp(prefix="forceai-r3-", dir="/var/tmp")
        tc.addCleanup(shutil.rmtree, self.base, True)
        os.chmod(self.base, 0o755)
        self.envs = os.path.join(self.base, ".env")
        with open(self.envs, "w"):
            pass
        os.chown(self.envs, TASK_UID, TASK_UID)
        os.chmod(self.envs, 0o600)
        self.server = os.path.join(self.base, "probe_server.py")
        with open(self.server, "w") as f:
            f.write(SERVER)
        os.chmod(self.server, 0o755)
        self.play = tempfile.mkdtemp(prefix="forceai-r3-play-", dir="/tmp")
        tc.addCleanup(shutil.rmtree, self.play, True)
        os.chmod(self.play, 0o777)
        self.marker = os.path.join(self.play, "HIJACKED")

    def servers_file(self, command="python3"):
        cfg = os.path.join(self.base, "mcp-servers.json")
        with open(cfg, "w") as f:
            json.dump({"mcpServers": {"probe": {"command": command, "args": [self.server]}}}, f)
        return cfg

    def hits(self):
        try:
            with open(self.marker) as f:
                return f.read().split()
        except FileNotFoundError:
            return []

    def clear(self):
        try:
            os.unlink(self.marker)
        except FileNotFoundError:
            pass


def start_runner(tc, *args, **kw):
    """A runner stopped at the test's end; a non-zero exit (an ASan or
    valgrind report) fails the test."""
    r = Runner(*args, **kw)

    def stop():
        rc = r.stop()
        log = r.logtext()
        r.close()
        if rc != 0:
            raise AssertionError("runner exited %s after SIGTERM; log tail:\n%s"
                                 % (rc, log[-4000:]))
    tc.addCleanup(stop)
    return r


def wait_server_down(tc, r, pid, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st, b = r.json("GET", "/v1/mcp/servers")
        s = b["servers"][0]
        if s["exits"] >= 1 and s["state"] != "ready":
            return s
        time.sleep(0.05)
    tc.fail("the MCP server (pid %s) was not seen to exit: %s" % (pid, b))


class EnvsHijack(unittest.TestCase):
    """Finding 5: a task writes BASH_ENV, LD_PRELOAD, NODE_OPTIONS, PYTHONPATH
    into EXECD_ENVS and kills the MCP server; the runner restarts it, and
    starts chat tasks and tool commands, with the task's code inside."""

    def test_envs_file_does_not_reach_the_runners_own_tasks(self):
        box = Box(self)
        # The planted code: each loader hook appends who ran it to the marker.
        evil_sh = os.path.join(box.play, "evil.sh")
        evil_py = os.path.join(box.play, "py")
        evil_js = os.path.join(box.play, "evil.js")
        evil_so = os.path.join(box.play, "evil.so")
        attack = (
            "set -e; cd %(play)s; mkdir -p py\n"
            "printf 'echo \"bash_env:$0\" >> %(m)s\\n' > evil.sh\n"
            "printf 'open(\"%(m)s\",\"a\").write(\"pythonpath\\\\n\")\\n' > py/sitecustomize.py\n"
            "printf 'require(\"fs\").appendFileSync(\"%(m)s\",\"node\\\\n\")\\n' > evil.js\n"
            "printf '#include <stdio.h>\\n__attribute__((constructor)) static void f(void)"
            "{FILE*f=fopen(\"%(m)s\",\"a\");if(f){fputs(\"ld_preload\\\\n\",f);fclose(f);}}\\n'"
            " > evil.c\n"
            "(cc -shared -fPIC -o evil.so evil.c 2>/dev/null || true)\n"
            "cat >> \"$EXECD_ENVS\" <<EOF\n"
            "BASH_ENV='%(sh)s'\nENV='%(sh)s'\nLD_PRELOAD='%(so)s'\n"
            "NODE_OPTIONS='--require %(js)s'\nPYTHONPATH='%(py)s'\nORDINARY='plain value'\n"
            "EOF\n"
            "kill -9 %(pid)s; echo attacked\n")
        # A gateway (for the chat task) without a key is vault mode, whose
        # exec default is network none: full, as without a gateway (valgrind
        # cannot stack that seccomp filter).
        r = start_runner(self, args=("--mcp-servers", box.servers_file(), "--exec-network", "full"),
                         token=TOKEN, env={"EXECD_ENVS": box.envs,
                                           "FORCEAI_GATEWAY_URL": "http://127.0.0.1:9"})
        mcp = McpClient(r)
        info, res = server_info(mcp)
        self.assertIsNotNone(info, res)
        self.assertEqual(info["uid"], TASK_UID, info)
        ev = r.execd({"command": attack % {"play": box.play, "m": box.marker, "sh": evil_sh,
                                           "so": evil_so, "js": evil_js, "py": evil_py,
                                           "pid": info["pid"]}, "cwd": r.work})
        self.assertIn("attacked", stdout_text(ev), ev)
        wait_server_down(self, r, info["pid"])
        box.clear()
        victims = {}
        # 1. The MCP server, started again on the next call.
        info2, res = server_info(mcp)
        self.assertIsNotNone(info2, res)
        self.assertNotEqual(info2["pid"], info["pid"])
        victims["mcp_server"] = box.hits()
        box.clear()
        # 2. A tool command through /mcp (run_command).
        b = mcp.call("run_command", {"command": "true", "cwd": r.work})
        self.assertFalse(b["result"].get("isError"), b)
        victims["mcp_run_command"] = box.hits()
        box.clear()
        # 3. A chat task (another client's model token would be in it).
        ev = r.native({"task": "true", "capability": "chat", "cwd": r.work})
        self.assertEqual(ev[-1]["event"], "exit", ev)
        victims["chat_task"] = box.hits()
        box.clear()
        # 4. A native exec task.
        ev = r.native({"task": "true", "cwd": r.work})
        self.assertEqual(ev[-1]["event"], "exit", ev)
        victims["native_task"] = box.hits()
        box.clear()
        record_figure(FIGURES, "envs_hijack_victims", victims)
        self.assertEqual({k: v for k, v in victims.items() if v}, {},
                         "the task's code ran inside the runner's own tasks")
        self.assertIsNone(info2["env"]["BASH_ENV"], info2)
        self.assertIsNone(info2["env"]["ORDINARY"], info2)
        self.assertIsNone(info2["env"]["EXECD_ENVS"], info2)
        # 5. execd's POST /command still gets the file's ordinary
        # variables, as execd does, and not the loader-changing ones.
        ev = r.execd({"command": "echo \"$ORDINARY|${BASH_ENV-unset}|${LD_PRELOAD-unset}|"
                                 "${NODE_OPTIONS-unset}|${PYTHONPATH-unset}\"",
                      "cwd": r.work})
        self.assertEqual(stdout_text(ev), "plain value|unset|unset|unset|unset\n", ev)
        self.assertEqual(box.hits(), [], "an execd command ran the planted code")
        # 6. An execd session run: the variable naming the file (set_env works
        # from a session), not its contents, as execd's bash sessions.
        st, b = r.json("POST", "/session", {"cwd": r.work})
        self.assertEqual(st, 200, b)
        ev = r.execd({"command": "echo \"${ORDINARY-unset}|$EXECD_ENVS\""},
                     path="/session/%s/run" % b["session_id"])
        self.assertEqual(stdout_text(ev), "unset|%s\n" % box.envs, ev)
        self.assertEqual(box.hits(), [], "a session run ran the planted code")
        self.assertIn("EXECD_ENVS: variables refused", r.logtext())
        # The kill is said for what it was.
        self.assertIn("not by the runner", r.logtext())


class ServerWorld(unittest.TestCase):
    """The other ways into a restarted MCP server: a program planted in a
    PATH directory tasks can write, the task user's home, a task-writable
    cwd; the server is started in a world no task can change."""

    def test_server_world_is_fixed(self):
        box = Box(self)
        bindir = os.path.join(box.play, "bin")
        os.mkdir(bindir)
        os.chmod(bindir, 0o777)
        # An image whose PATH starts with a directory tasks can write (a
        # ~/.local/bin first, say): the server's "python3" is looked up there.
        path = bindir + ":" + os.environ.get("PATH", "/usr/bin:/bin")
        r = start_runner(self, args=("--mcp-servers", box.servers_file("python3")),
                         token=TOKEN, env={"PATH": path})
        mcp = McpClient(r)
        info, res = server_info(mcp)
        self.assertIsNotNone(info, res)
        plant = ("printf '#!/bin/sh\\necho planted_path >> %s\\nexec /usr/bin/python3 \"$@\"\\n'"
                 " > %s/python3 && chmod 755 %s/python3 && kill -9 %d && echo planted"
                 % (box.marker, bindir, bindir, info["pid"]))
        ev = r.execd({"command": plant, "cwd": r.work})
        self.assertIn("planted", stdout_text(ev), ev)
        wait_server_down(self, r, info["pid"])
        box.clear()
        info2, res = server_info(mcp)
        self.assertIsNotNone(info2, res)
        record_figure(FIGURES, "server_world", {"hits": box.hits(), "env": info2["env"],
                                                "cwd": info2["cwd"]})
        self.assertEqual(box.hits(), [], "the restarted server ran the planted program")
        self.assertNotIn(bindir, info2["env"]["PATH"].split(":"), info2)
        # No home a task can write, no user site-packages, a cwd of root's.
        self.assertEqual(info2["env"]["HOME"], "/nonexistent", info2)
        self.assertEqual(info2["no_user_site"], 1, info2)
        self.assertEqual(info2["cwd"], "/", info2)
        self.assertIn("a PATH directory left out", r.logtext())

    def test_task_cannot_reach_into_the_server(self):
        """A guard (passes on the old code too): the server is a task of the
        same uid, but each task has a Landlock domain of its own, and
        Landlock refuses ptrace-mode access across domains: a task cannot
        read its stdin or environment, write its memory, or inject into
        its pipes through /proc. It can signal it (that is said, and the
        restart is into the same world: test_server_world_is_fixed)."""
        box = Box(self)
        r = start_runner(self, args=("--mcp-servers", box.servers_file()), token=TOKEN)
        st, b = r.json("GET", "/v1/hardening")
        if not (b.get("landlock") or {}).get("abi"):
            self.skipTest("Landlock not in force here")
        mcp = McpClient(r)
        info, res = server_info(mcp)
        self.assertIsNotNone(info, res)
        probe = ("for f in environ mem fd/0 fd/1; do "
                 "if [ \"$f\" = fd/1 ] || [ \"$f\" = mem ]; then (: > /proc/%d/$f) 2>/dev/null; "
                 "else cat /proc/%d/$f > /dev/null 2>&1; fi; echo \"$f=$?\"; done"
                 % (info["pid"], info["pid"]))
        ev = r.execd({"command": probe, "cwd": r.work})
        out = stdout_text(ev)
        record_figure(FIGURES, "server_proc_access", out.split())
        for f in ("environ", "mem", "fd/0", "fd/1"):
            self.assertIn("%s=1" % f, out, out)
        info2, res = server_info(mcp)
        self.assertEqual(info2["pid"], info["pid"], "the server was disturbed")

    def test_command_tasks_can_change_is_refused(self):
        box = Box(self)
        prog = os.path.join(box.play, "srv")
        shutil.copy("/usr/bin/python3", prog)
        os.chmod(prog, 0o777)  # writable by tasks
        r = start_runner(self, args=("--mcp-servers", box.servers_file(prog)), token=TOKEN)
        mcp = McpClient(r)
        info, res = server_info(mcp)
        self.assertIsNone(info, res)
        st, b = r.json("GET", "/v1/mcp/servers")
        self.assertIn("can be changed by tasks", b["servers"][0].get("last_error", ""), b)


    def test_root_tasks_cannot_change_root_files_in_the_roots(self):
        """With --allow-root-tasks a root task writes root's files beneath
        the writable roots: a server command there is refused too."""
        box = Box(self)
        sub = tempfile.mkdtemp(prefix="forceai-r3-rootbin-", dir="/tmp")
        self.addCleanup(shutil.rmtree, sub, True)
        os.chmod(sub, 0o755)  # root's, in /tmp (sticky): out of uid 1000's reach
        prog = os.path.join(sub, "srv")
        shutil.copy("/usr/bin/python3", prog)
        os.chmod(prog, 0o755)  # root's, not writable by uid 1000
        r = start_runner(self, args=("--mcp-servers", box.servers_file(prog),
                                     "--allow-root-tasks"), token=TOKEN)
        mcp = McpClient(r)
        info, res = server_info(mcp)
        self.assertIsNone(info, res)
        st, b = r.json("GET", "/v1/mcp/servers")
        self.assertIn("beneath a writable root", b["servers"][0].get("last_error", ""), b)


class EnvsQuadratic(unittest.TestCase):
    """Finding 8: one write of ~110,000 variables (under the file's 1 MiB cap)
    made every later task start freeze the loop for seconds."""

    N = 110000

    def test_many_variables_cost_linear_time(self):
        box = Box(self)
        r = start_runner(self, token=TOKEN, env={"EXECD_ENVS": box.envs})
        # The task writes them (9 bytes a line: 990,000 bytes).
        ev = r.execd({"command": "python3 -c 'import os\n"
                                 "with open(os.environ[\"EXECD_ENVS\"], \"w\") as f:\n"
                                 "    f.write(\"\".join(\"v%%05x=x\\n\" %% i for i in range(%d)))'"
                                 " && echo written" % self.N, "cwd": r.work})
        self.assertIn("written", stdout_text(ev), ev)
        self.assertLess(os.path.getsize(box.envs), 1 << 20)
        pings = []
        stop = threading.Event()

        def pinger():
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    r.request("GET", "/ping", timeout=30)
                except OSError:
                    pass
                pings.append(time.monotonic() - t0)
                time.sleep(0.01)
        th = threading.Thread(target=pinger, daemon=True)
        th.start()
        starts = []
        counts = []
        try:
            for _ in range(3):
                t0 = time.monotonic()
                # Bounded: on the old code one start froze the loop ~13 s
                # and its bash needed ~50 s more.
                res = r.curl("-H", "Content-Type: application/json", "-d",
                             json.dumps({"command": "env | grep -c '^v'", "cwd": r.work}),
                             r.url + "/command", timeout=20)
                starts.append(time.monotonic() - t0)
                counts.append(stdout_text(parse_execd(res.stdout)).strip())
                if starts[-1] > 2:
                    break  # the old code: one such start says enough
        finally:
            stop.set()
            th.join(35)
        fig = {"variables_written": self.N, "command_ms": [round(s * 1000, 1) for s in starts],
               "ping_max_ms": round(max(pings) * 1000, 1) if pings else None,
               "pings": len(pings), "variables_seen": counts}
        record_figure(FIGURES, "envs_many_variables", fig)
        self.assertLess(max(starts), 0.5, fig)
        self.assertLess(max(pings), 0.2, fig)
        self.assertEqual(counts, ["1024"] * 3, fig)
        skipped = [l for l in r.loglines()
                   if l.get("msg") == "EXECD_ENVS: variables skipped (over the bounds)"]
        self.assertTrue(skipped, r.logtext()[-2000:])
        self.assertEqual(skipped[0].get("over_count"), self.N - 1024, skipped[0])
        # Parsed once: the file did not change between the three starts.
        self.assertEqual(len(skipped), 1, skipped)


if __name__ == "__main__":
    unittest.main()
