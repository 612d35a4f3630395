"""Red-team round four (issue 44, finding 5 and the trail's head), from the
attacker's side: a task cannot crowd the client's actions out of the audit
trail, and a trail whose end was cut off is found out.

1. Eight task processes connect to the API in a loop (each refusal at the gate
   is an event a task can cause at will) while the client, with the token,
   runs 20 commands and 20 downloads, with --audit-rate 300: every one of the
   client's 40 actions is in the trail (stderr, the file, GET /v1/audit), and
   the `events dropped` markers name whose events were dropped (the task's
   uid), their counts summing to status.dropped. On the old build (one bucket
   for every door) client actions vanished and the marker named no one.
2. The head the runner publishes (GET /v1/audit's `head`, the reset's answer,
   the last log line at exit) makes --verify-audit --audit-head fail on a trail
   cut at its end; the intact trail passes with it."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from harness import RUNNER, Runner, record_figure

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "gateway"))
from test_gateway import TestGateway  # noqa: E402

TOKEN = "round4-audit-token-" + os.urandom(6).hex()
FIGURES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))), "build", "figures", "round4_audit.json")


def audit_events(text):
    out = []
    for line in text.splitlines():
        if '"audit":true' in line:
            try:
                out.append(json.loads(line[line.index("{"):]))
            except ValueError:
                pass
    return out


def verify(path, head=None):
    cmd = [RUNNER, "--verify-audit", path] + (["--audit-head", head] if head else [])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


# Eight processes, each connecting to the API as fast as it can for `secs`.
FLOOD = r'''
import os, socket, sys, time
port, secs = int(sys.argv[1]), float(sys.argv[2])
kids = []
for _ in range(8):
    pid = os.fork()
    if pid == 0:
        end, n = time.time() + secs, 0
        while time.time() < end:
            s = socket.socket()
            try:
                s.connect(("127.0.0.1", port)); s.recv(1)
            except OSError:
                pass
            s.close(); n += 1
        print("tries", n, flush=True)
        os._exit(0)
    kids.append(pid)
for k in kids:
    os.waitpid(k, 0)
print("flood done", flush=True)
'''


class ClientActionsSurviveATaskFlood(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.own = tempfile.mkdtemp(prefix="audit4-own-", dir="/var/tmp")  # not a writable root
        os.chmod(cls.own, 0o755)
        cls.audit_file = os.path.join(cls.own, "audit.log")
        cls.r = Runner(["--audit-file", cls.audit_file, "--audit-rate", "300"], token=TOKEN)

    @classmethod
    def tearDownClass(cls):
        cls.r.close()
        shutil.rmtree(cls.own, True)

    def test_40_client_actions_under_8_flooding_task_processes(self):
        r = self.r
        flood_py = os.path.join(r.work, "flood.py")
        with open(flood_py, "w") as f:
            f.write(FLOOD)
        secs = 10
        out = {}
        th = threading.Thread(target=lambda: out.setdefault("ev", r.execd(
            {"command": "python3 %s %d %d" % (flood_py, r.port, secs), "cwd": r.work},
            timeout=secs + 60)))
        th.start()
        # The flood is under way when the refusals start to count.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and r.logtext().count('"connection refused"') < 50:
            time.sleep(0.05)
        cmds, downloads = [], []
        t0 = time.monotonic()
        for i in range(20):
            tag = "client-cmd-%d-%s" % (i, os.urandom(3).hex())
            path = os.path.join(r.work, "cl-%d.txt" % i)
            ev = r.execd({"command": "echo %s > %s" % (tag, path), "cwd": r.work})
            self.assertTrue(any(e.get("type") == "execution_complete" for e in ev), ev)
            cmds.append(tag)
            st, _, body = r.request("GET", "/files/download?path=" + path)
            self.assertEqual(st, 200)
            self.assertIn(tag.encode(), body)
            downloads.append(path)
        client_secs = time.monotonic() - t0
        th.join(secs + 90)
        tries = sum(int(l.split()[1]) for e in out.get("ev", []) if e.get("type") == "stdout"
                    for l in e.get("text", "").splitlines() if l.startswith("tries"))
        time.sleep(2.5)  # the markers of the flood's last second
        st, j = r.json("GET", "/v1/audit?limit=10000")
        self.assertEqual(st, 200)
        time.sleep(0.1)
        sinks = {"stderr": audit_events(r.logtext()),
                 "file": audit_events(open(self.audit_file).read()),
                 "GET /v1/audit": j["events"]}
        events = sinks["stderr"]
        markers = [e for e in events if e["what"] == "events dropped"]
        refused = sum(1 for e in events if e["what"] == "connection refused")
        fig = {"flood_tries": tries, "client_seconds": round(client_secs, 1),
               "refusals_kept": refused, "markers": len(markers),
               "dropped": j["status"]["dropped"],
               "marker_sources": sorted({m.get("source", "(none)") for m in markers})}
        missing = {}
        for name, evs in sinks.items():
            started = {e.get("command", "") for e in evs if e["what"] == "task started"}
            posts = sum(1 for e in evs if e["what"] == "POST /command"
                        and e.get("outcome") == "ok")
            got = {e.get("path") or e.get("target", "") for e in evs
                   if e["what"].startswith("GET /files/download")}
            lost = [t for t in cmds if not any(t in c for c in started)]
            lost += [p for p in downloads if not any(p in g for g in got)]
            if posts < len(cmds) + 1:  # the flood's own command too
                lost.append("%d POST /command events of %d" % (posts, len(cmds) + 1))
            if lost:
                missing[name] = lost
        fig["client_actions_missing"] = {k: len(v) for k, v in missing.items()}
        record_figure(FIGURES, "client_actions_under_task_flood", fig)
        self.assertGreater(tries, 3000, fig)  # it was a flood
        self.assertEqual(missing, {}, fig)
        # The flood was bounded: refusals dropped and counted, by whose.
        self.assertTrue(markers, fig)
        self.assertGreater(j["status"]["dropped"], 0, fig)
        # Whose: the task's uid (a socket the task closed before the gate looked
        # it up has no owner: fail closed, its own source), never the client.
        sources = {m.get("source") for m in markers}
        self.assertIn("uid:1000", sources, fig)
        self.assertLessEqual(sources, {"uid:1000", "unknown:127.0.0.1"}, fig)
        for m in markers:
            self.assertEqual(set(m["by_door"]), {"native"}, m)
        self.assertEqual(sum(m["count"] for m in markers), j["status"]["dropped"], fig)
        # Bounded on its own: at most --audit-rate refusals a second (bursts of as many).
        self.assertLessEqual(refused, 300 * (secs + 6), fig)
        log = os.path.join(r.tmp, "flood.log")
        with open(log, "w") as f:
            f.write(r.logtext())
        for path in (log, self.audit_file):
            rc, v = verify(path)
            self.assertEqual(rc, 0, v)


    def test_unauthenticated_flood_is_its_address_alone(self):
        """Requests without the token (an outside party, or a task coming back
        in through a NAT) are bound per address: a flood of 401s keeps none of
        the client's actions out, and its marker names the address."""
        r = self.r
        st, j = r.json("GET", "/v1/audit?limit=1")
        seq0 = j["last_seq"]
        stop = []
        sent = [0]

        def flood():
            import http.client
            c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=10)
            while not stop:
                c.request("GET", "/v1/tasks")  # no token
                c.getresponse().read()
                sent[0] += 1

        ths = [threading.Thread(target=flood) for _ in range(2)]
        for t in ths:
            t.start()
        time.sleep(0.5)
        tags = []
        for i in range(10):
            tag = "unauth-flood-cmd-%d-%s" % (i, os.urandom(3).hex())
            r.execd({"command": "echo " + tag, "cwd": r.work})
            tags.append(tag)
        time.sleep(1)
        stop.append(1)
        for t in ths:
            t.join(30)
        time.sleep(2.5)
        events = [e for e in audit_events(r.logtext()) if e["seq"] > seq0]
        started = [e.get("command", "") for e in events if e["what"] == "task started"]
        unauth = sum(1 for e in events if e["what"] == "GET /v1/tasks" and e.get("status") == 401)
        markers = [e for e in events if e["what"] == "events dropped"]
        fig = {"sent": sent[0], "401_kept": unauth, "markers": len(markers),
               "sources": sorted({m.get("source", "(none)") for m in markers})}
        record_figure(FIGURES, "client_actions_under_unauthenticated_flood", fig)
        self.assertGreater(sent[0], 1000, fig)
        self.assertEqual([t for t in tags if not any(t in c for c in started)], [], fig)
        self.assertTrue(markers, fig)
        self.assertEqual({m.get("source") for m in markers}, {"addr:127.0.0.1"}, fig)


# A task's calls to the model proxy as fast as it can for argv[1] s, each with
# a token that is not its own (refused at once, no gateway call): each one a
# `model call` event the task causes at will.
MODEL_FLOOD = r'''
import http.client, os, sys, time, urllib.parse
u = urllib.parse.urlparse(os.environ["OPENAI_BASE_URL"])
end, n = time.time() + float(sys.argv[1]), 0
c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
while time.time() < end:
    c.request("POST", u.path + "/chat/completions", b"{}",
              {"Authorization": "Bearer not-mine", "Content-Type": "application/json"})
    c.getresponse().read(); n += 1
print("calls", n, flush=True)
'''


class ModelProxyFloodIsTheTasks(unittest.TestCase):
    """A task floods the model proxy (it is the task's door): its `model call`
    events are bound by its uid, the client's actions meanwhile all kept."""

    def test_model_proxy_flood_is_bound_by_the_tasks_uid(self):
        gw = TestGateway(key="sk-gw-" + os.urandom(8).hex())
        self.addCleanup(gw.close)
        r = Runner(["--audit-rate", "100"], token=TOKEN,
                   env={"FORCEAI_GATEWAY_URL": gw.url, "FORCEAI_GATEWAY_KEY": gw.key,
                        "FORCEAI_MODEL": "test-model"})
        self.addCleanup(r.close)
        path = os.path.join(r.work, "mflood.py")
        with open(path, "w") as f:
            f.write(MODEL_FLOOD)
        out = {}
        th = threading.Thread(target=lambda: out.setdefault("ev", r.native(
            {"task": "python3 %s 4" % path, "capability": "chat"}, timeout=60)))
        th.start()
        time.sleep(1)
        tags = []
        for i in range(10):
            tag = "model-flood-cmd-%d-%s" % (i, os.urandom(3).hex())
            r.execd({"command": "echo " + tag, "cwd": r.work})
            tags.append(tag)
        th.join(60)
        time.sleep(2.5)
        calls = 0
        for e in out.get("ev", []):
            if e.get("event") == "stdout" and "calls" in e["data"].get("text", ""):
                calls = int(e["data"]["text"].split()[1])
        events = audit_events(r.logtext())
        started = [e.get("command", "") for e in events if e["what"] == "task started"]
        kept = sum(1 for e in events if e["what"] == "model call")
        markers = [e for e in events if e["what"] == "events dropped"]
        fig = {"calls": calls, "model_calls_kept": kept, "markers": len(markers),
               "sources": sorted({m.get("source", "(none)") for m in markers}),
               "doors": sorted({d for m in markers for d in m.get("by_door", {})})}
        record_figure(FIGURES, "client_actions_under_model_proxy_flood", fig)
        self.assertGreater(calls, 800, fig)
        self.assertEqual([t for t in tags if not any(t in c for c in started)], [], fig)
        self.assertTrue(markers, fig)
        self.assertEqual(fig["doors"], ["model"], fig)
        self.assertEqual(len(fig["sources"]), 1, fig)
        self.assertTrue(fig["sources"][0].startswith("uid:"), fig)
        self.assertLessEqual(kept, 100 * 8, fig)


class CutTrailIsFoundByItsHead(unittest.TestCase):
    """A trail cut at its end (the attacker's edit that a hash chain alone
    cannot see) fails --verify-audit against the head the runner published."""

    def setUp(self):
        self.own = tempfile.mkdtemp(prefix="audit4-head-", dir="/var/tmp")
        os.chmod(self.own, 0o755)
        self.addCleanup(shutil.rmtree, self.own, True)
        self.audit_file = os.path.join(self.own, "audit.log")
        # Its own writable root: --allow-reset examines the roots at start, and
        # the shared /tmp changes under other tests meanwhile.
        self.roots = os.path.realpath(tempfile.mkdtemp(prefix="audit4-roots-"))
        os.chmod(self.roots, 0o777)
        self.addCleanup(shutil.rmtree, self.roots, True)
        self.r = Runner(["--landlock-roots", self.roots, "--audit-file", self.audit_file,
                         "--allow-reset"], token=TOKEN)
        self.addCleanup(self.r.close)

    def cut(self, src, n):
        """A copy of src without its last n audit events."""
        lines = open(src).read().splitlines(True)
        idx = [i for i, l in enumerate(lines) if '"audit":true' in l]
        drop = set(idx[-n:])
        dst = src + ".cut%d" % n
        with open(dst, "w") as f:
            f.writelines(l for i, l in enumerate(lines) if i not in drop)
        return dst

    def actions(self, k):
        for i in range(k):
            self.r.execd({"command": "echo secret-step-%d" % i, "cwd": self.r.work})

    def test_head_from_get_audit(self):
        self.actions(3)
        st, j = self.r.json("GET", "/v1/audit")
        self.assertEqual(st, 200)
        head = j["head"]
        seq, _, h = head.partition(":")
        self.assertEqual(int(seq), j["last_seq"], j)
        self.assertEqual(len(h), 64)
        # The head's line is in the file the moment it is published.
        rc, v = verify(self.audit_file, head)
        self.assertEqual(rc, 0, v)
        self.assertIn("head", v)
        # Without the head the cut trail passes (the old weakness) ...
        cut = self.cut(self.audit_file, 2)
        rc, v = verify(cut)
        self.assertEqual(rc, 0, v)
        # ... with it, it is found out and said.
        rc, v = verify(cut, head)
        self.assertEqual(rc, 1, v)
        self.assertIn("CUT", v)
        self.assertIn("cut off", v)
        self.assertIn("seq %s" % seq, v)
        # Events written after the head was read are fine.
        self.actions(2)
        time.sleep(0.1)
        rc, v = verify(self.audit_file, head)
        self.assertEqual(rc, 0, v)
        # A head whose line was changed (same seq, another hash) is named too.
        forged = "%s:%s" % (seq, "0" * 64)
        rc, v = verify(self.audit_file, forged)
        self.assertEqual(rc, 1, v)
        self.assertIn("hash differs", v)

    def test_head_in_the_reset_answer(self):
        self.actions(2)
        st, j = self.r.json("POST", "/v1/reset", {})
        self.assertEqual(st, 200, j)
        head = j["audit"]["head"]
        self.assertEqual(head, "%d:%s" % (j["audit"]["last_seq"], j["audit"]["last_hash"]))
        rc, v = verify(self.audit_file, head)
        self.assertEqual(rc, 0, v)
        rc, v = verify(self.cut(self.audit_file, 3), head)  # the closed chain's end and after
        self.assertEqual(rc, 1, v)

    def test_head_in_the_last_log_line(self):
        self.actions(3)
        self.assertEqual(self.r.stop(), 0)
        lines = [l for l in self.r.logtext().splitlines() if l.strip()]
        last = json.loads(lines[-1])
        self.assertEqual(last.get("msg"), "exited", lines[-1])
        head = last["audit_head"]
        events = audit_events(self.r.logtext())
        self.assertEqual(int(head.split(":")[0]), events[-1]["seq"])
        log = os.path.join(self.own, "stderr.log")
        with open(log, "w") as f:
            f.write(self.r.logtext())
        for path in (log, self.audit_file):
            rc, v = verify(path, head)
            self.assertEqual(rc, 0, v)
            rc, v = verify(self.cut(path, 1), head)
            self.assertEqual(rc, 1, v)
            self.assertIn("cut off", v)

    def test_bad_head_is_a_usage_error(self):
        for bad in ("12", "x:" + "a" * 64, "0:" + "a" * 64, "5:" + "g" * 64, "5:abc"):
            p = subprocess.run([RUNNER, "--verify-audit", self.audit_file, "--audit-head", bad],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 2, (bad, p.stdout, p.stderr))
            self.assertIn("--audit-head", p.stderr)


if __name__ == "__main__":
    unittest.main()
