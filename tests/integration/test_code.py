"""Code contexts (docs/design/audit.md): OpenSandbox execd's /code API from its
spec (specs/execd-api.yaml) with raw HTTP, and E2B's code-interpreter wire
format on --code-interpreter-listen with raw HTTP (tests/code/ drives the
real @e2b/code-interpreter client)."""
import base64
import http.client
import json
import os
import shutil
import tempfile
import threading
import time
import unittest

from harness import TIME_SCALE, Runner, RunnerTest, free_port, parse_execd, slow


def python_ok():
    """The driver runs on Debian's python3 with python3-ipython (the runner's
    own test: GET /code/languages)."""
    return os.path.isdir("/usr/lib/python3/dist-packages/IPython")


def stream(port, path, body, headers=None, timeout=60, on_event=None, sep=b"\n\n"):
    """POST body; the events (JSON objects) as they come, each with its
    arrival time (monotonic) in "_t"."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request("POST", path, body=json.dumps(body), headers=h)
    r = c.getresponse()
    if r.status != 200:
        data = r.read()
        c.close()
        return r.status, json.loads(data) if data else None
    events, buf = [], b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while sep in buf:
            frame, buf = buf.split(sep, 1)
            if frame.strip():
                ev = json.loads(frame)
                ev["_t"] = time.monotonic()
                events.append(ev)
                if on_event:
                    on_event(ev)
    c.close()
    return 200, events


@unittest.skipUnless(python_ok(), "python3-ipython is not installed")
class CodeApi(RunnerTest):
    def ctx(self, language="python", cwd=None):
        body = {"language": language}
        if cwd:
            body["cwd"] = cwd
        st, c = self.r.json("POST", "/code/context", body)
        self.assertEqual(st, 200, c)
        self.assertEqual(c["language"], language)
        return c["id"]

    def run_code(self, cid, code, **kw):
        st, ev = stream(self.r.port, "/code", {"context": {"id": cid}, "code": code}, **kw)
        self.assertEqual(st, 200, ev)
        self.assertEqual(ev[0]["type"], "init")
        self.assertEqual(ev[0]["text"], cid)
        self.assertEqual(ev[-1]["type"], "execution_complete", ev)
        return ev

    def of(self, ev, t):
        return [e for e in ev if e["type"] == t]

    def test_state_across_cells_and_last_expression(self):
        cid = self.ctx()
        ev = self.run_code(cid, "x = 41\nprint('hello')")
        self.assertEqual([e["text"] for e in self.of(ev, "stdout")], ["hello\n"])
        self.assertEqual(self.of(ev, "result"), [])
        ev = self.run_code(cid, "x + 1")
        self.assertEqual(self.of(ev, "result")[0]["results"]["text/plain"], "42")
        n = self.of(ev, "execution_count")[0]["execution_count"]
        self.assertEqual(n, 2)
        self.assertIsInstance(ev[-1]["execution_time"], int)

    def test_png_chart(self):
        cid = self.ctx()
        ev = self.run_code(cid, "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()")
        res = [e["results"] for e in self.of(ev, "result") if "image/png" in e["results"]]
        self.assertEqual(len(res), 1, ev)
        self.assertTrue(base64.b64decode(res[0]["image/png"]).startswith(b"\x89PNG\r\n\x1a\n"))
        self.assertEqual(self.of(ev, "error"), [])

    def test_dataframe_as_html(self):
        cid = self.ctx()
        ev = self.run_code(cid, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})")
        r = self.of(ev, "result")[0]["results"]
        self.assertIn("<table", r["text/html"])
        self.assertIn("a  b", r["text/plain"])

    def test_live_streaming(self):
        """A cell printing every 100 ms is seen every ~100 ms, not at its end."""
        cid = self.ctx()
        self.run_code(cid, "import time")
        t0 = time.monotonic()
        ev = self.run_code(cid, "for i in range(10):\n    print(i)\n    time.sleep(0.1)")
        outs = [e for e in self.of(ev, "stdout")]
        self.assertEqual("".join(e["text"] for e in outs), "".join("%d\n" % i for i in range(10)))
        first = outs[0]["_t"] - t0
        gaps = [b["_t"] - a["_t"] for a, b in zip(outs, outs[1:])]
        print("first line after %.0f ms, gaps %s ms" % (first * 1000,
                                                       [round(g * 1000) for g in gaps]))
        self.assertLess(first, 0.5)
        self.assertTrue(0.05 < sorted(gaps)[len(gaps) // 2] < 0.3, gaps)

    def test_error_and_the_context_lives_on(self):
        cid = self.ctx()
        self.run_code(cid, "keep = 'kept'")
        ev = self.run_code(cid, "1 / 0")
        err = self.of(ev, "error")
        self.assertEqual(len(err), 1, ev)
        self.assertEqual(err[0]["error"]["ename"], "ZeroDivisionError")
        self.assertEqual(err[0]["error"]["evalue"], "division by zero")
        self.assertTrue(any("1 / 0" in line for line in err[0]["error"]["traceback"]))
        ev = self.run_code(cid, "keep")
        self.assertEqual(self.of(ev, "result")[0]["results"]["text/plain"], "'kept'")

    def test_interrupt_keeps_state(self):
        cid = self.ctx()
        self.run_code(cid, "y = 7")
        out = {}
        th = threading.Thread(target=lambda: out.update(
            ev=self.run_code(cid, "print('go', flush=True)\nwhile True:\n    pass")))
        th.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            st, c = self.r.json("GET", "/code/contexts/" + cid)
            if c.get("running"):
                break
            time.sleep(0.02)
        time.sleep(0.3)
        st, _, _ = self.r.request("DELETE", "/code?id=" + cid)
        self.assertEqual(st, 200)
        th.join(15)
        self.assertFalse(th.is_alive())
        err = self.of(out["ev"], "error")
        self.assertEqual(err[0]["error"]["ename"], "KeyboardInterrupt", out["ev"])
        ev = self.run_code(cid, "y")
        self.assertEqual(self.of(ev, "result")[0]["results"]["text/plain"], "7")
        # Nothing runs: interrupting is 409.
        st, body = self.r.json("DELETE", "/code?id=" + cid)
        self.assertEqual(st, 409, body)

    def leave(self, port, path, body, token=None):
        """Start an execution and go away (as E2B's SDK on timeoutMs) once it has begun."""
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        h = {"Content-Type": "application/json"}
        if token:
            h["X-Access-Token"] = token
        c.request("POST", path, body=json.dumps(body), headers=h)
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        r.read1(100)
        c.sock.shutdown(2)
        c.close()

    def test_a_client_that_leaves(self):
        """Its execution is interrupted (nobody reads it) and the next one on the context is
        taken at once, run after it, with its own events only (docs/design/code.md#an-abandoned-execution-does-not-block-its-context). Before:
        409 CONTEXT_BUSY until the abandoned one ended."""
        cid = self.ctx()
        self.run_code(cid, "x = 1")
        self.leave(self.r.port, "/code", {"context": {"id": cid},
                                          "code": "x = 2\nimport time\ntime.sleep(30)\nx = 3"})
        t0 = time.monotonic()
        st, ev = stream(self.r.port, "/code", {"context": {"id": cid}, "code": "x"})
        self.assertEqual(st, 200, ev)
        self.assertLess(time.monotonic() - t0, slow(10))
        # The state is the interrupted cell's: it ran to its sleep, not past it.
        self.assertEqual(self.of(ev, "error"), [], ev)
        self.assertEqual(self.of(ev, "result")[0]["results"]["text/plain"], "2", ev)
        self.assertEqual(ev[-1]["type"], "execution_complete", ev)
        ev = self.run_code(cid, "'new'")
        self.assertEqual(self.of(ev, "result")[0]["results"]["text/plain"], "'new'")

    def test_the_next_execution_waits_for_a_cell_that_ignores_the_interrupt(self):
        """A cell that catches KeyboardInterrupt and goes on: the next execution is taken,
        waits behind it as a kernel queues, and sees what it did; none of the abandoned
        cell's output reaches it."""
        cid = self.ctx()
        self.leave(self.r.port, "/code", {"context": {"id": cid}, "code": (
            "import time\ntry:\n    time.sleep(30)\nexcept KeyboardInterrupt:\n"
            "    print('abandoned output')\n    time.sleep(1.5)\n    y = 'late'\n"
            "print('more abandoned output')")})
        t0 = time.monotonic()
        st, ev = stream(self.r.port, "/code", {"context": {"id": cid}, "code": "y"})
        took = time.monotonic() - t0
        self.assertEqual(st, 200, ev)
        self.assertGreater(took, 1.0)  # it waited for the abandoned cell's end
        self.assertEqual(self.of(ev, "result")[0]["results"]["text/plain"], "'late'", ev)
        self.assertEqual(self.of(ev, "stdout"), [], ev)
        self.assertEqual(self.of(ev, "error"), [], ev)
        # One waits at a time, per context, up to a bound; the waiting one is listed.
        st, c = self.r.json("GET", "/code/contexts/" + cid)
        self.assertFalse(c["running"], c)

    def test_an_abandoned_cell_can_be_interrupted(self):
        """A cell that swallowed the first interrupt holds the context: DELETE /code?id=
        interrupts it again (before: 409, nothing running), and the waiting one runs."""
        cid = self.ctx()
        self.leave(self.r.port, "/code", {"context": {"id": cid}, "code": (
            "import time\ntry:\n    time.sleep(30)\nexcept KeyboardInterrupt:\n"
            "    time.sleep(30)")})
        out = {}
        th = threading.Thread(target=lambda: out.update(ev=stream(
            self.r.port, "/code", {"context": {"id": cid}, "code": "'after'"})))
        th.start()
        time.sleep(0.5)
        st, body = self.r.json("DELETE", "/code?id=" + cid)
        self.assertEqual(st, 200, body)
        th.join(slow(10))
        self.assertFalse(th.is_alive())
        st, ev = out["ev"]
        self.assertEqual(self.of(ev, "result")[0]["results"]["text/plain"], "'after'", ev)

    def test_an_execution_while_another_streams_waits_its_turn(self):
        """Two clients at once on one context: the second waits (a kernel's queue), then
        runs; before, it was refused 409."""
        cid = self.ctx()
        out = {}
        th = threading.Thread(target=lambda: out.update(
            first=self.run_code(cid, "import time\ntime.sleep(1)\nz = 5")))
        th.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not self.r.json(
                "GET", "/code/contexts/" + cid)[1].get("running"):
            time.sleep(0.02)
        ev = self.run_code(cid, "z * 2")
        th.join(15)
        self.assertEqual(self.of(ev, "result")[0]["results"]["text/plain"], "10", ev)
        self.assertEqual(self.of(out["first"], "error"), [], out["first"])

    def test_an_interpreter_that_dies(self):
        """os._exit in a cell: that execution ends with an error (never a
        hang); the next one gets a fresh interpreter."""
        cid = self.ctx()
        self.run_code(cid, "z = 1")
        t0 = time.monotonic()
        ev = self.run_code(cid, "import os\nos._exit(3)", timeout=20)
        self.assertLess(time.monotonic() - t0, slow(10))
        err = self.of(ev, "error")
        self.assertEqual(err[0]["error"]["ename"], "InterpreterDied", ev)
        self.assertIn("exited with status 3", err[0]["error"]["evalue"])
        self.assertIn("fresh interpreter", err[0]["error"]["evalue"])
        ev = self.run_code(cid, "z")
        self.assertEqual(self.of(ev, "error")[0]["error"]["ename"], "NameError")
        ev = self.run_code(cid, "1 + 1")
        self.assertEqual(self.of(ev, "result")[0]["results"]["text/plain"], "2")

    def test_an_interpreter_killed_between_executions_is_said(self):
        """Killed while no execution streams (a task, the OOM killer): the next execution is
        told on stderr that the state is gone, instead of a bare NameError (docs/design.md
        design/code.md#an-abandoned-execution-does-not-block-its-context)."""
        cid = self.ctx()
        self.run_code(cid, "z = 1")
        st, c = self.r.json("GET", "/code/contexts/" + cid)
        self.assertEqual(st, 200, c)
        st, _, _ = self.r.request("DELETE", "/v1/tasks/" + c["task_id"])
        self.assertIn(st, (200, 202, 204))
        deadline = time.monotonic() + slow(10)
        while time.monotonic() < deadline and self.r.json(
                "GET", "/code/contexts/" + cid)[1].get("task_id"):
            time.sleep(0.05)
        ev = self.run_code(cid, "z")
        err = "".join(e.get("text", "") for e in self.of(ev, "stderr"))
        self.assertIn("while no execution was streaming", err, ev)
        self.assertIn("its state is lost", err, ev)
        self.assertEqual(self.of(ev, "error")[0]["error"]["ename"], "NameError", ev)

    def test_killed_by_signal(self):
        cid = self.ctx()
        ev = self.run_code(cid, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
                           timeout=20)
        self.assertIn("killed by SIGKILL", self.of(ev, "error")[0]["error"]["evalue"])

    def test_unknown_language_is_400(self):
        for lang in ("java", "typescript", "go", "sql", "cobol"):
            st, body = self.r.json("POST", "/code/context", {"language": lang})
            self.assertEqual(st, 400, body)
            self.assertEqual(body["code"], "UNSUPPORTED_LANGUAGE")
            self.assertIn('"python"', body["message"])
        st, body = stream(self.r.port, "/code", {"context": {"language": "java"}, "code": "1"})
        self.assertEqual(st, 400, body)
        st, body = self.r.json("GET", "/code/languages")
        self.assertIn("python", body["languages"])
        self.assertEqual("javascript" in body["languages"], os.access("/usr/bin/node", os.X_OK))

    def test_contexts_listed_and_deleted(self):
        a, b = self.ctx(), self.ctx(cwd="/tmp")
        st, lst = self.r.json("GET", "/code/contexts?language=python")
        ids = {c["id"] for c in lst}
        self.assertLessEqual({a, b}, ids)
        st, c = self.r.json("GET", "/code/contexts/" + b)
        self.assertEqual((st, c["cwd"]), (200, "/tmp"))
        ev = self.run_code(b, "import os\nos.getcwd()")
        self.assertEqual(self.of(ev, "result")[0]["results"]["text/plain"], "'/tmp'")
        # Each context is a task: in the task list and the execd inventory.
        st, tasks = self.r.json("GET", "/v1/tasks")
        code_tasks = {t["id"] for t in tasks["tasks"] if t["capability"] == "code" and
                      t["state"] == "running"}
        self.assertIn(c["task_id"], code_tasks)
        st, inv = self.r.json("GET", "/command?running=true")
        self.assertIn(c["task_id"], json.dumps(inv))
        st, _, _ = self.r.request("DELETE", "/code/contexts/" + a)
        self.assertEqual(st, 200)
        st, body = self.r.json("GET", "/code/contexts/" + a)
        self.assertEqual((st, body["code"]), (404, "CONTEXT_NOT_FOUND"))
        st, body = self.r.json("DELETE", "/code/contexts/" + a)
        self.assertEqual(st, 404)
        st, _, _ = self.r.request("DELETE", "/code/contexts?language=python")
        self.assertEqual(st, 200)
        st, lst = self.r.json("GET", "/code/contexts?language=python")
        self.assertEqual(lst, [])
        # Its interpreter's tree is gone.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            st, t = self.r.json("GET", "/v1/tasks/" + c["task_id"])
            if not t["running"]:
                break
            time.sleep(0.05)
        self.assertFalse(t["running"])

    def test_default_context_and_shell(self):
        st, ev = stream(self.r.port, "/code", {"context": {"language": "python"}, "code": "d = 5"})
        st, ev2 = stream(self.r.port, "/code", {"context": {"language": "python"}, "code": "d * 2"})
        self.assertEqual(ev[0]["text"], ev2[0]["text"])
        self.assertEqual(self.of(ev2, "result")[0]["results"]["text/plain"], "10")
        # Neither id nor language: a shell command, as execd runs it.
        st, ev = stream(self.r.port, "/code", {"code": "echo from-shell"})
        self.assertEqual(st, 200)
        self.assertIn("from-shell", "".join(e.get("text", "") for e in ev
                                            if e["type"] == "stdout"))

    def test_bad_requests(self):
        for body in ({}, {"code": 5}, {"code": "1", "context": "x"},
                     {"code": "1", "context": {"id": 7}}):
            st, b = stream(self.r.port, "/code", body)
            self.assertEqual(st, 400, (body, b))
            self.assertEqual(b["code"], "INVALID_REQUEST_BODY")
        st, b = stream(self.r.port, "/code", {"code": "1", "context": {"id": "f" * 32}})
        self.assertEqual((st, b["code"]), (404, "CONTEXT_NOT_FOUND"))
        st, b = self.r.json("POST", "/code/context", {"language": "python", "cwd": "rel"})
        self.assertEqual(st, 400)
        st, b = self.r.json("DELETE", "/code/contexts")
        self.assertEqual((st, b["code"]), (400, "MISSING_QUERY"))

    def test_the_queue_is_bounded(self):
        """Four executions may wait behind a running one; a fifth is 409 CONTEXT_BUSY; those
        that waited run in order."""
        cid = self.ctx()
        self.run_code(cid, "order = []")
        res = {}
        first = threading.Thread(target=lambda: res.update(
            first=self.run_code(cid, "import time\ntime.sleep(2)")))
        first.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not self.r.json(
                "GET", "/code/contexts/" + cid)[1].get("running"):
            time.sleep(0.02)
        waiting = []
        for i in range(4):
            th = threading.Thread(target=lambda i=i: res.update(
                {i: self.run_code(cid, "order.append(%d)" % i)}))
            th.start()
            waiting.append(th)
            time.sleep(0.1)  # in this order
        st, b = stream(self.r.port, "/code", {"context": {"id": cid}, "code": "1"})
        self.assertEqual((st, b["code"]), (409, "CONTEXT_BUSY"), b)
        self.assertIn("4 more wait", b["message"])
        for th in [first] + waiting:
            th.join(30)
        ev = self.run_code(cid, "order")
        self.assertEqual(self.of(ev, "result")[0]["results"]["text/plain"], "[0, 1, 2, 3]")


@unittest.skipUnless(os.access("/usr/bin/node", os.X_OK), "no /usr/bin/node")
class CodeJavascript(RunnerTest):
    def run_code(self, cid, code):
        st, ev = stream(self.r.port, "/code", {"context": {"id": cid}, "code": code})
        self.assertEqual(st, 200, ev)
        self.assertEqual(ev[-1]["type"], "execution_complete", ev)
        return ev

    def result(self, ev):
        r = [e for e in ev if e["type"] == "result"]
        return r[0]["results"]["text/plain"] if r else None

    def test_javascript_context(self):
        st, c = self.r.json("POST", "/code/context", {"language": "javascript"})
        self.assertEqual(st, 200, c)
        cid = c["id"]
        ev = self.run_code(cid, "let x = 41\nfunction inc(a) { return a + 1 }\nconsole.log('hi')")
        self.assertEqual([e["text"] for e in ev if e["type"] == "stdout"], ["hi\n"])
        self.assertEqual(self.result(self.run_code(cid, "inc(x)")), "42")
        self.assertEqual(self.result(self.run_code(
            cid, "const v = await new Promise(r => setTimeout(() => r(7), 50))\nv * 2")), "14")
        ev = self.run_code(cid, "throw new TypeError('bad')")
        err = [e for e in ev if e["type"] == "error"][0]["error"]
        self.assertEqual((err["ename"], err["evalue"]), ("TypeError", "bad"))
        # An endless loop is interrupted; the context keeps its state.
        out = {}
        th = threading.Thread(target=lambda: out.update(ev=self.run_code(cid, "while (true) {}")))
        th.start()
        time.sleep(0.8)
        st, _, _ = self.r.request("DELETE", "/code?id=" + cid)
        self.assertEqual(st, 200)
        th.join(10)
        self.assertFalse(th.is_alive())
        err = [e for e in out["ev"] if e["type"] == "error"][0]["error"]
        self.assertEqual(err["ename"], "KeyboardInterrupt")
        self.assertEqual(self.result(self.run_code(cid, "x")), "41")


class CodeBash(RunnerTest):
    def run_code(self, cid, code, envs=None):
        body = {"context": {"id": cid}, "code": code}
        if envs:
            body["envs"] = envs
        st, ev = stream(self.r.port, "/code", body)
        self.assertEqual(st, 200, ev)
        self.assertEqual(ev[-1]["type"], "execution_complete", ev)
        return ev

    def out(self, ev):
        return "".join(e["text"] for e in ev if e["type"] == "stdout")

    def test_bash_context(self):
        st, c = self.r.json("POST", "/code/context", {"language": "bash"})
        self.assertEqual(st, 200, c)
        cid = c["id"]
        self.assertEqual(self.out(self.run_code(cid, "x=41; f() { echo f$1; }; cd /tmp")), "")
        self.assertEqual(self.out(self.run_code(cid, "echo $((x + 1)); f 2; pwd")), "42\nf2\n/tmp\n")
        # Output that looks like a message is output (the marker has a nonce).
        ev = self.run_code(cid, "printf '\\x1e{\"t\":\"done\"}\\n'; printf partial")
        self.assertEqual(self.out(ev), '\x1e{"t":"done"}\npartial')
        ev = self.run_code(cid, "echo oops >&2; false")
        self.assertEqual([e["text"] for e in ev if e["type"] == "stderr"], ["oops\n"])
        self.assertEqual([e for e in ev if e["type"] == "error"][0]["error"]["evalue"], "1")
        self.assertEqual(self.out(self.run_code(cid, "echo $GREETING", {"GREETING": "a b"})),
                         "a b\n")
        self.assertEqual(self.out(self.run_code(cid, "echo ${GREETING-unset}")), "unset\n")
        for spin in ("sleep 30", "while :; do :; done"):
            out = {}
            th = threading.Thread(target=lambda: out.update(ev=self.run_code(cid, spin)))
            th.start()
            time.sleep(0.8)
            st, _, _ = self.r.request("DELETE", "/code?id=" + cid)
            self.assertEqual(st, 200)
            th.join(10)
            self.assertFalse(th.is_alive(), spin)
            err = [e for e in out["ev"] if e["type"] == "error"][0]["error"]
            self.assertEqual(err["ename"], "KeyboardInterrupt", spin)
        self.assertEqual(self.out(self.run_code(cid, "echo $x")), "41\n")


@unittest.skipUnless(python_ok(), "python3-ipython is not installed")
class CodeBounds(RunnerTest):
    # The idle limit outlasts the first execution (its interpreter's start-up, then its
    # 1.5 s limit and the interrupt), which the second context waits out unused; it
    # scales with the build.
    IDLE_MS = int(5000 * TIME_SCALE)
    runner_args = ("--code-max-contexts", "2", "--code-idle-timeout-ms", str(IDLE_MS),
                   "--code-exec-timeout-ms", "1500", "--code-output-max", "100000")

    def test_bounds(self):
        ids = []
        for _ in range(2):
            st, c = self.r.json("POST", "/code/context", {"language": "python"})
            self.assertEqual(st, 200)
            ids.append(c["id"])
        st, b = self.r.json("POST", "/code/context", {"language": "python"})
        self.assertEqual((st, b["code"]), (429, "TOO_MANY_CONTEXTS"))
        # An execution over --code-exec-timeout-ms is interrupted.
        t0 = time.monotonic()
        st, ev = stream(self.r.port, "/code", {"context": {"id": ids[0]},
                                                "code": "import time\ntime.sleep(30)"})
        self.assertLess(time.monotonic() - t0, slow(8))
        self.assertIn("--code-exec-timeout-ms", json.dumps(ev))
        self.assertEqual([e for e in ev if e["type"] == "error"][0]["error"]["ename"],
                         "KeyboardInterrupt")
        # Output over --code-output-max: dropped, and the execution interrupted.
        st, ev = stream(self.r.port, "/code", {"context": {"id": ids[1]},
                                                "code": "while True:\n    print('x' * 1000)"})
        printed = sum(len(e["text"]) for e in ev if e["type"] == "stdout")
        self.assertLess(printed, 200000)
        self.assertIn("--code-output-max", json.dumps(ev))
        self.assertEqual(ev[-1]["type"], "execution_complete")
        # Unused for --code-idle-timeout-ms: the contexts end.
        deadline = time.monotonic() + self.IDLE_MS / 1000 + 3
        while True:
            st, lst = self.r.json("GET", "/code/contexts?language=python")
            if lst == [] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.assertEqual(lst, [])


@unittest.skipUnless(python_ok(), "python3-ipython is not installed")
class CodeReset(unittest.TestCase):
    def test_reset_ends_every_context(self):
        # A root of its own: /tmp is shared with other runs, which a
        # snapshot of it would race.
        roots = tempfile.mkdtemp(prefix="forceai-code-reset-")
        os.chmod(roots, 0o777)
        r = Runner(("--allow-reset", "--landlock-roots", roots))
        try:
            st, c = r.json("POST", "/code/context", {"language": "python", "cwd": roots})
            self.assertEqual(st, 200, c)
            out = {}
            th = threading.Thread(target=lambda: out.update(res=stream(
                r.port, "/code", {"context": {"id": c["id"]}, "code": "while True:\n    pass"})))
            th.start()
            time.sleep(1.0)
            st, body = r.json("POST", "/v1/reset")
            self.assertEqual(st, 200, body)
            th.join(15)
            self.assertFalse(th.is_alive())
            st, lst = r.json("GET", "/code/contexts?language=python")
            self.assertEqual(lst, [])
            st, t = r.json("GET", "/v1/tasks?state=running")
            self.assertEqual(t["tasks"], [])
        finally:
            rc = r.stop()
            r.close()
            shutil.rmtree(roots, ignore_errors=True)
        self.assertEqual(rc, 0)


@unittest.skipUnless(python_ok(), "python3-ipython is not installed")
class E2bWire(unittest.TestCase):
    """E2B's wire format with raw HTTP (the SDK itself: tests/code/)."""

    @classmethod
    def setUpClass(cls):
        cls.port = free_port()
        cls.r = Runner(("--code-interpreter-listen", "127.0.0.1:%d" % cls.port), token="tok-e2b")

    @classmethod
    def tearDownClass(cls):
        rc = cls.r.stop()
        log = cls.r.logtext()
        cls.r.close()
        if rc != 0:
            raise AssertionError("runner exited %s after SIGTERM; log tail:\n%s" % (rc, log[-4000:]))

    def req(self, method, path, body=None, token="tok-e2b", header="X-Access-Token"):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        h = {"Content-Type": "application/json"}
        if token:
            h[header] = token
        c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def execute(self, body):
        return stream(self.port, "/execute", body, headers={"X-Access-Token": "tok-e2b"},
                      sep=b"\n")

    def test_execute_ndjson(self):
        st, ev = self.execute({"code": "import os\nprint(os.environ['GREETING'])\n6 * 7",
                               "env_vars": {"GREETING": "hi"}})
        self.assertEqual(st, 200, ev)
        types = [e["type"] for e in ev]
        self.assertEqual(types, ["stdout", "result", "number_of_executions", "end_of_execution"])
        self.assertEqual(ev[0]["text"], "hi\n")
        self.assertEqual((ev[1]["text"], ev[1]["is_main_result"]), ("42", True))
        # The variable was this execution's only.
        st, ev = self.execute({"code": "import os\nrepr(os.environ.get('GREETING'))"})
        self.assertEqual(ev[0]["text"], "'None'")

    def test_error_shape(self):
        st, ev = self.execute({"code": "raise ValueError('bad')"})
        err = [e for e in ev if e["type"] == "error"][0]
        self.assertEqual((err["name"], err["value"]), ("ValueError", "bad"))
        self.assertIsInstance(err["traceback"], str)

    def test_contexts_and_restart(self):
        st, data = self.req("POST", "/contexts", {"language": "python", "cwd": "/tmp"})
        self.assertEqual(st, 200, data)
        c = json.loads(data)
        self.assertEqual((c["language"], c["cwd"]), ("python", "/tmp"))
        st, ev = self.execute({"code": "v = 3", "context_id": c["id"]})
        st, data = self.req("GET", "/contexts")
        self.assertIn(c["id"], [x["id"] for x in json.loads(data)])
        st, _ = self.req("POST", "/contexts/%s/restart" % c["id"])
        self.assertEqual(st, 200)
        st, ev = self.execute({"code": "v", "context_id": c["id"]})
        self.assertEqual([e for e in ev if e["type"] == "error"][0]["name"], "NameError")
        st, _ = self.req("DELETE", "/contexts/" + c["id"])
        self.assertEqual(st, 200)
        st, _ = self.req("DELETE", "/contexts/" + c["id"])
        self.assertEqual(st, 404)

    def test_execute_after_a_client_that_left(self):
        """E2B's /execute as its SDK does after runCode's timeoutMs: the next execution on the
        context is taken (E2B's own server fixed the same lock, its issue #213)."""
        st, data = self.req("POST", "/contexts", {"language": "python"})
        cid = json.loads(data)["id"]
        self.execute({"code": "w = 'kept'", "context_id": cid})
        CodeApi.leave(self, self.port, "/execute",
                      {"code": "import time\ntime.sleep(30)", "context_id": cid},
                      token="tok-e2b")
        st, ev = self.execute({"code": "w", "context_id": cid})
        self.assertEqual(st, 200, ev)
        ev = [e for e in ev if e["type"] != "ping"]  # while it waited
        self.assertEqual([e["type"] for e in ev],
                         ["result", "number_of_executions", "end_of_execution"], ev)
        self.assertEqual(ev[0]["text"], "'kept'")

    def test_token(self):
        st, _ = self.req("POST", "/execute", {"code": "1"}, token=None)
        self.assertEqual(st, 401)
        st, _ = self.req("POST", "/execute", {"code": "1"}, token="wrong")
        self.assertEqual(st, 401)
        st, _ = self.req("GET", "/health", token=None)
        self.assertEqual(st, 200)
        # The E2B port serves only E2B's routes; the runner's port not E2B's.
        st, _ = self.req("GET", "/v1/tasks", header="X-EXECD-ACCESS-TOKEN")
        self.assertEqual(st, 404)
        st, _, _ = self.r.request("POST", "/execute", {"code": "1"})
        self.assertEqual(st, 404)


if __name__ == "__main__":
    unittest.main()
