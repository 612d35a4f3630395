"""Servers the port proxy tests reach through /proxy/{port}, each started as a
runner task (uid 1000): `proxy_upstreams.py MODE PORT`.

  echo     HTTP/1.1: POST/PUT echo the body (Content-Length or chunked) and
           report what arrived in X-Seen-* fields; PUT /sink[?slow] reads the
           body as it comes (slowly) and answers its length and SHA-256;
           GET /headers returns the
           request fields as JSON; GET /chunked and /sse-close send events
           300 ms apart (chunked, or delimited by the close); GET /idle
           sends a head and one chunk, then nothing; GET /status/N answers N;
           GET /peer[?close|?slow] answers the port of the connection it came
           on (the proxy's side), with Connection: close, or after 0.3 s
  ws       WebSocket echo (the `websockets` package: Debian's python3)
  silent   accepts, reads the request, never answers
  endless  a status line, then header fields without end
  trickle  a status line, then one byte every 300 ms
  drop     promises 1,000,000 bytes, sends 1,000 and closes
  garbage  answers bytes that are not HTTP
  once     answers the first request of each connection ("conn N", kept
           alive), then reads the next one and closes without an answer (a
           server that timed out an idle connection as the proxy sent on it)
Python standard library only, except `ws`."""
import json
import socket
import sys
import threading
import time


def serve_echo(port):
    import http.server
    import socketserver

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def read_body(self):
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                data = bytearray()
                while True:
                    n = int(self.rfile.readline().split(b";")[0], 16)
                    if n == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return bytes(data)
                    data += self.rfile.read(n)
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length", "0")))

        def do_POST(self):
            data = self.read_body()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("X-Seen-Method", self.command)
            self.send_header("X-Seen-Path", self.path)
            self.send_header("X-Seen-Framing", "chunked" if "chunked" in self.headers.get(
                "Transfer-Encoding", "") else "length")
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self):
            if not self.path.startswith("/sink"):
                return self.do_POST()
            # Read the body as it comes (a slow reader with ?slow), answer
            # its length and SHA-256.
            import hashlib
            h, n, slow = hashlib.sha256(), 0, "slow" in self.path
            for piece in self.pieces():
                h.update(piece)
                n += len(piece)
                if slow:
                    time.sleep(0.001)
            body = json.dumps({"bytes": n, "sha256": h.hexdigest()}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def pieces(self):
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                while True:
                    n = int(self.rfile.readline().split(b";")[0], 16)
                    if n == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return
                    while n:
                        b = self.rfile.read(min(n, 65536))
                        n -= len(b)
                        yield b
                    self.rfile.readline()
            left = int(self.headers.get("Content-Length", "0"))
            while left:
                b = self.rfile.read(min(left, 65536))
                if not b:
                    return
                left -= len(b)
                yield b

        def events(self, chunked):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            for i in range(5):
                msg = b"data: %d %.6f\n\n" % (i, time.time())
                self.wfile.write(b"%x\r\n%s\r\n" % (len(msg), msg) if chunked else msg)
                self.wfile.flush()
                time.sleep(0.3)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")

        def do_GET(self):
            if self.path == "/headers":
                body = json.dumps([[k, v] for k, v in self.headers.items()]).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close, X-Hop")
                self.send_header("X-Hop", "must not pass")
                self.send_header("Keep-Alive", "timeout=5")
                self.send_header("Set-Cookie", "a=1")
                self.send_header("Set-Cookie", "b=2")
                self.end_headers()
                self.wfile.write(body)
            elif self.path == "/chunked":
                self.events(True)
            elif self.path == "/sse-close":
                self.events(False)
            elif self.path == "/idle":
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.write(b"5\r\nhello\r\n")
                self.wfile.flush()
                time.sleep(3600)
            elif self.path.startswith("/peer"):
                if "slow" in self.path:
                    time.sleep(0.3)
                body = str(self.client_address[1]).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                if "close" in self.path:
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)
            elif self.path.startswith("/status/"):
                self.send_response(int(self.path[8:]))
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                body = b"path=" + self.path.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        do_HEAD = do_GET

    class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True
        request_queue_size = 128  # many proxied connections at once (the pool test)

    S(("127.0.0.1", port), H).serve_forever()


def serve_ws(port):
    import asyncio
    import websockets

    async def echo(ws, path=None):
        async for m in ws:
            await ws.send(m)

    async def main():
        async with websockets.serve(echo, "127.0.0.1", port, max_size=None):
            await asyncio.Future()

    asyncio.run(main())


def serve_raw(mode, port):
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", port))
    lsock.listen(64)

    conns = iter(range(1, 1 << 30))

    def one(c):
        try:
            c.recv(65536)
            if mode == "once":
                body = b"conn %d" % next(conns)
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                c.recv(65536)
            elif mode == "silent":
                time.sleep(3600)
            elif mode == "endless":
                c.sendall(b"HTTP/1.1 200 OK\r\n")
                while True:
                    c.sendall(b"X-Junk: " + b"a" * 1000 + b"\r\n")
            elif mode == "trickle":
                c.sendall(b"HTTP/1.1 200 OK\r\n")
                while True:
                    c.sendall(b"X")
                    time.sleep(0.3)
            elif mode == "drop":
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n" + b"x" * 1000)
                time.sleep(0.2)
            elif mode == "garbage":
                c.sendall(b"\x16\x03\x01\x02\x00garbage\r\n\r\n")
                time.sleep(0.2)
        except OSError:
            pass
        finally:
            c.close()

    while True:
        c, _ = lsock.accept()
        threading.Thread(target=one, args=(c,), daemon=True).start()


if __name__ == "__main__":
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "echo":
        serve_echo(port)
    elif mode == "ws":
        serve_ws(port)
    else:
        serve_raw(mode, port)
