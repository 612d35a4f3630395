"""The WebSocket routes of each build: both builds link libmicrohttpd's
microhttpd_ws, built from the same Debian libmicrohttpd source
(scripts/build-mhd-ws.sh for the dev build, scripts/build-static-deps.sh for
the static one), so both say "websocket": true and /pty/{id}/ws upgrades
(test_pty covers the protocol, the container suite the image)."""
import json
import os
import re
import socket
import unittest

import harness

STATIC = os.path.join(harness.ROOT, "build", "static", "forceai-runner")
UPGRADE = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
           "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}


def upgrade(r, path):
    """The handshake over a raw socket (an upgraded connection never ends, so
    read the head only, and the body when it has a length)."""
    with socket.create_connection(("127.0.0.1", r.port), timeout=10) as s:
        head = "".join("%s: %s\r\n" % kv for kv in r.headers(UPGRADE).items())
        s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n" % (path, head)).encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
        head, _, body = buf.partition(b"\r\n\r\n")
        status = int(head.split()[1])
        m = re.search(rb"(?i)content-length: *(\d+)", head)
        while m and len(body) < int(m.group(1)):
            chunk = s.recv(4096)
            if not chunk:
                break
            body += chunk
        return status, body


class WebSocketPerBuild(unittest.TestCase):
    def check(self, binary, expect_ws):
        saved = harness.RUNNER
        harness.RUNNER = binary
        try:
            r = harness.Runner()
        finally:
            harness.RUNNER = saved
        try:
            st, hard = r.json("GET", "/v1/hardening")
            self.assertEqual(st, 200)
            self.assertIs(hard["websocket"], expect_ws, hard)
            st, body = r.json("POST", "/pty", {"cwd": r.work})
            self.assertEqual(st, 201, body)
            sid = body["session_id"]
            st, data = upgrade(r, "/pty/%s/ws" % sid)
            if expect_ws:
                self.assertEqual(st, 101)
            else:
                self.assertEqual(st, 501, data)
                self.assertEqual(json.loads(data)["code"], "WEBSOCKET_UNAVAILABLE")
            r.request("DELETE", "/pty/%s" % sid)
        finally:
            r.stop()

    def test_dev_build_has_websocket(self):
        self.check(harness.RUNNER, True)

    def test_static_build_has_websocket(self):
        # `make check` builds the static runner (test-bins): its absence is a failure.
        self.assertTrue(os.access(STATIC, os.X_OK), "static build missing (make static)")
        self.check(STATIC, True)


if __name__ == "__main__":
    unittest.main()
