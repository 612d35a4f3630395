#!/usr/bin/env python3
"""The corpus of malformed or hostile requests of tests/fault/test_hostile.py.

Each case is raw bytes sent on a fresh connection, with the outcomes it may
get. What "gets a 4xx" means here:

  * a response with a 4xx status (a JSON {code, message} from the runner, or
    libmicrohttpd's own HTML page for what it refuses before the runner
    sees the request: 400, 413, 414, 431);
  * for a request line naming an HTTP version the server does not speak
    (HTTP/2.0, HTTP/3), 505 — the status RFC 9110 §15.6.6 defines for it;
  * only for bytes that are not an HTTP/1.x request at all (no request line
    can be parsed: binary, a TLS ClientHello, blank lines) or a request that
    is cut short (a body that never arrives): the connection is closed
    without a response, at once or at the idle timeout ("close").

Never acceptable: a 2xx/3xx (in particular for a second, smuggled request on
the same connection), any other 5xx, no answer within the idle timeout + 1
s, a crash. After every case a valid request on a new connection succeeds,
and commands smuggled in bodies never run (marker files stay absent).

`python3 tests/fault/hostile.py DIR` writes the cases to DIR, one file each
(e.g. as extra fuzz seeds: build/fuzz/fuzz_http DIR)."""
import json
import os
import sys

CLOSE = "close"
ANY4 = set(range(400, 500))
BAD = {400}
NOTFOUND = {404}
FORBID = {403, 404}
FS_BAD = {400, 403, 404}  # a files request whose path is refused


class Ctx:
    """Values a case may name: a marker directory (smuggled commands touch
    files there), ids of real finished tasks, a writable root."""

    def __init__(self, marker_dir="/tmp/hostile-markers", execd_id="0" * 32, native_id="1" * 32,
                 session_id="2" * 32, work="/tmp"):
        self.marker_dir = marker_dir
        self.execd_id = execd_id
        self.native_id = native_id
        self.session_id = session_id
        self.work = work
        self.n_markers = 0
        self.must_not_exist = []  # files no case may leave behind

    def marker_cmd(self):
        self.n_markers += 1
        return "touch %s/smuggled-%d" % (self.marker_dir, self.n_markers)


def req(method, path, body=None, headers=(), version="HTTP/1.1", host=True, cl=True):
    h = b"%s %s %s\r\n" % (method.encode(), path.encode() if isinstance(path, str) else path,
                           version.encode())
    if host:
        h += b"Host: x\r\n"
    for k in headers:
        h += k if isinstance(k, bytes) else k.encode()
        h += b"\r\n"
    if body is None:
        return h + b"\r\n"
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    if cl:
        h += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    return h + b"\r\n" + body


def chunked(path, raw_body, extra=()):
    h = b"POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" % path.encode()
    for k in extra:
        h += k.encode() + b"\r\n"
    return h + b"\r\n" + raw_body


def cases(ctx):
    out = []

    def add(name, data, allowed, slow=False):
        out.append((name, data, set(allowed) if not isinstance(allowed, set) else allowed, slow))

    cmd = lambda: json.dumps({"command": ctx.marker_cmd()}).encode()  # noqa: E731

    # ---- methods (the router answers 405 on a known path) ----
    for m in ("BREW", "get", "GETT", "PUT", "PATCH", "OPTIONS", "TRACE", "HEAD", "PROPFIND",
              "M" * 200):
        for p in ("/ping", "/command", "/v1/tasks", "/files/info"):
            add("method %s %s" % (m[:10], p), req(m, p), {405} | BAD)
    add("method POST /ping", req("POST", "/ping", {}), {405})
    add("method DELETE /metrics", req("DELETE", "/metrics"), {405})
    add("method GET /session", req("GET", "/session"), {405})
    add("method with NUL", b"GE\x00T /ping HTTP/1.1\r\nHost: x\r\n\r\n", ANY4 | {CLOSE})

    # ---- request lines ----
    add("HTTP/0.9 request", b"GET /ping\r\n\r\n", ANY4 | {CLOSE})
    add("HTTP/2.0 in a request line", req("GET", "/ping", version="HTTP/2.0"), {505} | ANY4)
    add("HTTP/3", req("GET", "/ping", version="HTTP/3"), {505} | ANY4)
    add("lower-case version", req("GET", "/ping", version="http/1.1"), ANY4)
    add("version junk", req("GET", "/ping", version="HTTP/1.x"), ANY4 | {505})
    add("extra token in request line", b"GET /ping HTTP/1.1 x\r\nHost: x\r\n\r\n", ANY4)
    add("tabs in request line", b"GET\t/ping\tHTTP/1.1\r\nHost: x\r\n\r\n", ANY4 | {CLOSE})
    add("no slash path", req("GET", "ping"), ANY4)
    add("asterisk path", req("GET", "*"), ANY4)
    add("absolute-form", req("GET", "http://evil.example/ping"), ANY4)
    add("URI of 70000 bytes", req("GET", "/" + "a" * 70000), {414} | ANY4)
    add("control char in path", req("GET", b"/pi\x7fng"), ANY4)
    add("NUL in path", req("GET", b"/pi\x00ng"), ANY4 | {CLOSE})
    add("HTTP/1.1 without Host", req("GET", "/ping", host=False), BAD)

    # ---- headers ----
    add("duplicate Host", req("GET", "/ping", headers=["Host: y"]), BAD)
    add("header without colon", req("GET", "/ping", headers=["BadHeader"]), BAD)
    add("space before colon", req("GET", "/ping", headers=["X-A : b"]), BAD)
    add("space before colon on TE",
        chunked("/command", b"5\r\n{\"a\":\r\n0\r\n\r\n").replace(
            b"Transfer-Encoding:", b"Transfer-Encoding :"), BAD)
    add("folded first header", b"GET /ping HTTP/1.1\r\n Host: x\r\n\r\n", BAD)
    add("non-token header name", req("GET", "/ping", headers=[b"X-\xff: a"]), BAD)
    add("CR inside a header value", req("GET", "/ping", headers=[b"X-A: a\rb"]), BAD)
    add("control char in a header value", req("GET", "/ping", headers=[b"X-A: a\x01b"]), BAD)
    add("header of 100 KB", req("GET", "/ping", headers=["X-Big: " + "a" * 100000]),
        {431, 400, 413})
    add("header name of 100 KB", req("GET", "/ping", headers=["X" * 100000 + ": a"]),
        {431, 400, 413})
    add("5000 headers", req("GET", "/ping", headers=["X-%d: y" % i for i in range(5000)]),
        {431, 400, 413})
    for name, cl in (("negative", "-5"), ("plus sign", "+20"), ("hex", "0x10"),
                     ("inner space", "1 2"), ("letters", "abc"), ("empty", ""),
                     ("float", "1.5"), ("huge", "99999999999999999999999")):
        add("Content-Length %s" % name,
            req("POST", "/command", headers=["Content-Length: " + cl]) + b"{}",
            {400, 413})
    add("two Content-Lengths, differing", req("POST", "/command", headers=[
        "Content-Length: 20", "Content-Length: 21"]) + cmd(), BAD)
    add("two Content-Lengths, equal", req("POST", "/command", headers=[
        "Content-Length: 27", "Content-Length: 27"]) + cmd(), BAD)
    add("Content-Length list", req("POST", "/command", headers=["Content-Length: 27, 27"]) + cmd(),
        BAD)

    # ---- request smuggling: Content-Length and Transfer-Encoding ----
    def te_cl(te_line, cl_first=True, name=""):
        body = cmd()
        chunk = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        smuggled = req("POST", "/command", json.dumps({"command": ctx.marker_cmd()}))
        hdrs = ["Content-Length: %d" % len(chunk), te_line]
        if not cl_first:
            hdrs.reverse()
        add("CL+TE %s" % name, req("POST", "/command", headers=hdrs) + chunk + smuggled, BAD)

    te_cl("Transfer-Encoding: chunked", True, "CL first")
    te_cl("Transfer-Encoding: chunked", False, "TE first")
    te_cl("Transfer-Encoding:  chunked", True, "TE with extra space")
    te_cl("Transfer-encoding: chunked", True, "lower-case TE name")
    te_cl("Transfer-Encoding: CHUNKED", True, "upper-case coding")
    te_cl("Transfer-Encoding: chunked, chunked", True, "coding list")
    te_cl("Transfer-Encoding: identity", True, "identity")
    add("CL 0 + TE then a pipelined request",
        req("POST", "/ping", headers=["Content-Length: 0", "Transfer-Encoding: chunked"]) +
        b"0\r\n\r\n" + req("POST", "/command", json.dumps({"command": ctx.marker_cmd()})), BAD)
    add("two TE headers", chunked("/command", b"2\r\n{}\r\n0\r\n\r\n",
                                  ["Transfer-Encoding: chunked"]), BAD)
    for te in ("gzip", "identity", "gzip, chunked", "chunked, gzip", "xchunked", "chunked;q=1",
               ""):
        add("Transfer-Encoding %r" % te, chunked("/command", b"2\r\n{}\r\n0\r\n\r\n").replace(
            b"Transfer-Encoding: chunked", b"Transfer-Encoding: " + te.encode()), BAD)

    # ---- chunked bodies ----
    for name, body in (("non-hex size", b"zz\r\n{}\r\n0\r\n\r\n"),
                       ("negative size", b"-2\r\n{}\r\n0\r\n\r\n"),
                       ("0x prefix", b"0x2\r\n{}\r\n0\r\n\r\n"),
                       ("space inside size", b"1 0\r\n{}\r\n0\r\n\r\n"),
                       ("size overflow", b"ffffffffffffffffff\r\n{}\r\n0\r\n\r\n"),
                       ("size 2^64-1", b"ffffffffffffffff\r\n{}\r\n0\r\n\r\n"),
                       ("data longer than size", b"1\r\n{}\r\n0\r\n\r\n"),
                       ("no CRLF after data", b"2\r\n{}XX0\r\n\r\n"),
                       ("empty size line", b"\r\n{}\r\n0\r\n\r\n"),
                       ("bad trailer", b"2\r\n{}\r\n0\r\nbad trailer\r\n\r\n")):
        add("chunked: %s" % name, chunked("/command", body), {400, 413} | {CLOSE})
    add("chunked: body never ends", chunked("/command", b"10\r\n{}"), {CLOSE, 400}, slow=True)
    add("chunked: no last chunk", chunked("/command", b"2\r\n{}\r\n"), {CLOSE, 400}, slow=True)
    add("chunked: body over max-body", chunked(
        "/command", b"".join(b"400\r\n" + b"x" * 1024 + b"\r\n" for _ in range(6)) +
        b"0\r\n\r\n"), {413, 400})

    # ---- bodies: JSON ----
    for path, key in (("/command", "command"), ("/v1/tasks", "task")):
        p = path
        for name, body in (("truncated", '{"%s": ' % key), ("not JSON", "not json"),
                           ("array", "[1, 2]"), ("string", '"x"'), ("number", "1"),
                           ("null", "null"), ("single quotes", "{'%s': 'x'}" % key),
                           ("trailing comma", '{"%s": "x",}' % key),
                           ("trailing garbage", '{"%s": "x"} x' % key),
                           ("comment", '{"%s": "x" /* c */}' % key),
                           ("NaN", '{"%s": "x", "timeout": NaN}' % key),
                           ("duplicate keys", '{"%s": "a", "%s": "b"}' % (key, key)),
                           ("empty", ""), ("whitespace", "   "),
                           ("NUL escape", '{"%s": "echo a\\u0000b"}' % key),
                           ("lone surrogate", '{"%s": "\\ud800"}' % key),
                           ("low surrogate first", '{"%s": "\\udc00\\ud800"}' % key),
                           ("huge float", '{"%s": "x", "timeout": 1e400}' % key),
                           ("huge integer", '{"%s": "x", "timeout": 99999999999999999999}' % key),
                           ("deep arrays", "[" * 10000 + "]" * 10000),
                           ("deep objects", '{"a":' * 5000 + "1" + "}" * 5000),
                           ("deep in a field", '{"%s": "x", "env": %s}' % (
                               key, '{"a":' * 3000 + '"x"' + "}" * 3000))):
            add("JSON %s %s" % (p, name), req("POST", p, body), {400, 413})
        for name, raw in (("0xff", b"\xff"), ("0xc3 0x28", b"\xc3\x28"),
                          ("truncated 3-byte", b"\xe2\x82"), ("overlong /", b"\xc0\xaf"),
                          ("encoded surrogate", b"\xed\xa0\x80"), ("0xf8", b"\xf8\x88\x80\x80\x80"),
                          ("above U+10FFFF", b"\xf4\x90\x80\x80")):
            add("bad UTF-8 %s in %s" % (name, p), req(
                "POST", p, b'{"' + key.encode() + b'": "echo ' + raw + b'"}'), {400})
        add("over max-body %s" % p, req("POST", p, {key: "echo " + "x" * 5000}), {413})
        add("over max-body, no Content-Length check %s" % p,
            req("POST", p, headers=["Content-Length: 5000"]) + b"{" * 5000, {413})
    bad_command = [{"command": 1}, {"command": ["ls"]}, {"command": {}}, {"command": True},
                   {"command": None}, {"command": ""}, {}, {"cwd": "/tmp"},
                   {"command": "true", "cwd": 5}, {"command": "true", "cwd": "relative"},
                   {"command": "true", "cwd": "/nonexistent/dir"},
                   {"command": "true", "timeout": -1}, {"command": "true", "timeout": "5"},
                   {"command": "true", "timeout": 1.5}, {"command": "true", "timeout": 2 ** 63},
                   {"command": "true", "timeout": 604800001},
                   {"command": "true", "uid": -1}, {"command": "true", "uid": "x"},
                   {"command": "true", "uid": 4294967295}, {"command": "true", "gid": 5},
                   {"command": "true", "uid": 0}, {"command": "true", "uid": 1000, "gid": 0},
                   {"command": "true", "envs": []}, {"command": "true", "envs": "x"},
                   {"command": "true", "envs": {"BAD-NAME": "x"}},
                   {"command": "true", "envs": {"A": 1}}, {"command": "true", "envs": {"": "x"}},
                   {"command": "true", "envs": {"1A": "x"}},
                   {"command": "true", "envs": {"A": None}},
                   {"command": "true", "background": "yes"}]
    for b in bad_command:
        want = {403} if b.get("uid") == 0 or b.get("gid") == 0 else {400}
        add("execd body %s" % json.dumps(b)[:60], req("POST", "/command", b), want)
    for b in ({"task": 5}, {"task": ""}, {"capability": "exec"}, {"task": "true", "capability": 3},
              {"task": "true", "capability": "root"}, {"task": "true", "capability": ""},
              {"task": "true", "timeout_ms": "1"}, {"task": "true", "timeout_ms": -5},
              {"task": "true", "timeout_ms": 1e10}, {"task": "true", "env": "x"},
              {"task": "true", "env": {"A": 1}}, {"task": "true", "model": 5},
              {"task": "true", "model": ""}, {"task": "true", "model": "m" * 300},
              {"task": "true", "max_steps": 0}, {"task": "true", "max_steps": "x"},
              {"task": "true", "cwd": "relative"}):
        add("native body %s" % json.dumps(b)[:60], req("POST", "/v1/tasks", b), {400})
    for b in ({"cwd": "relative"}, {"cwd": 5}, {"cwd": "a\u0000b"}, [1], "x"):
        add("session body %s" % json.dumps(b)[:40], req("POST", "/session", b), {400})
    add("session run body", req("POST", "/session/%s/run" % ctx.session_id, {"command": 5}),
        {400, 404})

    # ---- paths and traversal ----
    for p in ("/v1/tasks/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "//ping", "/ping/",
              "/command/status/..%2f..%2fetc%2fpasswd", "/v1/tasks/%2e%2e",
              "/./ping", "/PING", "/ping;x", "/v1//tasks", "/files/../ping",
              "/v1/tasks/" + "%41" * 32):
        add("path %s" % p[:50], req("GET", p), {404, 400})
    w = ctx.work
    up10 = "/.." * 12  # more than enough to climb to /
    for name, p, allowed in (
            ("download /etc/shadow", "/files/download?path=/etc/shadow", FORBID),
            ("download traversal", "/files/download?path=%s%s/etc/shadow" % (w, up10), FORBID),
            ("download runner environ", "/files/download?path=/proc/1/environ", FORBID),
            ("download own environ", "/files/download?path=/proc/self/environ", FORBID),
            ("download /proc/1/mem", "/files/download?path=/proc/1/mem", FORBID | BAD),
            ("download /dev/zero", "/files/download?path=/dev/zero", FS_BAD),
            ("download a directory", "/files/download?path=/etc", FS_BAD),
            ("download relative", "/files/download?path=etc/passwd", BAD),
            ("download NUL", "/files/download?path=/etc/passwd%00.txt", FS_BAD),
            ("download empty path", "/files/download?path=", BAD),
            ("download no path", "/files/download", BAD),
            ("download bad Range", "/files/download?path=/etc/hostname", None),
            ("info no path", "/files/info", BAD),
            ("info relative", "/files/info?path=..", BAD),
            ("list /root", "/directories/list?path=/root", FORBID),
            ("list depth junk", "/directories/list?path=/tmp&depth=x", BAD),
            ("list depth huge", "/directories/list?path=/tmp&depth=99999999999", BAD),
            ("search /root", "/files/search?path=/root&pattern=*", FORBID),
            ("search pattern too long", "/files/search?path=/tmp&pattern=" + "*" * 600, BAD),
            ("search unclosed class", "/files/search?path=/tmp&pattern=[a", BAD),
            ("download offset junk", "/files/download?path=/etc/hostname&offset=x", BAD)):
        if allowed is None:
            # not a valid range set (last < first): ignored, RFC 9110 §14.2
            add(name, req("GET", p, headers=["Range: bytes=99999999-1"]), {200})
            add(name + " beyond the end", req("GET", p, headers=["Range: bytes=99999999-"]),
                {416})
        else:
            add(name, req("GET", p), allowed)
    for name, method, p, body, allowed in (
            ("delete /etc/passwd", "DELETE", "/files?path=/etc/passwd", None, FORBID),
            ("delete traversal", "DELETE", "/files?path=%s%s/etc/passwd" % (w, up10), None, FORBID),
            ("delete /", "DELETE", "/directories?path=/", None, FS_BAD),
            ("delete relative", "DELETE", "/files?path=tmp", None, BAD),
            ("mkdir in /etc", "POST", "/directories", {"/etc/forceai-hostile": {"mode": 755}},
             FORBID),
            ("mkdir bad mode", "POST", "/directories", {w + "/d": {"mode": 888}}, BAD),
            ("mkdir relative", "POST", "/directories", {"rel/d": {}}, BAD),
            ("mkdir body array", "POST", "/directories", [1], BAD),
            ("mv from /etc", "POST", "/files/mv", [{"src": "/etc/passwd", "dest": w + "/p"}],
             FORBID),
            ("mv into /etc", "POST", "/files/mv", [{"src": w + "/nope", "dest": "/etc/x"}],
             FS_BAD),
            ("mv not array", "POST", "/files/mv", {"src": "/a", "dest": "/b"}, BAD),
            ("mv missing dest", "POST", "/files/mv", [{"src": w + "/a"}], BAD),
            ("chmod /etc/passwd", "POST", "/files/permissions", {"/etc/passwd": {"mode": 777}},
             FORBID),
            ("chown to root", "POST", "/files/permissions", {w: {"owner": "root"}}, {403}),
            ("chmod bad mode", "POST", "/files/permissions", {w: {"mode": 8888}}, BAD),
            ("chmod mode string", "POST", "/files/permissions", {w: {"mode": "755"}}, BAD),
            ("chown unknown user", "POST", "/files/permissions", {w: {"owner": "no-such-user"}},
             BAD),
            ("replace /etc/passwd", "POST", "/files/replace",
             {"/etc/passwd": {"old": "root", "new": "toor"}}, FORBID),
            ("replace not object", "POST", "/files/replace", [1], BAD),
            ("replace missing old", "POST", "/files/replace", {w + "/x": {"new": "y"}}, BAD)):
        add(name, req(method, p, body), allowed)
    mp = (b"--B\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n"
          b"{\"path\":\"/etc/cron.d/forceai-hostile\"}\r\n--B\r\nContent-Disposition: form-data; "
          b"name=\"file\"; filename=\"x\"\r\n\r\nx\r\n--B--\r\n")
    up = lambda ct, body: (b"POST /files/upload HTTP/1.1\r\nHost: x\r\nContent-Type: " + ct +  # noqa
                           b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    add("upload into /etc", up(b"multipart/form-data; boundary=B", mp), FORBID)
    add("upload no boundary", up(b"multipart/form-data", mp), BAD)
    add("upload not multipart", up(b"application/json", b"{}"), {400, 415})
    add("upload boundary too long", up(b"multipart/form-data; boundary=" + b"b" * 100, mp), BAD)
    partial = mp.replace(b"/etc/cron.d/forceai-hostile", (w + "/partial-upload").encode())
    add("upload no closing delimiter", up(b"multipart/form-data; boundary=B", partial[:-8]),
        BAD)
    ctx.must_not_exist.append(w + "/partial-upload")
    add("upload bad metadata", up(b"multipart/form-data; boundary=B",
                                  mp.replace(b"{\"path\"", b"{\"path\"\"")), BAD)

    # ---- ids of other shapes ----
    shapes = ["A" * 32, "a" * 31, "a" * 33, "g" * 32, "..%2f" + "a" * 27, "a" * 1000,
              "%00" + "a" * 29, "0x" + "a" * 30, "%20" * 32, "-1", "a" * 31 + "%0a"]
    for i, sid in enumerate(shapes):
        add("id %d status" % i, req("GET", "/command/status/" + sid), NOTFOUND)
        add("id %d logs" % i, req("GET", "/command/%s/logs" % sid), NOTFOUND)
        add("id %d native" % i, req("GET", "/v1/tasks/" + sid), NOTFOUND)
        add("id %d events" % i, req("GET", "/v1/tasks/%s/events" % sid), NOTFOUND)
        add("id %d native delete" % i, req("DELETE", "/v1/tasks/" + sid), NOTFOUND)
        add("id %d interrupt" % i, req("DELETE", "/command?id=" + sid), NOTFOUND | BAD)
        add("id %d session run" % i, req("POST", "/session/%s/run" % sid, {"command": "true"}),
            NOTFOUND)
    add("interrupt without id", req("DELETE", "/command"), BAD)
    add("interrupt empty id", req("DELETE", "/command?id="), BAD)
    add("native id of an execd task", req("GET", "/v1/tasks/" + ctx.execd_id), NOTFOUND)
    add("execd id of a native task", req("GET", "/command/status/" + ctx.native_id), NOTFOUND)
    for c in ("-1", "abc", "99999999999999999999999", "1e3", "0x10", "1 2"):
        add("logs cursor %r" % c, req("GET", "/command/%s/logs?cursor=%s" % (
            ctx.execd_id, c.replace(" ", "%20"))), BAD)
        add("Last-Event-ID %r" % c, req("GET", "/v1/tasks/%s/events" % ctx.native_id,
                                        headers=["Last-Event-ID: " + c]), {400})

    # ---- not HTTP at all ----
    add("TLS ClientHello", bytes.fromhex("16030100a5010000a10303") + bytes(range(32)) * 3,
        ANY4 | {CLOSE}, slow=True)
    add("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", {505} | ANY4 | {CLOSE})
    add("binary garbage", bytes((i * 37 + 11) % 256 for i in range(1024)), ANY4 | {CLOSE},
        slow=True)
    add("blank lines only", b"\r\n" * 20, ANY4 | {CLOSE}, slow=True)
    add("incomplete request line", b"GET /pi", {CLOSE} | ANY4, slow=True)
    add("body never arrives", req("POST", "/command", headers=["Content-Length: 100"]) + b"{",
        {CLOSE} | ANY4, slow=True)
    return out


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    d = sys.argv[1]
    os.makedirs(d, exist_ok=True)
    cs = cases(Ctx())
    for i, (name, data, _, _) in enumerate(cs):
        with open(os.path.join(d, "%03d" % i), "wb") as f:
            f.write(data)
    print("%d cases written to %s" % (len(cs), d))


if __name__ == "__main__":
    main()
