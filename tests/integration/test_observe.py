"""Observe mode (issue 24): zkwarden reports what it would fence and delete,
and does neither.

One short drill, in both Flink layouts, run direct, through sidecars in
`sidecar` mode and through sidecars in `observe` mode, each against a fresh
ZooKeeper server of its own (same paths in every run):
 A. the leader is killed and restarted at once: how long until it leads
    again (the old session's timeout direct);
 B. a stale lock the ensemble failed to remove (a forged tag of an earlier
    incarnation, on a live session) blocks the delete of a checkpoint;
 C. a restarted standby's previous incarnation, still alive, holds a lock on
    a job graph: the cancel cannot remove it.
Observe mode must give the JobManager exactly what direct gives it; every
action of the sidecar-mode run must come back as a would-action of the
observe-mode run; and the server's own view (`dump`, the transaction log)
must show that observe mode closed no session and deleted no node.
(ZooKeeper 3.8's transaction log tool is TxnLogToolkit; LogFormatter is gone.)
Then the audit file: every action, done and would-be, across restarts, a
switch observe -> sidecar, and a logrotate-style SIGHUP.
"""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from kazoo.exceptions import NotEmptyError

from zkharness import HOST, ZkServer, four_letter, wait_until, zk_classpath

from test_identity import Jm, forged_tag, is_leader, new_latch

HERE = Path(__file__).resolve().parent
PY = "/usr/bin/python3"
SESSION_MS = 6000
LATCH_DIR = "/flink/c1/leader/latch"
# Fixed names: the runs of one layout act on the same paths.
CK_OLD_LOCK_UUID = "0b6a55a4-8a5e-4ba1-9d3b-8f5a8b0c0001"
GHOST_UUID = "0b6a55a4-8a5e-4ba1-9d3b-8f5a8b0c0002"
MINE_UUID = "0b6a55a4-8a5e-4ba1-9d3b-8f5a8b0c0003"
SB_UUID = "0b6a55a4-8a5e-4ba1-9d3b-8f5a8b0c0004"
LEADER_UUID = "0b6a55a4-8a5e-4ba1-9d3b-8f5a8b0c0005"


def lock_dir(state, layout):
    return state if layout == "1.7" else state + "/locks"


def outcome(fn):
    """What a JobManager request got: "ok" or the exception's class name."""
    try:
        fn()
        return "ok"
    except Exception as e:  # noqa: BLE001 - the class is the outcome
        return type(e).__name__


def wait_log(proxy, text, start=0, limit=15):
    wait_until(lambda: proxy.stderr().count(text) > start, limit, interval=0.05, what="%r in the log" % text)


def owned(proxy):
    """Waits until the sidecar owns its identity (/readyz 200): observe mode
    does not hold a JobManager before that (its session is recorded later)."""
    def ready():
        try:
            return proxy.admin_get("/readyz")[0] == 200
        except OSError:  # the admin endpoint opens just after the client port
            return False
    wait_until(ready, 20, interval=0.05, what="the identity owned")
    return proxy


def txn_log(server):
    """The server's transaction log, as its TxnLogToolkit prints it (3.8 has no LogFormatter)."""
    logs = sorted((server.datadir / "version-2").glob("log.*"))
    out = []
    for log in logs:
        r = subprocess.run(["java", "-cp", zk_classpath(), "org.apache.zookeeper.server.persistence.TxnLogToolkit",
                            "--dump", str(log)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        out.append(r.stdout)
    return "\n".join(out)


def closed_sessions(txns):
    """Session ids whose closeSession is in the transaction log (client or expiry)."""
    return {int(m.group(1), 16) for m in re.finditer(r"session 0x([0-9a-f]+) cxid 0x[0-9a-f]+ zxid 0x[0-9a-f]+ "
                                                     r"closeSession", txns)}


def deleted_paths(txns):
    return set(re.findall(r" delete '(/\S+)", txns))


def drill(mode, layout, tmp_path, kazoo_factory, zkwarden_factory, jms, audit=None):
    """Runs A, B and C; returns what the JobManagers got, the sidecars'
    actions and the server's view."""
    srv = ZkServer(tmp_path / ("zk-%s-%s" % (mode, layout)), four_letter_words="srvr,ruok,stat,dump")
    srv.start()
    try:
        return _drill(mode, layout, srv, kazoo_factory, zkwarden_factory, jms, audit)
    finally:
        srv.stop()


def _drill(mode, layout, srv, kazoo_factory, zkwarden_factory, jms, audit):
    res = {"got": {}, "proxies": []}
    env = {"ZKWARDEN_MODE": mode, "ZKWARDEN_SWEEP_INTERVAL_S": "0", "ZKWARDEN_ORPHAN_GRACE_MS": "0"}
    if audit:
        env["ZKWARDEN_AUDIT_FILE"] = str(audit)
    if mode == "direct":
        jm0 = jm1 = srv.hostport
        p0 = p1 = None
    else:
        p0 = owned(zkwarden_factory.start(srv, extra_env=dict(env, ZKWARDEN_IDENTITY="jm-0")))
        p1 = owned(zkwarden_factory.start(srv, extra_env=dict(env, ZKWARDEN_IDENTITY="jm-1")))
        jm0, jm1 = p0.hostport, p1.hostport
        res["proxies"] = [p0, p1]
    ck1 = "/flink/c1/checkpoints/%s/%019d" % ("b" * 32, 1)
    old_ck_lock = "%s/%s" % (lock_dir(ck1, layout), CK_OLD_LOCK_UUID)

    # A. kill -9 the leader (it holds a lock on checkpoint 1), restart it at once.
    old = jms(jm0, SESSION_MS, LATCH_DIR, old_ck_lock)
    res["sessions"] = {"old_leader": old.session}
    old.kill()
    t0 = time.monotonic()
    leader = kazoo_factory(jm0, timeout=SESSION_MS / 1000.0)
    mine = new_latch(leader, LATCH_DIR)
    wait_until(lambda: is_leader(leader, LATCH_DIR, mine), 20, interval=0.01, what="leadership")
    res["took"] = time.monotonic() - t0
    res["got"]["A: leads after > 3 s"] = res["took"] > 3.0
    if p0:
        wait_log(p0, "sweep done")  # the new incarnation's sweep is over: B's ghost comes after it

    # B. a forged stale lock of jm-0's incarnation 1 on a live session (the
    # ensemble-bug case) blocks the delete of checkpoint 2.
    ck2 = "/flink/c1/checkpoints/%s/%019d" % ("b" * 32, 2)
    ghost = kazoo_factory(srv.hostport)
    res["sessions"]["ghost"] = ghost.client_id[0]
    leader.create(ck2, b"handle", makepath=True)
    if layout == "1.15":
        leader.create(ck2 + "/locks")
    ghost_lock = "%s/%s" % (lock_dir(ck2, layout), GHOST_UUID)
    ghost.create(ghost_lock, forged_tag("jm-0", 1, session=ghost.client_id[0]), ephemeral=True)
    own = "%s/%s" % (lock_dir(ck2, layout), MINE_UUID)
    res["got"]["B: create own lock"] = outcome(lambda: leader.create(own, b"127.0.0.1", ephemeral=True))
    res["got"]["B: release own lock"] = outcome(lambda: leader.delete(own))
    res["got"]["B: delete checkpoint"] = outcome(lambda: leader.delete(lock_dir(ck2, layout)))
    if layout == "1.15" and res["got"]["B: delete checkpoint"] == "ok":
        res["got"]["B: delete checkpoint node"] = outcome(lambda: leader.delete(ck2))
    res["got"]["B: checkpoint left"] = leader.exists(ck2) is not None

    # C. jm-1's previous incarnation, alive, holds a lock on the job graph;
    # jm-1 restarts (a new incarnation); the job is cancelled.
    graph = "/flink/c1/jobgraphs/%s" % ("f" * 32)
    leader.create(graph, b"jobgraph-handle", makepath=True)
    if layout == "1.15":
        leader.create(graph + "/locks")
    old_sb = kazoo_factory(jm1)
    new_latch(old_sb)
    res["sessions"]["old_standby"] = old_sb.client_id[0]
    sb_lock = "%s/%s" % (lock_dir(graph, layout), SB_UUID)
    old_sb.create(sb_lock, b"127.0.0.1", ephemeral=True)
    new_sb = kazoo_factory(jm1)
    new_latch(new_sb)
    if p1:
        wait_log(p1, "sweep done")
    own = "%s/%s" % (lock_dir(graph, layout), LEADER_UUID)
    res["got"]["C: create own lock"] = outcome(lambda: leader.create(own, b"127.0.0.1", ephemeral=True))
    res["got"]["C: release own lock"] = outcome(lambda: leader.delete(own))
    res["got"]["C: delete job graph"] = outcome(lambda: leader.delete(lock_dir(graph, layout)))
    if layout == "1.15" and res["got"]["C: delete job graph"] == "ok":
        res["got"]["C: delete job graph node"] = outcome(lambda: leader.delete(graph))
    res["got"]["C: job graph left"] = leader.exists(graph) is not None

    # The server's own view, while every client is still connected.
    res["dump"] = four_letter(srv.port, "dump").decode()
    res["stale"] = {"ghost": ghost_lock, "old_standby": sb_lock}
    res["txns"] = txn_log(srv)  # before the clients close their sessions
    if p0:
        res["actions"] = []
        for p in (p0, p1):
            status, body = p.admin_get("/v1/reclaims")
            assert status == 200
            res["actions"] += json.loads(body)["reclaims"]
        res["fence_wait_ms"] = 1000 * p0.metric("zkwarden_would_fence_wait_seconds_total")
        res["would_metric"] = sum(v for p in (p0, p1) for k, v in p.metrics().items()
                                  if k.startswith("zkwarden_would_actions_total{"))
    for c in (ghost, old_sb, new_sb, leader):
        c.stop()
        c.close()
    for p in res["proxies"]:
        assert not p.stop(), p.stderr()
        p.proc = None  # stopped: nothing left for the fixture to stop
    return res


def comparable(action):
    """An action as both runs name it: kind and path (a fence has no path)."""
    return action["kind"], action["path"]


@pytest.fixture
def jms():
    started = []

    def start(*a):
        jm = Jm(*a)
        started.append(jm)
        return jm
    yield start
    for jm in started:
        jm.kill()


@pytest.mark.zkwarden
@pytest.mark.parametrize("layout", ["1.7", "1.15"])
def test_observe_acts_as_direct_and_reports_what_sidecar_does(layout, tmp_path, kazoo_factory, zkwarden_factory,
                                                             jms):
    direct = drill("direct", layout, tmp_path, kazoo_factory, zkwarden_factory, jms)
    sidecar = drill("sidecar", layout, tmp_path, kazoo_factory, zkwarden_factory, jms)
    observe = drill("observe", layout, tmp_path, kazoo_factory, zkwarden_factory, jms)

    # The problem direct, ended in sidecar mode (so that this test can fail).
    assert direct["got"]["A: leads after > 3 s"] and not sidecar["got"]["A: leads after > 3 s"]
    assert direct["got"]["B: delete checkpoint"] == "NotEmptyError" and direct["got"]["B: checkpoint left"]
    assert direct["got"]["C: delete job graph"] == "NotEmptyError" and direct["got"]["C: job graph left"]
    assert sidecar["got"]["B: delete checkpoint"] == "ok" and not sidecar["got"]["C: job graph left"]

    # Observe mode: exactly what the JobManager gets direct.
    assert observe["got"] == direct["got"]

    # The cost of the fence not done in A, measured by zkwarden: the old
    # latch outlived it as long as the restarted leader waited.
    assert sidecar["fence_wait_ms"] == 0
    assert abs(observe["fence_wait_ms"] / 1000.0 - observe["took"]) < 1.0, (observe["fence_wait_ms"], observe["took"])

    # Every action of sidecar mode is a would-action of observe mode, one for one.
    done = [a for a in sidecar["actions"]]
    assert done and all(a["done"] and not a["would"] for a in done)
    would = [a for a in observe["actions"]]
    assert would and all(a["would"] and not a["done"] for a in would)
    assert observe["would_metric"] == len(would)
    # Observe mode also meets locks that a fence it did not do would have
    # removed: would-actions on a session it would have fenced (their reason
    # says so). Those are the cost of that fence, not an action of their own.
    fenced = {int(a["session"], 16) for a in would if a["kind"] == "fence"}
    consequences = [a for a in would if a["kind"] != "fence" and int(a["session"], 16) in fenced]
    assert all("would-fence of its session removes it" in a["reason"] for a in consequences if a["kind"] == "sweep")
    own = [a for a in would if a not in consequences]
    assert sorted(map(comparable, own)) == sorted(map(comparable, done)), (own, done)
    kinds = {a["kind"] for a in done}
    assert {"fence", "reclaim_at_delete"} <= kinds, kinds
    # The fences name the same incarnations and the roles of the same sessions.
    fences = lambda run: sorted((a["identity"], a["incarnation"]) for a in run if a["kind"] == "fence")  # noqa: E731
    assert fences(own) == fences(done)

    # The server's own view: in observe mode the superseded standby's and the
    # ghost's sessions live on with their locks; in sidecar mode the standby's
    # was closed and the ghost's lock deleted.
    for run in (sidecar, observe):
        run["closed"] = closed_sessions(run["txns"])
        run["deleted"] = deleted_paths(run["txns"])
    assert sidecar["sessions"]["old_standby"] in sidecar["closed"]
    assert sidecar["stale"]["ghost"] in sidecar["deleted"]
    for who in ("old_standby", "ghost"):
        assert observe["sessions"][who] not in observe["closed"], who
        assert observe["stale"][who] not in observe["deleted"], who
        assert "0x%x" % observe["sessions"][who] in observe["dump"], observe["dump"]
        assert observe["stale"][who] in observe["dump"], observe["dump"]
    # Every delete in the observe run is the JobManagers' own, as direct.
    assert observe["deleted"] == deleted_paths(direct["txns"]), (observe["deleted"], deleted_paths(direct["txns"]))


def records(proxy):
    status, body = proxy.admin_get("/v1/reclaims")
    assert status == 200
    return json.loads(body)["reclaims"][::-1]  # oldest first, as in the file


def audit_lines(*paths):
    out = []
    for p in paths:
        out += [json.loads(line) for line in Path(p).read_text().splitlines()]
    return out


def key(a):
    return a["kind"], a["done"], a["would"], a["path"], a["session"], a["identity"], a["incarnation"], a["reason"]


@pytest.mark.zkwarden
def test_audit_file_holds_every_action_across_restarts_and_the_switch(private_zk, zkwarden_factory,
                                                                       kazoo_factory, tmp_path):
    audit = tmp_path / "audit.jsonl"
    env = {"ZKWARDEN_IDENTITY": "jm-a", "ZKWARDEN_SWEEP_INTERVAL_S": "0", "ZKWARDEN_ORPHAN_GRACE_MS": "0",
           "ZKWARDEN_AUDIT_FILE": str(audit)}
    proxy = owned(zkwarden_factory.start(private_zk, extra_env=dict(env, ZKWARDEN_MODE="sidecar")))
    server = kazoo_factory(private_zk.hostport)
    jm = []
    passwords = [server.client_id[1]]

    def new_jm():
        c = kazoo_factory(proxy.hostport)
        new_latch(c)
        jm.append(c)
        passwords.append(c.client_id[1])
        return c

    # Sidecar mode: jm 2 fences jm 1; a forged stale lock is reclaimed at delete.
    new_jm()
    new_jm()
    wait_until(lambda: not jm[0].connected, 10, what="the fenced session dropped")
    wait_log(proxy, "sweep done")  # the incarnation's sweep is over: the ghost comes after it
    state = "/flink/c1/checkpoints/%s/%019d" % ("c" * 32, 1)
    jm[1].create(state, b"h", makepath=True)
    ghost = kazoo_factory(private_zk.hostport)
    passwords.append(ghost.client_id[1])
    ghost.create("%s/%s" % (state, GHOST_UUID), forged_tag("jm-a", 1, session=ghost.client_id[0]), ephemeral=True)
    jm[1].delete(state)
    wait_until(lambda: len(records(proxy)) == 2, 10, what="two actions")
    seen = records(proxy)
    assert [(a["kind"], a["done"]) for a in seen] == [("fence", True), ("reclaim_at_delete", True)]
    assert seen[1]["version"] == 0 and seen[0]["version"] is None

    # The same pod restarted in observe mode: jm 3 would fence jm 2 (alive).
    assert not proxy.stop()
    proxy.extra_env["ZKWARDEN_MODE"] = "observe"
    owned(proxy.start())
    wait_until(lambda: jm[1].connected, 20, what="jm 2 re-attached through the restarted sidecar")
    new_jm()
    wait_until(lambda: records(proxy), 10, what="the would-fence")
    assert jm[1].connected and jm[2].connected
    # logrotate: the file is moved away, SIGHUP reopens it under its name.
    rotated = tmp_path / "audit.jsonl.1"
    os.rename(audit, rotated)
    proxy.proc.send_signal(signal.SIGHUP)
    wait_log(proxy, "SIGHUP: audit file reopened")
    new_jm()  # jm 4 would fence jm 3
    wait_until(lambda: len(records(proxy)) == 2, 10, what="the second would-fence")
    seen += records(proxy)
    assert [(a["kind"], a["done"]) for a in seen[2:]] == [("fence", False), ("fence", False)]
    assert all(c.connected for c in jm[1:])
    assert proxy.metric('zkwarden_would_actions_total{kind="fence"}') == 2
    status, page = proxy.admin_get("/")
    assert "observe: nothing fenced or deleted; 2 would-action(s)" in page and "would (observe)" in page

    # Switched back to sidecar mode by a restart alone: jm 5 fences jm 4, the
    # session observe mode recorded.
    assert not proxy.stop()
    proxy.extra_env["ZKWARDEN_MODE"] = "sidecar"
    owned(proxy.start())
    wait_until(lambda: jm[3].connected, 20, what="jm 4 re-attached through the restarted sidecar")
    jm4 = jm[3].client_id[0]
    new_jm()
    wait_until(lambda: not jm[3].connected, 10, what="jm 4 fenced after the switch")
    wait_until(lambda: records(proxy), 10, what="the fence after the switch")
    seen += records(proxy)
    assert (seen[-1]["kind"], seen[-1]["done"], seen[-1]["session"]) == ("fence", True, "0x%x" % jm4)
    assert not proxy.stop()
    proxy.proc = None

    # Every action of the three lifetimes, in order, and nothing else.
    lines = audit_lines(rotated, audit)
    assert [key(a) for a in lines] == [key(a) for a in seen]
    assert len(audit_lines(rotated)) == 3  # moved away before the SIGHUP
    for a in lines:
        assert set(a) == {"time", "time_ms", "kind", "done", "would", "path", "version", "reason", "session",
                          "identity", "incarnation"}
        assert a["done"] != a["would"]  # no step failed here
    # Never a secret: no session password, in hex or raw, of any session.
    text = rotated.read_bytes() + audit.read_bytes()
    for pw in passwords:
        assert len(pw) == 16
        assert pw.hex().encode() not in text and pw not in text
    assert "passwd" not in text.decode()


@pytest.mark.parametrize("mode", ["direct", pytest.param("observe", marks=pytest.mark.zkwarden)])
def test_recreated_lock_gets_nodeexists_as_direct_and_a_would_reclaim(mode, private_zk, zkwarden_factory,
                                                                      kazoo_factory):
    """A lock re-created by a new session on a stale lock of an earlier
    incarnation (an ensemble-bug leftover): direct and in observe mode the
    JobManager gets NODEEXISTS and the lock vanishes with the old session;
    observe mode reports the reclaim at create that sidecar mode would do."""
    proxy = None
    hostport = private_zk.hostport
    if mode == "observe":
        proxy = owned(zkwarden_factory.start(private_zk, extra_env={
            "ZKWARDEN_MODE": "observe", "ZKWARDEN_IDENTITY": "jm-0", "ZKWARDEN_SWEEP_INTERVAL_S": "0"}))
        hostport = proxy.hostport
    lock = "/flink/c1/jobgraphs/%s/%s" % ("c" * 32, GHOST_UUID)
    old = kazoo_factory(private_zk.hostport)
    old_sid = old.client_id[0]
    new = kazoo_factory(hostport)
    new_latch(new)  # incarnation 1
    old.create(lock, forged_tag("jm-0", 0, session=old.client_id[0]), ephemeral=True, makepath=True)
    assert outcome(lambda: new.create(lock, b"127.0.0.1", ephemeral=True)) == "NodeExistsError"
    assert new.exists(lock).ephemeralOwner == old.client_id[0]  # not deleted
    old.stop()
    assert new.exists(lock) is None  # the lock Flink thinks it holds vanished, as direct
    if proxy:
        (a,) = records(proxy)
        assert (a["kind"], a["done"], a["path"], a["version"]) == ("reclaim_at_create", False, lock, 0)
        assert (a["session"], a["identity"], a["incarnation"]) == ("0x%x" % old_sid, "jm-0", 0)
        assert "the JobManager got NODEEXISTS" in a["reason"]
        assert proxy.metric('zkwarden_would_actions_total{kind="reclaim_at_create"}') == 1
        assert "observe: would reclaim_at_create: path %s" % lock in proxy.stderr()


@pytest.mark.zkwarden
@pytest.mark.parametrize("mode", ["sidecar", "observe"])
def test_orphan_is_fenced_or_only_reported(mode, tmp_path, zkwarden_factory):
    """A JobManager whose connection drops without closeSession: sidecar mode
    fences the session after the grace; observe mode reports the orphan
    fence, the server keeps the session and its latch until it expires
    (its own `dump` says so), and zkwarden measures how long that was."""
    import rawzk
    srv = ZkServer(tmp_path / "zk", four_letter_words="srvr,ruok,stat,dump")
    srv.start()
    try:
        proxy = owned(zkwarden_factory.start(srv, extra_env={
            "ZKWARDEN_MODE": mode, "ZKWARDEN_ORPHAN_GRACE_MS": "300", "ZKWARDEN_IDENTITY": "jm-o",
            "ZKWARDEN_SWEEP_INTERVAL_S": "0"}))
        jm = rawzk.RawSession(proxy.port, timeout_ms=4000)
        assert jm.create_latch() == 0  # incarnation 1
        sid = "0x%x" % jm.session_id
        jm.close()  # dropped without closeSession
        wait_until(lambda: records(proxy), 10, what="the orphan fence")
        (a,) = records(proxy)
        assert (a["kind"], a["session"], a["incarnation"]) == ("orphan_fence", sid, 1)
        alive = sid in four_letter(srv.port, "dump").decode()
        if mode == "sidecar":
            assert a["done"] and not alive
            return
        assert not a["done"] and alive, "observe mode must leave the session to the server"
        assert "not re-attached in 300 ms" in a["reason"]
        # The server expires it by itself; zkwarden measures the wait its fence would have saved.
        wait_until(lambda: proxy.metric("zkwarden_would_fence_wait_seconds_total") > 0, 20, interval=0.1,
                   what="the latch to go")
        assert 2.5 < proxy.metric("zkwarden_would_fence_wait_seconds_total") < 12
        assert sid not in four_letter(srv.port, "dump").decode()
        assert not proxy.stop()
        proxy.proc = None
    finally:
        srv.stop()


@pytest.mark.zkwarden
@pytest.mark.parametrize("mode", ["sidecar", "observe"])
def test_observe_never_holds_the_jobmanager_while_the_identity_is_claimed(mode, private_zk, zkwarden_factory,
                                                                            kazoo_factory):
    """A sidecar restarted after a crash waits for its predecessor's registry
    session to expire before it owns the identity. Sidecar mode holds the
    request that begins an incarnation meanwhile (up to the fence timeout, so
    that no lock is created by an unrecorded session); observe mode lets it
    go at once and records the session once the identity is owned."""
    env = {"ZKWARDEN_MODE": mode, "ZKWARDEN_IDENTITY": "jm-c", "ZKWARDEN_SWEEP_INTERVAL_S": "0",
           "ZKWARDEN_ORPHAN_GRACE_MS": "0", "ZKWARDEN_FENCE_TIMEOUT_MS": "3000"}
    first = owned(zkwarden_factory.start(private_zk, extra_env=env))
    old = kazoo_factory(first.hostport)
    new_latch(old)  # incarnation 1
    old_sid = old.client_id[0]
    wait_until(lambda: "incarnation 1 begins" in first.stderr(), 10, what="incarnation 1")
    first.kill()  # the pod's sidecar crashes: its registry owner node stays for its session timeout
    first.proc = None
    second = zkwarden_factory.start(private_zk, extra_env=env)
    jm = kazoo_factory(second.hostport)
    t0 = time.monotonic()
    new_latch(jm)
    took = time.monotonic() - t0
    if mode == "sidecar":
        assert took > 2.0, "sidecar mode holds the new incarnation until the identity is owned: %.2f s" % took
    else:
        assert took < 1.0, "observe mode held the JobManager %.2f s" % took
    wait_until(lambda: "incarnation 2 begins" in second.stderr(), 20, what="incarnation 2 recorded")
    wait_until(lambda: records(second), 10, what="the fence of incarnation 1")
    (a,) = records(second)
    assert (a["kind"], a["session"], a["incarnation"], a["done"]) == (
        "fence", "0x%x" % old_sid, 1, mode == "sidecar")
