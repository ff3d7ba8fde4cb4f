"""FakeZk: a misbehaving ZooKeeper *server side* for the bad-reply tests
(issue 7, "malformed frames from the server side").

It is not a ZooKeeper implementation: it is a relay in front of a REAL
ZooKeeper server that passes every frame through unchanged, and breaks the
server's replies only on the connections that ask for it, so that healthy
sessions through the same fake server keep working:

- a request whose body contains the bytes `/fault/<kind>` (any opcode, multi
  sub-ops included) marks its reply for the fault `<kind>` (see FAULTS);
- a ConnectRequest whose timeout is CONNRESP_TIMEOUT_MS gets a malformed
  ConnectResponse (the fault "connresp").

Everything listens on and connects to 127.0.0.1 only. One thread per
connection; stop() closes the listener and every connection it relays.
"""

import re
import socket
import struct
import threading
import time

from zkharness import HOST

# A ConnectRequest with this timeout gets a malformed ConnectResponse.
CONNRESP_TIMEOUT_MS = 7777

FAULTS = {
    "truncated": "the reply body cut short (a stat missing its last 8 bytes), frame length adjusted",
    "oversized": "a frame length one byte above max_reply_frame, then that many bytes",
    "negative": "a negative frame length",
    "unknownxid": "the reply, then a copy answering an xid that was never sent",
    "duplicate": "the reply sent twice",
    "reorder": "the reply held back and sent after the reply to the next request",
    "garbage": "an HTTP error page instead of a frame",
    "connresp": "a ConnectResponse whose password length runs past the frame",
    "dribble": "the reply written one byte at a time (valid: must pass)",
    "badwatch": "the reply, then a watch event whose path length runs past the frame",
    "badmulti": "a multi reply whose first result header carries an unknown type",
    "midclose": "half of the reply frame, then the connection closed",
}

_KIND = re.compile(rb"/fault/([a-z]+)")


def _frames(buf):
    """Splits buf into whole frames (4-byte length included); returns
    (frames, rest). A length that is not positive is returned as a frame of
    its 4 bytes so the caller can pass it on as it is."""
    out = []
    while len(buf) >= 4:
        (n,) = struct.unpack(">i", buf[:4])
        if n < 0 or len(buf) < 4 + n:
            break
        out.append(buf[:4 + n])
        buf = buf[4 + n:]
    return out, buf


class _Relay(threading.Thread):
    """One client connection and its connection to the real server."""

    def __init__(self, fake, client):
        super().__init__(daemon=True)
        self.fake = fake
        self.client = client
        self.server = socket.create_connection(fake.upstream, timeout=10)
        for s in (self.client, self.server):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.settimeout(None)
        self.lock = threading.Lock()  # writes to the client
        self.marked = {}              # xid -> fault kind
        self.connresp = None          # fault for the ConnectResponse
        self.handshake = True
        self.held = None              # "reorder": the reply held back
        self.closed = False

    # ---- client -> server

    def _from_client(self):
        buf = b""
        first = True
        try:
            while not self.closed:
                d = self.client.recv(65536)
                if not d:
                    break
                buf += d
                frames, buf = _frames(buf)
                for f in frames:
                    if first:
                        first = False
                        if len(f) >= 24 and struct.unpack(">i", f[16:20])[0] == CONNRESP_TIMEOUT_MS:
                            self.connresp = "connresp"
                    elif len(f) >= 12:
                        m = _KIND.search(f[12:])
                        if m and m.group(1).decode() in FAULTS:
                            (xid,) = struct.unpack(">i", f[4:8])
                            self.marked[xid] = m.group(1).decode()
                    self.server.sendall(f)
                if buf and first is False and len(buf) >= 4 and struct.unpack(">i", buf[:4])[0] < 0:
                    self.server.sendall(buf)  # pass bad input on; the server judges it
                    buf = b""
        except OSError:
            pass
        self.close()

    # ---- server -> client

    def _send(self, data):
        with self.lock:
            self.client.sendall(data)

    def _reply(self, f):
        if self.handshake:
            self.handshake = False
            if self.connresp:
                self.fake.count(self.connresp)
                body = f[4:]
                # protocolVersion, timeOut, sessionId, then a password length
                # of 1000 with 16 bytes behind it.
                bad = body[:16] + struct.pack(">i", 1000) + body[20:]
                return self._send(struct.pack(">i", len(bad)) + bad)
            return self._send(f)
        xid = struct.unpack(">i", f[4:8])[0] if len(f) >= 8 else None
        kind = self.marked.pop(xid, None) if xid is not None and xid >= 0 else None
        if self.held is not None and kind is None and xid is not None and xid >= 0:
            held, self.held = self.held, None
            self._send(f)
            return self._send(held)
        if kind is None:
            return self._send(f)
        self.fake.count(kind)
        body = f[4:]
        if kind == "truncated":
            cut = body[:-8]
            self._send(struct.pack(">i", len(cut)) + cut)
        elif kind == "oversized":
            n = self.fake.max_reply_frame + 1
            self._send(struct.pack(">i", n) + (body + b"\0" * n)[:n])
        elif kind == "negative":
            self._send(struct.pack(">i", -16) + body)
        elif kind == "unknownxid":
            self._send(f + f[:4] + struct.pack(">i", 0x7FFFFFF0) + f[8:])
        elif kind == "duplicate":
            self._send(f + f)
        elif kind == "reorder":
            self.held = f
        elif kind == "garbage":
            self._send(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        elif kind == "dribble":
            for i in range(len(f)):
                self._send(f[i:i + 1])
                time.sleep(0.002)
        elif kind == "badwatch":
            ev = struct.pack(">iqiii", -1, -1, 0, 3, 3) + struct.pack(">i", 1000) + b"/fault"
            self._send(f + struct.pack(">i", len(ev)) + ev)
        elif kind == "badmulti":
            # ReplyHeader (16 bytes), then the first MultiHeader's type.
            bad = body[:16] + struct.pack(">i", 0x7FFF) + body[20:]
            self._send(struct.pack(">i", len(bad)) + bad)
        elif kind == "midclose":
            self._send(f[:max(5, len(f) // 2)])
            self.close()

    def _from_server(self):
        buf = b""
        try:
            while not self.closed:
                d = self.server.recv(65536)
                if not d:
                    break
                buf += d
                frames, buf = _frames(buf)
                for f in frames:
                    self._reply(f)
                    if self.closed:
                        return
        except OSError:
            pass
        self.close()

    def run(self):
        t = threading.Thread(target=self._from_server, daemon=True)
        t.start()
        self._from_client()
        t.join(10)

    def close(self):
        if self.closed:
            return
        self.closed = True
        for s in (self.client, self.server):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass


class FakeZk:
    """The misbehaving server: listens on a free 127.0.0.1 port and relays to
    the real server at `upstream` (host:port)."""

    def __init__(self, upstream, max_reply_frame=1048575):
        host, port = upstream.rsplit(":", 1)
        assert host == HOST
        self.upstream = (host, int(port))
        self.max_reply_frame = max_reply_frame
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((HOST, 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.relays = []
        self.served = {}
        self._lock = threading.Lock()
        self._stopped = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def hostport(self):
        return "%s:%d" % (HOST, self.port)

    def count(self, kind):
        with self._lock:
            self.served[kind] = self.served.get(kind, 0) + 1

    def _accept(self):
        while not self._stopped:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            try:
                r = _Relay(self, c)
            except OSError:
                c.close()
                continue
            with self._lock:
                self.relays.append(r)
            r.start()

    def stop(self):
        self._stopped = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes accept()
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass
        with self._lock:
            relays = list(self.relays)
        for r in relays:
            r.close()
        for r in relays:
            r.join(5)
