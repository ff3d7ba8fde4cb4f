"""The session move (issue 22, zkw_move.c): when the server a session is on
goes away, zkwarden re-attaches the session to another server while its
client stays connected. On a 3-server ensemble from the Debian package, with
the fault made real on a member:

- test_watches_survive[kill|stop]: kill -9 of the session's server, or
  SIGSTOP longer than half the session timeout. The Java client direct
  (tests/integration/java/ReconnectWatch.java: data, child, exist and
  persistent-recursive watches) is disconnected, reconnects and re-arms its
  watches; the same client through zkwarden, on the same member, sees no
  session event, keeps its session and its ephemeral, and gets every
  notification the direct one got for writes a third session made while
  the sessions moved. A kazoo client through zkwarden keeps its session,
  ephemeral and watches too (direct, kazoo drops its watches at every
  disconnect: test_reconnect.py).
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
from test_reconnect import CLIENTS, LineProc
from zkharness import four_letter, wait_until

SESSION_S = 6.0


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

    def __init__(self, hosts, name, timeout=SESSION_S):
        from kazoo.client import KazooClient
        self.name = name
        self.states = []
        self.events = []
        self.lock = threading.Lock()
        self.zk = KazooClient(hosts=hosts, timeout=timeout, randomize_hosts=False,
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


def upstreams(proxy):
    """The upstream of each established session (None while it moves)."""
    sessions = json.loads(proxy.admin_get("/v1/sessions")[1])["sessions"]
    return [s.get("upstream") for s in sessions if s["session"] not in ("", "0", "0x0")]


def upstream_of(proxy):
    ups = upstreams(proxy)
    return ups[0] if len(ups) == 1 else None


def session_server(ensemble, sid_hex):
    """The member whose `cons` lists the session (None if none does)."""
    for i, srv in enumerate(ensemble.servers):
        try:
            text = four_letter(srv.port, "cons", timeout=2.0).decode("utf-8", "replace")
        except OSError:
            continue
        if "sid=0x%s" % sid_hex in text:
            return i
    return None


def java_events(proc, since):
    return sorted(l for l in proc.lines[since:] if l.startswith("EVENT ") and not l.startswith("EVENT None "))


@pytest.mark.zkwarden
@pytest.mark.parametrize("fault", ["kill", "stop"])
def test_watches_survive(fault, move_ensemble, zkwarden_factory, java_classes, tmp_path):
    ens = move_ensemble
    tag = "move-%s-%s" % (fault, uuid.uuid4().hex[:8])
    roots = {k: "/%s-%s" % (tag, k) for k in ("direct", "zkwarden", "kazoo")}
    from kazoo.client import KazooClient
    setup = KazooClient(hosts=ens.connect, timeout=10)
    setup.start(timeout=20)
    for root in roots.values():
        for path in (root, root + "/watched", root + "/tree", root + "/data"):
            setup.ensure_path(path)
    procs, clients = [], []
    try:
        # The Java client direct (it re-arms its watches itself when it
        # reconnects), then zkwarden first to the same member.
        direct = LineProc(java_classes.cmd("ReconnectWatch", ens.connect, roots["direct"]), tmp_path / "direct.err")
        procs.append(direct)
        sid_direct = direct.lines[direct.expect(r"^READY [0-9a-f]+$")].split()[1]
        f = wait_until(lambda: [session_server(ens, sid_direct)] if session_server(ens, sid_direct) is not None
                       else None, 10, what="the direct session's member")[0]
        order = [ens.servers[f]] + [s for i, s in enumerate(ens.servers) if i != f]
        proxy = zkwarden_factory.start(*[s.hostport for s in order], extra_env=sidecar_env(tag))
        through = LineProc(java_classes.cmd("ReconnectWatch", ",".join([proxy.hostport] * 6), roots["zkwarden"]),
                           tmp_path / "through.err")
        procs.append(through)
        sid_through = through.lines[through.expect(r"^READY [0-9a-f]+$")].split()[1]
        # A second sidecar for kazoo: each one sends its first session to
        # the first server of its list.
        proxy2 = zkwarden_factory.start(*[s.hostport for s in order], extra_env=sidecar_env(tag + "-kazoo"))
        # 30 s as the Java client's: a paused leader costs an election.
        kz = Client(proxy2.hostport, "kazoo", timeout=30.0)
        clients.append(kz)
        kz.zk.create(roots["kazoo"] + "/eph", ephemeral=True)
        kz.arm(roots["kazoo"])
        for p in (proxy, proxy2):
            assert set(upstreams(p)) == {ens.servers[f].hostport}, upstreams(p)
        marks = [len(p.lines) for p in procs]

        if fault == "kill":
            ens.servers[f].kill()
        else:
            ens.servers[f].pause()
        # Changes made while the sessions move, seen by a third session.
        writer = KazooClient(hosts=",".join(s.hostport for s in order[1:]), timeout=10)
        writer.start(timeout=30)
        for root in roots.values():
            writer.set(root + "/watched", b"1")
            writer.create(root + "/watched/kid", b"")
            writer.create(root + "/later", b"")
            writer.create(root + "/tree/x", b"")
            writer.create(root + "/tree/x/y", b"")
            writer.set(root + "/data", b"changed")
        writer.stop()
        writer.close()
        # Direct first: the client lost its server and came back.
        gone = direct.expect(r"^EVENT None Disconnected ", marks[0], timeout=40)
        direct.expect(r"^EVENT None SyncConnected ", gone, timeout=40)
        # The one-shot watches fire when re-armed (the changes came while
        # disconnected); the persistent one does not replay what it missed.
        one_shot = sorted(l for l in CLIENTS["java"]["expected"] if "R/tree" not in l)
        wait_until(lambda: set(one_shot) <= set(java_events(direct, marks[0])), 30,
                   what="direct: the notifications")
        # Through zkwarden: every notification the direct client got.
        wait_until(lambda: set(java_events(direct, marks[0])) <= set(java_events(through, marks[1])), 40,
                   what="through zkwarden: the notifications the direct client got")
        kz_want = sorted([("CHANGED", roots["kazoo"] + "/data"), ("CREATED", roots["kazoo"] + "/later"),
                          ("CHILD", roots["kazoo"])])
        wait_until(lambda: kz.got() == kz_want, 30, what="kazoo through zkwarden: %s" % kz.got())
        for p in (proxy, proxy2):
            moved = session_moves(p)
            assert moved.get("moved", 0) == 1, moved
            assert ens.servers[f].hostport not in upstreams(p)
        # No state change through zkwarden: a round trip on each moved
        # session now, after the move; a disconnect would have come first.
        through.send("CHECK")
        i = through.expect(r"^SID ", marks[1])
        kz.zk.exists(roots["kazoo"])
        assert [l for l in through.lines[marks[1]:] if l.startswith("EVENT None ")] == [], through.lines
        assert kz.states == [], kz.states
        assert through.lines[i] == "SID " + sid_through
        assert through.lines[through.expect(r"^EPH ", i)] == "EPH owner=self"
        assert setup.exists(roots["kazoo"] + "/eph").ephemeralOwner == kz.zk.client_id[0]
    finally:
        for p in procs:
            p.close()
        for c in clients:
            c.close()
        setup.stop()
        setup.close()
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


@pytest.mark.zkwarden
def test_zkcli_keeps_its_session(move_ensemble, zkwarden_factory, tmp_path):
    """zkCli.sh through zkwarden, its member killed -9 under it: no
    Disconnected event, its data watch fires for a write made meanwhile, and
    its ephemeral is still its own (the Java client direct is disconnected
    by the same fault: test_watches_survive)."""
    ens = move_ensemble
    f = follower(ens)
    order = [ens.servers[f]] + [s for i, s in enumerate(ens.servers) if i != f]
    root = "/move-zkcli-%s" % uuid.uuid4().hex[:8]
    proxy = zkwarden_factory.start(*[s.hostport for s in order])
    from kazoo.client import KazooClient
    writer = KazooClient(hosts=",".join(s.hostport for s in order[1:]), timeout=10)
    writer.start(timeout=20)
    writer.ensure_path(root + "/data")
    writer.set(root + "/data", b"before-the-kill")
    cli = LineProc(["/usr/share/zookeeper/bin/zkCli.sh", "-server", proxy.hostport], tmp_path / "zkcli.err")
    try:
        cli.send("create -e %s/eph x" % root)  # "Created ..." goes to stderr
        cli.send("get -w %s/data" % root)
        cli.expect(r"^before-the-kill$", timeout=60)
        assert wait_until(lambda: upstream_of(proxy), 10, what="zkCli's upstream") == ens.servers[f].hostport
        mark = len(cli.lines)
        ens.servers[f].kill()
        writer.set(root + "/data", b"changed")
        cli.expect(r"WatchedEvent state:SyncConnected type:NodeDataChanged path:%s/data" % root, mark, timeout=30)
        cli.send("stat %s/eph" % root)
        owner = cli.lines[cli.expect(r"^ephemeralOwner = 0x", mark, timeout=30)].split("= ")[1]
        assert int(owner, 16) == writer.exists(root + "/eph").ephemeralOwner
        assert session_moves(proxy).get("moved", 0) == 1
        assert [l for l in cli.lines if "state:Disconnected" in l] == [], cli.lines
    finally:
        cli.send("quit")
        cli.close()
        writer.stop()
        writer.close()
        healed(ens)
