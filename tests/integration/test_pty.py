"""execd PTY sessions over WebSocket (components/execd/PTY.md), driven by a
real client (Python's websockets): a real terminal (tty, stty, Ctrl-C),
resize, replay with since, takeover, pipe mode, exit, hostile frames."""
import asyncio
import json
import os
import time
import unittest

from harness import RunnerTest, slow
from wsutil import RawWS, decode, output_of, recv_until, websockets, ws_url


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def is_json(kind, typ):
    return lambda k, p: k == "json" and p.get("type") == typ


def has_output(text):
    def pred(kind, payload):
        pred.buf += payload if kind in ("stdout", "stderr") else \
            payload[1] if kind == "replay" else b""
        return text.encode() in pred.buf
    pred.buf = b""
    return pred


def stdin(data):
    return b"\x00" + (data.encode() if isinstance(data, str) else data)


class PtySessions(RunnerTest):
    def create(self, body=None):
        st, b = self.r.json("POST", "/pty", body if body is not None else {"cwd": self.r.work})
        self.assertEqual(st, 201, b)
        self.assertRegex(b["session_id"], "^[0-9a-f]{32}$")
        self.addCleanup(self.r.request, "DELETE", "/pty/" + b["session_id"])
        return b["session_id"]

    def connect(self, sid, query=""):
        return websockets.connect(ws_url(self.r, "/pty/%s/ws%s" % (sid, query)),
                                  max_size=None)

    def test_rest_lifecycle(self):
        sid = self.create()
        st, b = self.r.json("GET", "/pty/" + sid)
        self.assertEqual(st, 200)
        self.assertEqual(b, {"session_id": sid, "running": False, "output_offset": 0,
                             "launch_attempted": False, "launch_failed": False})
        self.assertEqual(self.r.request("DELETE", "/pty/" + sid)[0], 200)
        self.assertEqual(self.r.json("GET", "/pty/" + sid)[0], 404)
        st, b = self.r.json("DELETE", "/pty/" + sid)
        self.assertEqual((st, b["code"]), (404, "CONTEXT_NOT_FOUND"))
        ws = RawWS(self.r.port, "/pty/%s/ws" % sid)
        self.assertEqual(ws.status, 404)
        ws.close()
        st, b = self.r.json("POST", "/pty", {"cwd": 5})
        self.assertEqual(st, 400)
        # An empty body is fine (execd); a missing cwd is made, as the task user.
        st, b = self.r.json("POST", "/pty", "")
        self.assertEqual(st, 201)
        self.r.request("DELETE", "/pty/" + b["session_id"])
        newdir = os.path.join(self.r.work, "made", "here")
        sid2 = self.create({"cwd": newdir})
        self.assertTrue(os.path.isdir(newdir))
        self.assertEqual(os.stat(newdir).st_uid, 1000)

        async def cwd():
            async with self.connect(sid2) as ws:
                await recv_until(ws, is_json("json", "connected"))
                await ws.send(stdin("pwd\n"))
                await recv_until(ws, has_output(newdir + "\r\n"))
        run(cwd())

    def test_real_terminal_confined(self):
        sid = self.create()
        confined = self.r.json("GET", "/v1/hardening")[1]["enabled"]

        async def go():
            async with self.connect(sid) as ws:
                frames = await recv_until(ws, is_json("json", "connected"))
                self.assertEqual(frames[-1][1], {"type": "connected", "session_id": sid,
                                                 "mode": "pty"})
                await ws.send(stdin(
                    "test -t 0 && test -t 1 && test -t 2 && echo ISA_$((6*7))TTY\n"
                    "tty; stty size; id -u\n"
                    "grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status\n"
                    "echo SID_$(( $(ps -o sid= -p $$) - $$ ))_$(ps -o tty= -p $$); "
                    "echo LEADER_$((2+3))\n"))
                out = output_of(await recv_until(ws, has_output("LEADER_5\r\n"), 15))
                text = out.decode(errors="replace")
                self.assertIn("ISA_42TTY", text)
                self.assertRegex(text, r"/dev/pts/\d+\r\n24 80\r\n1000\r\n")
                if confined:  # not in the valgrind stage (--insecure-no-confine)
                    self.assertRegex(text, r"Seccomp:\s+2")
                    self.assertRegex(text, r"NoNewPrivs:\s+1")
                self.assertRegex(text, r"CapEff:\s+0000000000000000")
                # The shell leads its own session (sid = its pid), and the
                # terminal is its controlling terminal.
                self.assertRegex(text, r"SID_0_pts/\d+\s*\r\nLEADER_5")
        run(go())

    def test_resize(self):
        sid = self.create()

        async def go():
            async with self.connect(sid) as ws:
                await recv_until(ws, is_json("json", "connected"))
                await ws.send(stdin("stty size\n"))
                await recv_until(ws, has_output("24 80\r\n"))
                await ws.send(json.dumps({"type": "resize", "cols": 132, "rows": 43}))
                await ws.send(stdin("stty size; echo COLUMNS=$(tput cols 2>/dev/null)\n"))
                await recv_until(ws, has_output("43 132\r\n"))
        run(go())

    def test_ctrl_c_interrupts_foreground_job(self):
        sid = self.create()

        async def go():
            async with self.connect(sid) as ws:
                await recv_until(ws, is_json("json", "connected"))
                await ws.send(stdin("sleep 30; echo NOT_$((1+1))_INTERRUPTED\n"))
                await recv_until(ws, has_output("sleep 30"))
                await asyncio.sleep(0.5)
                t0 = time.monotonic()
                await ws.send(stdin(b"\x03"))  # ^C typed on the terminal
                frames = await recv_until(ws, has_output("^C"), 5)
                await ws.send(stdin("echo BACK_$((40+2))\n"))
                frames += await recv_until(ws, has_output("BACK_42\r\n"), 5)
                self.assertLess(time.monotonic() - t0, slow(5))
                self.assertNotIn(b"NOT_2_INTERRUPTED", output_of(frames))
                # The signal frame does the same for the foreground job.
                await ws.send(stdin("sleep 30; echo NOT_$((1+2))_INTERRUPTED\n"))
                await recv_until(ws, has_output("sleep 30"))
                await asyncio.sleep(0.5)
                await ws.send(json.dumps({"type": "signal", "signal": "SIGINT"}))
                await ws.send(stdin("echo AGAIN_$((40+3))\n"))
                frames = await recv_until(ws, has_output("AGAIN_43\r\n"), 5)
                self.assertNotIn(b"NOT_3_INTERRUPTED", output_of(frames))
        run(go())

    def test_replay_with_since(self):
        sid = self.create()

        async def first():
            async with self.connect(sid) as ws:
                await recv_until(ws, is_json("json", "connected"))
                await ws.send(stdin("echo replay_$((1000+234))\n"))
                await recv_until(ws, has_output("replay_1234\r\n"))
                await asyncio.sleep(0.3)  # the prompt after it
        run(first())
        st, status = self.r.json("GET", "/pty/" + sid)
        off = status["output_offset"]
        self.assertTrue(status["running"])
        self.assertGreater(off, 0)

        async def again(query):
            async with self.connect(sid, query) as ws:
                return await recv_until(ws, is_json("json", "connected"))

        # since=0: everything retained, as replay frames before `connected`
        frames = run(again("?since=0"))
        replays = [p for k, p in frames if k == "replay"]
        self.assertTrue(replays)
        self.assertEqual(replays[0][0], 0)
        whole = b"".join(p[1] for p in replays)
        self.assertEqual(len(whole), off)
        self.assertIn(b"replay_1234\r\n", whole)
        for a, b in zip(replays, replays[1:]):
            self.assertEqual(a[0] + len(a[1]), b[0])
        self.assertEqual(frames[-1][0], "json")
        # caught up: no replay frame at all
        frames = run(again("?since=%d" % off))
        self.assertEqual([k for k, _ in frames], ["json"])
        # the last 5 bytes, at their offset
        frames = run(again("?since=%d" % (off - 5)))
        self.assertEqual(frames[0][0], "replay")
        self.assertEqual(frames[0][1], (off - 5, whole[-5:]))

    def test_one_client_409_and_takeover(self):
        sid = self.create()

        async def go():
            async with self.connect(sid) as ws1:
                await recv_until(ws1, is_json("json", "connected"))
                await ws1.send(stdin("TAKEOVER_VAR=alive; echo holder_marker\n"))
                await recv_until(ws1, has_output("holder_marker\r\n"))
                with self.assertRaises(websockets.exceptions.InvalidStatusCode) as cm:
                    async with self.connect(sid):
                        pass
                self.assertEqual(cm.exception.status_code, 409)
                # takeover without a WebSocket handshake evicts nobody
                st, _, body = self.r.request("GET", "/pty/%s/ws?takeover=1" % sid)
                self.assertEqual(st, 409)
                self.assertEqual(json.loads(body)["code"], "ALREADY_CONNECTED")
                async with self.connect(sid, "?takeover=1&since=0") as ws2:
                    with self.assertRaises(websockets.exceptions.ConnectionClosed):
                        while True:
                            await asyncio.wait_for(ws1.recv(), 10)
                    self.assertEqual(ws1.close_code, 4001)
                    self.assertEqual(ws1.close_reason, "TAKEN_OVER")
                    await recv_until(ws2, has_output("holder_marker"))
                    await ws2.send(stdin("echo SAMESHELL_$TAKEOVER_VAR\n"))
                    await recv_until(ws2, has_output("SAMESHELL_alive\r\n"))
            # a takeover of a free session simply connects
            async with self.connect(sid, "?takeover=1") as ws3:
                await recv_until(ws3, is_json("json", "connected"))
        run(go())

    def test_pipe_mode_channels(self):
        sid = self.create()

        async def go():
            async with self.connect(sid, "?pty=0") as ws:
                frames = await recv_until(ws, is_json("json", "connected"))
                self.assertEqual(frames[-1][1]["mode"], "pipe")
                await ws.send(stdin("echo to_out; echo to_err >&2; test -t 0 || echo NO_TTY\n"))
                got = {"stdout": b"", "stderr": b""}

                def pred(kind, payload):
                    if kind in got:
                        got[kind] += payload
                    return b"NO_TTY\n" in got["stdout"] and b"to_err\n" in got["stderr"]
                await recv_until(ws, pred)
                self.assertEqual(got["stdout"], b"to_out\nNO_TTY\n")
                self.assertEqual(got["stderr"], b"to_err\n")
                await ws.send(stdin("exit 4\n"))
                frames = await recv_until(ws, is_json("json", "exit"))
                self.assertEqual(frames[-1][1], {"type": "exit", "exit_code": 4})
                with self.assertRaises(websockets.exceptions.ConnectionClosedOK):
                    await asyncio.wait_for(ws.recv(), 5)
                self.assertEqual(ws.close_code, 1000)
        run(go())

    def test_command_exit_and_restart(self):
        sid = self.create({"cwd": self.r.work, "command": "echo from_command; exit 5"})

        async def go():
            async with self.connect(sid) as ws:
                frames = await recv_until(ws, is_json("json", "exit"))
                self.assertIn(b"from_command", output_of(frames))
                self.assertEqual(frames[-1][1]["exit_code"], 5)
                names = [p.get("type") for k, p in frames if k == "json"]
                self.assertEqual(names, ["connected", "exit"])
        run(go())
        st, b = self.r.json("GET", "/pty/" + sid)
        self.assertEqual((b["running"], b["launch_attempted"], b["launch_failed"]),
                         (False, True, False))
        off = b["output_offset"]

        # A new client starts the shell again; offsets go on.
        async def again():
            async with self.connect(sid, "?since=%d" % off) as ws:
                frames = await recv_until(ws, is_json("json", "exit"))
                self.assertEqual(frames[0], ("json", {"type": "connected", "session_id": sid,
                                                      "mode": "pty"}))
        run(again())
        self.assertEqual(self.r.json("GET", "/pty/" + sid)[1]["output_offset"], 2 * off)

    def test_frames_ping_unknown_and_debug_stdin(self):
        sid = self.create()

        async def go():
            async with self.connect(sid) as ws:
                await recv_until(ws, is_json("json", "connected"))
                await ws.send(json.dumps({"type": "ping"}))
                await recv_until(ws, is_json("json", "pong"))
                await ws.send(json.dumps({"type": "bogus"}))
                frames = await recv_until(ws, is_json("json", "error"))
                self.assertEqual(frames[-1][1]["code"], "INVALID_FRAME")
                await ws.send("not json at all")  # ignored, as execd does
                await ws.send(b"\x07ignored channel")
                await ws.send(json.dumps({"type": "stdin", "data": "echo DEBUG_$((2*3))\n"}))
                await recv_until(ws, has_output("DEBUG_6\r\n"))
        run(go())

    def test_delete_while_connected(self):
        sid = self.create()

        async def go():
            async with self.connect(sid) as ws:
                await recv_until(ws, is_json("json", "connected"))
                await ws.send(stdin("echo up\n"))
                await recv_until(ws, has_output("up\r\n"))
                t0 = time.monotonic()
                self.assertEqual(self.r.request("DELETE", "/pty/" + sid)[0], 200)
                frames = await recv_until(ws, is_json("json", "exit"), 5)
                self.assertEqual(frames[-1][1]["exit_code"], 137)  # SIGKILL
                with self.assertRaises(websockets.exceptions.ConnectionClosed):
                    await asyncio.wait_for(ws.recv(), 5)
                self.assertLess(time.monotonic() - t0, slow(3))
        run(go())

    def test_hostile_frames(self):
        sid = self.create()
        # oversized message: 1009, decided from the frame header. The client
        # claims 2 MiB and sends 64 KiB: had it sent all 2 MiB, the runner's
        # close (unread bytes in its socket) would reset the connection
        # before the client got to read the close frame.
        ws = RawWS(self.r.port, "/pty/%s/ws" % sid)
        self.assertEqual(ws.status, 101, ws.head)
        ws.send_frame(2, b"\x00" + b"x" * (64 << 10), announce=2 << 20)
        self.assertEqual(ws.wait_close(), 1009)
        ws.close()
        # a client frame without a mask: 1002
        ws = RawWS(self.r.port, "/pty/%s/ws?takeover=1" % sid)
        self.assertEqual(ws.status, 101, ws.head)
        ws.send_frame(2, b"\x00echo hi\n", mask=False)
        self.assertEqual(ws.wait_close(), 1002)
        ws.close()
        # a text frame that is not UTF-8: 1007
        ws = RawWS(self.r.port, "/pty/%s/ws?takeover=1" % sid)
        self.assertEqual(ws.status, 101, ws.head)
        ws.send_frame(1, b'{"type":"ping","x":"\xff\xfe"}')
        self.assertEqual(ws.wait_close(), 1007)
        ws.close()
        # reserved bits without an extension: 1002
        ws = RawWS(self.r.port, "/pty/%s/ws?takeover=1" % sid)
        ws.send_frame(2, b"\x00x", rsv=4)
        self.assertEqual(ws.wait_close(), 1002)
        ws.close()
        # fragmented message with a ping in between: reassembled by microhttpd_ws
        ws = RawWS(self.r.port, "/pty/%s/ws?takeover=1" % sid)
        ws.send_frame(2, b"\x00echo FRAG", fin=False)
        ws.send_frame(9, b"p")
        ws.send_frame(0, b"MENT_OK\n", fin=True)
        seen, pong = b"", False
        ws.sock.settimeout(10)
        while b"FRAGMENT_OK\r\n" not in seen.replace(b"\x01", b""):
            op, payload = ws.recv_frame()
            pong |= op == 10 and payload == b"p"
            if op == 2:
                seen += payload[1:]
        self.assertTrue(pong)
        ws.close()
        # bad handshakes
        for hdr, want in (({"Sec-WebSocket-Key": None}, 400),
                          ({"Sec-WebSocket-Key": "short"}, 400),
                          ({"Sec-WebSocket-Version": "8"}, 426),
                          ({"Upgrade": None}, 400)):
            ws = RawWS(self.r.port, "/pty/%s/ws?takeover=1" % sid, headers=hdr)
            self.assertEqual(ws.status, want, (hdr, ws.head))
            if want == 426:
                self.assertIn("Sec-WebSocket-Version: 13", ws.head)
            ws.close()
        self.assertEqual(self.r.request("GET", "/ping")[0], 200)


if __name__ == "__main__":
    unittest.main()
