"""Egress pin as the box sees it (issue 6): the runner and its tasks in a
network namespace of their own whose only way out is nftables-allowed
tcp to the gateway's address:port.

Topology (nothing in the host's namespace; no traffic leaves the machine):

    netns BOX  veth 10.213.7.2/24  <->  veth 10.213.7.1/24 + 10.213.7.3  netns GW
    runner (+ tasks, via ip netns exec)     test gateway on 10.213.7.1:P,
                                            decoys on 10.213.7.3:P and 10.213.7.1:Q

The BOX output chain: lo accepted; tcp to 10.213.7.1:P accepted (runner's
packets, uid 0, counted apart from the tasks'); everything else from the
runner counted and dropped, from tasks counted and rejected."""
import json
import os
import socket
import subprocess
import threading
import unittest

from harness import Runner
from gwtools import ensure_packages, netns, run
from test_gateway import TestGateway, text, tool

KEY = "sk-egress-" + os.urandom(8).hex()
NET = "10.213.7."
GW_IP, BOX_IP, DECOY_IP = NET + "1", NET + "2", NET + "3"


class Decoy:
    """A TCP listener that counts connections (answers a minimal HTTP 200)."""

    def __init__(self, host, port):
        self.accepts = 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.t = threading.Thread(target=self._loop, daemon=True)
        self.t.start()

    def _loop(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepts += 1
            try:
                c.settimeout(2)
                c.recv(4096)
                c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\nreachable\n")
            except OSError:
                pass
            c.close()

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def nft_counters(ns, table):
    r = run("ip", "netns", "exec", ns, "nft", "-j", "list", "table", "inet", table)
    out = {}
    for item in json.loads(r.stdout)["nftables"]:
        rule = item.get("rule")
        if not rule or "comment" not in rule:
            continue
        for e in rule["expr"]:
            if "counter" in e:
                out[rule["comment"]] = e["counter"]["packets"]
    return out


class EgressPin(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        why = ensure_packages(("nft", "nftables"), ("ip", "iproute2"), ("curl", "curl"),
                              ("sysctl", "procps"))
        if why:
            raise unittest.SkipTest(why)
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root (network namespaces)")
        tag = "%d%s" % (os.getpid() % 100000, os.urandom(2).hex())
        cls.box, cls.gwns = "fai-box-" + tag, "fai-gw-" + tag
        cls.table = "faipin"
        cls.made = []
        cls.r = cls.gw = None
        cls.decoys = []
        try:
            cls._topology(tag)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def _topology(cls, tag):
        for ns in (cls.box, cls.gwns):
            run("ip", "netns", "add", ns)
            cls.made.append(ns)
            # no IPv6: no router solicitations or DAD to blur the counters
            for k in ("all", "default"):
                run("ip", "netns", "exec", ns, "sysctl", "-qw",
                    "net.ipv6.conf.%s.disable_ipv6=1" % k)
            run("ip", "-n", ns, "link", "set", "lo", "up")
        vb, vg = "fvb" + tag[:9], "fvg" + tag[:9]
        # both ends created straight inside our namespaces
        run("ip", "link", "add", vb, "netns", cls.box, "type", "veth",
            "peer", "name", vg, "netns", cls.gwns)
        run("ip", "-n", cls.box, "addr", "add", BOX_IP + "/24", "dev", vb)
        run("ip", "-n", cls.gwns, "addr", "add", GW_IP + "/24", "dev", vg)
        run("ip", "-n", cls.gwns, "addr", "add", DECOY_IP + "/24", "dev", vg)
        run("ip", "-n", cls.box, "link", "set", vb, "up")
        run("ip", "-n", cls.gwns, "link", "set", vg, "up")
        with netns(cls.gwns):
            cls.gw = TestGateway(key=KEY, host=GW_IP)
            cls.decoys = [Decoy(DECOY_IP, cls.gw.port), Decoy(GW_IP, 0)]
        cls._record_clients()
        cls.port = cls.gw.port
        # positive control: before the pin, the decoys ARE reachable from the box
        for d in cls.decoys:
            host = d.sock.getsockname()[0]
            r = run("ip", "netns", "exec", cls.box, "curl", "-sS", "--max-time", "5",
                    "http://%s:%d/" % (host, d.port), check=False)
            if r.stdout != b"reachable\n":
                raise RuntimeError("control: decoy %s:%d unreachable without the pin: %s"
                                   % (host, d.port, r.stderr))
        for d in cls.decoys:
            d.accepts = 0
        ruleset = """
table inet %(t)s {
    chain out {
        type filter hook output priority 0; policy drop;
        oifname "lo" accept
        ip daddr %(gw)s tcp dport %(p)d tcp flags & (syn | ack) == syn meta skuid 0 counter comment "runner_syn"
        ip daddr %(gw)s tcp dport %(p)d meta skuid 0 counter accept comment "runner_gw"
        ip daddr %(gw)s tcp dport %(p)d counter accept comment "tasks_gw"
        meta skuid 0 counter drop comment "runner_other"
        counter reject comment "tasks_other"
    }
}
""" % {"t": cls.table, "gw": GW_IP, "p": cls.port}
        run("ip", "netns", "exec", cls.box, "nft", "-f", "-", input=ruleset.encode())
        with netns(cls.box):
            cls.r = Runner(env={"FORCEAI_GATEWAY_URL": "http://%s:%d/v1" % (GW_IP, cls.port),
                                "FORCEAI_GATEWAY_KEY": KEY, "FORCEAI_MODEL": "test-model"},
                           wrap=["ip", "netns", "exec", cls.box])

    @classmethod
    def _record_clients(cls):
        """Make the test gateway record each request's client address."""
        base = cls.gw.server.RequestHandlerClass

        class H(base):
            def _record(self, body_raw):
                rec = base._record(self, body_raw)
                rec["client"] = self.client_address
                return rec
        cls.gw.server.RequestHandlerClass = H

    @classmethod
    def tearDownClass(cls):
        if cls.r:
            cls.r.close()
        if cls.gw:
            cls.gw.close()
        for d in cls.decoys:
            d.close()
        for ns in reversed(cls.made):  # deleting a namespace destroys its veth end
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def setUp(self):
        self.gw.turns.clear()
        self.gw.errors.clear()

    def native(self, body, timeout=90):
        with netns(self.box):  # the runner's port is on the box's loopback
            return self.r.native(body, timeout=timeout)

    def test_agent_multistep_and_runner_contacts_only_gateway(self):
        n0 = len(self.gw.chat_requests())
        self.gw.script(
            tool("bash", {"command": "printf 'n=6; echo pinned-$((n*7))\\n' > step.sh"},
                 call_id="call_write"),
            tool("bash", {"command": "sh step.sh"}, call_id="call_run"),
            text("The script printed pinned-42."))
        ev = self.native({"task": "write step.sh, run it, report", "capability": "agent",
                          "cwd": self.r.work})
        self.assertTrue(ev, self.r.logtext()[-3000:])
        self.assertEqual(ev[-1]["event"], "exit", ev[-3:])
        x = ev[-1]["data"]
        self.assertEqual((x["status"], x["steps"]), ("succeeded", 3))
        self.assertEqual(x["answer"], "The script printed pinned-42.")
        done = [e["data"] for e in ev if e["event"] == "tool.result" and e["data"].get("done")]
        self.assertEqual([d["exit_code"] for d in done], [0, 0])
        live = "".join(e["data"].get("text", "") for e in ev
                       if e["event"] == "tool.result" and not e["data"].get("done"))
        self.assertEqual(live, "pinned-42\n")
        self.assertEqual(self.gw.errors, [])
        reqs = self.gw.chat_requests()[n0:]
        self.assertEqual(len(reqs), 3)
        self.assertIn("pinned-42", reqs[2]["body"]["messages"][-1]["content"])
        self._runner_only_gateway()

    def test_task_cannot_reach_other_addresses(self):
        probes = ["http://%s:%d/" % (DECOY_IP, self.port),           # other address, same port
                  "http://%s:%d/" % (GW_IP, self.decoys[1].port),     # gateway address, other port
                  "http://%s:%d/" % ("10.213.8.1", self.port)]         # no route at all
        cmd = "; ".join("curl -sS --max-time 5 %s; echo rc=$?" % u for u in probes)
        ev = self.native({"task": cmd, "capability": "exec", "cwd": self.r.work})
        self.assertEqual(ev[-1]["event"], "exit", ev)
        out = "".join(e["data"].get("text", "") for e in ev if e["event"] == "stdout")
        rcs = [l for l in out.splitlines() if l.startswith("rc=")]
        self.assertEqual(len(rcs), 3, out)
        self.assertNotIn("rc=0", rcs)
        self.assertNotIn("reachable", out)
        self.assertEqual([d.accepts for d in self.decoys], [0, 0])
        c = nft_counters(self.box, self.table)
        self.assertGreater(c["tasks_other"], 0, c)  # the task's attempts hit the reject rule
        self._runner_only_gateway()

    def _runner_only_gateway(self):
        c = nft_counters(self.box, self.table)
        reqs = self.gw.requests
        self.assertGreater(len(reqs), 0)
        self.assertGreater(c["runner_gw"], 0, c)
        self.assertEqual(c["runner_other"], 0, c)
        # every connection the gateway saw came from the box, and the runner
        # opened exactly as many as the gateway saw (tasks opened none)
        clients = {tuple(q["client"]) for q in reqs}
        self.assertEqual({h for h, _ in clients}, {BOX_IP})
        self.assertEqual(c["runner_syn"], len(clients), (c, clients))
        self.assertEqual(c["tasks_gw"], 0, c)


if __name__ == "__main__":
    unittest.main()
