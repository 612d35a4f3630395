"""A corpus of >= 200 malformed or hostile requests (tests/fault/hostile.py:
bad methods, request smuggling with both Content-Length and
Transfer-Encoding, duplicate headers, huge headers, invalid chunk sizes, bad
UTF-8 in JSON, deep JSON nesting, path traversal, ids of other shapes...):
each gets a 4xx (see hostile.py for what that means for bytes that are not
HTTP), a valid request right after still succeeds, nothing smuggled runs,
and the runner holds no more fds than before."""
import json
import os
import socket
import time
import unittest

import hostile
from faultlib import fd_count, record, wait_for
from harness import Runner

IDLE_MS = 2000


def exchange(port, data, deadline_s):
    """Send data on a fresh connection; return (final statuses, closed, seconds)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=deadline_s)
    t0 = time.monotonic()
    try:
        s.sendall(data)
    except OSError:
        pass  # the server may refuse before reading everything
    buf, statuses, closed = b"", [], False
    end = t0 + deadline_s
    while True:
        # Parse complete responses out of buf.
        while True:
            if b"\r\n\r\n" not in buf:
                break
            head, _, rest = buf.partition(b"\r\n\r\n")
            line = head.split(b"\r\n", 1)[0]
            try:
                st = int(line.split()[1])
            except (IndexError, ValueError):
                statuses.append(-1)
                buf = b""
                break
            hdrs = {}
            for h in head.split(b"\r\n")[1:]:
                k, _, v = h.partition(b":")
                hdrs[k.strip().lower()] = v.strip()
            if 100 <= st < 200:
                buf = rest
                continue
            n = int(hdrs.get(b"content-length", b"0") or 0)
            if data.startswith(b"HEAD "):
                n = 0  # a HEAD response has no body
            if hdrs.get(b"transfer-encoding") == b"chunked":
                if b"\r\n0\r\n\r\n" not in rest and not rest.startswith(b"0\r\n\r\n"):
                    break
                rest = rest.split(b"0\r\n\r\n", 1)[1]
            elif len(rest) < n:
                break
            else:
                rest = rest[n:]
            statuses.append(st)
            buf = rest
        now = time.monotonic()
        if now >= end:
            break
        # After a complete answer, only a short wait for anything more.
        s.settimeout(min(end - now, 0.05) if statuses else end - now)
        try:
            c = s.recv(65536)
        except socket.timeout:
            if statuses:
                break
            continue
        except OSError:
            closed = True
            break
        if not c:
            closed = True
            break
        buf += c
    s.close()
    return statuses, closed, time.monotonic() - t0


class Hostile(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.r = Runner(["--max-body", "4096", "--idle-timeout-ms", str(IDLE_MS)])
        cls.pid = cls.r.host_pid()
        cls.markers = os.path.join(cls.r.tmp, "markers")
        os.mkdir(cls.markers)
        os.chmod(cls.markers, 0o777)
        ev = cls.r.execd({"command": "echo hi"})
        execd_id = ev[0]["text"]
        ev = cls.r.native({"task": "echo hi"})
        native_id = ev[0]["data"]["task_id"]
        st, body = cls.r.json("POST", "/session", {})
        cls.ctx = hostile.Ctx(marker_dir=cls.markers, execd_id=execd_id, native_id=native_id,
                              session_id=body["session_id"], work=cls.r.work)

    @classmethod
    def tearDownClass(cls):
        cls.r.close()

    def test_corpus(self):
        cases = hostile.cases(self.ctx)
        self.assertGreaterEqual(len(cases), 200)
        self.assertEqual(self.r.request("GET", "/ping")[0], 200)
        fds0 = fd_count(self.pid)
        failures, outcomes, slowest = [], {}, (0, "")
        t0 = time.monotonic()
        for name, data, allowed, slow in cases:
            statuses, closed, dt = exchange(self.r.port, data, IDLE_MS / 1000 + 1.5)
            if dt > slowest[0]:
                slowest = (dt, name)
            if statuses:
                first = statuses[0]
                key = str(first)
                if first not in allowed:
                    failures.append("%s: got %s, want one of %s" % (name, statuses,
                                                                    sorted(map(str, allowed))))
                for st in statuses[1:]:
                    if st < 400 or (st >= 500 and st != 505):
                        failures.append("%s: a later response on the connection got %d"
                                        % (name, st))
            elif closed:
                key = "close"
                if hostile.CLOSE not in allowed:
                    failures.append("%s: closed without a response (%.1fs)" % (name, dt))
            else:
                key = "no answer"
                failures.append("%s: no answer within %.1fs" % (name, dt))
            if not slow and dt > 1.0 and key != "close":
                failures.append("%s: answered only after %.1fs" % (name, dt))
            outcomes[key] = outcomes.get(key, 0) + 1
            # A valid request right after still succeeds.
            try:
                st = self.r.request("GET", "/ping", timeout=5)[0]
            except OSError as e:
                st = repr(e)
            if st != 200:
                failures.append("%s: the next /ping got %s" % (name, st))
                if self.r.proc.poll() is not None:
                    failures.append("the runner died: %s" % self.r.logtext()[-2000:])
                    break
        elapsed = time.monotonic() - t0
        # Nothing smuggled ran.
        time.sleep(0.5)
        self.assertEqual(os.listdir(self.markers), [], "smuggled commands ran")
        for p in self.ctx.must_not_exist:
            self.assertFalse(os.path.exists(p), "%s was left behind" % p)
        ev = self.r.execd({"command": "echo still-serving"})
        self.assertEqual(ev[-1]["type"], "execution_complete")
        fds_ok = wait_for(lambda: fd_count(self.pid) <= fds0 + 2, IDLE_MS / 1000 + 3, 0.2)
        fds1 = fd_count(self.pid)
        self.assertEqual(failures, [], "\n".join(failures))
        self.assertTrue(fds_ok, "fds %d, before %d" % (fds1, fds0))
        record("hostile", cases=len(cases), outcomes=outcomes, seconds=round(elapsed, 1),
               slowest_s=round(slowest[0], 2), slowest=slowest[1], fds_before=fds0,
               fds_after=fds1, smuggled_markers=self.ctx.n_markers)


if __name__ == "__main__":
    unittest.main()
