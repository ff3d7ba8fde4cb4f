"""Talking to zkwarden's admin endpoint in the tests: curl for real HTTP
requests, raw sockets for the bytes curl will not send (malformed requests,
pipelining, idle connections)."""

import json
import os
import socket
import subprocess
import time

from zkharness import HOST

import promcheck


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # lower-case name -> value (last one wins)
        self.body = body  # bytes

    @property
    def text(self):
        return self.body.decode("utf-8")

    def json(self):
        return json.loads(self.text)

    def __repr__(self):
        return "Response(%d, %r)" % (self.status, self.body[:200])


def parse_response(raw):
    """Splits one HTTP/1.1 response (bytes) into a Response. The body is
    what follows the head (the tests read one response per connection or
    use Content-Length themselves)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("iso-8859-1").split("\r\n")
    proto, code, _ = (lines[0].split(" ", 2) + [""])[:3]
    assert proto == "HTTP/1.1", lines[0]
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return Response(int(code), headers, body)


def read_responses(sock, count, timeout=10.0):
    """Reads count responses (each with Content-Length) from sock."""
    sock.settimeout(timeout)
    buf = b""
    out = []
    while len(out) < count:
        while b"\r\n\r\n" not in buf:
            d = sock.recv(65536)
            if not d:
                raise ConnectionError("closed after %d responses; pending %r" % (len(out), buf[:200]))
            buf += d
        head, _, rest = buf.partition(b"\r\n\r\n")
        r = parse_response(head + b"\r\n\r\n")
        n = int(r.headers["content-length"])
        while len(rest) < n:
            d = sock.recv(65536)
            if not d:
                raise ConnectionError("closed inside a body")
            rest += d
        r.body, buf = rest[:n], rest[n:]
        out.append(r)
    return out


def closed_by_peer(sock, timeout=5.0):
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


class AdminClient:
    def __init__(self, port, wait=10.0):
        """wait: seconds to wait for the endpoint to accept connections (it
        starts just after the proxy's listener)."""
        self.port = port
        self.base = "http://%s:%d" % (HOST, port)
        deadline = time.monotonic() + wait
        while True:
            try:
                socket.create_connection((HOST, port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def curl(self, path, *args, timeout=10):
        """Runs curl; returns the Response (head and body of the last
        response curl received)."""
        cmd = ["curl", "-sS", "-i", "--max-time", str(timeout)] + list(args) + [self.base + path]
        r = subprocess.run(cmd, capture_output=True, timeout=timeout + 5)
        assert r.returncode == 0, "curl failed (%d): %s" % (r.returncode, r.stderr.decode())
        return parse_response(r.stdout)

    def get(self, path, *args, **kw):
        return self.curl(path, *args, **kw)

    def metrics(self):
        r = self.get("/metrics")
        assert r.status == 200, r
        return r.text

    def samples(self):
        text = self.metrics()
        problems = promcheck.check(text)
        assert problems == [], "invalid exposition:\n" + "\n".join(problems)
        return promcheck.parse_samples(text)

    def raw(self, data, timeout=5.0):
        """Sends raw bytes on a new connection; returns (responses bytes,
        closed) after the peer closed or timeout passed."""
        with socket.create_connection((HOST, self.port), timeout=timeout) as s:
            s.sendall(data)
            s.settimeout(timeout)
            out = b""
            deadline = time.monotonic() + timeout
            closed = False
            while time.monotonic() < deadline:
                try:
                    d = s.recv(65536)
                except (ConnectionResetError, BrokenPipeError):
                    closed = True
                    break
                except socket.timeout:
                    break
                if not d:
                    closed = True
                    break
                out += d
            return out, closed

    def connect(self, timeout=5.0):
        return socket.create_connection((HOST, self.port), timeout=timeout)


def curl_parallel(port, path, n, outdir, max_parallel=None, timeout=30):
    """n concurrent GETs of path with one curl process (--parallel). Returns
    the list of HTTP status codes, and leaves each body in outdir/r_<i>.txt."""
    os.makedirs(outdir, exist_ok=True)
    url = "http://%s:%d%s?scrape=[1-%d]" % (HOST, port, path, n)
    cmd = ["curl", "-sS", "--parallel", "--parallel-immediate", "--parallel-max", str(max_parallel or n),
           "--max-time", str(timeout), "-w", "%{http_code}\n", "-o", os.path.join(outdir, "r_#1.txt"), url]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 30)
    assert r.returncode == 0, "curl --parallel failed (%d): %s" % (r.returncode, r.stderr)
    return [int(x) for x in r.stdout.split()]
