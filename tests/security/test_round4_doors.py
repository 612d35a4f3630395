"""Round four of the runner's doors (issue 44), from the attacker's side.

Finding 4: the port proxy must not hand the runner's access token to the app behind
/proxy/{port}, which is the task's. The task's own HTTP server answers each request with the
head it received; the client sends the token in every form the runner accepts (X-EXECD-ACCESS-
TOKEN, X-Access-Token, Authorization: Bearer) and inside other fields (a cookie, a custom
field, %-encoded, Basic credentials); the server must never see it (docs/design.md §9.3)."""
import base64
import hashlib
import http.client
import json
import os
import socket
import time
import unittest

from harness import Runner, free_port

PY = "/usr/bin/python3"

# The task's server: every request is answered with the head it received, as bytes.
RECORDER = r'''
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
while True:
    c, _ = s.accept()
    data = b""
    while b"\r\n\r\n" not in data:
        got = c.recv(65536)
        if not got:
            break
        data += got
    head = data.split(b"\r\n\r\n")[0]
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
              % (len(head), head))
    c.close()
'''


def wait_listening(port, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("nothing listens on port %d" % port)


def forms(token):
    """(label, the fields a client adds besides X-EXECD-ACCESS-TOKEN)."""
    pct = "".join("%%%02X" % ord(ch) for ch in token)
    basic = base64.b64encode(("user:" + token).encode()).decode()
    urlsafe = base64.urlsafe_b64encode(("x" + token + "y").encode()).decode().rstrip("=")
    return [
        ("execd", {}),
        ("x-access-token", {"X-Access-Token": token}),
        ("x-access-token lower case", {"x-access-token": token}),
        ("bearer", {"Authorization": "Bearer " + token}),
        ("bearer lower case", {"authorization": "bearer  " + token}),
        ("cookie", {"Cookie": "session=abc; tok=%s; x=1" % token}),
        ("custom field", {"X-Upstream-Key": "prefix-%s-suffix" % token}),
        ("%-encoded cookie", {"Cookie": "tok=" + pct}),
        ("basic credentials", {"Authorization": "Basic " + basic}),
        ("base64url inside a field", {"X-Blob": "v1." + urlsafe + ".sig"}),
    ]


class ProxyKeepsTheToken(unittest.TestCase):
    def run_forms(self, r, token, auth_field="X-EXECD-ACCESS-TOKEN"):
        port = free_port()
        script = os.path.join(r.work, "recorder.py")
        with open(script, "w") as f:
            f.write(RECORDER)
        os.chmod(script, 0o644)
        ev = r.execd({"command": "exec %s %s %d" % (PY, script, port), "background": True})
        self.assertEqual(ev[0]["type"], "init", ev)
        wait_listening(port)
        leaked = []
        for label, extra in forms(token):
            h = {auth_field: token, "X-Kept": "yes"}
            h.update(extra)
            c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=30)
            c.request("GET", "/proxy/%d/x" % port, headers=h)
            resp = c.getresponse()
            seen = resp.read().decode(errors="replace")
            c.close()
            self.assertEqual(resp.status, 200, (label, seen))
            # The request itself went through: the app's own fields are kept.
            self.assertIn("X-Kept: yes", seen, label)
            # Each value sent carries the token in some encoding: none may arrive.
            carried = [token] + list(extra.values())
            if any(v in seen for v in carried):
                leaked.append((label, seen))
        self.assertEqual(leaked, [], "the task's server saw the runner's token")

    def test_startup_token_in_every_form(self):
        token = "r4-" + os.urandom(12).hex()
        r = Runner(token=token)
        try:
            self.run_forms(r, token)
            # An app's own credentials are not the runner's: they go through.
            port = free_port()
            script = os.path.join(r.work, "recorder2.py")
            with open(script, "w") as f:
                f.write(RECORDER)
            os.chmod(script, 0o644)
            r.execd({"command": "exec %s %s %d" % (PY, script, port), "background": True})
            wait_listening(port)
            c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=30)
            c.request("GET", "/proxy/%d/x" % port, headers={
                "X-EXECD-ACCESS-TOKEN": token, "Authorization": "Bearer app-own-key",
                "Cookie": "app=1"})
            seen = c.getresponse().read().decode()
            c.close()
            self.assertIn("Authorization: Bearer app-own-key", seen)
            self.assertIn("Cookie: app=1", seen)
        finally:
            self.assertEqual(r.stop(), 0, r.logtext()[-3000:])
            r.close()

    def test_runtime_init_token_in_every_form(self):
        # Bound by runtime init, the runner keeps only the token's hash: the forwarded
        # fields are still searched for the token that authenticated the request.
        r = Runner(["--runtime-init"])
        try:
            token = "cp-" + os.urandom(12).hex()
            st, b = r.json("POST", "/internal/init", {
                "sandboxId": "r4", "generation": 1,
                "accessTokenHash": "sha256:" + hashlib.sha256(token.encode()).hexdigest()})
            self.assertEqual(st, 200, b)
            r.token = token
            self.run_forms(r, token)
        finally:
            self.assertEqual(r.stop(), 0, r.logtext()[-3000:])
            r.close()


if __name__ == "__main__":
    unittest.main()
