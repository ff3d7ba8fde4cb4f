"""An orphan (a JobManager's connection gone without closeSession) and the
re-attach of its session (issue 29, items 3 and 4):

- test_cancelled_fence_keeps_the_session_timeout: the orphan fence has
  re-attached the session on the server (its answer held by a relay in
  "mute") when the JobManager comes back; the fence stops before
  closeSession. The server re-validated the session with the timeout the
  fence asked for: it must be the session's own (20 s), not the fence's
  bound (6 s), for the JobManager's re-attach then goes to a first server
  that takes the connection and never answers (a relay in "drop"): zkwarden
  gives up on it after 10 s and closes the connection, the JobManager
  connects again, as the ZooKeeper client does, and reaches the good one.
  The session survives, with its own timeout, its latch still its own,
  nothing fenced. (When the fence asked for its own bound, the session
  expired 6 s after the fence's re-attach.)
- test_orphan_whose_reattach_fails_is_still_fenced: a ConnectRequest with
  the orphan's session id whose connection ends before the server confirms
  it (the client goes), or that carries the wrong password, does not save
  the orphan: its latch goes within two graces and the fence, not at the
  session timeout (when any ConnectRequest with the id forgot the orphan,
  the crashed JobManager's latch stayed until the session expired).
"""

import socket
import struct
import sys
import time
from pathlib import Path

import pytest

import rawzk
from zkharness import HOST, ZkServer, four_letter, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "faults"))
import netfault  # noqa: E402  (tests/faults: the fault-injecting relay)
from test_partitions import sidecar_env as partitions_sidecar_env  # noqa: E402

pytestmark = pytest.mark.zkwarden

SESSION_MS = 20000


def sidecar_env(**extra):
    return partitions_sidecar_env("jm-0", **extra)


@pytest.fixture
def zk(tmp_path):
    """A ZooKeeper server that answers `cons` (which sessions it holds)."""
    srv = ZkServer(tmp_path / "zk", four_letter_words="srvr,ruok,stat,cons")
    srv.start()
    yield srv
    srv.stop()


def holds(zk, sid):
    return ("sid=0x%x" % sid) in four_letter(zk.port, "cons").decode()


def latch_of(observer, sid):
    kids = observer.get_children("/flink/c1/leader/latch")
    mine = [k for k in kids if observer.exists("/flink/c1/leader/latch/" + k).ephemeralOwner == sid]
    assert len(mine) == 1, kids
    return "/flink/c1/leader/latch/" + mine[0]


def connect_response(sock, timeout=30.0):
    """(negotiated timeout, session id) of the ConnectResponse on sock."""
    sock.settimeout(timeout)
    body = b""
    while len(body) < 20:
        chunk = sock.recv(64)
        if not chunk:
            raise ConnectionError("closed before the ConnectResponse")
        body += chunk
    _, _, negotiated, session = struct.unpack(">iiiq", body[:20])
    return negotiated, session


def test_cancelled_fence_keeps_the_session_timeout(zk, zkwarden_factory, kazoo_factory):
    first = netfault.Relay(zk.hostport, name="first").start()  # later silent
    good = netfault.Relay(zk.hostport, name="good").start()
    try:
        proxy = zkwarden_factory.start(first.hostport, good.hostport, extra_env=sidecar_env(
            ZKWARDEN_ORPHAN_GRACE_MS=500, ZKWARDEN_FENCE_TIMEOUT_MS=6000))
        observer = kazoo_factory(zk.hostport)
        observer.ensure_path("/flink/c1/leader")
        raw = rawzk.RawSession(proxy.port, timeout_ms=SESSION_MS)  # through `first`
        assert raw.timeout == SESSION_MS
        assert raw.create_latch("/flink/c1/leader/latch") == 0
        sid, passwd = raw.session_id, raw.passwd
        latch = latch_of(observer, sid)
        # A plain client between: the re-attach's turn begins with `first`.
        plain = rawzk.RawSession(proxy.port, timeout_ms=SESSION_MS)
        plain.send(rawzk.request(1, -11))
        assert plain.closed_by_peer()
        first.set_mode("drop")
        good.set_mode("mute")
        raw.close()  # an orphan after 500 ms; its fence re-attaches through `good`
        accepted = good.accepted
        wait_until(lambda: good.accepted > accepted and holds(zk, sid), 10, what="the fence's re-attach on the server")
        back = socket.create_connection((HOST, proxy.port), timeout=10)
        try:
            back.sendall(rawzk.connect_request(SESSION_MS, sid, passwd))
            wait_until(lambda: "re-attaches while its orphan fence is under way" in proxy.stderr(), 10,
                       what="the re-attach to meet the fence")
            good.set_mode("pass")
            t0 = time.monotonic()
            try:
                negotiated, session = connect_response(back)
            except ConnectionError:  # the silent server: the JobManager connects again
                back.close()
                back = socket.create_connection((HOST, proxy.port), timeout=10)
                back.sendall(rawzk.connect_request(SESSION_MS, sid, passwd))
                negotiated, session = connect_response(back)
            took = time.monotonic() - t0
            assert (negotiated, session) == (SESSION_MS, sid), \
                "the re-attach after %.1f s: %s" % (took, (negotiated, session))
            assert took > 4, "the silent first server did not delay the re-attach (%.1f s)" % took
            assert observer.exists(latch).ephemeralOwner == sid
            assert "re-attached: not fenced" in proxy.stderr()
            assert proxy.metric("zkwarden_orphans_fenced_total") == 0
            back.sendall(rawzk.request(1, -11))
            wait_until(lambda: "after closeSession" in proxy.stderr(), 10, what="the session to close")
        finally:
            back.close()
    finally:
        first.stop()
        good.stop()


@pytest.mark.parametrize("how", ["client gone", "wrong password"])
def test_orphan_whose_reattach_fails_is_still_fenced(how, zk, zkwarden_factory, kazoo_factory):
    relay = netfault.Relay(zk.hostport, name="orphan").start()
    try:
        proxy = zkwarden_factory.start(relay.hostport, extra_env=sidecar_env(ZKWARDEN_ORPHAN_GRACE_MS=3000))
        observer = kazoo_factory(zk.hostport)
        observer.ensure_path("/flink/c1/leader")
        raw = rawzk.RawSession(proxy.port, timeout_ms=SESSION_MS)
        assert raw.create_latch("/flink/c1/leader/latch") == 0
        sid, passwd = raw.session_id, raw.passwd
        latch = latch_of(observer, sid)
        raw.close()  # crashed: an orphan, fenced 3 s from now unless re-attached
        t0 = time.monotonic()
        wait_until(lambda: "closed: client closed the connection" in proxy.stderr(), 10, what="the orphan")
        back = socket.create_connection((HOST, proxy.port), timeout=10)
        if how == "client gone":
            relay.set_mode("mute")  # the server takes the re-attach; its answer is held
            wait_until(lambda: not holds(zk, sid), 10, what="the crashed connection gone on the server")
            back.sendall(rawzk.connect_request(SESSION_MS, sid, passwd))
            wait_until(lambda: holds(zk, sid), 10, what="the server to take the re-attach")
            back.close()  # gone before the server confirmed the session
            relay.set_mode("pass")
        else:
            back.sendall(rawzk.connect_request(SESSION_MS, sid, b"\x01" * 16))
            assert connect_response(back) == (0, 0)  # the server refuses it
            back.close()
        wait_until(lambda: observer.exists(latch) is None, 15, what="the orphan's latch to go")
        assert time.monotonic() - t0 < SESSION_MS / 1000.0 / 2, "gone only with the session"
        assert proxy.metric("zkwarden_orphans_fenced_total") == 1
    finally:
        relay.stop()
