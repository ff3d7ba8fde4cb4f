"""3. Reconnect across a ZooKeeper restart (same port, same dataDir): the
client re-attaches the same session, its ephemeral survives, and the watches
it re-arms on the new connection (SetWatches / SetWatches2) fire on a change
made after the reconnect.

Through zkwarden the upstream connection drops with the server, and
zkwarden moves the session (issue 22, zkw_move.c): it re-attaches it to the
restarted server and re-arms the client's watches itself, while the client
stays connected and sees no session event at all. The same changes fire
the same watches, direct and through zkwarden.

kazoo 2.8 sends no SetWatches on reconnect (its server-side watches are lost
with the connection, directly as well), so for kazoo only the session and the
ephemeral are checked; the watches are checked with the C and Java clients.
"""

import re
import subprocess
import threading
import time

import pytest
from kazoo.protocol.states import KazooState

from conftest import SIDECAR_MODES, make_target
from test_cclient_workload import cclient_binary
from test_sessions import States
from zkharness import wait_until


@pytest.fixture(params=SIDECAR_MODES)
def private_target(request, private_zk):
    return make_target(request.param, private_zk,
                       lambda: request.getfixturevalue("zkwarden_factory"))


def prepare(target, kazoo_factory, root):
    setup = kazoo_factory(target.another())
    setup.create(root, b"")
    setup.create(root + "/watched", b"0")
    setup.create(root + "/tree", b"")
    setup.stop()


@pytest.mark.parametrize("down_for", [0, 12], ids=["restart", "down-12s"])
def test_reconnect_kazoo_keeps_session(private_target, private_zk, kazoo_factory, down_for):
    """down-12s: the server stays down longer than zkwarden's default
    ZKWARDEN_ORPHAN_GRACE_MS (10 s) but well within the 30 s session: the
    session is alive on the server and its client re-attaches it as soon as
    the server is back, so nothing may fence it in between."""
    root = "/reconnect-kazoo"
    prepare(private_target, kazoo_factory, root)
    # kazoo gives one connection attempt session_timeout / len(hosts): with
    # the address six times, 5 s. A server that is still starting may accept
    # a connection and never answer it; a 30 s attempt would outlive the session.
    c = kazoo_factory(",".join([private_target.hostport] * 6), timeout=30)
    states = States(c)
    c.create(root + "/eph", b"", ephemeral=True)
    sid = c.client_id[0]

    private_zk.restart(down_for=down_for)

    if private_target.via_zkwarden:
        # The session moves across the restart (zkw_move.c): no state change.
        moved = 'zkwarden_session_moves_total{outcome="moved"}'
        wait_until(lambda: private_target.proxy.metric(moved) >= 1, 45, what="the session moved")
        c.exists(root)  # a round trip after the move: a SUSPENDED would be reported by now
        assert states.seen == [], states.seen
    else:
        states.wait_for(KazooState.SUSPENDED)
        with states.cond:
            assert states.cond.wait_for(
                lambda: KazooState.CONNECTED in states.seen[states.seen.index(KazooState.SUSPENDED):],
                45), "no reconnect: %s" % states.seen
    assert KazooState.LOST not in states.seen
    assert c.client_id[0] == sid
    assert c.exists(root + "/eph").ephemeralOwner == sid
    other = kazoo_factory(private_target.another())
    assert other.exists(root + "/eph").ephemeralOwner == sid
    c.set(root + "/watched", b"after")
    assert other.get(root + "/watched")[0] == b"after"


class LineProc:
    """A child process speaking a line protocol on stdin/stdout."""

    def __init__(self, cmd, errfile):
        self.err = open(errfile, "wb")
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.err, text=True, start_new_session=True)
        self.lines = []
        self.cond = threading.Condition()
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()

    def expect(self, pattern, start=0, timeout=30.0):
        """Index of the first line at or after `start` matching pattern."""
        rx = re.compile(pattern)

        def find():
            for i in range(start, len(self.lines)):
                if rx.search(self.lines[i]):
                    return i + 1
            return None
        with self.cond:
            i = self.cond.wait_for(find, timeout)
            assert i, "no line matching %r after line %d; lines:\n%s" % (
                pattern, start, "\n".join(self.lines))
            return i - 1

    def send(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def close(self):
        if self.p.poll() is None:
            try:
                self.send("QUIT")
                self.p.wait(20)
            except (OSError, subprocess.TimeoutExpired):
                self.p.kill()
                self.p.wait(10)
        self.t.join(10)     # every line the process wrote, read
        self.err.close()
        return self.p.returncode


# Per client: the command, and how its events are spelled.
CLIENTS = {
    "cclient": dict(
        connected=r"^EVENT SESSION CONNECTED ",
        disconnected=r"^EVENT SESSION (CONNECTING|ASSOCIATING) ",
        session_event=r"^EVENT SESSION ",
        expected=["EVENT CHANGED CONNECTED R/watched", "EVENT CHILD CONNECTED R/watched",
                  "EVENT CREATED CONNECTED R/later"]),
    "java": dict(
        connected=r"^EVENT None SyncConnected ",
        disconnected=r"^EVENT None Disconnected ",
        session_event=r"^EVENT None ",
        expected=["EVENT NodeDataChanged SyncConnected R/watched",
                  "EVENT NodeChildrenChanged SyncConnected R/watched",
                  "EVENT NodeCreated SyncConnected R/later",
                  # the persistent-recursive watch, re-armed by SetWatches2
                  "EVENT NodeCreated SyncConnected R/tree/x",
                  "EVENT NodeCreated SyncConnected R/tree/x/y"]),
}


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_reconnect_rearms_watches(client, private_target, private_zk, kazoo_factory, build_dir,
                                  request, tmp_path):
    spec = CLIENTS[client]
    root = "/reconnect-" + client
    prepare(private_target, kazoo_factory, root)
    if client == "cclient":
        cmd = [cclient_binary(build_dir), "reconnect", private_target.hostport, root]
    else:
        cmd = request.getfixturevalue("java_classes").cmd(
            "ReconnectWatch", ",".join([private_target.hostport] * 6), root)
    proc = LineProc(cmd, tmp_path / ("%s.stderr" % client))
    try:
        ready = proc.expect(r"^READY [0-9a-f]+$")
        sid = proc.lines[ready].split()[1]
        mark = len(proc.lines)

        t0 = time.monotonic()
        private_zk.restart()
        if private_target.via_zkwarden:
            moved = 'zkwarden_session_moves_total{outcome="moved"}'
            wait_until(lambda: private_target.proxy.metric(moved) >= 1, 45, what="the session moved")
            gone = back = len(proc.lines)
        else:
            gone = proc.expect(spec["disconnected"], mark)
            back = proc.expect(spec["connected"], gone, timeout=45)
        reconnect_s = time.monotonic() - t0

        # nothing but session events between the restart and the changes:
        # re-arming the watches must not fire them
        changes_at = len(proc.lines)
        spurious = [line for line in proc.lines[mark:changes_at]
                    if not re.match(spec["session_event"], line)]
        assert spurious == [], "events before any change: %s" % spurious

        other = kazoo_factory(private_target.another())
        other.set(root + "/watched", b"1")
        other.create(root + "/watched/kid", b"")
        other.create(root + "/later", b"")
        other.create(root + "/tree/x", b"")
        other.create(root + "/tree/x/y", b"")
        for line in spec["expected"]:
            proc.expect("^" + re.escape(line) + "$", changes_at, timeout=15)

        # the same session, and its ephemeral
        proc.send("CHECK")
        i = proc.expect(r"^SID ", changes_at)
        assert proc.lines[i] == "SID " + sid
        assert proc.lines[proc.expect(r"^EPH ", i)] == "EPH owner=self"
        assert other.exists(root + "/eph").ephemeralOwner == int(sid, 16)
        assert reconnect_s < 45
        if private_target.via_zkwarden:  # never disconnected
            assert [line for line in proc.lines[mark:] if re.match(spec["session_event"], line)] == []
        else:
            assert back > gone
    finally:
        rc = proc.close()
    assert rc == 0, "%s exited with %s; stderr:\n%s" % (
        client, rc, (tmp_path / ("%s.stderr" % client)).read_text(errors="replace"))
    assert "BYE" in proc.lines   # (a Closed event may come after it)
    watch_events = [line for line in proc.lines[changes_at:]
                    if line.startswith("EVENT ") and not re.match(spec["session_event"], line)]
    assert sorted(watch_events) == sorted(spec["expected"])
