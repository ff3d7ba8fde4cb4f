"""6. Hostile input against zkwarden. A healthy kazoo session, the
JobManager's incarnation (it created its leader latch), stays open through
zkwarden all along; after each case it must still work (get/set), without
having lost its connection, and zkwarden must still be running. The
offending connection itself must be closed by zkwarden (EOF or reset).

Bad input "after a valid ConnectRequest" re-attaches a spare session made
directly on the server, so that each case is one connection and one
session. New sessions among the garbage are plain clients and fence
nothing (issue 12): test_plain_clients.py."""

import os
import random
import socket
import struct
import threading
import time
import uuid

import pytest
from kazoo.protocol.states import KazooState

import rawzk
from zkharness import HOST, wait_until

pytestmark = pytest.mark.zkwarden


class Healthy:
    """A kazoo session through zkwarden that must never notice anything."""

    def __init__(self, proxy, kazoo_factory, name):
        self.proxy = proxy
        self.client = kazoo_factory(proxy)
        self.states = []
        self.client.add_listener(lambda s: self.states.append(s) and False)
        self.sid = self.client.client_id[0]
        # Its leader latch: the session is the JobManager's incarnation.
        self.path = self.client.create("/flink/hostile-%s/leader/latch/_c_%s-latch-" % (name, uuid.uuid4()), b"0",
                                       ephemeral=True, sequence=True, makepath=True)
        self.n = 0

    def check(self, what):
        assert self.proxy.alive(), "zkwarden died after %s" % what
        self.n += 1
        value = ("%s #%d" % (what, self.n)).encode()
        stat = self.client.set(self.path, value)
        assert stat.version == self.n
        assert self.client.get(self.path)[0] == value
        assert self.client.client_id[0] == self.sid
        assert KazooState.SUSPENDED not in self.states and KazooState.LOST not in self.states, \
            "the healthy session saw %s after %s" % (self.states, what)
        assert self.proxy.metric("zkwarden_fences_total") == 0, "something was fenced after %s" % what


class Spares:
    """Sessions created directly on the server (raw, 30 s), left open without
    closeSession, to be re-attached through zkwarden by the bad clients."""

    def __init__(self, server):
        self.server = server
        self.sessions = []

    def get(self, n=1):
        out = []
        for _ in range(n):
            sock = socket.create_connection((HOST, self.server.port), timeout=10)
            sock.sendall(rawzk.connect_request(timeout_ms=30000))
            sid, passwd = read_connect_response(sock)
            sock.close()
            assert sid != 0
            self.sessions.append((sid, passwd))
            out.append((sid, passwd))
        return out

    def close_all(self):
        for sid, passwd in self.sessions:
            try:
                sock = socket.create_connection((HOST, self.server.port), timeout=10)
                sock.sendall(rawzk.connect_request(timeout_ms=30000, session_id=sid,
                                                   passwd=passwd))
                if read_connect_response(sock)[0] == sid:
                    sock.sendall(rawzk.request(1, -11))
                    closed_by_peer(sock, 5)
                sock.close()
            except OSError:
                pass


def read_connect_response(sock):
    """(sessionId, passwd) of the ConnectResponse on sock; (0, b"") if the
    peer closed first."""
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
        d = sock.recv(4096)
        if not d:
            return 0, b""
        buf += d
    _, _timeout, sid, plen = struct.unpack(">iiqi", buf[4:24])
    return sid, buf[24:24 + plen]


@pytest.fixture
def spares(zk_server):
    sp = Spares(zk_server)
    yield sp
    sp.close_all()


def attach(port, session):
    """A connection to port that re-attached `session` (a valid handshake)."""
    sid, passwd = session
    sock = socket.create_connection((HOST, port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(rawzk.connect_request(timeout_ms=30000, session_id=sid, passwd=passwd))
    got, _ = read_connect_response(sock)
    assert got == sid, "re-attaching session 0x%x through zkwarden failed" % sid
    return sock


@pytest.fixture
def proxy(zk_server, zkwarden_factory):
    # the default mode: one JobManager's sidecar
    return zkwarden_factory.start(zk_server, extra_env={"ZKWARDEN_MODE": "sidecar"})


@pytest.fixture
def healthy(proxy, kazoo_factory, request):
    h = Healthy(proxy, kazoo_factory, request.node.name.replace("[", "-").rstrip("]"))
    h.check("start")
    return h


def closed_by_peer(sock, timeout=10.0):
    """Reads until EOF or reset; returns (True, bytes read) or (False, bytes)
    when the peer keeps the connection open past the timeout."""
    sock.settimeout(timeout)
    data = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            d = sock.recv(65536)
            if not d:
                return True, data
            data += d
    except (ConnectionResetError, BrokenPipeError):
        return True, data
    except socket.timeout:
        pass
    return False, data


def send_and_expect_close(proxy, payload, session=None):
    """Sends payload on a new connection (raw, or after a valid handshake
    re-attaching `session`) and requires zkwarden to close it and to log a
    line naming the peer (DESIGN.md section 4: "closes that one connection
    with a logged reason"). Returns what was read before the close."""
    if session:
        sock = attach(proxy.port, session)
    else:
        sock = socket.create_connection((HOST, proxy.port), timeout=10)
    peer = "%s:%d" % sock.getsockname()
    try:
        try:
            sock.sendall(payload)
        except (ConnectionResetError, BrokenPipeError):
            data = b""      # closed while we were still writing: fine
        else:
            closed, data = closed_by_peer(sock)
            assert closed, "zkwarden kept the connection open (read %r)" % data[:64]
    finally:
        sock.close()
    wait_until(lambda: peer in proxy.stderr(), 5,
               what="zkwarden to log why it closed %s" % peer)
    return data


def test_http_request_as_first_bytes(proxy, healthy):
    send_and_expect_close(proxy, b"GET / HTTP/1.1\r\nHost: zk\r\n\r\n")
    healthy.check("an HTTP request")


KNOWN_OPS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 16, 17, 18, 19, 21, 22, 100, 101,
             102, 103, 104, 105, 106, 107, -11]


def garbage(seed):
    """Seeded garbage of three kinds: raw bytes (mostly an absurd length
    prefix); well-framed random bodies; well-framed requests with a known
    opcode and a random body (strings, vectors and flags all random)."""
    rnd = random.Random(seed)
    kind = seed % 3
    if kind == 0:
        return bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 16384)))
    frames = []
    for _ in range(rnd.randint(1, 20)):
        body = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 300)))
        if kind == 2:
            body = struct.pack(">ii", rnd.randint(1, 1000), rnd.choice(KNOWN_OPS)) + body
        frames.append(rawzk.frame(body))
    return b"".join(frames)


@pytest.mark.parametrize("after_connect", [False, True], ids=["first-bytes", "after-connect"])
def test_random_garbage(proxy, healthy, spares, after_connect):
    """zkwarden may be waiting for the rest of a frame the garbage announced,
    so the sender half-closes; zkwarden must then close too, and stay up."""
    session = spares.get()[0] if after_connect else None
    for seed in range(30):
        payload = garbage(seed)
        if session:
            sock = attach(proxy.port, session)
        else:
            sock = socket.create_connection((HOST, proxy.port), timeout=10)
        try:
            try:
                sock.sendall(payload)
                sock.shutdown(socket.SHUT_WR)
            except (ConnectionResetError, BrokenPipeError):
                pass
            else:
                closed, data = closed_by_peer(sock)
                assert closed, "seed %d: connection still open" % seed
        finally:
            sock.close()
        healthy.check("garbage seed %d" % seed)


@pytest.mark.parametrize("after_connect", [False, True], ids=["first-frame", "after-connect"])
def test_frame_length_0x7fffffff(proxy, healthy, spares, after_connect):
    data = send_and_expect_close(proxy, struct.pack(">I", 0x7FFFFFFF) + b"\0" * 64,
                                 spares.get()[0] if after_connect else None)
    assert data == b""
    healthy.check("length 0x7fffffff")


@pytest.mark.parametrize("length", [-1, -5, -0x80000000])
@pytest.mark.parametrize("after_connect", [False, True], ids=["first-frame", "after-connect"])
def test_negative_frame_length(proxy, healthy, spares, length, after_connect):
    data = send_and_expect_close(proxy, struct.pack(">i", length) + b"\0" * 64,
                                 spares.get()[0] if after_connect else None)
    assert data == b""
    healthy.check("length %d" % length)


def test_string_length_past_frame(proxy, healthy, spares):
    """getData whose path length (1000) runs past its 16-byte frame. (The
    server itself answers MARSHALLINGERROR and keeps the connection; zkwarden
    parses the frame and must close.)"""
    body = struct.pack(">ii", 1, 4) + struct.pack(">i", 1000) + b"/abc"
    send_and_expect_close(proxy, rawzk.frame(body), spares.get()[0])
    healthy.check("string past frame")


def test_connect_request_truncated(proxy, healthy):
    """A ConnectRequest frame whose password length runs past the frame."""
    body = struct.pack(">iqiq", 0, 0, 10000, 0) + struct.pack(">i", 500) + b"\0" * 16 + b"\0"
    data = send_and_expect_close(proxy, rawzk.frame(body))
    assert data == b""
    healthy.check("truncated ConnectRequest")


def test_unknown_opcode(proxy, healthy, spares):
    """Opcode 9999 after a valid handshake. The server answers
    UNIMPLEMENTED (-6) and closes; zkwarden may relay that reply or close
    first, but the connection must end."""
    data = send_and_expect_close(proxy, rawzk.request(7, 9999), spares.get()[0])
    if data:
        n, xid, _zxid, err = struct.unpack(">iiqi", data[:20])
        assert (n, xid, err) == (16, 7, -6), data
    healthy.check("opcode 9999")


def test_frame_over_zkwarden_max_frame(zk_server, zkwarden_factory, kazoo_factory):
    """With ZKWARDEN_MAX_FRAME below the server's own limit, a request the
    server would take is refused by zkwarden: the connection closes (the
    client sees ConnectionLoss and reconnects its session); smaller frames
    pass."""
    from kazoo.exceptions import ConnectionLoss
    proxy = zkwarden_factory.start(zk_server, extra_env={"ZKWARDEN_MAX_FRAME": "65536",
                                                         "ZKWARDEN_MODE": "sidecar"})
    c = kazoo_factory(proxy)
    sid = c.client_id[0]
    c.create("/hostile-maxframe", b"x" * 60000)
    with pytest.raises(ConnectionLoss):
        c.set("/hostile-maxframe", b"y" * 100000)
    assert c.retry(c.get, "/hostile-maxframe")[0] == b"x" * 60000
    assert c.client_id[0] == sid
    assert proxy.alive()


def test_300_idle_connections(proxy, healthy, kazoo_factory, spares):
    socks = []
    try:
        for _ in range(300):
            socks.append(socket.create_connection((HOST, proxy.port), timeout=10))
        healthy.check("300 idle connections")
        # a new kazoo client (on a spare session, as the other cases)
        newcomer = kazoo_factory(proxy, timeout=30, client_id=spares.get()[0])
        newcomer.create("/hostile-newcomer", b"hi", ephemeral=True)
        assert newcomer.get("/hostile-newcomer")[0] == b"hi"
        newcomer.stop()
    finally:
        for s in socks:
            s.close()
    healthy.check("closing 300 idle connections")


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def test_connect_flood(proxy, healthy, kazoo_factory, spares):
    session = spares.get()[0]
    base_fds = open_fds(proxy.proc.pid)
    deadline = time.monotonic() + 90
    done = 0
    for i in range(2000):
        if time.monotonic() > deadline:
            break
        s = socket.create_connection((HOST, proxy.port), timeout=10)
        if i % 10 == 0:
            # some send a whole ConnectRequest (re-attaching the spare
            # session) and leave at once
            try:
                s.sendall(rawzk.connect_request(timeout_ms=30000, session_id=session[0],
                                                passwd=session[1]))
            except OSError:
                pass
        s.close()
        done += 1
    assert done >= 1000, "only %d connect+close in 90 s" % done
    healthy.check("%d connect+close" % done)
    c = kazoo_factory(proxy, timeout=30, client_id=session)
    assert c.exists("/") is not None
    c.stop()
    # no descriptor leak: zkwarden goes back to about where it started
    wait_until(lambda: open_fds(proxy.proc.pid) <= base_fds + 4, 20,
               what="zkwarden's open fds (%d at start) to settle" % base_fds)


def test_garbage_on_many_connections_at_once(proxy, healthy, spares):
    """Thirty concurrent bad clients (garbage, huge and negative lengths),
    each closed, while the healthy session keeps working."""
    payloads = [struct.pack(">I", 0x7FFFFFFF), struct.pack(">i", -7), b"\xff" * 100,
                b"GET / HTTP/1.0\r\n\r\n"]
    errors = []
    sessions = spares.get(15)

    def bad(i):
        try:
            send_and_expect_close(proxy, payloads[i % len(payloads)],
                                  sessions[i // 2] if i % 2 else None)
        except BaseException as e:  # report every failure, not just the first
            errors.append("client %d: %r" % (i, e))
    threads = [threading.Thread(target=bad, args=(i,)) for i in range(30)]
    for t in threads:
        t.start()
    healthy.check("concurrent bad clients (during)")
    for t in threads:
        t.join(60)
    assert errors == []
    healthy.check("concurrent bad clients")


def test_addauth_loop_keeps_memory_bounded(proxy, healthy):
    """Issue 29, item 6: a process that loops addauth (100,000 packets of
    1 KiB, each other credentials) on one session: zkwarden keeps each
    distinct packet once for a session move, up to a bound (16 packets, 64
    KiB); past it the session is marked not movable, with one log line.
    Every packet is still relayed and answered; zkwarden's RSS stays
    bounded (it grew by 100 MB, copying the whole buffer at each packet,
    when every packet was kept)."""
    from test_proxy_mechanics import rss_kib
    raw = rawzk.RawSession(proxy.port, timeout_ms=30000)
    try:
        rss0 = rss_kib(proxy.proc.pid)
        for batch in range(100):
            raw.send(b"".join(rawzk.auth("digest", "user%d:%s" % (batch * 1000 + i, "p" * 1000))
                              for i in range(1000)))
            for _ in range(1000):
                xid, _, err, _ = raw.read_reply()
                assert (xid, err) == (-4, 0)
        grown = rss_kib(proxy.proc.pid) - rss0
        assert grown < 8 * 1024, "zkwarden grew by %d KiB" % grown
        raw.send(rawzk.exists(1, "/"))
        assert raw.read_reply()[:3:2] == (1, 0)
        assert proxy.stderr().count("more auth packets than zkwarden keeps for a replay") == 1
        assert proxy.metric('zkwarden_session_moves_refused_total{reason="auth_not_kept"}') == 1
    finally:
        raw.close()
    healthy.check("an addauth loop")
