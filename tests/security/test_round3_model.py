"""Red-team round three (issue 33), the model side, from the attacker's side:
a chat task that hangs up on its model calls to spend tokens its budget
never sees, concurrent calls racing at the budget's edge, a task in non-root
mode reading another client's agent conversation from the state dir, and a
gateway that refuses connections. Each test failed on the code before the
fix (design/model.md#usage-and-budgets, design/security.md#the-state-dir-is-out-of-the-tasks-reach-in-every-mode, design/model.md#conversations)."""
import json
import os
import shutil
import socket
import sys
import tempfile
import time
import unittest

from harness import Runner, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "gateway"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
from test_gateway import TestGateway, text, tool  # noqa: E402
from wire_gateways import a_text, g_text  # noqa: E402
from test_profiles import TASK_UID  # noqa: E402

KEY = "sk-round3-" + os.urandom(8).hex()
NONROOT = ["setpriv", "--reuid=%d" % TASK_UID, "--regid=%d" % TASK_UID, "--clear-groups",
           "--inh-caps=-all", "--"]

# A model client in the task that speaks HTTP itself, so it can hang up
# exactly when it wants: after the answer's head and its first events.
CLIENT = r'''
import json, os, socket, sys, threading, time
fmt, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
port = int(os.environ["ANTHROPIC_BASE_URL"].rsplit(":", 1)[1])
tok = os.environ["OPENAI_API_KEY"]
if fmt == "anthropic":
    path = "/v1/messages"
    hdr = "x-api-key: %s\r\nanthropic-version: 2023-06-01\r\n" % tok
    body = {"model": "claude-test", "max_tokens": 1000, "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}
    marker, enough = b"content_block_delta", 2
elif fmt == "openai":
    path = "/v1/chat/completions"
    hdr = "Authorization: Bearer %s\r\n" % tok
    body = {"model": "test-model", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "hi"}]}
    marker, enough = b'"content"', 3
else:
    path = "/v1beta/models/gemini-test:streamGenerateContent?alt=sse"
    hdr = "x-goog-api-key: %s\r\n" % tok
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    marker, enough = b"usageMetadata", 2
data = json.dumps(body).encode()

def call(i):
    s = socket.create_connection(("127.0.0.1", port))
    # Connection: close: a 200 stream ends with the connection, not at the proxy's idle limit.
    s.sendall(("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%sContent-Type: application/json\r\n"
               "Content-Length: %d\r\n\r\n" % (path, hdr, len(data))).encode() + data)
    s.settimeout(30)
    got = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        got += d
        head, sep, rest = got.partition(b"\r\n\r\n")
        if not sep:
            continue
        if head.startswith(b"HTTP/1.1 200"):
            if mode == "hangup" and rest.count(marker) >= enough:
                break  # mid-answer: hang up
            continue
        cl = [l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
        if cl and len(rest) >= int(cl[0].split(b":")[1]):
            break
    status = got.split(b" ", 2)[1].decode() if got else "none"
    code = "budget_exceeded" if b"budget_exceeded" in got else (
        "budget_held" if b"budget_held" in got else "")
    print("call %d %s %s" % (i, status, code), flush=True)
    s.close()

if mode == "concurrent":
    ts = [threading.Thread(target=call, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
else:
    for i in range(n):
        call(i)
        time.sleep(0.4)  # the proxy notices the hang-up at the next bytes
time.sleep(1.0)
'''


def stdout_of(ev):
    return "".join(e["data"].get("text", "") + "\n" for e in ev if e["event"] == "stdout")


def calls_of(ev):
    """[(status, code)] of the CLIENT's calls."""
    out = []
    for l in stdout_of(ev).splitlines():
        p = l.split()
        if len(p) >= 3 and p[0] == "call":
            out.append((p[2], p[3] if len(p) > 3 else ""))
    return out


class ProxyBase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = TestGateway(key=KEY)
        # The gateway's writes after a hang-up fail (broken pipe): expected.
        cls.gw.server.handle_error = lambda *a: None
        cls.r = Runner((), env={"FORCEAI_GATEWAY_URL": cls.gw.url, "FORCEAI_GATEWAY_KEY": KEY})
        cls.client = os.path.join(cls.r.work, "client.py")
        with open(cls.client, "w") as f:
            f.write(CLIENT)
        os.chmod(cls.client, 0o644)

    @classmethod
    def tearDownClass(cls):
        rc = cls.r.stop()  # under ASan a leak or an error shows as another code
        log = cls.r.logtext()[-3000:]
        cls.r.close()
        cls.gw.close()
        if rc != 0:
            raise AssertionError("runner exited %s; log tail:\n%s" % (rc, log))

    def setUp(self):
        self.gw.turns.clear()
        self.gw.requests.clear()
        self.gw.errors.clear()

    def chat(self, args, max_tokens):
        ev = self.r.native({"task": "python3 %s %s" % (self.client, args), "capability": "chat",
                            "cwd": self.r.work, "max_tokens": max_tokens}, timeout=120)
        self.assertEqual(ev[-1]["event"], "exit", ev[-3:])
        return ev


class HangUpIsCharged(ProxyBase):
    """Finding 6: a call was charged only when the gateway's answer ended
    while the client was still connected. A task that hung up after the
    answer's first events spent a 300-token answer 8 times under a
    100-token budget and its usage read 0."""

    def hang_up(self, fmt, turn):
        self.gw.script(*[turn() for _ in range(8)])
        ev = self.chat("%s 8 hangup" % fmt, max_tokens=100)
        x = ev[-1]["data"]
        calls = calls_of(ev)
        ok = sum(s == "200" for s, _ in calls)
        print("\n  %s, 8 hang-ups under max_tokens 100: %d answered, calls %s, usage %s, "
              "budget %s" % (fmt, ok, calls, json.dumps(x.get("usage")),
                             json.dumps(x.get("budget"))))
        self.assertEqual(len(calls), 8, stdout_of(ev))
        self.assertGreater(x["usage"]["total_tokens"], 0, "hang-ups were charged nothing")
        self.assertGreaterEqual(x["usage"]["total_tokens"], 100)
        # Once spent, the next call is refused before the gateway.
        self.assertIn(("429", "budget_exceeded"), calls)
        self.assertLess(ok, 8)
        self.assertTrue(x["budget"]["exhausted"])
        self.assertGreaterEqual(x["usage"].get("estimated_responses", 0), 1)

    def test_anthropic_hang_up_after_message_start(self):
        self.hang_up("anthropic", lambda: a_text("x" * 900, usage=(10, 300), split=64,
                                                 drip=0.01))

    def test_openai_hang_up_after_first_deltas(self):
        # usage only in the last chunk: nothing reported before the hang-up
        self.hang_up("openai", lambda: text("y" * 900, usage=(10, 290), frag=3, drip=0.01))

    def test_gemini_hang_up_after_first_chunk(self):
        self.hang_up("gemini", lambda: g_text("z" * 900, usage=(10, 290), chunks=30, split=64,
                                              drip=0.01))


class ConcurrentCallsAtTheEdge(ProxyBase):
    """Finding 6: every call admitted while the budget was unspent, so
    concurrent calls all started on the same remainder."""

    def test_concurrent_calls_overspend_at_most_one_call(self):
        n = 12
        self.gw.script(*[text("w" * 60, usage=(10, 290), frag=3, drip=0.02) for _ in range(n)])
        ev = self.chat("openai %d concurrent" % n, max_tokens=100)
        x = ev[-1]["data"]
        calls = calls_of(ev)
        ok = sum(s == "200" for s, _ in calls)
        print("\n  %d concurrent calls of 300 tokens under max_tokens 100: %d answered, "
              "usage %s, budget %s" % (n, ok, json.dumps(x["usage"]), json.dumps(x["budget"])))
        # The bound (design/model.md#usage-and-budgets): past max_tokens by at most one call's
        # cost while each call stays within its hold (input + 4096 output).
        self.assertLessEqual(x["usage"]["total_tokens"], 100 + 300)
        self.assertEqual(len(calls), n, stdout_of(ev))
        self.assertEqual(ok, 1)
        self.assertTrue(all(c in ("budget_held", "budget_exceeded") for s, c in calls
                            if s != "200"), calls)


class RefusedGatewayAnswersAtOnce(unittest.TestCase):
    """Smaller (a): with a gateway that refuses connections the 502 came at
    once but the connection stayed open 30 s (MP_NEXT_HEAD_MS): a client
    reading to the end of the connection had its answer after 30 s."""

    def test_502_and_close_within_2s(self):
        port = free_port()  # nobody listens: connections are refused
        r = Runner((), env={"FORCEAI_GATEWAY_URL": "http://127.0.0.1:%d/v1" % port,
                            "FORCEAI_GATEWAY_KEY": KEY})
        self.addCleanup(r.close)
        script = r'''
import os, socket, time
port = int(os.environ["ANTHROPIC_BASE_URL"].rsplit(":", 1)[1])
body = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
for mode in ("together", "apart"):
    s = socket.create_connection(("127.0.0.1", port))
    head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
            "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % (os.environ["OPENAI_API_KEY"], len(body))).encode()
    t = time.time()
    if mode == "together":
        s.sendall(head + body)
    else:
        s.sendall(head); time.sleep(0.05); s.sendall(body)
    s.settimeout(5)
    got = b""
    try:
        while True:
            d = s.recv(4096)
            if not d:
                break
            got += d
        end = "%.2f" % (time.time() - t)
    except socket.timeout:
        end = "none"
    print(mode, got.split(b" ", 2)[1].decode() if got else "none", end, flush=True)
'''
        ev = r.native({"task": "python3 -c '%s'" % script.replace("'", "'\\''"),
                       "capability": "chat", "cwd": r.work}, timeout=60)
        lines = [l.split() for l in stdout_of(ev).splitlines() if l.strip()]
        print("\n  refused gateway: %s" % lines)
        self.assertEqual(len(lines), 2, stdout_of(ev))
        for mode, status, end in lines:
            self.assertEqual(status, "502", mode)
            self.assertNotEqual(end, "none", "%s: the connection stayed open" % mode)
            self.assertLess(float(end), 2.0, mode)
        rc = r.stop()
        self.assertEqual(rc, 0, "runner exited %s; log tail:\n%s" % (rc, r.logtext()[-3000:]))


# What a task tries against the state dir: every file under it, each
# conversation file by name, and every fd of every process it can see
# (the runner's among them) by /proc/<pid>/fd/<n>. It prints what it read.
ATTACK = r'''
import os, stat, sys
state, conv = sys.argv[1], sys.argv[2]
seen = {"listed": 0, "read": 0, "fds_opened": 0, "fds_denied": 0}
try:
    seen["state_dir"] = "listable, %d entries" % len(os.listdir(state))
except OSError as e:
    seen["state_dir"] = "not listable: %s" % e
def dump(label, path):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return True
        data = os.read(fd, 1 << 20)
        print("READ", label, path, data[:4000].decode(errors="replace").replace("\n", " "))
        seen["read"] += 1
    finally:
        os.close(fd)
    return True
for d, dirs, files in os.walk(state):
    for n in dirs + files:
        seen["listed"] += 1
        print("LIST", os.path.join(d, n))
    for n in files:
        dump("file", os.path.join(d, n))
for name in ("conv-%s.json" % conv, "conv-%s.json.tmp" % conv):
    dump("byname", os.path.join(state, name))
me = os.getpid()
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == me:
        continue
    try:
        fds = os.listdir("/proc/%s/fd" % pid)
    except OSError:
        seen["fds_denied"] += 1
        continue
    for n in fds:
        if dump("fd", "/proc/%s/fd/%s" % (pid, n)):
            seen["fds_opened"] += 1
print("SEEN", seen)
'''


@unittest.skipUnless(shutil.which("setpriv"), "needs setpriv (util-linux)")
class NonRootConversations(unittest.TestCase):
    """Finding 7: in non-root mode the built-in agent kept each conversation
    as conv-<ID>.json (0600) in the state dir, owned by the runner's uid,
    which is every task's: a plain command read another client's goal, the
    model's answers and every tool output."""

    def setUp(self):
        self.gw = TestGateway(key=KEY)
        self.addCleanup(self.gw.close)
        self.base = tempfile.mkdtemp(prefix="forceai-r3-")
        self.addCleanup(shutil.rmtree, self.base, True)
        os.chmod(self.base, 0o755)
        self.ws = os.path.join(self.base, "ws")
        own = os.path.join(self.base, "own")
        for d in (self.ws, own):
            os.mkdir(d)
            os.chown(d, TASK_UID, TASK_UID)
        self.state = os.path.join(own, "state")  # outside the writable roots
        self.r = Runner(("--landlock-roots", self.ws, "--state-dir", self.state),
                        env={"FORCEAI_GATEWAY_URL": self.gw.url, "FORCEAI_GATEWAY_KEY": KEY,
                             "FORCEAI_MODEL": "test-model", "HOME": self.ws},
                        wrap=NONROOT, owner=TASK_UID)
        self.addCleanup(self.r.close)
        self.attack = os.path.join(self.ws, "attack.py")
        with open(self.attack, "w") as f:
            f.write(ATTACK)
        os.chmod(self.attack, 0o644)

    def test_no_task_reads_another_agent_conversation(self):
        rep = self.r.json("GET", "/v1/hardening")[1]
        self.assertEqual(rep["identity"]["mode"], "non-root")
        marker = "MARKER-" + os.urandom(8).hex()
        # The victim: an agent task whose goal, answer and tool output hold
        # the marker (the history saved for its conversation holds all three).
        self.gw.script(text("the answer is " + marker, usage=(10, 5)))
        ev = self.r.native({"task": "remember " + marker, "capability": "agent",
                            "cwd": self.ws}, timeout=60)
        self.assertEqual(ev[-1]["event"], "exit", ev[-3:])
        self.assertEqual(ev[-1]["data"]["status"], "succeeded", ev[-1])
        conv = ev[0]["data"]["conversation"]
        # The conversation is kept: a later task of it sees the history.
        self.gw.script(text("still here", usage=(10, 5)))
        ev2 = self.r.native({"task": "and now?", "capability": "agent", "cwd": self.ws,
                             "conversation": conv}, timeout=60)
        self.assertEqual(ev2[-1]["data"]["status"], "succeeded", ev2[-1])
        sent = json.dumps(self.gw.chat_requests()[-1]["body"]["messages"])
        self.assertIn(marker, sent, "the continued conversation lost its history")

        # The attacker: a plain command, then another agent's tool call.
        cmd = "python3 %s %s %s" % (self.attack, self.state, conv)
        ev3 = self.r.native({"task": cmd, "cwd": self.ws}, timeout=60)
        got = stdout_of(ev3) + "".join(e["data"].get("text", "") for e in ev3
                                       if e["event"] == "stderr")
        self.gw.script(tool("bash", {"command": cmd}, usage=(10, 5)), text("done", usage=(10, 5)))
        ev4 = self.r.native({"task": "look around", "capability": "agent", "cwd": self.ws},
                            timeout=60)
        got4 = json.dumps(ev4)
        seen = [l for l in got.splitlines() if l.startswith("SEEN")]
        print("\n  non-root attack on the state dir: %s; lines read: %d" %
              (seen, sum(l.startswith("READ") for l in got.splitlines())))
        self.assertTrue(seen, got[-2000:])
        self.assertNotIn(marker, got, "a plain command read another agent's conversation")
        self.assertNotIn(marker, got4, "an agent's tool call read another agent's conversation")
        self.assertIn("SEEN", got4)
        self.assertFalse([l for l in got.splitlines()
                          if l.startswith("LIST") and "conv-" in l], got[-2000:])
        rc = self.r.stop()
        self.assertEqual(rc, 0, "runner exited %s; log tail:\n%s" % (rc, self.r.logtext()[-3000:]))


if __name__ == "__main__":
    unittest.main()
