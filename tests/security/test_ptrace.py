"""ptrace from the attacker's side (docs/design/confinement.md#debugging-inside-the-tasks-own-tree-ptrace). The default policy
allows ptrace, process_vm_readv/writev and the personality flags debuggers
use, because Landlock scopes them to the caller's own domain: a task traces
its own children (strace, gdb, LeakSanitizer) and nothing else. Every
neighbour a task has is tried here: another task, a code context, a
lifecycle hook, an MCP server, another client's PTY session and the runner
(as root, and in non-root mode where the uid is shared and only Landlock
stands between them). Each probe first traces a child of its own: a probe
that is refused everything proves nothing."""
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

from harness import Runner

TASK_UID = 1000
NONROOT = ["setpriv", "--reuid=%d" % TASK_UID, "--regid=%d" % TASK_UID, "--clear-groups",
           "--inh-caps=-all", "--"]

# Tries each victim pid (argv[1], JSON {name: pid}) with PTRACE_ATTACH,
# PTRACE_SEIZE, process_vm_readv and /proc/PID/mem; "own_child" is a child
# of the probe itself, the control that must succeed.
PROBE = r'''
import ctypes, errno, json, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
ATTACH, SEIZE, DETACH = 16, 0x4206, 17

class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

def err():
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))

def first_mapping(pid):
    try:
        with open("/proc/%d/maps" % pid) as f:
            return int(f.readline().split("-")[0], 16)
    except OSError:
        return 0x400000

def probe(pid):
    r = {}
    if libc.ptrace(ATTACH, pid, None, None) == 0:
        r["attach"] = "ok"
        os.waitpid(pid, os.__dict__.get("WALL", 0x40000000))
        libc.ptrace(DETACH, pid, None, None)
    else:
        r["attach"] = err()
    if libc.ptrace(SEIZE, pid, None, None) == 0:
        r["seize"] = "ok"
        libc.ptrace(DETACH, pid, None, None)
    else:
        r["seize"] = err()
    buf = ctypes.create_string_buffer(8)
    local, remote = iovec(ctypes.addressof(buf), 8), iovec(first_mapping(pid), 8)
    n = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    r["vm_readv"] = "ok" if n >= 0 else err()
    try:
        with open("/proc/%d/mem" % pid, "rb") as f:
            f.seek(first_mapping(pid))
            f.read(8)
        r["mem"] = "ok"
    except OSError as e:
        r["mem"] = errno.errorcode.get(e.errno, str(e.errno))
    return r

victims = json.loads(sys.argv[1])
child = os.fork()
if child == 0:
    time.sleep(60)
    os._exit(0)
victims["own_child"] = child
out = {name: probe(pid) for name, pid in victims.items()}
os.kill(child, signal.SIGKILL)
print("PROBE" + json.dumps(out))
'''

REFUSED = ("EPERM", "EACCES")


def find_pid(marker, timeout=15):
    """The oldest process whose command line holds marker (the test's view)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = []
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if marker.encode() in cmd and b"PROBE" not in cmd:
                found.append(int(p))
        if found:
            return min(found)
        time.sleep(0.05)
    raise AssertionError("no process with %s" % marker)


def sleeper(marker):
    return "exec python3 -c 'import time; time.sleep(120)' %s" % marker


class PtraceScope(unittest.TestCase):
    def probe(self, r, victims):
        path = os.path.join(r.work, "ptrace_probe.py")
        with open(path, "w") as f:
            f.write(PROBE)
        os.chmod(path, 0o644)
        ev = r.execd({"command": "python3 %s '%s'" % (path, json.dumps(victims)),
                      "timeout": 60000}, timeout=90)
        text = "".join(e.get("text", "") + "\n" for e in ev if e["type"] in ("stdout", "stderr"))
        line = [l for l in text.splitlines() if l.startswith("PROBE")]
        self.assertTrue(line, text)
        found = json.loads(line[0][5:])
        print("\nptrace probe:", json.dumps(found))
        # The control: the task's own child is traced, read and written.
        self.assertEqual(found["own_child"], {"attach": "ok", "seize": "ok", "vm_readv": "ok",
                                              "mem": "ok"}, found)
        for name in victims:
            for how, res in found[name].items():
                self.assertIn(res, REFUSED, "%s of %s: %s" % (how, name, found[name]))
        return found

    def background(self, r, command):
        """A command started as a task of another client, left running."""
        import threading
        t = threading.Thread(target=r.execd, args=({"command": command, "timeout": 90000},),
                             kwargs={"timeout": 100}, daemon=True)
        t.start()

    def test_neighbours_of_a_root_runner(self):
        tmp = tempfile.mkdtemp(prefix="forceai-ptrace-")
        self.addCleanup(shutil.rmtree, tmp, True)
        os.chmod(tmp, 0o755)
        tag = "ptrace-%d-%s" % (os.getpid(), os.urandom(3).hex())
        server = os.path.join(tmp, "mcp_server.py")
        with open(server, "w") as f:
            # A stdio MCP server that answers initialize and lists no tool.
            f.write("import json, sys\n"
                    "for line in sys.stdin:\n"
                    "    m = json.loads(line)\n"
                    "    if 'id' not in m: continue\n"
                    "    res = {'protocolVersion': '2025-06-18', 'capabilities': {'tools': {}},\n"
                    "           'serverInfo': {'name': 's', 'version': '1'}}\n"
                    "    if m['method'] == 'tools/list': res = {'tools': []}\n"
                    "    print(json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': res}),"
                    " flush=True)\n")
        cfg = os.path.join(tmp, "servers.json")
        with open(cfg, "w") as f:
            json.dump({"mcpServers": {"s": {"command": "/usr/bin/python3",
                                            "args": [server, tag + "-mcp"]}}}, f)
        r = Runner(("--runtime-init", "--mcp-servers", cfg))
        self.addCleanup(r.close)
        st, b = r.json("POST", "/internal/init", {
            "sandboxId": "pt", "generation": 1,
            "lifecycle": {"periodic": [{"name": "p", "intervalSeconds": 1, "timeoutSeconds": 100,
                                        "command": sleeper(tag + "-hook")}]}})
        self.assertEqual(st, 200, b)
        victims = {}
        self.background(r, sleeper(tag + "-task"))
        victims["another_task"] = find_pid(tag + "-task")
        st, c = r.json("POST", "/code/context", {"language": "python"})
        self.assertEqual(st, 200, c)
        st, tasks = r.json("GET", "/v1/tasks")
        victims["code_context"] = [t["pid"] for t in tasks["tasks"]
                                   if t["id"] == c["task_id"]][0]
        st, p = r.json("POST", "/pty", {"cwd": r.work, "command": sleeper(tag + "-pty")})
        self.assertIn(st, (200, 201), p)
        from wsutil import RawWS  # the session starts with its client
        ws = RawWS(r.port, "/pty/%s/ws" % p["session_id"], headers=r.headers())
        self.addCleanup(ws.sock.close)
        self.assertEqual(ws.status, 101, ws.head)
        victims["pty_session"] = find_pid(tag + "-pty")
        victims["hook"] = find_pid(tag + "-hook")
        # The MCP server starts with its first use.
        hdr = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        st, h, _ = r.request("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                              "params": {"protocolVersion": "2025-06-18",
                                                         "capabilities": {},
                                                         "clientInfo": {"name": "t",
                                                                        "version": "1"}}}, hdr)
        self.assertEqual(st, 200)
        sid = h.get("mcp-session-id")
        if sid:
            hdr["Mcp-Session-Id"] = sid
        r.request("POST", "/mcp", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, hdr)
        victims["mcp_server"] = find_pid(tag + "-mcp")
        victims["runner"] = r.host_pid()
        self.probe(r, victims)
        self.assertEqual(r.stop(), 0)

    def test_the_runner_in_non_root_mode(self):
        """Same uid as its tasks: Landlock alone keeps them off the runner."""
        r = Runner(wrap=NONROOT, owner=TASK_UID, state_dir=False)
        self.addCleanup(r.close)
        rep = r.json("GET", "/v1/hardening")[1]
        self.assertEqual(rep["identity"]["mode"], "non-root")
        tag = "ptrace-nr-%d" % os.getpid()
        self.background(r, sleeper(tag))
        self.probe(r, {"runner": r.host_pid(), "another_task": find_pid(tag)})
        self.assertEqual(r.stop(), 0)

    def test_debuggers_in_the_own_tree(self):
        """strace of the task's own child, setarch -R (personality's
        ADDR_NO_RANDOMIZE), and gdb running a program to its end."""
        r = Runner()
        self.addCleanup(r.close)
        for tool in ("strace", "gdb", "setarch"):
            self.assertTrue(shutil.which(tool), "%s is not installed (scripts/install-deps.sh)"
                            % tool)
        ev = r.execd({"command": "strace -f -qq -e trace=execve sh -c 'exec true' 2>&1; "
                      "echo rc=$?; setarch -R sh -c 'grep personality /proc/self/status; "
                      "cat /proc/self/personality'; "
                      "gdb -batch -ex run -ex 'info inferiors' --args /bin/echo gdb-ran 2>&1 "
                      "| grep -E 'gdb-ran|exited'", "timeout": 60000}, timeout=90)
        out = "".join(e.get("text", "") + "\n" for e in ev if e["type"] == "stdout")
        self.assertIn('execve("/usr/bin/true"', out.replace('"/bin/true"', '"/usr/bin/true"'))
        self.assertIn("rc=0", out)
        self.assertIn("00040000", out)  # ADDR_NO_RANDOMIZE in force
        self.assertIn("gdb-ran", out)
        self.assertIn("exited normally", out)
        self.assertEqual(r.stop(), 0)


    def test_traceme_makes_no_tracer_of_the_shim(self):
        """A task's main process is the shim's child: PTRACE_TRACEME makes
        the shim (root, outside every domain) its tracer. The shim lets it
        go: the task runs on to its own exit status, not a stop read as
        an end."""
        r = Runner()
        self.addCleanup(r.close)
        path = os.path.join(r.work, "traceme.py")
        with open(path, "w") as f:
            f.write("import ctypes, os\n"
                    "libc = ctypes.CDLL(None, use_errno=True)\n"
                    "print('traceme', libc.ptrace(0, 0, None, None), flush=True)\n"
                    "os.execvp('sh', ['sh', '-c', 'echo after-exec; exit 7'])\n")
        ev = r.execd({"command": "exec python3 " + path})
        out = [e["text"] for e in ev if e["type"] == "stdout"]
        self.assertEqual(out, ["traceme 0", "after-exec"], ev)
        self.assertEqual(ev[-1]["error"]["evalue"], "7", ev)
        self.assertEqual(r.stop(), 0)


class PtraceWithoutLandlock(unittest.TestCase):
    """Fail closed: where a task gets no Landlock domain (here: an outer
    seccomp filter that refuses the Landlock calls, as a container
    runtime's profile might), nothing scopes ptrace, so the runner refuses
    it whatever the policy says."""

    def test_refused_without_landlock(self):
        # The runner under an outer filter that answers landlock_* ENOSYS
        # (kernel without Landlock): python's seccomp is not in the stdlib,
        # so a tiny C wrapper stacks it and execs the runner.
        src = r'''
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) {
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 444, 0, 2),
		BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, 446, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 38),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog p = {sizeof(f) / sizeof(f[0]), f};
	if (argc < 2 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
	    syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &p))
		return 99;
	execv(argv[1], argv + 1);
	return 98;
}
'''
        tmp = tempfile.mkdtemp(prefix="forceai-nolandlock-")
        self.addCleanup(shutil.rmtree, tmp, True)
        with open(os.path.join(tmp, "w.c"), "w") as f:
            f.write(src)
        wrapper = os.path.join(tmp, "nolandlock")
        subprocess.run(["cc", "-O1", "-o", wrapper, os.path.join(tmp, "w.c")], check=True)
        r = Runner(wrap=[wrapper])
        self.addCleanup(r.close)
        rep = r.json("GET", "/v1/hardening")[1]
        conf = rep.get("confinement", rep)
        self.assertIsNone(conf["landlock"]["abi"], conf["landlock"])
        self.assertIn("refused", conf["ptrace"])
        path = os.path.join(r.work, "ptrace_probe.py")
        with open(path, "w") as f:
            f.write(PROBE)
        ev = r.execd({"command": "python3 %s '{}'; strace -qq true; echo strace=$?" % path})
        text = "".join(e.get("text", "") + "\n" for e in ev if e["type"] in ("stdout", "stderr"))
        line = [l for l in text.splitlines() if l.startswith("PROBE")]
        self.assertTrue(line, text)
        own = json.loads(line[0][5:])["own_child"]
        self.assertEqual((own["attach"], own["seize"], own["vm_readv"]),
                         ("EPERM", "EPERM", "EPERM"), own)
        self.assertIn("strace=1", text)
        self.assertEqual(r.stop(), 0)


if __name__ == "__main__":
    unittest.main()
