"""4. closeSession and 5. session expiry, directly and through zkwarden."""

import socket
import struct
import threading

from kazoo.protocol.states import KazooState

import rawzk
from zkharness import HOST, wait_until


class States:
    """Records a kazoo client's state transitions."""

    def __init__(self, client):
        self.seen = []
        self.cond = threading.Condition()
        client.add_listener(self._on)

    def _on(self, state):
        with self.cond:
            self.seen.append(state)
            self.cond.notify_all()
        return False

    def wait_for(self, state, timeout=20.0):
        with self.cond:
            ok = self.cond.wait_for(lambda: state in self.seen, timeout)
        assert ok, "state %s not reached; seen %s" % (state, self.seen)


def test_close_session_removes_ephemerals(target, kazoo_factory):
    root = "/close-" + target.kind
    owner = kazoo_factory(target)
    watcher = kazoo_factory(target.another())
    owner.create(root, b"")
    owner.create(root + "/eph1", b"1", ephemeral=True)
    owner.create(root + "/eph2", b"2", ephemeral=True)
    owner.create(root + "/seq-", b"", ephemeral=True, sequence=True)
    sid = owner.client_id[0]
    assert watcher.exists(root + "/eph1").ephemeralOwner == sid

    events = []
    got = threading.Event()

    def on(ev):
        events.append((ev.type, ev.path))
        if len(events) == 2:
            got.set()
    watcher.exists(root + "/eph1", watch=on)
    watcher.get_children(root, watch=on)

    owner.stop()    # sends closeSession and waits for its reply
    assert got.wait(10), "events after closeSession: %s" % events
    assert sorted(events) == [("CHILD", root), ("DELETED", root + "/eph1")]
    assert watcher.exists(root + "/eph1") is None
    assert watcher.get_children(root) == []


def test_session_closed_by_another_handle_expires(target, kazoo_factory):
    root = "/expire-" + target.kind
    victim = kazoo_factory(target)
    states = States(victim)
    victim.create(root, b"")
    victim.create(root + "/eph", b"", ephemeral=True)
    sid, passwd = victim.client_id

    # a second handle on the same session (the server moves the session to
    # the new connection), closed: the session ends on the server
    thief = kazoo_factory(target, client_id=(sid, passwd))
    assert thief.client_id[0] == sid
    thief.stop()

    # the victim's next connect gets the "invalid session" ConnectResponse
    states.wait_for(KazooState.LOST)
    # kazoo then starts a new session by itself
    wait_until(lambda: victim.connected and victim.client_id[0] not in (0, sid), 20,
               what="kazoo to open a new session")
    assert victim.exists(root + "/eph") is None
    assert victim.get_children(root) == []

    # a raw reattach to the closed session: timeOut 0, sessionId 0, a
    # 16-byte zero password, then the connection closes
    with socket.create_connection((HOST, target.port), timeout=10) as s:
        s.sendall(rawzk.connect_request(session_id=sid, passwd=passwd))
        reply = b""
        while True:
            try:
                d = s.recv(4096)
            except ConnectionResetError:
                break
            if not d:
                break
            reply += d
    assert reply == struct.pack(">iiiq", 37, 0, 0, 0) + struct.pack(">i", 16) + b"\0" * 16 \
        + b"\0", reply

