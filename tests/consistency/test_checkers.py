"""The checkers of checkers.py on small made-up histories: each finds the
anomaly it is for, and nothing in the same history without it. (The Porcupine
checkers and the four mutated guarantees are shown failing against a real
zkwarden by the mutation runs; these cover the others.) run.sh runs this
first."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import checkers  # noqa: E402

S1, S2, JM1, JM2, PLANTER = 0x101, 0x102, 0x201, 0x202, 0x301
LOCK = "/flink/c/jobgraphs/g1/0f0e0d0c-0b0a-4908-8706-050403020100"


class H:
    """Builds a history: one client's requests and replies in order."""

    def __init__(self):
        self.recs = []
        self.n = 0
        self.rseq = {}
        self.t = 1000

    def op(self, c, sid, kind, path, args=None, res=None, exc=None, zxid=None, conn=1, reply=True):
        self.n += 1
        self.t += 10
        oid = "op-%d" % self.n
        self.recs.append({"t": "inv", "id": oid, "c": c, "kind": kind, "path": path, "ts": self.t,
                          "args": args or {}})
        if not reply:
            return oid
        r = self.rseq[c] = self.rseq.get(c, 0) + 1
        self.t += 10
        ret = {"t": "ret", "id": oid, "c": c, "ts": self.t, "xid": r, "zxid": zxid or 0, "err": 0, "rseq": r,
               "conn": conn, "sid": sid}
        if exc:
            ret["exc"] = exc
        else:
            ret["res"] = res or {}
        self.recs.append(ret)
        return oid

    def event(self, c, sid, path, conn=1):
        r = self.rseq[c] = self.rseq.get(c, 0) + 1
        self.recs.append({"t": "ev", "c": c, "conn": conn, "sid": sid, "rseq": r, "ts": self.t, "type": 3,
                          "path": path})

    def history(self):
        return checkers.History(self.recs)


def stat(mzxid, version=0, owner=0):
    return {"mzxid": mzxid, "czxid": mzxid, "version": version, "owner": owner, "cversion": 0}


def info(**kw):
    d = {"root": "/r", "identity": "jm", "audit": [], "idle": {}, "leftover": {}, "lock_snapshots": [],
         "jm_current_sid": JM2, "snapshot": {"ephemerals": {}, "nodes": [], "seq": {}}, "reclaims": None}
    d.update(kw)
    return d


def test_zxid_monotonic_and_xid_order():
    h = H()
    h.op("a", S1, "get", "/r/reg/x", res={"v": "", "stat": stat(5)}, zxid=9)
    h.op("a", S1, "get", "/r/reg/x", res={"v": "", "stat": stat(5)}, zxid=9)
    assert checkers.check_zxid_monotonic(h.history()) == []
    h.op("a", S1, "get", "/r/reg/x", res={"v": "", "stat": stat(5)}, zxid=8)
    assert len(checkers.check_zxid_monotonic(h.history())) == 1
    h.recs.append({"t": "xidbad", "c": "a", "conn": 1, "sid": S1, "rseq": 99, "ts": 1, "got": 5, "want": 4,
                   "zxid": 9})
    assert len(checkers.check_xid_order(h.history())) == 1


def test_read_your_writes():
    h = H()
    h.op("a", S1, "set", "/r/reg/x", {"v": "a1", "ver": -1}, res={"stat": stat(20, 1)}, zxid=20)
    h.op("b", S2, "set", "/r/reg/x", {"v": "b1", "ver": -1}, res={"stat": stat(21, 2)}, zxid=21)
    h.op("a", S1, "get", "/r/reg/x", res={"v": "a1", "stat": stat(20, 1)}, zxid=20)  # b's write not seen yet: fine
    hist = h.history()
    assert checkers.check_read_your_writes(hist, hist.known_writes(), hist.deleted_paths()) == []
    h.op("b", S2, "get", "/r/reg/x", res={"v": "a1", "stat": stat(20, 1)}, zxid=21)  # older than its own write
    hist = h.history()
    found = checkers.check_read_your_writes(hist, hist.known_writes(), hist.deleted_paths())
    assert {a["what"] for a in found} == {"read older than a write the session had seen",
                                          "a session's read does not show its own write"}


def test_read_of_a_value_not_written_yet():
    h = H()
    h.op("a", S1, "get", "/r/reg/x", res={"v": "later", "stat": stat(20, 1)}, zxid=20)
    h.op("b", S2, "set", "/r/reg/x", {"v": "later", "ver": -1}, res={"stat": stat(20, 1)}, zxid=20)
    hist = h.history()
    assert [a["what"] for a in checkers.check_read_your_writes(hist, hist.known_writes(), set())] == \
        ["read a value no write had sent yet"]


def test_watch_before_data():
    h = H()
    h.op("w", S1, "get", "/r/reg/x", {"watch": True}, res={"v": "a", "stat": stat(10)}, zxid=10)
    h.op("b", S2, "set", "/r/reg/x", {"v": "b", "ver": -1}, res={"stat": stat(12, 1)}, zxid=12)
    h.event("w", S1, "/r/reg/x")
    h.op("w", S1, "get", "/r/reg/y", res={"v": "", "stat": stat(3)}, zxid=12)
    hist = h.history()
    assert checkers.check_watch_before_data(hist, hist.known_writes()) == []
    h = H()  # the same without the event: the reply with zxid 12 shows the change first
    h.op("w", S1, "get", "/r/reg/x", {"watch": True}, res={"v": "a", "stat": stat(10)}, zxid=10)
    h.op("b", S2, "set", "/r/reg/x", {"v": "b", "ver": -1}, res={"stat": stat(12, 1)}, zxid=12)
    h.op("w", S1, "get", "/r/reg/y", res={"v": "", "stat": stat(3)}, zxid=12)
    hist = h.history()
    assert len(checkers.check_watch_before_data(hist, hist.known_writes())) == 1


def test_sequential_increasing():
    h = H()
    for n in (3, 5, 4):
        h.op("a", S1, "create", "/r/seq/p/t%d-" % n, {"v": "s", "seq": True},
             res={"path": "/r/seq/p/t%d-%010d" % (n, n), "stat": stat(n)}, zxid=n)
    assert len(checkers.check_sequential_increasing(h.history())) == 1


def test_ephemerals():
    h = H()
    h.op("a", S1, "create", "/r/eph/a-1", {"v": "x", "eph": True}, res={"path": "/r/eph/a-1", "stat": stat(5)})
    h.op("a", S1, "create", "/r/eph/a-2", {"v": "x", "eph": True}, res={"path": "/r/eph/a-2", "stat": stat(6)})
    live = {"a": {"sid": S1}}
    snap = {"ephemerals": {"/r/eph/a-1": {"owner": S1, "data": "x"}, "/r/eph/a-2": {"owner": S1, "data": "x"}},
            "nodes": [], "seq": {}}
    assert checkers.check_ephemerals(h.history(), info(idle=live, snapshot=snap)) == []
    del snap["ephemerals"]["/r/eph/a-2"]  # gone while its session lives
    found = checkers.check_ephemerals(h.history(), info(idle=live, snapshot=snap))
    assert [a["what"] for a in found] == ["ephemeral of a live session gone"]
    h.recs.append({"t": "expired", "c": "a", "sid": S1, "ts": 1})  # its session ended: none may be left
    found = checkers.check_ephemerals(h.history(), info(idle={"a": {"sid": S2}}, snapshot=snap))
    assert [a["what"] for a in found] == ["ephemeral of a session that ended"]


def test_zkwarden_deletes_and_tags():
    h = H()
    planted = "/flink/c/jobgraphs/g1/ffffffff-0b0a-4908-8706-050403020100"
    h.op("planter", PLANTER, "create", planted, {"v": "t", "eph": True}, res={"path": planted, "stat": stat(2)})
    h.recs.append({"t": "conn", "c": "jm1", "conn": 1, "sid": JM1, "ts": 1, "host": "h"})
    h.recs.append({"t": "conn", "c": "jm2", "conn": 1, "sid": JM2, "ts": 2, "host": "h"})
    h.op("jm2", JM2, "create", LOCK, {"v": "jm2-jg", "eph": True}, res={"path": LOCK, "stat": stat(7, 0, JM2)})
    h.op("jm2", JM2, "get", LOCK, res={"v": "jm2-jg", "stat": stat(7, 0, JM2)})
    audit = [{"kind": "reclaim_at_create", "done": True, "path": planted, "session": "0x%x" % PLANTER},
             {"kind": "fence", "done": True, "path": "", "session": "0x%x" % JM1}]
    tag = "zkwarden-lock 1 identity=jm incarnation=2 session=0x%x\n" % JM2
    snap = {"ephemerals": {LOCK: {"owner": JM2, "data": tag + "jm2-jg"}}, "nodes": [], "seq": {}}
    i = info(audit=audit, snapshot=snap)
    assert checkers.check_zkwarden_deletes(h.history(), i) == []
    assert checkers.check_locks_tagged(h.history(), i) == [] and checkers.check_lock_reads(h.history()) == []
    audit += [{"kind": "sweep", "done": True, "path": "/r/reg/x", "session": "0x0"},
              {"kind": "fence", "done": True, "path": "", "session": "0x%x" % S1}]
    snap["ephemerals"][LOCK]["data"] = "jm2-jg"  # untagged
    assert len(checkers.check_zkwarden_deletes(h.history(), i)) == 2
    assert [a["what"] for a in checkers.check_locks_tagged(h.history(), i)] == ["a lock without zkwarden's tag"]
    h.op("jm2", JM2, "get", LOCK, res={"v": "127.0.0.1", "stat": stat(2, 0, PLANTER)})
    assert len(checkers.check_lock_reads(h.history())) == 1


def test_a_superseded_jobmanagers_lock_may_go_once_the_next_one_connected():
    """A sweep deletes jm1's lock: fine once jm2 has connected (jm1 was
    killed before), not before; never the current JobManager's."""
    h = H()
    h.recs.append({"t": "conn", "c": "jm1", "conn": 1, "sid": JM1, "ts": 1000, "host": "h"})
    h.op("jm1", JM1, "create", LOCK, {"v": "jm1-jg", "eph": True}, res={"path": LOCK, "stat": stat(5, 0, JM1)})
    h.recs.append({"t": "conn", "c": "jm2", "conn": 1, "sid": JM2, "ts": 5000000, "host": "h"})
    sweep = {"kind": "sweep", "done": True, "path": LOCK, "session": "0x%x" % JM1, "time_ms": 6}
    i = info(audit=[sweep], wall_minus_mono_ns=0)
    assert checkers.check_zkwarden_deletes(h.history(), i) == []
    sweep["time_ms"] = 4  # 4 ms: before jm2 connected (5 ms)
    assert len(checkers.check_zkwarden_deletes(h.history(), i)) == 1
    sweep["time_ms"], sweep["session"] = 6, "0x%x" % JM2  # the current one's session: not its lock either
    assert len(checkers.check_zkwarden_deletes(h.history(), i)) == 1


def test_a_delete_written_down_as_failed_may_have_run():
    h = H()
    planted = "/flink/c/jobgraphs/g2/eeeeeeee-0b0a-4908-8706-050403020100"
    h.op("planter", PLANTER, "create", planted, {"v": "t", "eph": True}, res={"path": planted, "stat": stat(2)})
    lost = {"kind": "reclaim_at_create", "done": False, "path": planted, "session": "0x%x" % PLANTER,
            "reason": "failed (connection_loss): cannot delete the stale lock: connection loss"}
    i = info(audit=[lost], idle={"planter": {"sid": PLANTER}})  # the node is gone from the snapshot
    assert checkers.check_ephemerals(h.history(), i) == []
    assert checkers.check_zkwarden_deletes(h.history(), i) == []
    # Reclaim at create's replace (a multi: delete the stale lock, create the
    # JobManager's) answered by a connection loss may have run too (the
    # 1800 s run of seed 1803 met it); a failed read deletes nothing.
    lost["reason"] = "failed (connection_loss): cannot replace the stale lock: connection loss"
    assert checkers.check_ephemerals(h.history(), i) == []
    lost["reason"] = "failed (connection_loss): cannot read the lock: connection loss"
    assert [a["what"] for a in checkers.check_ephemerals(h.history(), i)] == ["ephemeral of a live session gone"]
    lost["reason"] = "failed (connection_loss): cannot delete the stale lock: connection loss"
    lost["path"] = "/r/reg/x"  # a node that is no stale lock: tried at all is too much
    assert len(checkers.check_zkwarden_deletes(h.history(), i)) == 1


def test_a_lock_created_before_zkwarden_recorded_the_session_is_counted_apart():
    """The registry not usable within the fence bound: the request goes on as
    a plain client's, untagged (DESIGN 3.3, docs/reliability.md). A lock its
    session created before zkwarden recorded it ("incarnation N begins") is
    no anomaly; one created after, untagged, is."""
    h = H()
    h.recs.append({"t": "conn", "c": "jm2", "conn": 1, "sid": JM2, "ts": 2, "host": "h"})
    h.op("jm2", JM2, "create", LOCK, {"v": "jm2-jg", "eph": True}, res={"path": LOCK, "stat": stat(7, 0, JM2)})
    created_at = h.t
    snap = {"ephemerals": {LOCK: {"owner": JM2, "data": "jm2-jg"}}, "nodes": [], "seq": {}}
    offset = 5000
    later = info(snapshot=snap, wall_minus_mono_ns=offset, incarnation_recorded_ns={"0x%x" % JM2: created_at + 100 + offset})
    stats = {}
    assert checkers.check_locks_tagged(h.history(), later, stats) == [] and stats["locks_before_recorded"] == 1
    earlier = info(snapshot=snap, wall_minus_mono_ns=offset, incarnation_recorded_ns={"0x%x" % JM2: 1 + offset})
    assert [a["what"] for a in checkers.check_locks_tagged(h.history(), earlier)] == ["a lock without zkwarden's tag"]
    never = info(snapshot=snap, wall_minus_mono_ns=offset, incarnation_recorded_ns={"0x%x" % JM1: 1 + offset})
    assert checkers.check_locks_tagged(h.history(), never) == []  # never recorded: a plain client throughout
    unread = info(snapshot=snap, wall_minus_mono_ns=offset, incarnation_recorded_ns={})
    assert len(checkers.check_locks_tagged(h.history(), unread)) == 1  # nothing read from the log: no excuse
