"""A reclaim at create whose connection goes away under it (issue 35,
review).

A lock create that meets a stale lock gets the server's NODEEXISTS, which
Flink reads as "I hold it"; zkwarden makes that true behind the reply with
one multi on the JobManager's connection (delete the stale lock at its
version, create the JobManager's own). Here the server's connection is cut
as that multi is sent (a relay in front of a real ZooKeeper drops both
sides of the connection when it sees zkwarden's multi, xid >= 0x7fff0000,
opcode 14, and passes everything else): the session moves (the same server,
through the relay again) and the multi's outcome is unknown. The reclaim
reads the lock again on the moved connection and replaces it then: the
JobManager, which was told it holds the lock, holds it. Before, the reclaim
ended on the connection loss and the lock stayed the dead incarnation's (it
vanishes with that session, or the sweep deletes it as stale: the JobManager
holds nothing). The JobManager sees no state change, as in any move.

The same with the new read's allocation failing (the sanitizer build's
fault seam, ZKW_TEST_FAULT=alloc:1@<its line>): the reclaim ends as a failed
step, the lock stays the dead incarnation's (as direct), nothing crashes or
leaks, the JobManager stays connected.

And a reclaim at delete whose list of locks cannot be kept (its allocation
failed by the seam) is a failed step like any other: logged at warn,
counted, recorded; the JobManager gets its NOTEMPTY. Before, it ended
without a word.
"""

import json
import os
import struct
import threading
import uuid

import pytest
from kazoo.exceptions import NodeExistsError, NotEmptyError

from checkpoints import forged_tag
from test_slow_inband import INBAND_XID_BASE, SlowInbandServer, _shut, frames
from zkharness import HOST, REPO, wait_until

pytestmark = pytest.mark.zkwarden

OP_MULTI = 14


class CutOnInbandMulti(SlowInbandServer):
    """127.0.0.1:port in front of a ZooKeeper server (test_slow_inband's
    relay, replies undelayed): bytes pass both ways, but the first in-band
    multi from zkwarden is not forwarded: its connection is cut on both sides
    instead. Later connections pass."""

    def __init__(self, target_port):
        self.cuts = 0
        self.cut_lock = threading.Lock()
        super().__init__(target_port, 0.0)

    def _pipe(self, c, u):
        """Client to server, frame by frame (the first frame is the
        ConnectRequest, whose first int is not an xid: it never matches)."""
        try:
            for frame in frames(c):
                xid, op = struct.unpack(">ii", frame[4:12]) if len(frame) >= 12 else (0, 0)
                with self.cut_lock:
                    cut = xid >= INBAND_XID_BASE and op == OP_MULTI and self.cuts == 0
                    self.cuts += cut
                if cut:
                    break
                u.sendall(frame)
        except OSError:
            pass
        _shut(c, u)


def reclaim_point(text):
    """ZKW_TEST_FAULT's point (file:line) of the one line of zkw_reclaim.c
    holding text."""
    lines = (REPO / "proxy" / "sidecar" / "cleanup" / "zkw_reclaim.c").read_text().splitlines()
    at = [i + 1 for i, l in enumerate(lines) if text in l]
    assert len(at) == 1, (text, at)
    return "zkw_reclaim.c:%d" % at[0]


def fault_binary():
    binary = os.environ.get("ZKW_BIN") or str(REPO / "build-asan" / "zkwarden")
    with open(binary, "rb") as f:
        assert b"ZKW_TEST_FAULT" in f.read(), "%s was built without -DZKW_FAULT_INJECTION=ON" % binary
    return binary


@pytest.mark.parametrize("fault", ["none", "alloc"])
def test_a_move_under_a_reclaim_at_create_still_gives_the_jobmanager_its_lock(fault, private_zk, zkwarden_factory,
                                                                              kazoo_factory):
    env = {"ZKWARDEN_MODE": "sidecar", "ZKWARDEN_SWEEP_INTERVAL_S": "0"}
    if fault == "alloc":
        fault_binary()
        env["ZKW_TEST_FAULT"] = "alloc:1@" + reclaim_point("struct lock_arg *a = path ? zkw_malloc(sizeof *a) : NULL;")
    relay = CutOnInbandMulti(private_zk.port)
    try:
        identity = "reclaim-move-%s" % uuid.uuid4().hex[:6]
        env["ZKWARDEN_IDENTITY"] = identity
        proxy = zkwarden_factory.start("%s:%d" % (HOST, relay.port), extra_env=env)
        base = "/flink/%s" % uuid.uuid4().hex[:8]
        jm = kazoo_factory(proxy.hostport, timeout=20)
        states = []
        jm.add_listener(states.append)
        jm.create("%s/leader/latch/_c_%s-latch-" % (base, uuid.uuid4()), b"", ephemeral=True, sequence=True,
                  makepath=True)
        # The incarnation's first sweep ends first (it would delete the stale lock itself).
        wait_until(lambda: "sweep done" in proxy.stderr(), 30, what="the incarnation's sweep")
        # A stale lock of an earlier incarnation of this identity, kept by a live session.
        ghost = kazoo_factory(private_zk.hostport)
        lock = "%s/jobs/%s/checkpoints/%019d/locks/%s" % (base, "d" * 32, 3, uuid.uuid4())
        ghost.create(lock, forged_tag(identity, 0, session=ghost.client_id[0]), ephemeral=True, makepath=True)
        with pytest.raises(NodeExistsError):  # what the server said; Flink: "I hold it"
            jm.create(lock, b"127.0.0.1", ephemeral=True)
        wait_until(lambda: relay.cuts == 1, 10, what="the reclaim's multi (the connection cut under it)")
        wait_until(lambda: proxy.metric('zkwarden_session_moves_total{outcome="moved"}') == 1, 20,
                   what="the session moved")
        if fault == "alloc":  # the read again cannot begin: the reclaim ends there, as a failed step
            wait_until(lambda: "fault injection: failing alloc" in proxy.stderr(), 15, what="the injected failure")
            wait_until(lambda: proxy.metric("zkwarden_reclaim_failures_total{reason=\"connection_loss\"}") >= 1, 10,
                       what="the failed step counted")
            assert jm.exists(lock).ephemeralOwner == ghost.client_id[0]  # as direct
            assert states == [] and jm.connected, states
            return  # the factory's shutdown check: exit 0, no sanitizer report, no leak
        wait_until(lambda: jm.exists(lock) is not None and jm.exists(lock).ephemeralOwner == jm.client_id[0], 15,
                   what="the stale lock replaced by the JobManager's own after the move")
        assert jm.get(lock)[0] == b"127.0.0.1"  # its own bytes, the tag hidden
        assert proxy.metric("zkwarden_reclaims_at_create_total") == 1
        assert states == [] and jm.connected, states
        ghost.stop()  # the dead incarnation's session ends: the JobManager keeps its lock
        assert jm.exists(lock).ephemeralOwner == jm.client_id[0]
    finally:
        relay.stop()


def test_a_reclaim_at_delete_that_cannot_keep_the_locks_says_so(private_zk, zkwarden_factory, kazoo_factory):
    fault_binary()
    identity = "reclaim-oom-%s" % uuid.uuid4().hex[:6]
    proxy = zkwarden_factory.start(private_zk, extra_env={
        "ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": identity, "ZKWARDEN_SWEEP_INTERVAL_S": "0",
        "ZKW_TEST_FAULT": "alloc:1@" + reclaim_point("rcl->locks = zkw_calloc((size_t)(r->child_count")})
    base = "/flink/%s" % uuid.uuid4().hex[:8]
    jm = kazoo_factory(proxy.hostport)
    jm.create("%s/leader/latch/_c_%s-latch-" % (base, uuid.uuid4()), b"", ephemeral=True, sequence=True,
              makepath=True)
    wait_until(lambda: "sweep done" in proxy.stderr(), 30, what="the incarnation's sweep")
    ghost = kazoo_factory(private_zk.hostport)
    locks = "%s/jobs/%s/checkpoints/%019d/locks" % (base, "e" * 32, 4)
    ghost.create("%s/%s" % (locks, uuid.uuid4()), forged_tag(identity, 0, session=ghost.client_id[0]),
                 ephemeral=True, makepath=True)
    with pytest.raises(NotEmptyError):  # the reply it would have had direct
        jm.delete(locks)
    assert "fault injection: failing alloc" in proxy.stderr()
    assert "reclaim_at_delete: cannot keep (out of memory) the locks under %s: " % locks in proxy.stderr()
    assert sum(v for k, v in proxy.metrics().items() if k.startswith("zkwarden_reclaim_failures_total")) == 1
    rows = json.loads(proxy.admin_get("/v1/reclaims")[1])["reclaims"]
    assert any(r["path"] == locks and "cannot keep (out of memory)" in r["reason"] for r in rows), rows
    assert jm.connected and ghost.exists(locks) is not None
