#!/usr/bin/python3
"""Writes the seed corpus of the admin endpoint fuzz target (fuzz_admin.c) to
tests/fuzz/corpus-admin/: valid GETs of every path, HEAD, other methods,
unknown paths, HTTP/1.0 and 0.9, huge headers, long URLs, bodies, chunked
bodies, pipelined requests, and each of them again in small pieces and with
the target's switches. Each file is the target's input: a chunking byte, a
flags byte, then the client's bytes. Re-run after changing the list; the
fuzzer's own finds are added by hand (minimised) when worth keeping."""
import hashlib
import os
import sys

PATHS = ["/healthz", "/readyz", "/metrics", "/v1/sessions", "/v1/reclaims", "/v1/locks", "/"]
H = "Host: 127.0.0.1:9000\r\n"


def get(path, method="GET", version="HTTP/1.1", headers=H, body=""):
    return f"{method} {path} {version}\r\n{headers}\r\n{body}".encode("latin-1")


def requests():
    for p in PATHS:
        yield get(p)
        yield get(p + "?x=1#frag")
        yield get(p, "HEAD")
        yield get(p, "POST", headers=H + "Content-Length: 5\r\n", body="hello")
        yield get(p, version="HTTP/1.0", headers="")
    for m in ["PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "BREW", "CONNECT"]:
        yield get("/healthz", m)
    yield get("127.0.0.1:9000", "CONNECT")
    yield get("/nope")
    yield get("/", "HEAD")
    yield get("*", "OPTIONS")
    yield b"GET /healthz\r\n\r\n"  # HTTP/0.9
    yield get("/healthz", version="HTTP/2.0")
    yield get("/healthz", headers=H + "Connection: close\r\n")
    yield get("/healthz", headers=H + "Upgrade: websocket\r\nConnection: Upgrade\r\n")
    yield get("/healthz", headers=H + "X-Big: " + "a" * 9000 + "\r\n")
    yield get("/healthz", headers=H + "".join(f"X-{i}: {i}\r\n" for i in range(400)))
    yield get("/" + "u" * 1100)
    yield get("/healthz", "POST", headers=H + "Content-Length: 5000\r\n")
    yield get("/healthz", "POST", headers=H + "Transfer-Encoding: chunked\r\n",
              body="5\r\nhello\r\n0\r\n\r\n")
    yield get("/healthz", "POST", headers=H + "Transfer-Encoding: chunked\r\n",
              body="400\r\n" + "b" * 1024 + "\r\n400\r\n" + "b" * 1024 + "\r\n0\r\n\r\n")
    yield get("/healthz", headers=H + "Content-Length: 1\r\nContent-Length: 2\r\n")
    yield get("/healthz", headers="Host: a\r\n bad folding\r\n")
    yield b"".join(get(p) for p in PATHS)  # pipelined
    yield b"".join(get("/metrics") for _ in range(20)) + get("/healthz", headers="Connection: close\r\n") \
        + get("/readyz")
    yield get("/healthz") + get("/healthz", "HEAD") + get("/x") + b"garbage\r\n\r\n"
    yield get("/healthz")[:20]  # incomplete (the timeout answers)
    yield b"\x00\x01\xff garbage"
    yield b"\r\n\r\nGET /healthz HTTP/1.1\r\n\r\n"


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus-admin")
    os.makedirs(out, exist_ok=True)
    n = 0
    for req in requests():
        # whole; in pieces of up to 7 bytes; with the timeout; as the last
        # allowed answer; with responses piling up; with a hostile peer name
        # (the large requests whole and in pieces only)
        prefixes = [b"\x00\x00", b"\x07\x00", b"\x00\x02", b"\x03\x04", b"\x00\x08",
                    b"\x00\x11\x0a\"\\\n\x01\x7f\xff\xc3\xa9zz"]
        for prefix in prefixes if len(req) < 2048 else prefixes[:2]:
            data = prefix + req
            name = hashlib.sha1(data).hexdigest()
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
            n += 1
    print(f"{n} seeds in {out}")


if __name__ == "__main__":
    main()
