"""The session move (issue 22, zkw_move.c): when the server a session is on
goes away, zkwarden re-attaches the session to another server while its
client stays connected. On a 3-server ensemble from the Debian package, with
the fault made real on a member:

- test_kazoo_watches_survive[kill|stop]: kill -9 of the session's server,
  or SIGSTOP longer than a third of the session timeout. A kazoo client
  direct (pinned to that server first) goes SUSPENDED then CONNECTED; the
  same client through zkwarden sees no state change, keeps its session id
  and its ephemeral, and every watch notification the direct client got
  (data, exist and child watches, for writes made by a third session while
  the sessions were moving) reaches it too: the same (type, path) log.
- test_rolling_restart_curator_jm: every member stopped with SIGTERM,
  started and waited for in turn, with the Curator JobManager of the
  partition tests (LeaderLatch, ConnectionStateListener) direct and through
  a sidecar. Direct: SUSPENDED at least once. Through zkwarden: no state
  change, the same session, leadership never revoked, and a lock taken at
  the end.
- test_move_off_drops_as_direct: with ZKWARDEN_SESSION_MOVE=off the client
  through zkwarden goes SUSPENDED as direct (the switch works, and the test
  above could fail).

The network cut between zkwarden and one server, and a partition longer
than the client's budget (zkwarden drops the client in time: SUSPENDED,
LOST, as direct), are test_partitions.py::test_jm_state_sequence.
"""

import json
import threading
import time
import uuid

import pytest

from test_partitions import JM, session_moves, sidecar_env
from zkharness import Ensemble, wait_until

SESSION_S = 6.0


@pytest.fixture(scope="module")
def move_ensemble(tmp_path_factory):
    e = Ensemble(tmp_path_factory.mktemp("move-ensemble"))
    try:
        e.start()
        yield e
    finally:
        e.stop()


def healed(ensemble):
    """Every member running and in the quorum again (after a test's fault)."""
    for s in ensemble.servers:
        s.resume()
        if not s.alive():
            s.start(wait=False)
    ensemble.wait_quorum(60)


def follower(ensemble):
    modes = ensemble.modes()
    return modes.index("follower")


class Client:
    """A kazoo client that records its state changes and watch events."""

    def __init__(self, hosts, name):
        from kazoo.client import KazooClient
        self.name = name
        self.states = []
        self.events = []
        self.lock = threading.Lock()
        self.zk = KazooClient(hosts=hosts, timeout=SESSION_S, randomize_hosts=False,
                              connection_retry={"max_tries": -1, "delay": 0.05, "max_delay": 0.5})
        self.zk.start(timeout=20)
        self.zk.add_listener(self._state)

    def _state(self, state):
        with self.lock:
            self.states.append(str(state))

    def _event(self, ev):
        with self.lock:
            self.events.append((ev.type, ev.path))

    def arm(self, base):
        """A data watch, an exist watch (node missing) and a child watch."""
        self.zk.get(base + "/data", watch=self._event)
        assert self.zk.exists(base + "/later", watch=self._event) is None
        self.zk.get_children(base, watch=self._event)

    def got(self):
        with self.lock:
            return sorted(self.events)

    def close(self):
        self.zk.stop()
        self.zk.close()


def upstream_of(proxy):
    sessions = json.loads(proxy.admin_get("/v1/sessions")[1])["sessions"]
    ups = [s["upstream"] for s in sessions if s["session"] not in ("", "0", "0x0")]
    return ups[0] if len(ups) == 1 else None


@pytest.mark.zkwarden
@pytest.mark.parametrize("fault", ["kill", "stop"])
def test_kazoo_watches_survive(fault, move_ensemble, zkwarden_factory):
    ens = move_ensemble
    f = follower(ens)
    order = [ens.servers[f]] + [s for i, s in enumerate(ens.servers) if i != f]
    others = ",".join(s.hostport for s in order[1:])
    base = "/move-%s-%s" % (fault, uuid.uuid4().hex[:8])
    proxy = zkwarden_factory.start(*[s.hostport for s in order],
                                   extra_env=sidecar_env("move-%s" % uuid.uuid4().hex[:8]))
    from kazoo.client import KazooClient
    writer = KazooClient(hosts=others, timeout=10)
    writer.start(timeout=20)
    writer.ensure_path(base + "/data")
    clients = []
    try:
        direct = Client(",".join(s.hostport for s in order), "direct")
        clients.append(direct)
        through = Client(proxy.hostport, "zkwarden")
        clients.append(through)
        for c in clients:
            c.zk.create(base + "/eph-" + c.name, ephemeral=True)
            c.arm(base)
        # Both sessions are on the server about to fail.
        assert direct.zk._connection._socket.getpeername()[1] == ens.servers[f].port
        assert wait_until(lambda: upstream_of(proxy), 10, what="the session's upstream") == ens.servers[f].hostport
        sids = {c.name: c.zk.client_id[0] for c in clients}

        t0 = time.monotonic()
        if fault == "kill":
            ens.servers[f].kill()
        else:
            ens.servers[f].pause()
        # Changes made while the sessions move: the re-armed watches fire.
        writer.set(base + "/data", b"changed")
        writer.create(base + "/later", b"")
        want = sorted([("CHANGED", base + "/data"), ("CREATED", base + "/later"), ("CHILD", base)])
        wait_until(lambda: direct.states[-2:] == ["SUSPENDED", "CONNECTED"], 4 * SESSION_S,
                   what="direct: SUSPENDED then CONNECTED")
        wait_until(lambda: session_moves(proxy).get("moved", 0) >= 1, 4 * SESSION_S,
                   what="zkwarden: the session moved")
        for c in clients:
            wait_until(lambda: len(c.got()) >= len(want), 4 * SESSION_S, what="%s: the notifications" % c.name)
        assert direct.got() == want, direct.got()
        assert through.got() == direct.got(), "through zkwarden %s, direct %s" % (through.got(), direct.got())
        assert upstream_of(proxy) != ens.servers[f].hostport
        # Past the client's read timeout after the fault, any SUSPENDED
        # would have been reported (absence is seen only by time).
        time.sleep(max(0.0, t0 + SESSION_S - time.monotonic()))
        assert through.states == [], "through zkwarden: %s" % through.states
        assert through.zk.client_id[0] == sids["zkwarden"]
        owner = writer.exists(base + "/eph-zkwarden").ephemeralOwner
        assert owner == sids["zkwarden"], "ephemeral owner 0x%x, session 0x%x" % (owner, sids["zkwarden"])
        # And it works: a write and a read through the moved session.
        through.zk.set(base + "/data", b"after")
        assert writer.get(base + "/data")[0] == b"after"
    finally:
        for c in clients:
            c.close()
        writer.stop()
        writer.close()
        healed(ens)


def _latch_parent(ensemble, path):
    from kazoo.client import KazooClient
    c = KazooClient(hosts=ensemble.connect, timeout=10)
    c.start(timeout=20)
    try:
        c.ensure_path(path)
    finally:
        c.stop()
        c.close()


@pytest.mark.zkwarden
def test_rolling_restart_curator_jm(move_ensemble, zkwarden_factory, java_classes, tmp_path):
    ens = move_ensemble
    session_ms = 10000
    tag = "rolling-%s" % uuid.uuid4().hex[:8]
    proxy = zkwarden_factory.start(*[s.hostport for s in ens.servers], extra_env=sidecar_env("jm-" + tag))
    jms = []
    try:
        for kind, connect in (("direct", ens.connect), ("zkwarden", proxy.hostport)):
            _latch_parent(ens, "/%s/%s/leader" % (tag, kind))
            jms.append(JM(java_classes, connect, session_ms, "/%s/%s/leader" % (tag, kind), tmp_path, "jm-" + kind))
        before = []
        for jm in jms:
            jm.wait_line(lambda l: l.startswith("READY"), 60, what="READY")
            before.append(jm.sid())
            assert before[-1][1], "%s: not leading before the restart" % jm.name
        marks = [jm.mark() for jm in jms]
        for s in ens.servers:
            s.stop()
            s.start(wait=False)
            ens.wait_quorum(60)
        # The direct JM lost its server at least once and came back.
        jms[0].wait_line(lambda l: l.startswith("STATE RECONNECTED"), 30, since=marks[0],
                         what="direct: RECONNECTED")
        wait_until(lambda: jms[0].sid()[1], 30, what="direct: leading again")
        assert "SUSPENDED" in jms[0].states(marks[0]), "direct:\n" + jms[0].output()
        moved = session_moves(proxy)
        assert moved.get("moved", 0) >= 1, moved
        through = jms[1]
        assert through.states(marks[1]) == [], "through zkwarden:\n" + through.output()
        assert not [l for _, l in through.lines[marks[1]:] if l == "LEADER false"], through.output()
        sid, leading = through.sid()
        assert (sid, leading) == (before[1][0], True), "through zkwarden: %s -> %s" % (before[1], (sid, leading))
        m = through.mark()
        through.proc.stdin.write("LOCK /%s/zkwarden/after-restart\n" % tag)
        through.proc.stdin.flush()
        _, done = through.wait_line(lambda l: l.startswith("DONE LOCK"), 20, since=m, what="a lock")
        assert done.endswith(" ok"), done
    finally:
        for jm in jms:
            jm.stop()
        healed(ens)


@pytest.mark.zkwarden
def test_move_off_drops_as_direct(move_ensemble, zkwarden_factory):
    ens = move_ensemble
    f = follower(ens)
    order = [ens.servers[f]] + [s for i, s in enumerate(ens.servers) if i != f]
    proxy = zkwarden_factory.start(*[s.hostport for s in order], extra_env={"ZKWARDEN_SESSION_MOVE": "off"})
    c = Client(proxy.hostport, "off")
    try:
        assert wait_until(lambda: upstream_of(proxy), 10, what="the session's upstream") == ens.servers[f].hostport
        ens.servers[f].kill()
        wait_until(lambda: c.states[-2:] == ["SUSPENDED", "CONNECTED"], 4 * SESSION_S,
                   what="SUSPENDED then CONNECTED with the move off")
        assert session_moves(proxy).get("moved", 0) == 0
    finally:
        c.close()
        healed(ens)
