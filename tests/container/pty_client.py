"""A PTY session through the image, driven by a real WebSocket client (Debian's
python3-websockets, run with /usr/bin/python3 by test_container.py):

  pty_client.py PORT TOKEN [CWD]  (CWD default /workspace)

Prints one JSON object: {step: [ok, detail]} for echo, resize, ctrl_c,
takeover, exit. Each step waits for the terminal's own answer (the shell's
output), never for a fixed time."""
import asyncio
import json
import sys
import urllib.request

sys.path.append("/usr/lib/python3/dist-packages")
import websockets  # noqa: E402

PORT, TOKEN = int(sys.argv[1]), sys.argv[2]
CWD = sys.argv[3] if len(sys.argv) > 3 else "/workspace"
HDR = {"X-EXECD-ACCESS-TOKEN": TOKEN}
results = {}


def http(method, path, body=None):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (PORT, path), method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers=dict(HDR, **{"Content-Type": "application/json"}))
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, json.loads(r.read() or b"null")


def connect(sid, query=""):
    url = "ws://127.0.0.1:%d/pty/%s/ws%s" % (PORT, sid, query)
    # Debian 12 ships websockets 10.4 (extra_headers); 14+ renamed it.
    key = "extra_headers" if int(websockets.__version__.split(".")[0]) < 14 else "additional_headers"
    return websockets.connect(url, max_size=None, **{key: HDR})


async def until(ws, want, timeout=15):
    """Read frames until the terminal output contains want (bytes) or a JSON
    frame of type want (str). Returns (output, last json frame)."""
    out = b""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        try:
            frame = await asyncio.wait_for(ws.recv(), max(0.1, end - loop.time()))
        except asyncio.TimeoutError:
            raise AssertionError("no %r within %ss; output so far: %r" % (want, timeout, out[-300:]))
        if isinstance(frame, str):
            j = json.loads(frame)
            if isinstance(want, str) and j.get("type") == want:
                return out, j
            continue
        if frame[:1] in (b"\x01", b"\x02"):
            out += frame[1:]
        elif frame[:1] == b"\x03":
            out += frame[9:]
        if isinstance(want, bytes) and want in out:
            return out, None


def step(name, ok, detail=""):
    results[name] = [bool(ok), detail[-300:] if isinstance(detail, str) else detail]


async def main():
    st, body = http("POST", "/pty", {"cwd": CWD})
    sid = body["session_id"]
    async with connect(sid) as ws:
        await until(ws, "connected")
        await ws.send(b"\x00echo ws-$((6*7))\n")
        out, _ = await until(ws, b"ws-42\r\n")
        step("echo", True, out.decode(errors="replace"))

        # A read-only viewer (execd 1.2 ?mode=viewer): replay, live output,
        # its input refused, the writer untouched.
        async with connect(sid, "?mode=viewer&since=0") as v:
            out, _ = await until(v, b"ws-42")
            await v.send(b"\x00echo from-viewer\n")
            _, err = await until(v, "error")
            await ws.send(b"\x00echo both-$((3*3))\n")
            seen, _ = await until(v, b"both-9\r\n")
            wout, _ = await until(ws, b"both-9\r\n")
            step("viewer", err.get("code") == "READ_ONLY" and b"from-viewer" not in wout,
                 json.dumps(err))

        await ws.send(json.dumps({"type": "resize", "cols": 123, "rows": 45}))
        await ws.send(b"\x00stty size\n")
        out, _ = await until(ws, b"45 123")
        step("resize", True, out.decode(errors="replace"))

        await ws.send(b"\x00sleep 30; echo not-interrupted\n")
        await asyncio.sleep(0.3)
        await ws.send(b"\x00\x03")
        await ws.send(b"\x00echo after-$((1+1))\n")
        out, _ = await until(ws, b"after-2\r\n", timeout=10)
        # The command's echo holds the words too: only a line of its own is its output.
        step("ctrl_c", b"^C" in out and b"\nnot-interrupted" not in out,
             out.decode(errors="replace"))

        async with connect(sid, "?takeover=1") as ws2:
            try:
                while True:
                    await asyncio.wait_for(ws.recv(), 10)
            except websockets.exceptions.ConnectionClosed as e:
                code = e.rcvd.code if getattr(e, "rcvd", None) else getattr(e, "code", None)
            await until(ws2, "connected")
            await ws2.send(b"\x00echo second-$((2*3))\n")
            out, _ = await until(ws2, b"second-6\r\n")
            step("takeover", code == 4001, "first client closed with %s" % code)

            await ws2.send(b"\x00exit 3\n")
            _, ex = await until(ws2, "exit")
            step("exit", ex == {"type": "exit", "exit_code": 3}, json.dumps(ex))
    http("DELETE", "/pty/" + sid)


try:
    asyncio.run(asyncio.wait_for(main(), 90))
except Exception as e:  # a step that never answered: reported, not raised
    results.setdefault("error", [False, "%s: %s" % (type(e).__name__, e)])
print(json.dumps(results))
