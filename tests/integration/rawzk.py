"""A minimal ZooKeeper wire client on a raw socket, for tests that need exact
control of the bytes (pipelining without reading, malformed frames).

It writes frames with struct and reads replies back; it is a test client, not
a server: every test that uses it talks to a real ZooKeeper (directly or
through zkwarden).
"""

import socket
import struct

from zkharness import HOST


def frame(body):
    return struct.pack(">i", len(body)) + body


def connect_request(timeout_ms=10000, session_id=0, passwd=b"\0" * 16, last_zxid=0):
    body = struct.pack(">iqiq", 0, last_zxid, timeout_ms, session_id)
    body += struct.pack(">i", len(passwd)) + passwd + b"\0"
    return frame(body)


def ustring(s):
    if isinstance(s, str):
        s = s.encode()
    return struct.pack(">i", len(s)) + s


def request(xid, op, body=b""):
    return frame(struct.pack(">ii", xid, op) + body)


def get_data(xid, path, watch=False):
    return request(xid, 4, ustring(path) + (b"\1" if watch else b"\0"))


def exists(xid, path, watch=False):
    return request(xid, 3, ustring(path) + (b"\1" if watch else b"\0"))


def auth(scheme, data):
    """An addauth packet (xid -4, opcode 100)."""
    if isinstance(data, str):
        data = data.encode()
    return request(-4, 100, struct.pack(">i", 0) + ustring(scheme) + struct.pack(">i", len(data)) + data)


def create(xid, path, data=b"", flags=0):
    """create (opcode 1) with the open ACL (world:anyone, all permissions)."""
    acl = struct.pack(">ii", 1, 31) + ustring("world") + ustring("anyone")
    return request(xid, 1, ustring(path) + struct.pack(">i", len(data)) + data + acl + struct.pack(">i", flags))


class RawSession:
    """A connected, established ZooKeeper session on a raw socket."""

    def __init__(self, port, timeout_ms=10000, sock_timeout=10.0, rcvbuf=None):
        if rcvbuf:  # a small receive window: set before connecting, never shrunk after
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            self.sock.settimeout(sock_timeout)
            self.sock.connect((HOST, port))
        else:
            self.sock = socket.create_connection((HOST, port), timeout=sock_timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.sock.sendall(connect_request(timeout_ms))
        body = self.read_frame()
        _, self.timeout, self.session_id = struct.unpack(">iiq", body[:16])
        (n,) = struct.unpack(">i", body[16:20])
        self.passwd = body[20:20 + n]
        if self.timeout <= 0:
            raise RuntimeError("session rejected")

    def send(self, data):
        self.sock.sendall(data)

    def create_latch(self, parent="/flink"):
        """Acts as the JobManager: ensures `parent` and creates a leader latch
        node under it (EPHEMERAL_SEQUENTIAL), which begins an incarnation
        through a sidecar. Returns the latch create's error code (0: ok)."""
        import uuid
        self.send(create(0x7000, parent) + create(0x7001, "%s/_c_%s-latch-" % (parent, uuid.uuid4()), flags=3))
        errs = {}
        while len(errs) < 2:
            xid, _, err, _ = self.read_reply()
            errs[xid] = err
        return errs[0x7001]

    def read_exact(self, n):
        while len(self.buf) < n:
            d = self.sock.recv(max(65536, n - len(self.buf)))
            if not d:
                raise ConnectionError("peer closed after %d of %d bytes" % (len(self.buf), n))
            self.buf += d
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_frame(self):
        (n,) = struct.unpack(">i", self.read_exact(4))
        return self.read_exact(n)

    def read_reply(self):
        """(xid, zxid, err, body) of the next reply frame."""
        body = self.read_frame()
        xid, zxid, err = struct.unpack(">iqi", body[:16])
        return xid, zxid, err, body[16:]

    def closed_by_peer(self, timeout=5.0):
        """True when the peer closes (EOF or reset) within timeout."""
        self.sock.settimeout(timeout)
        try:
            while True:
                d = self.sock.recv(65536)
                if not d:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
