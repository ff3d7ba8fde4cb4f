"""Bad replies from the *server* side (issue 7, bad input): a ZooKeeper reply
cut short, too long, negative in length, answering an unknown xid,
duplicated, out of order, garbage instead of a frame, a malformed
ConnectResponse, a broken watch event, a multi reply with a broken inner
header, the connection closed mid-frame, and (valid) a reply dribbled one byte
at a time.

The broken replies come from fakezk.FakeZk, a relay in front of a real
ZooKeeper that breaks only the replies of requests naming /fault/<kind>, so a
healthy kazoo session works through the same zkwarden and the same fake server
all along. Each case runs twice, with the same raw-socket client and the same
checker of what reaches the client:

- direct (client -> fake server): the broken bytes reach the client (the
  checker finds a malformed frame): this is what zkwarden must stop;
- through zkwarden (client -> zkwarden -> fake server): the client receives
  only well-formed frames answering its own requests, then EOF; only that
  session's connection is closed, with a logged reason naming it; the
  metrics count it; zkwarden lives; the healthy kazoo session notices nothing;
  a new session works afterwards. A connection the server closes in the
  middle of a reply is not a broken reply but the server's loss (a server
  shutting down drops the rest of a large reply it was writing): the session
  moves to a new connection, the cut reply's request gets CONNECTIONLOSS, and
  the client stays connected (issue 29).

And what kazoo itself makes of a few of these replies, direct and through
zkwarden (test_kazoo_*).
"""

import socket
import struct
import threading
import time
import uuid

import pytest
from kazoo.exceptions import ConnectionLoss
from kazoo.protocol.states import KazooState

from fakezk import CONNRESP_TIMEOUT_MS, FAULTS, FakeZk
from rawzk import connect_request, frame, get_data, ustring
from zkharness import HOST, wait_until

MAX_REPLY = 65536
STAT_LEN = 68
PAYLOAD = b"payload-of-the-fault-node"
BROKEN = [k for k in FAULTS if k != "dribble"]
CUT = "midclose"  # the connection closed mid-reply: the session moves
# Faults that follow a good reply, sent in one write with it.
GOOD_REPLY_FIRST = ("unknownxid", "duplicate", "badwatch")


# ------------------------------------------------------------ what the client receives

def read_until_eof(sock, quiet=20.0, enough=None):
    """Everything the peer sends until it closes (eof True), until it has
    been quiet for `quiet` seconds, or until enough(data) is true (eof
    False)."""
    sock.settimeout(quiet)
    data = b""
    deadline = time.monotonic() + 2 * quiet
    while time.monotonic() < deadline:
        try:
            d = sock.recv(65536)
        except socket.timeout:
            return data, False
        except (ConnectionResetError, BrokenPipeError):
            return data, True
        if not d:
            return data, True
        data += d
        if enough and enough(data):
            return data, False
    return data, False


def check_stream(data, expected, handshake=False):
    """Checks the bytes a client received against the replies it may expect:
    `expected` is the list of (xid, op) it sent, in order; with handshake, the
    stream starts with a ConnectResponse. Returns (frames, problem): the
    well-formed frames, and a description of the first malformed thing (None
    when every byte belongs to a well-formed frame)."""
    frames = []
    pending = list(expected)
    off = 0
    first = handshake
    while off < len(data):
        if len(data) - off < 4:
            return frames, "stream ends inside a frame length (%d bytes)" % (len(data) - off)
        (n,) = struct.unpack(">i", data[off:off + 4])
        if n < (20 if first else 16) or n > MAX_REPLY:
            return frames, "bad frame length %d" % n
        if len(data) - off - 4 < n:
            return frames, "stream ends inside a frame (%d of %d bytes)" % (len(data) - off - 4, n)
        body = data[off + 4:off + 4 + n]
        off += 4 + n
        problem = check_connect_response(body) if first else check_reply(body, pending)
        if problem:
            return frames, problem
        first = False
        frames.append(body)
    return frames, None


def check_connect_response(body):
    try:
        _, timeout, _, plen = struct.unpack(">iiqi", body[:20])
    except struct.error:
        return "ConnectResponse too short"
    if timeout <= 0 or plen != 16 or len(body) not in (20 + plen, 21 + plen):
        return "malformed ConnectResponse (timeout %d, password length %d, %d bytes)" % (timeout, plen, len(body))
    return None


def check_reply(body, pending):
    xid, _, err = struct.unpack(">iqi", body[:16])
    rest = body[16:]
    if xid == -1:  # WatcherEvent: type, state, path
        if len(rest) < 12:
            return "watch event too short"
        (plen,) = struct.unpack(">i", rest[8:12])
        return None if plen >= 0 and len(rest) == 12 + plen else "malformed watch event (path length %d)" % plen
    if xid == -2:
        return None
    if not pending:
        return "reply to xid %d, which no request is waiting for" % xid
    want, op = pending.pop(0)
    if xid != want:
        return "reply to xid %d while xid %d was next" % (xid, want)
    if err != 0:
        return None if not rest else "error reply with a body"
    if op == 4:  # getData: buffer, stat
        if len(rest) < 4:
            return "getData reply too short"
        (dlen,) = struct.unpack(">i", rest[:4])
        return None if len(rest) == 4 + max(dlen, 0) + STAT_LEN else "malformed getData reply"
    if op == 3:  # exists: stat
        return None if len(rest) == STAT_LEN else "malformed exists reply"
    if op == 14:  # multi: results of check ops, then the end marker
        while True:
            if len(rest) < 9:
                return "multi reply ends without its end marker"
            typ, done, e = struct.unpack(">i?i", rest[:9])
            rest = rest[9:]
            if done:
                return None if (typ, e) == (-1, -1) and not rest else "bad multi end marker"
            if typ == 13:
                continue
            if typ == -1 and len(rest) >= 4:  # error result: int err
                rest = rest[4:]
                continue
            return "multi result of unknown type %d" % typ
    return "reply to unexpected op %d" % op


# ------------------------------------------------------------ the raw client

def multi_check(xid, path):
    body = struct.pack(">i?i", 13, False, -1) + ustring(path) + struct.pack(">i", -1)
    body += struct.pack(">i?i", -1, True, -1)
    return frame(struct.pack(">ii", xid, 14) + body)


def requests_for(kind):
    """The bytes the faulted client sends after its handshake, and the
    (xid, op) list of the replies it may expect."""
    path = "/fault/%s" % kind
    if kind == "reorder":
        return get_data(1, path) + get_data(2, "/fault"), [(1, 4), (2, 4)]
    if kind == "badwatch":
        return get_data(1, path, watch=True), [(1, 4)]
    if kind == "badmulti":
        return multi_check(1, path), [(1, 14)]
    return get_data(1, path), [(1, 4)]


class Faulted:
    """A raw client session that asks for one fault."""

    def __init__(self, port, kind):
        self.kind = kind
        self.sock = socket.create_connection((HOST, port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.local_port = self.sock.getsockname()[1]
        self.session = None
        if kind == "connresp":
            self.sock.sendall(connect_request(CONNRESP_TIMEOUT_MS))
            self.expected, self.handshake = [], True
            return
        self.sock.sendall(connect_request(10000))
        hdr = self._exact(4)
        body = self._exact(struct.unpack(">i", hdr)[0])
        _, timeout, self.session = struct.unpack(">iiq", body[:16])
        assert timeout > 0
        data, self.expected = requests_for(kind)
        self.handshake = False
        self.sock.sendall(data)

    def _exact(self, n):
        out = b""
        while len(out) < n:
            d = self.sock.recv(n - len(out))
            assert d, "closed during the handshake"
            out += d
        return out

    def outcome(self, direct=False):
        """(frames, problem, eof). Through zkwarden, read until EOF; direct,
        the fake server keeps the connection open: read until the checker
        finds the broken frame, or the peer is quiet for 3 s."""
        def broken(data):
            return check_stream(data, self.expected, self.handshake)[1] not in (None, "") and \
                not check_stream(data, self.expected, self.handshake)[1].startswith("stream ends inside")
        data, eof = read_until_eof(self.sock, quiet=3.0, enough=broken) if direct else read_until_eof(self.sock)
        frames, problem = check_stream(data, self.expected, self.handshake)
        return frames, problem, eof

    def close(self):
        self.sock.close()


# ------------------------------------------------------------ fixtures

class Healthy:
    """A kazoo session doing work through the same zkwarden all along: it
    must see neither an error nor a state change."""

    def __init__(self, client, root):
        self.c = client
        self.root = root
        self.states = []
        self.errors = []
        self.ops = 0
        self.stop_ev = threading.Event()
        self.session = client.client_id[0]
        client.add_listener(lambda st: self.states.append(st))
        client.ensure_path(root)
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        i = 0
        while not self.stop_ev.is_set():
            i += 1
            try:
                p = "%s/n%d" % (self.root, i % 5)
                if self.c.exists(p) is None:
                    self.c.create(p, b"%d" % i)
                else:
                    self.c.set(p, b"%d" % i)
                assert self.c.get(p)[0] == b"%d" % i
                self.ops += 1
            except Exception as e:  # recorded, judged by check()
                self.errors.append(repr(e))
            time.sleep(0.005)

    def check(self, min_ops=5):
        self.stop_ev.set()
        self.t.join(10)
        assert self.errors == [], self.errors[:5]
        assert self.states == [], "healthy session saw %s" % self.states
        assert self.c.client_id[0] == self.session
        assert self.ops >= min_ops, "healthy session did only %d ops" % self.ops


@pytest.fixture
def fake(zk_server, kazoo_factory):
    direct = kazoo_factory(zk_server.hostport)
    for kind in FAULTS:
        direct.ensure_path("/fault/%s" % kind)
        direct.set("/fault/%s" % kind, PAYLOAD)
    direct.set("/fault", PAYLOAD)
    f = FakeZk(zk_server.hostport, max_reply_frame=MAX_REPLY)
    yield f
    f.stop()


DECODE_UP = 'zkwarden_decode_errors_total{direction="upstream_to_client"}'
CLOSED_PROTO = 'zkwarden_connections_closed_total{reason="protocol_error"}'


# ------------------------------------------------------------ the cases

@pytest.mark.parametrize("kind", BROKEN)
def test_broken_reply_reaches_a_direct_client(kind, fake):
    """The baseline: without zkwarden the client receives the broken bytes."""
    c = Faulted(fake.port, kind)
    try:
        frames, problem, eof = c.outcome(direct=True)
    finally:
        c.close()
    assert problem is not None, "direct: the %s fault did not show (%d frames, eof %s)" % (kind, len(frames), eof)
    print("direct, %s: the client received %d good frame(s), then: %s" % (kind, len(frames), problem))
    assert fake.served.get(kind) == 1


@pytest.mark.zkwarden
def test_reply_cut_by_a_close_moves_the_session(fake, zkwarden_factory, kazoo_factory):
    proxy = zkwarden_factory.start(fake.hostport, extra_env={"ZKWARDEN_MAX_REPLY_FRAME": str(MAX_REPLY)})
    healthy = Healthy(kazoo_factory(proxy.hostport), "/bad-replies/%s" % uuid.uuid4().hex)
    wait_until(lambda: healthy.ops >= 3, 30, what="the healthy session to work")
    c = Faulted(proxy.port, CUT)
    try:
        data, eof = read_until_eof(c.sock, quiet=20.0, enough=lambda d: len(d) >= 20)
        assert not eof, "through zkwarden: the connection was closed:\n" + proxy.stderr()[-3000:]
        assert fake.served.get(CUT) == 1, "the fault was not served"
        frames, problem = check_stream(data, c.expected, c.handshake)
        assert problem is None and len(frames) == 1, (frames, problem)
        assert struct.unpack(">iqi", data[4:20])[::2] == (1, -4), data[:20]  # xid 1: CONNECTIONLOSS
        # The same session goes on.
        c.sock.sendall(get_data(2, "/fault"))
        more, eof = read_until_eof(c.sock, quiet=20.0, enough=lambda d: len(d) >= 20)
        assert not eof and struct.unpack(">iqi", more[4:20])[::2] == (2, 0), more[:20]
    finally:
        c.close()
    assert "closed the connection in the middle of a frame: moving the session" in proxy.stderr()
    assert proxy.metric('zkwarden_session_moves_total{outcome="moved"}') == 1
    wait_until(lambda: healthy.ops >= 10, 30, what="more healthy work")
    healthy.check()


@pytest.mark.zkwarden
@pytest.mark.parametrize("kind", [k for k in BROKEN if k != CUT])
def test_broken_reply_closes_only_that_session(kind, fake, zkwarden_factory, kazoo_factory):
    proxy = zkwarden_factory.start(fake.hostport, extra_env={"ZKWARDEN_MAX_REPLY_FRAME": str(MAX_REPLY)})
    healthy = Healthy(kazoo_factory(proxy.hostport), "/bad-replies/%s" % uuid.uuid4().hex)
    wait_until(lambda: healthy.ops >= 3, 30, what="the healthy session to work")
    before = proxy.metrics()

    c = Faulted(proxy.port, kind)
    try:
        frames, problem, eof = c.outcome()
    finally:
        c.close()
    assert fake.served.get(kind) == 1, "the fault was not served"
    assert problem is None, "through zkwarden, %s: the client received a malformed frame: %s" % (kind, problem)
    assert eof, "through zkwarden, %s: the connection stayed open" % kind
    # Whatever reached the client answers its own requests, in order. The
    # good reply the server sent before the broken frame (in the same TCP
    # segment) is delivered, not dropped with the connection.
    if kind in GOOD_REPLY_FIRST:
        assert len(frames) == 1, "through zkwarden, %s: the good reply before the broken frame was lost" % kind
    else:
        assert frames == []

    # The reason is logged, naming the session (its peer port, and its id
    # when the server had granted one).
    def logged():
        for line in proxy.stderr().splitlines():
            if "closed:" in line and "peer=%s:%d " % (HOST, c.local_port) in line:
                return line
        return None
    line = wait_until(logged, 15, what="the close to be logged")
    if c.session:
        assert "session=0x%x" % c.session in line, line
    print("through zkwarden, %s: %s" % (kind, line.split(" closed: ", 1)[-1]))
    assert "protocol error from upstream" in line, line
    # Where the close line is generic, the line before it says what was wrong.
    detail = {"unknownxid": "answers no outstanding request", "duplicate": "answers no outstanding request",
              "reorder": "xid 2 out of order, expected xid 1"}.get(kind)
    if detail:
        mine = [l for l in proxy.stderr().splitlines() if "peer=%s:%d " % (HOST, c.local_port) in l]
        assert any(detail in l and "bad reply from upstream" in l for l in mine), mine

    after = proxy.metrics()
    assert after[DECODE_UP] == before.get(DECODE_UP, 0) + 1
    assert after[CLOSED_PROTO] == before[CLOSED_PROTO] + 1

    # A new session works through the same zkwarden and fake server.
    fresh = kazoo_factory(proxy.hostport)
    assert fresh.get("/fault")[0] == PAYLOAD
    wait_until(lambda: healthy.ops >= 10, 30, what="more healthy work")
    healthy.check()
    assert proxy.alive()


@pytest.mark.parametrize("via", ["direct", pytest.param("zkwarden", marks=pytest.mark.zkwarden)])
def test_reply_dribbled_byte_by_byte_passes(via, fake, zkwarden_factory):
    """Valid, only slow: one byte per write. Same bytes either way."""
    port = fake.port
    if via == "zkwarden":
        port = zkwarden_factory.start(fake.hostport, extra_env={"ZKWARDEN_MAX_REPLY_FRAME": str(MAX_REPLY)}).port
    c = Faulted(port, "dribble")
    try:
        hdr = c._exact(4)
        body = c._exact(struct.unpack(">i", hdr)[0])
        assert check_reply(body, list(c.expected)) is None
        assert body[16:20] == struct.pack(">i", len(PAYLOAD)) and body[20:20 + len(PAYLOAD)] == PAYLOAD
        # The session goes on.
        c.sock.sendall(get_data(2, "/fault"))
        hdr = c._exact(4)
        body = c._exact(struct.unpack(">i", hdr)[0])
        assert check_reply(body, [(2, 4)]) is None
    finally:
        c.close()
    assert fake.served.get("dribble") == 1


@pytest.mark.zkwarden
def test_broken_reply_to_a_lock_create_in_sidecar_mode(fake, zkwarden_factory, kazoo_factory, zk_server):
    """In sidecar mode a lock create is held behind a barrier and its reply
    may start a reclaim: a broken reply there closes that connection just the
    same, and the next incarnation works."""
    # The lock lies right under its lock root: no own tree is learned from it,
    # so the registry record never names /fault/truncated (which the fake
    # would answer broken too).
    proxy = zkwarden_factory.start(fake.hostport, extra_env={
        "ZKWARDEN_MODE": "sidecar", "ZKWARDEN_LOCK_ROOTS": "/fault/truncated", "ZKWARDEN_SWEEP_INTERVAL_S": "0",
        "ZKWARDEN_MAX_REPLY_FRAME": str(MAX_REPLY)})
    lock = "/fault/truncated/%s" % uuid.uuid4()
    sock = socket.create_connection((HOST, proxy.port), timeout=30)
    sock.sendall(connect_request(10000))
    hdr = sock.recv(4, socket.MSG_WAITALL)
    body = sock.recv(struct.unpack(">i", hdr)[0], socket.MSG_WAITALL)
    session = struct.unpack(">iiq", body[:16])[2]
    # create(path, data, world ACL, EPHEMERAL): a lock by the rule (UUID name).
    acl = struct.pack(">i", 1) + struct.pack(">i", 31) + ustring("world") + ustring("anyone")
    create = frame(struct.pack(">ii", 1, 1) + ustring(lock) + ustring(b"127.0.0.1") + acl + struct.pack(">i", 1))
    sock.sendall(create)
    data, eof = read_until_eof(sock)
    sock.close()
    frames, problem = check_stream(data, [(1, 1)])
    assert eof and frames == [] and problem is None, (data, eof, problem)
    assert fake.served.get("truncated") == 1
    wait_until(lambda: "session=0x%x" % session in proxy.stderr() and "protocol error from upstream" in proxy.stderr(),
               15, what="the close to be logged")
    raw = kazoo_factory(zk_server.hostport).get(lock)[0]
    assert raw.startswith(b"zkwarden-lock 1 identity=")  # it was a tagged lock create
    jm = kazoo_factory(proxy.hostport)  # the next incarnation
    assert jm.get("/fault")[0] == PAYLOAD
    assert proxy.alive()


# ------------------------------------------------------------ kazoo's view

KAZOO_KINDS = ["truncated", "duplicate", "reorder", "badmulti"]


def kazoo_request(c, kind):
    """The request that gets the broken reply; returns what kazoo made of it."""
    try:
        if kind == "reorder":
            a, b = c.get_async("/fault/reorder"), c.get_async("/fault")
            return "returned %r" % ([a.get(timeout=10)[0], b.get(timeout=10)[0]],)
        if kind == "badmulti":
            t = c.transaction()
            t.check("/fault/badmulti", -1)
            return "returned %r" % (t.commit(),)
        return "returned %r" % (c.get("/fault/%s" % kind)[0],)
    except ConnectionLoss:
        return "ConnectionLoss"
    except Exception as e:
        return "raised %r" % e


# Direct, kazoo's connection thread dies on some of these replies: that is
# the point shown, not a fault of the test.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("kind", KAZOO_KINDS)
@pytest.mark.parametrize("via", ["direct", pytest.param("zkwarden", marks=pytest.mark.zkwarden)])
def test_kazoo_on_a_broken_reply(via, kind, fake, zkwarden_factory, kazoo_factory):
    """What a real client makes of the broken reply. Direct, kazoo is fooled
    or broken: a struct.error out of a read (truncated), its connection loop
    dead and the client LOST for good (duplicate, reorder), a corrupt multi
    reply taken as a success (badmulti). Through zkwarden: at worst a
    connection loss, then the same session re-attached and working."""
    hostport = fake.hostport
    if via == "zkwarden":
        hostport = zkwarden_factory.start(fake.hostport,
                                          extra_env={"ZKWARDEN_MAX_REPLY_FRAME": str(MAX_REPLY)}).hostport
    c = kazoo_factory(hostport)
    sid = c.client_id[0]
    states = []
    c.add_listener(lambda st: states.append(st))
    outcome = kazoo_request(c, kind)
    assert fake.served.get(kind) == 1

    def after():
        try:
            return "ok" if c.exists_async("/fault").get(timeout=5) is not None else "missing"
        except ConnectionLoss:
            return None  # reconnecting: ask again
        except Exception as e:
            return "raised %r" % e
    later = wait_until(after, 20, what="kazoo to answer again")
    print("%s, %s: kazoo %s; then %s; states %s" % (via, kind, outcome, later, states))
    if via == "direct":
        if kind == "truncated":
            assert outcome.startswith("raised error("), outcome  # struct.error, not a ZooKeeper error
        elif kind in ("duplicate", "reorder"):
            assert KazooState.LOST in states and "ConnectionClosedError" in later, (states, later)
        else:
            assert outcome.startswith("returned"), outcome  # the broken results taken for good ones
        return
    assert outcome == "ConnectionLoss" or (kind == "duplicate" and outcome.startswith("returned")), outcome
    assert later == "ok" and KazooState.LOST not in states, (later, states)
    assert c.client_id[0] == sid  # the same session, re-attached
