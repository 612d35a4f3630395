"""Helpers for the TLS-vault and egress-pin tests (not a test module):
Debian packages installed on demand, a throwaway CA made with the openssl
CLI, a private nginx instance, and network namespaces entered per thread."""
import ctypes
import os
import shutil
import subprocess
import time

CLONE_NEWNET = 0x40000000


def ensure_packages(*pairs):
    """pairs: (command, debian package). Installs the missing packages with
    apt-get (root only). Returns a reason string when unavailable, else None."""
    missing = [pkg for cmd, pkg in pairs if not shutil.which(cmd) and
               not os.path.exists(os.path.join("/usr/sbin", cmd))]
    if not missing:
        return None
    if os.geteuid() != 0:
        return "needs %s (not root, cannot install)" % " ".join(missing)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    r = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends"] + missing,
                       capture_output=True, env=env, timeout=600)
    if r.returncode != 0:
        # a stale package index: refresh once
        subprocess.run(["apt-get", "update"], capture_output=True, env=env, timeout=600)
        r = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends"] + missing,
                           capture_output=True, env=env, timeout=600)
    if r.returncode != 0:
        return "apt-get install %s failed: %s" % (" ".join(missing), r.stderr.decode()[-500:])
    return None


def run(*cmd, check=True, **kw):
    r = subprocess.run(list(cmd), capture_output=True, timeout=60, **kw)
    if check and r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), r.returncode,
                                                    r.stderr.decode(errors="replace")))
    return r


def make_ca(d, host="localhost"):
    """A CA and a server certificate for DNS:host signed by it, in d.
    Returns (ca_pem, cert_pem, key_pem)."""
    ca_key, ca = os.path.join(d, "ca.key"), os.path.join(d, "ca.pem")
    key, csr, crt = (os.path.join(d, n) for n in ("server.key", "server.csr", "server.pem"))
    ext = os.path.join(d, "server.ext")
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "2",
        "-keyout", ca_key, "-out", ca, "-subj", "/CN=forceai test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-sha256", "-keyout", key,
        "-out", csr, "-subj", "/CN=" + host)
    with open(ext, "w") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth\nsubjectAltName=DNS:%s\n" % host)
    run("openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
        "-days", "2", "-sha256", "-extfile", ext, "-out", crt)
    return ca, crt, key


class Nginx:
    """A private nginx (own prefix, config, pid, logs, temp dirs; never the
    system service): TLS on 127.0.0.1:port for server_name host, proxying to
    http://upstream and injecting Authorization: Bearer key. The access log
    records the Authorization header as the client sent it."""

    def __init__(self, d, port, upstream, cert, key, inject_key):
        self.d = d
        self.port = port
        self.access_log = os.path.join(d, "access.log")
        self.error_log = os.path.join(d, "error.log")
        for t in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            os.makedirs(os.path.join(d, "tmp", t), exist_ok=True)
        conf = os.path.join(d, "nginx.conf")
        tmp = os.path.join(d, "tmp")
        with open(conf, "w") as f:
            f.write("""
daemon off;
master_process on;
worker_processes 1;
user root;
pid %(d)s/nginx.pid;
error_log %(err)s info;
events { worker_connections 512; }
http {
    client_body_temp_path %(tmp)s/client_body;
    proxy_temp_path %(tmp)s/proxy;
    fastcgi_temp_path %(tmp)s/fastcgi;
    uwsgi_temp_path %(tmp)s/uwsgi;
    scgi_temp_path %(tmp)s/scgi;
    client_max_body_size 64m;
    log_format vault '$request_method $request_uri $status auth="$http_authorization"';
    access_log %(acc)s vault;
    server {
        listen 127.0.0.1:%(port)d ssl;
        server_name localhost;
        ssl_certificate %(cert)s;
        ssl_certificate_key %(key)s;
        location / {
            proxy_pass http://%(up)s;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Authorization "Bearer %(ik)s";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 120s;
        }
    }
}
""" % {"d": d, "err": self.error_log, "tmp": tmp, "acc": self.access_log, "port": port,
                "cert": cert, "key": key, "up": upstream, "ik": inject_key})
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        run(nginx, "-t", "-p", d, "-c", conf, "-e", self.error_log)
        self.proc = subprocess.Popen([nginx, "-p", d, "-c", conf, "-e", self.error_log],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        self._wait_listen()

    def _wait_listen(self, timeout=15):
        import socket
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("nginx exited: " + self.errors())
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nginx not listening: " + self.errors())

    def errors(self):
        try:
            with open(self.error_log) as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def access_lines(self):
        try:
            with open(self.access_log) as f:
                return f.read().splitlines()
        except OSError:
            return []

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: fast shutdown of master and worker
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()


_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, "setns: " + os.strerror(e))


class netns:
    """`with netns("name"):` the calling thread is in network namespace
    `name` (sockets created inside stay there; children inherit it)."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.orig = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        fd = os.open("/run/netns/" + self.name, os.O_RDONLY)
        try:
            _setns(fd)
        except OSError:
            os.close(self.orig)
            raise
        finally:
            os.close(fd)
        return self

    def __exit__(self, *a):
        try:
            _setns(self.orig)
        finally:
            os.close(self.orig)
