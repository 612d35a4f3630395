"""execd-compatible command API against the real runner (curl + raw sockets)."""
import json
import os
import re
import socket
import subprocess
import time
import unittest

from harness import Runner, RunnerTest, parse_execd, slow

HEX32 = re.compile(r"^[0-9a-f]{32}$")


def ref_lines(data):
    """Reference splitter: \\r, \\n and \\r\\n end a line; empty line -> '\\n'."""
    out, cur, i = [], bytearray(), 0
    while i < len(data):
        c = data[i:i + 1]
        if c in (b"\n", b"\r"):
            out.append(cur.decode() if cur else "\n")
            cur = bytearray()
            if c == b"\r" and data[i + 1:i + 2] == b"\n":
                i += 1
        else:
            cur += c
        i += 1
    if cur:
        out.append(cur.decode())
    return out


class EventContract(RunnerTest):
    def test_init_first_terminal_last_timestamps(self):
        ev = self.r.execd({"command": "echo hello; echo oops >&2"})
        self.assertEqual(ev[0]["type"], "init")
        self.assertRegex(ev[0]["text"], HEX32)
        for e in ev:
            self.assertIsInstance(e.get("timestamp"), int, e)
            self.assertGreater(e["timestamp"], 1_600_000_000_000)
        self.assertEqual(ev[-1]["type"], "execution_complete")
        self.assertIsInstance(ev[-1]["execution_time"], int)
        terminals = [e for e in ev if e["type"] in ("execution_complete", "error")]
        self.assertEqual(len(terminals), 1)
        out = [e["text"] for e in ev if e["type"] == "stdout"]
        err = [e["text"] for e in ev if e["type"] == "stderr"]
        self.assertEqual(out, ["hello"])
        self.assertEqual(err, ["oops"])

    def test_raw_json_framing_no_data_prefix(self):
        r = self.r.curl("-d", json.dumps({"command": "echo x"}), self.r.url + "/command")
        text = r.stdout.decode()
        self.assertTrue(text.startswith("{"), text[:40])
        self.assertNotIn("data:", text)
        for frame in text.split("\n\n")[:-1]:
            json.loads(frame)

    def test_line_splitting_cr_lf_empty_and_partial(self):
        ev = self.r.execd({"command": r"printf 'a\r\nb\rc\n\nd\r\r\ne'"})
        out = [e["text"] for e in ev if e["type"] == "stdout"]
        self.assertEqual(out, ["a", "b", "c", "\n", "d", "\n", "e"])

    def test_nonzero_exit_error_event(self):
        ev = self.r.execd({"command": "echo before; exit 7"})
        self.assertEqual(ev[-1]["type"], "error")
        err = ev[-1]["error"]
        self.assertEqual(err["ename"], "CommandExecError")
        self.assertEqual(err["evalue"], "7")
        self.assertIsInstance(err["traceback"], list)
        self.assertEqual(err["traceback"], ["exit status 7"])
        self.assertFalse(any(e["type"] == "execution_complete" for e in ev))

    def test_byte_exact_1mib_with_blank_lines_and_crs(self):
        script = ("import sys,random\n"
                  "r=random.Random(7)\n"
                  "out=bytearray()\n"
                  "while len(out) < 1<<20:\n"
                  "    k=r.randrange(6)\n"
                  "    out += (b'x'*r.randrange(1,120)) + [b'\\n',b'\\r\\n',b'\\r',b'\\n\\n',b'\\r\\n\\r\\n',b'\\n'][k]\n"
                  "sys.stdout.buffer.write(bytes(out[:1<<20]))\n")
        path = os.path.join(self.r.work, "gen.py")
        with open(path, "w") as f:
            f.write(script)
        expected = subprocess.run(["python3", path], capture_output=True).stdout
        self.assertEqual(len(expected), 1 << 20)
        ev = self.r.execd({"command": "python3 " + path})
        got = [e["text"] for e in ev if e["type"] == "stdout"]
        self.assertEqual(got, ref_lines(expected))
        self.assertEqual(ev[-1]["type"], "execution_complete")

    def test_ping_at_least_every_3s(self):
        ev = self.r.execd({"command": "sleep 7; echo end"})
        pings = [e for e in ev if e["type"] == "ping"]
        self.assertGreaterEqual(len(pings), 2)
        self.assertTrue(all(p["text"] == "pong" for p in pings))
        ts = [e["timestamp"] for e in ev]
        gaps = [b - a for a, b in zip(ts, ts[1:])]
        self.assertLessEqual(max(gaps), 3000, gaps)

    def test_stream_closed_right_after_terminal(self):
        t0 = time.monotonic()
        r = self.r.curl("-d", json.dumps({"command": "true"}), self.r.url + "/command")
        self.assertLess(time.monotonic() - t0, 0.9)  # execd waits 1 s; we must not
        self.assertEqual(parse_execd(r.stdout)[-1]["type"], "execution_complete")

    def test_envs_merged_over_clean_environment(self):
        ev = self.r.execd({"command": "echo $FOO; env | grep -c '^FORCEAI_' || true; echo ${EXECD_ACCESS_TOKEN:-none}",
                           "envs": {"FOO": "bar baz"}})
        out = [e["text"] for e in ev if e["type"] == "stdout"]
        self.assertEqual(out, ["bar baz", "0", "none"])

    def test_login_variables_without_a_shell(self):
        # The argv form runs no shell, so nothing but the runner can have set these
        # (bash fills an unset SHELL from passwd itself). SHELL as login(1) sets it.
        import pwd
        ev = self.r.execd({"argv": ["/usr/bin/env"]})
        env = dict(e["text"].split("=", 1) for e in ev if e["type"] == "stdout" and "=" in e["text"])
        ev = self.r.execd({"argv": ["/usr/bin/id", "-u"]})
        uid = int([e["text"] for e in ev if e["type"] == "stdout"][0])
        pw = pwd.getpwuid(uid)
        self.assertEqual({k: env.get(k) for k in ("HOME", "USER", "LOGNAME", "SHELL")},
                         {"HOME": pw.pw_dir, "USER": pw.pw_name, "LOGNAME": pw.pw_name,
                          "SHELL": pw.pw_shell or "/bin/sh"}, env)
        ev = self.r.execd({"argv": ["/usr/bin/env"], "envs": {"SHELL": "/bin/bash"}})
        self.assertIn("SHELL=/bin/bash", [e["text"] for e in ev if e["type"] == "stdout"])

    def test_the_command_shell(self):
        # docs/design/tasks.md "The task shell": Debian's static build of the same bash when
        # the box has it (make check installs it, as the image does), exec'd under bash's
        # own name, so $0, $BASH and the version are what /bin/bash gives.
        want = "/usr/bin/bash-static" if os.access("/bin/bash-static", os.X_OK) else "/usr/bin/bash"
        ev = self.r.execd({"command": 'readlink /proc/$$/exe; echo "$0|$BASH|$BASH_VERSION"'})
        out = [e["text"] for e in ev if e["type"] == "stdout"]
        version = subprocess.run(["/bin/bash", "-c", "echo $BASH_VERSION"], capture_output=True,
                                 text=True).stdout.strip()
        self.assertEqual(out, [want, "/bin/bash|/bin/bash|" + version], ev)
        self.assertEqual(ev[-1]["type"], "execution_complete", ev)
        # A syntax error is still bash's own, with bash's name in it.
        ev = self.r.execd({"command": "if then fi"})
        err = " ".join(e["text"] for e in ev if e["type"] == "stderr")
        self.assertIn("/bin/bash: -c: ", err, ev)
        self.assertEqual(ev[-1]["type"], "error", ev)

    def test_cwd(self):
        ev = self.r.execd({"command": "pwd", "cwd": "/tmp"})
        self.assertEqual([e["text"] for e in ev if e["type"] == "stdout"], ["/tmp"])

    def test_timeout_kills_tree(self):
        marker = "31.4159%d" % os.getpid()
        t0 = time.monotonic()
        ev = self.r.execd({"command": "(setsid sleep %s &) ; sleep %s" % (marker, marker),
                           "timeout": 500})
        self.assertLess(time.monotonic() - t0, slow(5))
        self.assertEqual(ev[-1]["type"], "error")
        time.sleep(0.3)
        left = subprocess.run(["pgrep", "-f", "sleep " + marker], capture_output=True).stdout
        self.assertEqual(left, b"", "processes left behind")


class BackgroundAndStatus(RunnerTest):
    def test_background_status_logs_cursor(self):
        ev = self.r.execd({"command": "sleep 0.5; printf 'one\\ntwo\\n'; echo three >&2",
                           "background": True})
        self.assertEqual([e["type"] for e in ev], ["init", "execution_complete"])
        cid = ev[0]["text"]
        st, body = self.r.json("GET", "/command/status/" + cid)
        self.assertEqual(st, 200)
        self.assertTrue(body["running"])
        self.assertNotIn("exit_code", body)
        self.assertEqual(body["content"], "sleep 0.5; printf 'one\\ntwo\\n'; echo three >&2")
        deadline = time.time() + 10
        while body["running"] and time.time() < deadline:
            time.sleep(0.1)
            st, body = self.r.json("GET", "/command/status/" + cid)
        self.assertFalse(body["running"])
        self.assertEqual(body["exit_code"], 0)
        self.assertRegex(body["started_at"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        self.assertIn("finished_at", body)
        st, h, data = self.r.request("GET", "/command/%s/logs?cursor=0" % cid)
        self.assertEqual(st, 200)
        self.assertEqual(data, b"one\ntwo\nthree\n")
        self.assertEqual(h["execd-commands-tail-cursor"], "14")
        st, h, data = self.r.request("GET", "/command/%s/logs?cursor=4" % cid)
        self.assertEqual(data, b"two\nthree\n")
        st, h, data = self.r.request("GET", "/command/%s/logs?cursor=14" % cid)
        self.assertEqual(data, b"")
        self.assertEqual(h["execd-commands-tail-cursor"], "14")

    def test_status_of_failed_command(self):
        ev = self.r.execd({"command": "exit 3"})
        st, body = self.r.json("GET", "/command/status/" + ev[0]["text"])
        self.assertEqual(body["exit_code"], 3)
        self.assertEqual(body["error"], "exit status 3")

    def test_interrupt_tree_with_setsid_grandchild(self):
        marker = "27.1828%d" % os.getpid()
        ev = self.r.execd({"command": "(setsid sleep %s &); sleep %s" % (marker, marker),
                           "background": True})
        cid = ev[0]["text"]
        time.sleep(0.3)
        n = subprocess.run(["pgrep", "-fc", "sleep " + marker], capture_output=True).stdout
        self.assertEqual(int(n), 2)
        st, h, body = self.r.request("DELETE", "/command?id=" + cid)
        self.assertEqual(st, 200)
        self.assertEqual(h.get("content-length"), "0")
        deadline = time.time() + 8
        while time.time() < deadline:
            st, b = self.r.json("GET", "/command/status/" + cid)
            if not b["running"]:
                break
            time.sleep(0.1)
        self.assertFalse(b["running"])
        left = subprocess.run(["pgrep", "-f", "sleep " + marker], capture_output=True).stdout
        self.assertEqual(left, b"")

    def test_disconnect_does_not_kill_foreground(self):
        s = socket.create_connection(("127.0.0.1", self.r.port))
        body = json.dumps({"command": "sleep 1; echo late"})
        s.sendall(("POST /command HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
        data = b""
        while b"init" not in data:
            data += s.recv(4096)
        cid = re.search(rb'"text":"([0-9a-f]{32})"', data).group(1).decode()
        s.close()
        time.sleep(1.6)
        st, b = self.r.json("GET", "/command/status/" + cid)
        self.assertFalse(b["running"])
        self.assertEqual(b["exit_code"], 0)
        st, h, data = self.r.request("GET", "/command/%s/logs" % cid)
        self.assertEqual(data, b"late\n")


class Sessions(RunnerTest):
    def test_cd_and_exports_persist(self):
        st, b = self.r.json("POST", "/session", {})
        self.assertEqual(st, 200)
        sid = b["session_id"]
        self.assertRegex(sid, HEX32)
        ev = self.r.execd({"command": "cd /tmp && export X=42 && Y=local"}, path="/session/%s/run" % sid)
        self.assertEqual(ev[-1]["type"], "execution_complete")
        self.assertEqual(ev[0]["text"], sid)
        ev = self.r.execd({"command": "pwd; echo $X; echo err >&2"}, path="/session/%s/run" % sid)
        out = [e["text"] for e in ev if e["type"] == "stdout"]
        self.assertEqual(out, ["/tmp", "42", "err"])
        ev = self.r.execd({"command": "exit 4"}, path="/session/%s/run" % sid)
        self.assertEqual(ev[-1]["error"]["evalue"], "4")
        ev = self.r.execd({"command": "echo $X"}, path="/session/%s/run" % sid)
        self.assertEqual([e["text"] for e in ev if e["type"] == "stdout"], ["42"])
        st, h, _ = self.r.request("DELETE", "/session/" + sid)
        self.assertEqual(st, 200)
        st, b = self.r.json("POST", "/session/%s/run" % sid, {"command": "true"})
        self.assertEqual(st, 404)

    def test_session_cwd(self):
        st, b = self.r.json("POST", "/session", {"cwd": "/tmp"})
        ev = self.r.execd({"command": "pwd"}, path="/session/%s/run" % b["session_id"])
        self.assertEqual([e["text"] for e in ev if e["type"] == "stdout"], ["/tmp"])

    def test_unknown_session(self):
        st, b = self.r.json("DELETE", "/session/" + "0" * 32)
        self.assertEqual(st, 404)
        self.assertIn("code", b)


class Metrics(RunnerTest):
    def test_metrics(self):
        st, b = self.r.json("GET", "/metrics")
        self.assertEqual(st, 200)
        for k in ("cpu_count", "cpu_used_pct", "mem_total_mib", "mem_used_mib", "timestamp"):
            self.assertIn(k, b)
        self.assertGreater(b["mem_total_mib"], 0)

    def test_metrics_watch_once_a_second(self):
        r = self.r.curl(self.r.url + "/metrics/watch", timeout=3)
        lines = [json.loads(l) for l in r.stdout.decode().splitlines() if l.strip()]
        self.assertGreaterEqual(len(lines), 2)
        self.assertLessEqual(len(lines), 5)
        self.assertIn("cpu_used_pct", lines[0])


if __name__ == "__main__":
    unittest.main()
