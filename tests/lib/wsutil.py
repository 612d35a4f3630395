"""WebSocket helpers for the tests: the real client is Python's `websockets`
(Debian python3-websockets, installed by scripts/install-deps.sh check); a
raw client over a socket sends what a real client never would (unmasked
frames, oversized frames, bad UTF-8) for the hostile-input tests."""
import base64
import json
import os
import socket
import struct
import sys
import time

try:
    import websockets  # noqa: F401
except ImportError:
    # `python3` on PATH may not be Debian's (pyenv): the package lives in
    # Debian's dist-packages, pure Python with an optional C speedup.
    sys.path.append("/usr/lib/python3/dist-packages")
    import websockets  # noqa: F401  (a missing package fails the tests, never skips them)

import websockets.exceptions  # noqa: E402


def ws_url(runner, path):
    return "ws://127.0.0.1:%d%s" % (runner.port, path)


def decode(frame):
    """A server frame as (kind, payload): ('json', dict), ('stdout', bytes),
    ('stderr', bytes), ('replay', (offset, bytes))."""
    if isinstance(frame, str):
        return "json", json.loads(frame)
    ch = frame[0]
    if ch == 1:
        return "stdout", frame[1:]
    if ch == 2:
        return "stderr", frame[1:]
    if ch == 3:
        return "replay", (struct.unpack(">Q", frame[1:9])[0], frame[9:])
    raise AssertionError("unknown channel byte 0x%02x" % ch)


class RawWS:
    """A minimal client over a plain socket: handshake, frames as given."""

    def __init__(self, port, path, headers=None, timeout=10):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        hdr = {"Host": "127.0.0.1", "Upgrade": "websocket", "Connection": "Upgrade",
               "Sec-WebSocket-Key": key, "Sec-WebSocket-Version": "13"}
        if headers is not None:
            hdr.update(headers)
        req = "GET %s HTTP/1.1\r\n" % path
        for k, v in hdr.items():
            if v is not None:
                req += "%s: %s\r\n" % (k, v)
        self.sock.sendall((req + "\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            d = self.sock.recv(4096)
            if not d:
                break
            self.buf += d
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        self.head = head.decode(errors="replace")
        self.status = int(self.head.split(" ")[1]) if self.head else 0

    def send_frame(self, opcode, payload, mask=True, fin=True, rsv=0, announce=None):
        """announce: the payload length the header claims (a hostile client
        may claim more than it sends)."""
        b0 = (0x80 if fin else 0) | (rsv << 4) | opcode
        n = len(payload) if announce is None else announce
        mbit = 0x80 if mask else 0
        if n < 126:
            hdr = struct.pack("!BB", b0, mbit | n)
        elif n < 65536:
            hdr = struct.pack("!BBH", b0, mbit | 126, n)
        else:
            hdr = struct.pack("!BBQ", b0, mbit | 127, n)
        if mask:
            key = os.urandom(4)
            payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload)) \
                if len(payload) < 65536 else _mask_fast(payload, key)
            hdr += key
        self.sock.sendall(hdr + payload)

    def recv_exact(self, n):
        while len(self.buf) < n:
            d = self.sock.recv(65536)
            if not d:
                raise EOFError("connection closed")
            self.buf += d
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv_frame(self):
        """(opcode, payload) of the next server frame (servers never mask)."""
        b0, b1 = self.recv_exact(2)
        assert not (b1 & 0x80), "a server frame must not be masked"
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self.recv_exact(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self.recv_exact(8))[0]
        return b0 & 0x0F, self.recv_exact(n)

    def wait_close(self, timeout=10):
        """Read until a close frame; returns its status code (None if the
        connection ended without one)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                op, payload = self.recv_frame()
                if op == 8:
                    return struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 0
        except (EOFError, ConnectionResetError):
            return None

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def _mask_fast(payload, key):
    k = int.from_bytes(key * 2, "little")
    out = bytearray(len(payload))
    n8 = len(payload) // 8 * 8
    ints = memoryview(bytes(payload[:n8])).cast("Q")
    outv = memoryview(out)[:n8].cast("Q")
    for i, v in enumerate(ints):
        outv[i] = v ^ k
    for i in range(n8, len(payload)):
        out[i] = payload[i] ^ key[i % 4]
    return bytes(out)


async def recv_until(ws, pred, timeout=10):
    """Read frames until pred(kind, payload) is true; returns all frames read."""
    import asyncio
    seen = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("timed out; frames so far: %r" % seen[-20:])
        frame = await asyncio.wait_for(ws.recv(), left)
        kind, payload = decode(frame)
        seen.append((kind, payload))
        if pred(kind, payload):
            return seen


def output_of(frames):
    """stdout/stderr/replay bytes of decoded frames, concatenated."""
    out = b""
    for kind, payload in frames:
        if kind in ("stdout", "stderr"):
            out += payload
        elif kind == "replay":
            out += payload[1]
    return out
