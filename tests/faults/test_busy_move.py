"""The session move when the JobManager is busy or slow, and only when the
server fails (issue 29). On a 3-server ensemble from the Debian package and
a single server, with the fault made real:

- test_busy_rolling_restart: a JobManager (kazoo) that creates and deletes a
  lock node every 20 ms, as a session cluster completing checkpoints does,
  so that a lock create or delete (a barrier in zkwarden) is in flight at
  almost every moment; every member stopped with SIGTERM and started in
  turn, two rounds. Direct: SUSPENDED. Through a sidecar: no state change,
  the same session, the JobManager's work goes on; a move goes to the server
  that came back last, not to the next one to stop: the session's own
  server stops under it at most 4 times in the 6 restarts (6 when it moved
  to "the next server"), and each loss costs at most one move (a leader's
  restart, an election, drops every connection of the ensemble: ZooKeeper's
  own `srvr` and `cons` say which restarts were which).
  Through an observe-mode sidecar in the same run: the JobManager is dropped
  as direct (SUSPENDED), nothing moves, and each drop is a would-action
  (kind session_move) in /v1/reclaims and zkwarden_would_actions_total.
- test_paused_client_is_not_moved: a kazoo client in its own process asks
  for 150 reads of a 1 MB node and a setData, and is stopped (SIGSTOP, a GC
  pause, begun by its reader thread once it read the first reply, so the
  rest is unread whatever the machine's load) for longer than a third of
  its session timeout, inside its read timeout. zkwarden stops reading the server meanwhile (backpressure), which
  is not the server's silence. Direct and through zkwarden: every reply
  arrives, no CONNECTIONLOSS; zkwarden moves nothing.
- test_reset_seen_on_a_write_moves: the server's connection is reset while
  zkwarden is not reading it (a client that does not read its replies); the
  first to see the reset is the write of the client's next request. The
  session moves and answers every request.
- test_own_read_buffer_failure_is_not_a_loss: zkwarden's own read buffer
  for the server cannot be allocated (fault injection, UV_ENOBUFS): the
  session is closed as zkwarden's failure, not moved to another server.
"""

import json
import os
import re
import signal
import subprocess
import threading
import time
import uuid

import pytest
from kazoo.client import KazooClient

import rawzk
from netfault import Relay
from test_partitions import session_moves, sidecar_env
from test_session_move import healed, session_server
from zkharness import REPO, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
SESSION_S = 10.0
PACE_S = 2.0  # a restarted server serves this long before the next one stops


class BusyJM:
    """A JobManager in a thread of the test: its latch (which makes it the
    JobManager through a sidecar), then a lock node created and deleted
    every 20 ms under a retained checkpoint."""

    def __init__(self, hosts, base):
        self.base = base
        self.states = []
        self.done = 0
        self.errors = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.zk = KazooClient(hosts=hosts, timeout=SESSION_S, randomize_hosts=False,
                              connection_retry={"max_tries": -1, "delay": 0.05, "max_delay": 0.5})
        self.zk.start(timeout=30)
        self.zk.add_listener(lambda st: self.states.append(str(st)))
        self.zk.ensure_path(base + "/leader/latch")
        self.zk.create("%s/leader/latch/_c_%s-latch-" % (base, uuid.uuid4()), b"", ephemeral=True,
                       sequence=True)
        self.locks = "%s/jobs/%s/checkpoints/%019d/locks" % (base, uuid.uuid4().hex, 1)
        self.zk.ensure_path(self.locks)
        self.session = self.zk.client_id[0]
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stopping.is_set():
            path = "%s/%s" % (self.locks, uuid.uuid4())
            for op in (lambda: self.zk.create(path, b"10.0.0.1", ephemeral=True), lambda: self.zk.delete(path)):
                try:
                    op()
                    with self.lock:
                        self.done += 1
                except Exception as e:  # noqa: BLE001 counted: ConnectionLoss, NoNode after a lost create
                    with self.lock:
                        self.errors[type(e).__name__] = self.errors.get(type(e).__name__, 0) + 1
            self.stopping.wait(0.02)

    def ops(self):
        with self.lock:
            return self.done

    def close(self):
        self.stopping.set()
        self.thread.join(10)
        self.zk.stop()
        self.zk.close()


def would_moves(proxy):
    return int(proxy.metric('zkwarden_would_actions_total{kind="session_move"}'))


@pytest.mark.zkwarden
def test_busy_rolling_restart(move_ensemble, zkwarden_factory):
    ens = move_ensemble
    tag = "busy-%s" % uuid.uuid4().hex[:8]
    ups = [s.hostport for s in ens.servers]
    sidecar = zkwarden_factory.start(*ups, extra_env=sidecar_env("jm-" + tag))
    observe = zkwarden_factory.start(*ups, extra_env=sidecar_env("jm-obs-" + tag, ZKWARDEN_MODE="observe"))
    jms = {}
    try:
        jms["direct"] = BusyJM(ens.connect, "/flink/%s-direct" % tag)
        jms["zkwarden"] = BusyJM(sidecar.hostport, "/flink/%s-sidecar" % tag)
        jms["observe"] = BusyJM(observe.hostport, "/flink/%s-observe" % tag)
        before = {k: jm.ops() for k, jm in jms.items()}
        wait_until(lambda: all(jm.ops() > before[k] + 20 for k, jm in jms.items()), 20, what="the JMs busy")
        sid_hex = "%x" % jms["zkwarden"].session
        own_stops = elections = 0
        for _ in range(2):
            for i, s in enumerate(ens.servers):
                # What ZooKeeper itself says: the member the session is on,
                # and whether this one leads (its stop is an election, which
                # drops every connection of the ensemble).
                on = wait_until(lambda: [session_server(ens, sid_hex)] if session_server(ens, sid_hex) is not None
                                else None, 20, what="the session's member")[0]
                leads = ens.modes()[i] == "leader"
                own_stops += on == i
                elections += leads and on != i
                s.stop()
                s.start(wait=False)
                ens.wait_quorum(60)
                # As an operator's rolling restart goes on: the server back in
                # the quorum and ready for a readiness probe's period, every
                # JobManager busy again.
                time.sleep(PACE_S)
                mark = {k: jm.ops() for k, jm in jms.items()}
                wait_until(lambda: all(jm.ops() > mark[k] + 10 for k, jm in jms.items()), 30,
                           what="every JobManager busy after the restart")
        direct, through, obs = jms["direct"], jms["zkwarden"], jms["observe"]
        print("busy rolling restart: direct SUSPENDED %d, through zkwarden moves %s (own server stopped %d times, "
              "%d other elections), observe SUSPENDED %d" % (direct.states.count("SUSPENDED"), session_moves(sidecar),
                                                            own_stops, elections, obs.states.count("SUSPENDED")))
        assert "SUSPENDED" in direct.states, "direct: %s" % direct.states
        moved = session_moves(sidecar)
        assert through.states == [], "through zkwarden: %s (moves %s, errors %s)" % (through.states, moved,
                                                                                      through.errors)
        assert through.zk.client_id[0] == through.session
        # A move goes to the server back most recently, not to the next one
        # to stop: the session's own server stopped under it at most 4 times
        # in 6 restarts (always, moving to "the next server"); and no loss
        # cost more than one move.
        assert own_stops <= 4, (own_stops, elections, moved)
        assert 1 <= moved.get("moved", 0) <= own_stops + elections, (own_stops, elections, moved)
        assert sum(v for k, v in moved.items() if k != "moved") == 0, moved
        # Observe mode: dropped as direct, each drop reported, nothing moved.
        suspended = obs.states.count("SUSPENDED")
        assert suspended >= 1, "observe: %s" % obs.states
        assert session_moves(observe).get("moved", 0) == 0
        assert would_moves(observe) == suspended, (would_moves(observe), obs.states)
        rows = json.loads(observe.admin_get("/v1/reclaims")[1])["reclaims"]
        wanted = [r for r in rows if r["kind"] == "session_move"]
        assert len(wanted) == suspended and all(r["would"] and not r["done"] for r in wanted), wanted
        assert all(r["session"] == "0x%x" % obs.session for r in wanted), wanted
    finally:
        for jm in jms.values():
            jm.close()
        healed(ens)


# ------------------------------------------------------------ a GC pause

# The pause begins in the client's own reader thread, right after it read
# the first reply of the batch off its socket: the reader thread stops the
# process (SIGSTOP sent to itself stops every thread, the reader before it
# reads on) with the other 150 replies unread, so
# that a reader faster than the parent's signal cannot read them all first.
# When each reply was read off the socket is noted there too (the reader
# thread, before its callbacks run), not when a callback ran: callbacks
# bunch up after SIGCONT.
PAUSED_CLIENT = """
import json, signal, sys, threading, time
from kazoo.client import KazooClient
from kazoo.protocol import connection
hosts, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
arrived = []
read_response = connection.ConnectionHandler._read_response
def noted(self, header, buffer, offset):
    mine = self.client._pending and getattr(self.client._pending[0][0], "path", None) in (path, path + "-w")
    r = read_response(self, header, buffer, offset)
    if mine:
        arrived.append(time.monotonic())
        if len(arrived) == 1:
            # To this very thread: delivered before it reads on (a stop of the
            # whole process, os.kill, may let it read the next reply first).
            signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)  # the pause begins; the parent ends it
    return r
connection.ConnectionHandler._read_response = noted
zk = KazooClient(hosts=hosts, timeout=6.0, connection_retry={"max_tries": 0}, command_retry={"max_tries": 0})
zk.start(timeout=20)
states = []
zk.add_listener(lambda s: states.append(str(s)))
results = [zk.get_async(path) for _ in range(n)] + [zk.set_async(path + "-w", b"after the reads")]
ok, errors = 0, []
for r in results:
    try:
        r.get(timeout=60)
        ok += 1
    except Exception as e:
        errors.append(type(e).__name__)
# The pause shows as the gap between the first reply and the next, read off the socket.
print(json.dumps({"ok": ok, "errors": errors, "states": states,
                  "gap_s": arrived[1] - arrived[0] if len(arrived) > 1 else 0.0,
                  "after_gap": len(arrived) - 1}), flush=True)
zk.stop()
zk.close()
"""


def stopped(p):
    """The child process is stopped (SIGSTOP): /proc says T. Raises if it ended."""
    if p.poll() is not None:
        raise AssertionError("the paused client ended: %s %s" % (p.returncode, p.stderr.read()))
    with open("/proc/%d/stat" % p.pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def paused_run(hostport, path, n=150, pause_s=3.7):
    """The client's replies once it ran again after its pause."""
    p = subprocess.Popen(["/usr/bin/python3", "-c", PAUSED_CLIENT, hostport, path, str(n)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: stopped(p), 60, interval=0.005, what="the client paused after its first reply")
        time.sleep(pause_s)  # the pause itself: the fault under test
        p.send_signal(signal.SIGCONT)
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        return json.loads(out.strip().splitlines()[-1])
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.parametrize("kind", ["direct", pytest.param("zkwarden", marks=pytest.mark.zkwarden)])
def test_paused_client_is_not_moved(kind, zk_server, request):
    direct = KazooClient(hosts=zk_server.hostport, timeout=10)
    direct.start(timeout=20)
    path = "/gc-pause-%s" % uuid.uuid4().hex[:8]
    direct.create(path, b"x" * 1000000)
    direct.create(path + "-w", b"")
    try:
        hostport = zk_server.hostport
        if kind == "zkwarden":
            proxy = request.getfixturevalue("zkwarden_factory").start(
                zk_server, extra_env=sidecar_env("jm-gc-%s" % uuid.uuid4().hex[:6]))
            hostport = proxy.hostport
        got = paused_run(hostport, path)
        # Paused with most of the 150 MB unread (far more than every buffer on
        # the way holds: zkwarden stopped reading the server).
        assert got["gap_s"] >= 3.0 and got["after_gap"] >= 100, got
        del got["gap_s"], got["after_gap"]
        assert got == {"ok": 151, "errors": [], "states": []}, got
        assert direct.get(path + "-w")[0] == b"after the reads"
        if kind == "zkwarden":
            assert sum(session_moves(proxy).values()) == 0, session_moves(proxy)
            assert "moving the session" not in proxy.stderr()
    finally:
        direct.delete(path)
        direct.delete(path + "-w")
        direct.stop()
        direct.close()


# ------------------------------------------------------------ write-path loss

def read_until_closed_or(raw, xids, timeout=30.0):
    """Reads replies until every xid in xids is answered; returns {xid: err}."""
    raw.sock.settimeout(timeout)
    got = {}
    while set(xids) - set(got):
        xid, _, err, _ = raw.read_reply()
        got[xid] = err
    return got


def not_reading(proxy, relay):
    """zkwarden stopped reading the server: the relay holds what the server
    sends, and what zkwarden read of it did not grow over 300 ms."""
    key = 'zkwarden_relayed_bytes_total{direction="upstream_to_client"}'
    if relay.held_to_client() < (1 << 20):
        return False
    before = proxy.metric(key)
    time.sleep(0.3)
    return relay.held_to_client() >= (1 << 20) and proxy.metric(key) == before


@pytest.mark.zkwarden
def test_reset_seen_on_a_write_moves(zk_server, zkwarden_factory, kazoo_factory):
    relay = Relay(zk_server.hostport, name="write-reset").start()
    path = "/write-reset-%s" % uuid.uuid4().hex[:8]
    direct = kazoo_factory(zk_server.hostport)
    direct.create(path, b"y" * 1000000)
    try:
        proxy = zkwarden_factory.start(relay.hostport, extra_env=sidecar_env("jm-wr-%s" % uuid.uuid4().hex[:6]))
        raw = rawzk.RawSession(proxy.port, timeout_ms=20000, sock_timeout=30.0)
        # 40 MB of replies the client does not read: zkwarden stops reading
        # the server, the relay holds what the server sends.
        raw.send(b"".join(rawzk.get_data(x, path) for x in range(1, 41)))
        wait_until(lambda: not_reading(proxy, relay), 30,
                   what="zkwarden not reading the server (the relay holding what it sends)")
        relay.set_mode("reset")  # zkwarden does not read: it does not see the reset
        relay.set_mode("pass")
        raw.send(rawzk.exists(41, "/"))  # its write meets the reset
        got = read_until_closed_or(raw, list(range(1, 42)))
        assert set(got.values()) <= {0, -4}, got  # a reply, or CONNECTIONLOSS for those in flight
        assert got[41] == -4, got
        raw.send(rawzk.exists(42, "/"))
        assert read_until_closed_or(raw, [42]) == {42: 0}
        text = proxy.stderr()
        assert "session moved from" in text, text[-3000:]
        # The write met the reset first (a read would log the error alone).
        assert re.search(r"write failed: [^:]*: moving the session", text), text[-3000:]
        assert "write to upstream failed" not in text
        assert session_moves(proxy).get("moved") == 1, session_moves(proxy)
        raw.close()
    finally:
        relay.stop()
        direct.delete(path)


@pytest.mark.zkwarden
def test_own_read_buffer_failure_is_not_a_loss(zk_server, zkwarden_factory):
    binary = os.environ.get("ZKW_BIN") or str(REPO / "build-asan" / "zkwarden")
    with open(binary, "rb") as f:
        assert b"ZKW_TEST_FAULT" in f.read(), "%s lacks the fault-injection seam (build-asan has it)" % binary
    # The 4th read of the server's connection: the ConnectResponse, then replies.
    proxy = zkwarden_factory.start(zk_server, binary=binary,
                                   extra_env=dict(sidecar_env("jm-nb-%s" % uuid.uuid4().hex[:6]),
                                                  ZKW_TEST_FAULT="alloc:4@upstream read"))
    raw = rawzk.RawSession(proxy.port, timeout_ms=20000)
    for x in range(1, 10):
        raw.send(rawzk.exists(x, "/"))
        try:
            raw.read_reply()
        except (ConnectionError, OSError):
            break
    assert raw.closed_by_peer(10.0)
    text = proxy.stderr()
    assert re.search(r"fault injection: failing alloc #\d+ at \S+/upstream read", text), text[-3000:]
    assert "out of memory reading from upstream" in text, text[-3000:]
    assert "moving the session" not in text
    assert sum(session_moves(proxy).values()) == 0, session_moves(proxy)
    raw.close()
