"""A sidecar costs what its own cluster costs (issue 30), and dead sessions
are proven before anything they own is deleted (issue 29, item 10).

One ZooKeeper serves many Flink clusters, each under /flink/<cluster-id>.
The sweep reads only its identity's own trees: the parents of the ephemerals
its JobManager creates, merged into the cluster's tree and kept in the
registry record. The server's own count of the packets it received (`mntr`
zk_packets_received) is the measure of what the sweep costs the ensemble.

- Past ZKW_SCOPE_FOREIGN_N (default 200,000) nodes of 100 other clusters, the
  pass after a restarted JobManager's new incarnation deletes its zombies and
  its stale lock, reads no node of another cluster (a node there that would
  be a stale lock of this identity is left alone: it is never read), and
  costs the server about the own tree's size. Before issue 30 the sweep walked
  all of /flink and stopped at 200,000 nodes without saying so.
- A periodic pass of an unchanged tree costs the server under a tenth of a
  walk's reads (ZKWARDEN_SWEEP_WATCH on vs off); what changed is read, and a
  stale lock that appears is found.
- A pass that reaches ZKWARDEN_SWEEP_MAX_NODES says so (warn, metric, a
  sweep_incomplete row) and the next one goes on from there.
- A registry record anyone could write, listing the current session and a
  session still alive as dead: nothing of either is deleted, by the sweep or
  by a reclaim at delete."""

import json
import os
import re
import subprocess
import time
import uuid

import pytest
from kazoo.exceptions import NotEmptyError

from checkpoints import forged_tag
from test_zombies import ZombieZk, crashed_jm
from zkharness import ZkServer, default_zkwarden_bin, four_letter, wait_until

pytestmark = pytest.mark.zkwarden

FOREIGN_N = int(os.environ.get("ZKW_SCOPE_FOREIGN_N", "200000"))


def packets(zk):
    """The server's count of the packets it received (mntr)."""
    text = four_letter(zk.port, "mntr").decode()
    return int(re.search(r"zk_packets_received\s+(\d+)", text).group(1))


def count_nodes(client, root):
    n, todo = 0, [root]
    while todo:
        p = todo.pop()
        n += 1
        todo += ["%s/%s" % (p, c) for c in client.get_children(p)]
    return n


def job_id(j):
    return "%032x" % (0xa5b1c0de0000 + j)


def checkpoint_locks(cluster, j, n):
    return "%s/jobs/%s/checkpoints/%019d/locks" % (cluster, job_id(j), n)


def make_jobs(client, cluster, jobs, checkpoints):
    """A session cluster's persistent nodes (its JobManager made them in an
    earlier life): per job its checkpoints, each with its `locks` container."""
    paths = [cluster, cluster + "/jobs"]
    for j in range(jobs):
        job = "%s/jobs/%s" % (cluster, job_id(j))
        paths += [job, job + "/checkpoints"]
        for n in range(1, checkpoints + 1):
            locks = checkpoint_locks(cluster, j, n)
            paths += [locks.rsplit("/", 1)[0], locks]
    client.ensure_path("/flink")
    t = client.transaction()
    for p in paths:
        t.create(p, b"h")
    res = t.commit()
    assert all(isinstance(r, str) for r in res), res


def sweeps(proxy, since=0):
    return proxy.stderr()[since:].count("sweep done")


def stop(factory, proxy):
    assert not proxy.stop(), proxy.stderr()[-3000:]
    factory.procs.remove(proxy)


def ready(proxy):
    try:
        return proxy.admin_get("/readyz")[0] == 200
    except OSError:  # the admin port opens once the registry session started
        return False


def sidecar(factory, zk, identity, **env):
    full = {"ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": identity, "ZKWARDEN_SWEEP_INTERVAL_S": "0"}
    full.update({k: str(v) for k, v in env.items()})
    return factory.start(zk, extra_env=full)


@pytest.fixture
def crowded_zk(tmp_path, java_classes):
    """The zombie harness (test_zombies.py), with mntr."""
    zk = ZombieZk(tmp_path / "zk", java_classes, tick_ms=200, min_session_ms=1000,
                  four_letter_words="srvr,ruok,stat,mntr")
    zk.start()
    yield zk
    zk.stop()


def test_own_tree_past_other_clusters_is_swept_and_nothing_else_read(crowded_zk, zkwarden_factory,
                                                                      kazoo_factory):
    zk = crowded_zk
    t0 = time.monotonic()
    zk.command("bulk /flink 100 %d" % (FOREIGN_N // 100), timeout=120)
    made = time.monotonic() - t0
    client = kazoo_factory(zk.hostport)
    me = "scope-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
    proxy = sidecar(zkwarden_factory, zk, me, ZKWARDEN_ORPHAN_GRACE_MS=500)
    cluster = "/flink/zz-%s" % uuid.uuid4().hex[:8]  # after the others, in any order
    make_jobs(client, cluster, 10, 10)
    locks = ["%s/%s" % (checkpoint_locks(cluster, j, n), uuid.uuid4()) for j in range(10) for n in range(1, 11)]

    # JobManager #0 (its own process) locks every checkpoint, and is killed -9;
    # its sidecar fences the orphan: the session zkwarden saw end.
    info, born = crashed_jm(proxy.hostport, cluster + "/leader/latch", *locks)
    wait_until(lambda: proxy.metric("zkwarden_orphans_fenced_total") == 1, 20, what="the orphan fence")
    wait_until(lambda: client.exists(info["latch"]) is None, 10, what="the fenced session's latch to go")
    record = client.get("/zkwarden/identities/" + me)[0]
    assert b"\ntree=%s\n" % cluster.encode() in record, record  # learned, kept for the next incarnation

    # The ensemble keeps some of them (zombies): the latch and two locks.
    zombies = [info["latch"], locks[0], locks[57]]
    for p in zombies:
        zk.zombie(p, info["session"], b"" if p == info["latch"] else b"127.0.0.1", born)
    # A stale lock of incarnation 1 on a live session the fence never saw.
    ghost = kazoo_factory(zk.hostport)
    stale = "%s/%s" % (checkpoint_locks(cluster, 3, 5), uuid.uuid4())
    ghost.create(stale, forged_tag(me, 1, session=ghost.client_id[0]), ephemeral=True)
    # The same in another cluster's tree: never read, so never deleted.
    canary = "/flink/cluster-042/jobs/%s" % uuid.uuid4()
    ghost.create(canary, forged_tag(me, 1, session=ghost.client_id[0]), ephemeral=True)
    own = count_nodes(client, cluster)

    # JobManager #1: a new incarnation; its sweep.
    before = packets(zk)
    jm = kazoo_factory(proxy.hostport)
    jm.create(cluster + "/leader/latch/_c_%s-latch-" % uuid.uuid4(), b"", ephemeral=True, sequence=True)
    wait_until(lambda: sweeps(proxy) >= 1, 60, what="the new incarnation's sweep")
    cost = packets(zk) - before
    reads = proxy.metric("zkwarden_sweep_last_pass_reads")
    print("%d foreign nodes made in %.1f s; own tree %d nodes; sweep read %d, the server received %d packets"
          % (FOREIGN_N + 200, made, own, reads, cost))
    for p in zombies + [stale]:
        assert client.exists(p) is None, p
    assert client.exists(canary) is not None
    assert proxy.metric("zkwarden_zombie_ephemerals_total") == len(zombies)
    assert proxy.metric("zkwarden_stale_locks_swept_total") == 1
    assert proxy.metric("zkwarden_sweep_incomplete_total") == 0
    # It read its own tree (and the latch the new JobManager added), nothing else.
    assert reads <= own + 1, (reads, own)
    assert cost < own + 100, (cost, own)  # the JobManager's latch, pings and the registry's few beside it
    assert "cluster-" not in proxy.stderr()


def test_periodic_pass_of_an_unchanged_tree_costs_a_tenth_of_a_walk(tmp_path, zkwarden_factory,
                                                                      kazoo_factory):
    zk = ZkServer(tmp_path / "zk", four_letter_words="srvr,ruok,stat,mntr")
    zk.start()
    try:
        client = kazoo_factory(zk.hostport)
        costs = {}
        for watch in ("off", "on"):
            me = "periodic-%s-%d-%s" % (watch, os.getpid(), uuid.uuid4().hex[:6])
            cluster = "/flink/p-%s" % uuid.uuid4().hex[:8]
            make_jobs(client, cluster, 30, 10)
            proxy = sidecar(zkwarden_factory, zk, me, ZKWARDEN_SWEEP_INTERVAL_S=1, ZKWARDEN_SWEEP_WATCH=watch)
            jm = kazoo_factory(proxy.hostport)
            jm.create(cluster + "/leader/latch/_c_%s-latch-" % uuid.uuid4(), b"", ephemeral=True,
                      sequence=True, makepath=True)
            for j in range(30):
                for n in range(1, 11):
                    jm.create("%s/%s" % (checkpoint_locks(cluster, j, n), uuid.uuid4()), b"127.0.0.1",
                              ephemeral=True)
            own = count_nodes(client, cluster)
            # A pass between two others: what one periodic pass costs the server.
            first = wait_until(lambda: sweeps(proxy) >= 2 and sweeps(proxy), 30, what="two passes")
            wait_until(lambda: sweeps(proxy) > first, 10, interval=0.01, what="a pass")
            before = packets(zk)
            now = sweeps(proxy)
            wait_until(lambda: sweeps(proxy) > now, 10, interval=0.01, what="the next pass")
            costs[watch] = packets(zk) - before
            print("watch %s: own tree %d nodes; a periodic pass costs the server %d packets (last pass read %d)"
                  % (watch, own, costs[watch], proxy.metric("zkwarden_sweep_last_pass_reads")))
            if watch == "on":
                assert proxy.metric("zkwarden_sweep_change_passes_total") >= 1
                assert proxy.metric("zkwarden_sweep_last_pass_reads") == 0
                # What changes is read: a stale lock of an earlier incarnation
                # appears (the ensemble-bug case) and the next pass finds it.
                ghost = kazoo_factory(zk.hostport)
                stale = "%s/%s" % (checkpoint_locks(cluster, 7, 3), uuid.uuid4())
                ghost.create(stale, forged_tag(me, 0, session=ghost.client_id[0]), ephemeral=True)
                wait_until(lambda: client.exists(stale) is None, 10, what="the next pass to delete it")
                assert proxy.metric("zkwarden_stale_locks_swept_total") == 1
                assert "sweep done (what changed): 1 node(s) read" in proxy.stderr()
            else:
                assert proxy.metric("zkwarden_sweep_change_passes_total") == 0
                assert proxy.metric("zkwarden_sweep_last_pass_reads") >= own - 1
            stop(zkwarden_factory, proxy)
        assert costs["on"] * 10 <= costs["off"], costs
    finally:
        zk.stop()


def test_a_pass_that_reaches_the_bound_says_so_and_the_next_goes_on(private_zk, zkwarden_factory,
                                                                     kazoo_factory):
    client = kazoo_factory(private_zk.hostport)
    me = "bound-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
    cluster = "/flink/b-%s" % uuid.uuid4().hex[:8]
    make_jobs(client, cluster, 10, 10)  # some 250 nodes
    proxy = sidecar(zkwarden_factory, private_zk, me, ZKWARDEN_SWEEP_MAX_NODES=100)
    jm = kazoo_factory(proxy.hostport)
    jm.create(cluster + "/leader/latch/_c_%s-latch-" % uuid.uuid4(), b"", ephemeral=True, sequence=True,
              makepath=True)
    jm.create("%s/%s" % (checkpoint_locks(cluster, 0, 1), uuid.uuid4()), b"127.0.0.1", ephemeral=True)
    ghost = kazoo_factory(private_zk.hostport)
    stale = ["%s/%s" % (checkpoint_locks(cluster, j, 10), uuid.uuid4()) for j in range(10)]
    for p in stale:
        ghost.create(p, forged_tag(me, 0, session=ghost.client_id[0]), ephemeral=True)
    wait_until(lambda: all(client.exists(p) is None for p in stale), 30, what="every stale lock swept")
    assert proxy.metric("zkwarden_sweep_incomplete_total") >= 2
    assert "sweep pass stopped at ZKWARDEN_SWEEP_MAX_NODES (100 node(s) read)" in proxy.stderr()
    rows = json.loads(proxy.admin_get("/v1/reclaims")[1])["reclaims"]
    assert any(r["kind"] == "sweep_incomplete" and "left for the next pass" in r["reason"] for r in rows), rows
    assert proxy.metric("zkwarden_stale_locks_swept_total") == len(stale)
    assert "the walk went on" in proxy.stderr()


class FailingTree:
    """A small tree whose sweep fails, per job: a stale lock that cannot be
    read, a checkpoint that cannot be listed (a stale lock below it) and a
    stale lock that cannot be deleted (ACLs the JobManager's rights, world,
    do not pass); allow() lifts the ACLs."""

    def __init__(self, client, ghost, tree, me, jobs=3):
        from kazoo.security import make_acl
        self.client = client
        make_jobs(client, tree, jobs, 4)
        no_read = make_acl("world", "anyone", write=True, create=True, delete=True, admin=True)
        no_delete = make_acl("world", "anyone", read=True, write=True, create=True, admin=True)
        self.everything = [make_acl("world", "anyone", all=True)]

        def stale_in(locks, **kw):
            p = "%s/%s" % (locks, uuid.uuid4())
            ghost.create(p, forged_tag(me, 0, session=ghost.client_id[0]), ephemeral=True, **kw)
            return p

        self.unreadable, self.unlisted, self.undeletable, self.stale = [], [], [], []
        for j in range(jobs):
            self.stale.append(stale_in(checkpoint_locks(tree, j, 1), acl=[no_read]))
            self.unreadable.append(self.stale[-1])
            self.stale.append(stale_in(checkpoint_locks(tree, j, 2)))
            self.unlisted.append(checkpoint_locks(tree, j, 2).rsplit("/", 1)[0])
            self.stale.append(stale_in(checkpoint_locks(tree, j, 3)))
            self.undeletable.append(self.stale[-1])
        for p in self.unlisted:
            client.set_acls(p, [no_read])
        for p in self.undeletable:
            client.set_acls(p.rsplit("/", 1)[0], [no_delete])
        self.lines = (["cannot read the lock %s:" % p for p in self.unreadable] +
                      ["cannot list the children of %s:" % p for p in self.unlisted] +
                      ["cannot delete the stale lock %s:" % p for p in self.undeletable])

    def missing(self, log, times):
        """The failures met fewer than `times` times in log."""
        return [x for x in self.lines if log.count(x) < times]

    def allow(self):
        for p in self.unreadable + self.unlisted:
            self.client.set_acls(p, self.everything)
        for p in self.undeletable:
            self.client.set_acls(p.rsplit("/", 1)[0], self.everything)


def test_a_capped_pass_reads_again_what_it_could_not_read_or_delete(private_zk, zkwarden_factory,
                                                                       kazoo_factory):
    """Issue 35, item 3: a pass is complete or it is not. The own trees are
    an operator's (read first: the failing tree) and the cluster's (some 310
    nodes, all readable); a pass stops at ZKWARDEN_SWEEP_MAX_NODES (100), so
    the walk goes on over 4 passes, the failures all in the first. Each of
    them is read again by every later pass, which says it is incomplete (its
    line, zkwarden_sweep_incomplete_total, zkwarden_sweep_paths_left); once
    the ACLs allow it, the next pass deletes every stale lock. Before, the
    pass that went on from the frontier counted the walk as whole: the
    failures of its first part were never read again (the periodic passes
    read only what the watch saw change, and a setACL is no change), and
    those stale locks stayed for good."""
    client = kazoo_factory(private_zk.hostport)
    ghost = kazoo_factory(private_zk.hostport)
    me = "redo-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
    failing = "/flink/failing-%s" % uuid.uuid4().hex[:8]
    cluster = "/flink/c-%s" % uuid.uuid4().hex[:8]
    bad = FailingTree(client, ghost, failing, me)
    make_jobs(client, cluster, 14, 10)
    proxy = sidecar(zkwarden_factory, private_zk, me, ZKWARDEN_SWEEP_MAX_NODES=100, ZKWARDEN_SWEEP_INTERVAL_S=1,
                    ZKWARDEN_SWEEP_TREES=failing)
    jm = kazoo_factory(proxy.hostport)
    jm.create(cluster + "/leader/latch/_c_%s-latch-" % uuid.uuid4(), b"", ephemeral=True, sequence=True,
              makepath=True)
    jm.create("%s/%s" % (checkpoint_locks(cluster, 0, 1), uuid.uuid4()), b"127.0.0.1", ephemeral=True)
    # The walk goes on past the bound, then the passes after it: each
    # failure is met again by every one of them.
    wait_until(lambda: "the walk went on" in proxy.stderr(), 30, what="a walk going on past the bound")
    wait_until(lambda: not bad.missing(proxy.stderr(), 6), 60,
               what="every failure read again by the passes after the first")
    # A periodic pass reads what changed, and what was left: 9 paths each time.
    changes = re.compile(r"sweep done \(what changed\): .*; incomplete: 9 path\(s\) left for the next pass "
                         r"\(0 past ZKWARDEN_SWEEP_MAX_NODES, 9 to read again")
    wait_until(lambda: changes.search(proxy.stderr()), 30, what="a periodic pass reading what was left")
    log = proxy.stderr()
    assert re.search(r"sweep done \(walk\): .*; incomplete: \d+ path\(s\) left for the next pass", log), log
    assert proxy.metric("zkwarden_sweep_paths_left") == len(bad.lines)
    assert proxy.metric("zkwarden_sweep_incomplete_total") >= 6
    for p in bad.stale:
        assert client.exists(p) is not None, p
    bad.allow()
    wait_until(lambda: all(client.exists(p) is None for p in bad.stale), 20, what="every stale lock swept")
    wait_until(lambda: proxy.metric("zkwarden_sweep_paths_left") == 0, 10, what="a complete pass")
    assert proxy.metric("zkwarden_stale_locks_swept_total") == len(bad.stale)


def test_an_earlier_tree_retires_only_after_a_complete_pass(private_zk, zkwarden_factory, kazoo_factory):
    """Issue 35, item 3: incarnation 2 has its own tree (read first, where
    the sweep fails: FailingTree) and incarnation 1's (some 310 nodes, all
    readable), which retires only after a complete pass over both, a pass
    stopping at ZKWARDEN_SWEEP_MAX_NODES (100). It stays in the record while
    the failures are read again; once the ACLs allow it, every stale lock
    goes and then it retires. Before, the pass that went on from the
    frontier counted the walk as whole and the old tree retired as if
    swept."""
    client = kazoo_factory(private_zk.hostport)
    ghost = kazoo_factory(private_zk.hostport)
    me = "retire-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
    old = "/flink/old-%s" % uuid.uuid4().hex[:8]
    new = "/flink/new-%s" % uuid.uuid4().hex[:8]
    make_jobs(client, old, 14, 10)
    bad = FailingTree(client, ghost, new, me)
    proxy = sidecar(zkwarden_factory, private_zk, me, ZKWARDEN_SWEEP_MAX_NODES=100, ZKWARDEN_SWEEP_INTERVAL_S=1)
    node = "/zkwarden/identities/" + me
    # Incarnation 1 learns the old tree (its latch and a lock), and ends.
    jm1 = kazoo_factory(proxy.hostport)
    jm1.create(old + "/leader/latch/_c_%s-latch-" % uuid.uuid4(), b"", ephemeral=True, sequence=True,
               makepath=True)
    jm1.create("%s/%s" % (checkpoint_locks(old, 0, 1), uuid.uuid4()), b"127.0.0.1", ephemeral=True)
    wait_until(lambda: b"\ntree=%s\n" % old.encode() in client.get(node)[0], 10, what="the old tree recorded")
    jm1.stop()
    jm1.close()
    # Incarnation 2 in the new tree (a cluster-id change).
    jm2 = kazoo_factory(proxy.hostport)
    jm2.create(new + "/leader/latch/_c_%s-latch-" % uuid.uuid4(), b"", ephemeral=True, sequence=True,
               makepath=True)
    jm2.create("%s/%s" % (checkpoint_locks(new, 0, 4), uuid.uuid4()), b"127.0.0.1", ephemeral=True)
    wait_until(lambda: "incarnation 2 begins" in proxy.stderr(), 10, what="incarnation 2")
    mark = proxy.stderr().index("incarnation 2 begins")
    wait_until(lambda: "the walk went on" in proxy.stderr()[mark:], 30, what="a walk going on past the bound")
    wait_until(lambda: not bad.missing(proxy.stderr()[mark:], 6), 60,
               what="every failure read again by the passes after the first")
    assert b"\ntree=%s\n" % old.encode() in client.get(node)[0], "the old tree retired before a complete pass"
    assert "retired" not in proxy.stderr()[mark:]
    bad.allow()
    wait_until(lambda: all(client.exists(p) is None for p in bad.stale), 20, what="every stale lock swept")
    wait_until(lambda: b"\ntree=%s\n" % old.encode() not in client.get(node)[0], 20,
               what="the old tree retired after the complete pass")
    assert proxy.metric("zkwarden_sweep_paths_left") == 0


def test_record_listing_the_current_or_a_live_session_as_dead(private_zk, zkwarden_factory, kazoo_factory):
    """Without ZKWARDEN_REGISTRY_AUTH anyone may write the record: a forged
    dead list names the JobManager's current session and a session still
    alive. Nothing of either is deleted: the sweep skips them (zkwarden did
    not see them end), and a reclaim at delete does not take the live
    session's lock."""
    client = kazoo_factory(private_zk.hostport)
    me = "forged-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
    cluster = "/flink/f-%s" % uuid.uuid4().hex[:8]
    make_jobs(client, cluster, 1, 2)
    # The operator names the tree: a record anyone may write is no source of
    # trees for a restarted sidecar (see the warning checked below).
    proxy = sidecar(zkwarden_factory, private_zk, me, ZKWARDEN_SWEEP_INTERVAL_S=1, ZKWARDEN_SWEEP_TREES=cluster)
    jm = kazoo_factory(proxy.hostport)
    latch = jm.create(cluster + "/leader/latch/_c_%s-latch-" % uuid.uuid4(), b"", ephemeral=True,
                      sequence=True, makepath=True)
    mine = "%s/%s" % (checkpoint_locks(cluster, 0, 1), uuid.uuid4())
    jm.create(mine, b"127.0.0.1", ephemeral=True)
    live = kazoo_factory(private_zk.hostport)  # alive all along
    live_info = live.create(cluster + "/leader/rest_server/connection_info", b"x", ephemeral=True, makepath=True)
    live_lock = "%s/%s" % (checkpoint_locks(cluster, 0, 2), uuid.uuid4())
    live.create(live_lock, b"127.0.0.1", ephemeral=True)
    node = "/zkwarden/identities/" + me
    wait_until(lambda: b"\nsession=0x%x\n" % jm.client_id[0] in client.get(node)[0], 10,
               what="the record to name the JobManager's session")

    # The sidecar restarts; meanwhile the record gets a forged dead list.
    jm_session, live_session = jm.client_id[0], live.client_id[0]
    assert not proxy.stop()
    mark = len(proxy.stderr())
    data, _ = client.get(node)
    assert b"dead_sessions=" not in data
    now = int(time.time() * 1000)
    forged = data.replace(b"\ndead=", b"\ndead_sessions=0x%x:1:%d,0x%x:0:%d\ndead=" % (
        jm_session, now, live_session, now))
    client.set(node, forged)
    proxy.start()
    wait_until(lambda: ready(proxy) and jm.connected and proxy.metric("zkwarden_sessions_active") == 1, 20,
               what="the JobManager back through the sidecar")
    jm.exists(cluster)  # its first request here: the sweeps begin
    wait_until(lambda: sweeps(proxy, mark) >= 2, 20, what="two sweeps")
    # A reclaim at delete meets the live session's lock: not taken.
    with pytest.raises(NotEmptyError):
        jm.delete(checkpoint_locks(cluster, 0, 2))
    for p in (latch, mine, live_info, live_lock):
        assert client.exists(p) is not None, p
    assert proxy.metric("zkwarden_zombie_ephemerals_total") == 0
    assert proxy.metric("zkwarden_zombies_unproven_total") == 2  # the live session's two nodes, once each
    log = proxy.stderr()[mark:]
    assert log.count("which anyone may write (ZKWARDEN_REGISTRY_AUTH unset)): not deleted") == 2, log


def test_a_forged_tree_in_a_record_anyone_may_write_is_not_read(private_zk, zkwarden_factory, kazoo_factory):
    """Without ZKWARDEN_REGISTRY_AUTH anyone may write the record: a forged
    tree=/flink/<another cluster> there is never swept (the trees the
    JobManager's creates show are), and the lock report shows it only marked
    untrusted, where `--reclaim` acts on nothing. Before, the restarted
    sidecar read the other cluster's tree (and deleted a node there that
    looked like a stale lock of this identity)."""
    client = kazoo_factory(private_zk.hostport)
    me = "forgedtree-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
    cluster = "/flink/t-%s" % uuid.uuid4().hex[:8]
    other = "/flink/victim-%s" % uuid.uuid4().hex[:8]
    make_jobs(client, cluster, 1, 2)
    make_jobs(client, other, 1, 2)
    ghost = kazoo_factory(private_zk.hostport)
    bait = "%s/%s" % (checkpoint_locks(other, 0, 1), uuid.uuid4())  # looks like a stale lock of this identity
    ghost.create(bait, forged_tag(me, 0, session=ghost.client_id[0]), ephemeral=True)
    proxy = sidecar(zkwarden_factory, private_zk, me, ZKWARDEN_SWEEP_INTERVAL_S=1)
    jm = kazoo_factory(proxy.hostport)
    jm.create(cluster + "/leader/latch/_c_%s-latch-" % uuid.uuid4(), b"", ephemeral=True, sequence=True,
              makepath=True)
    node = "/zkwarden/identities/" + me
    wait_until(lambda: b"\ntree=" in client.get(node)[0], 10, what="the record to name the own tree")
    assert not proxy.stop()
    mark = len(proxy.stderr())
    data, _ = client.get(node)
    client.set(node, data.replace(b"\ntree=", b"\ntree=%s\ntree=" % other.encode(), 1))
    # `zkwarden locks` shows the record's trees, marked untrusted, and acts on nothing there.
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZKWARDEN_")}
    env.update({"ZKWARDEN_UPSTREAM": private_zk.hostport, "ZKWARDEN_IDENTITY": me})
    cli = subprocess.run([default_zkwarden_bin(), "locks", "--json", "--reclaim"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    assert "are read and marked untrusted: the record is not trusted (ZKWARDEN_REGISTRY_AUTH is unset" \
        in cli.stderr, cli.stderr
    doc = json.loads(cli.stdout)
    assert other in doc["untrusted_roots"].split(","), doc["untrusted_roots"]
    (entry,) = [e for e in doc["locks"] if e["path"] == bait]
    assert entry["stale"] and not entry["trusted"] and "not trusted" in entry["untrusted"], entry
    assert doc["reclaim"]["deleted"] == 0, doc["reclaim"]
    assert client.exists(bait) is not None
    env["ZKWARDEN_SWEEP_TREES"] = cluster  # named by the operator: trusted
    cli = subprocess.run([default_zkwarden_bin(), "locks", "--json"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert cli.returncode == 0, cli.stderr
    doc = json.loads(cli.stdout)
    assert cluster in doc["roots"].split(",") and doc["untrusted_roots"] == other, doc
    proxy.start()
    wait_until(lambda: ready(proxy) and jm.connected and proxy.metric("zkwarden_sessions_active") == 1, 20,
               what="the JobManager back through the sidecar")
    jm.create("%s/%s" % (checkpoint_locks(cluster, 0, 1), uuid.uuid4()), b"127.0.0.1", ephemeral=True)
    wait_until(lambda: sweeps(proxy, mark) >= 2, 20, what="two sweeps")
    log = proxy.stderr()[mark:]
    assert log.count("are not swept: the record is not trusted (ZKWARDEN_REGISTRY_AUTH is unset") == 1, log
    for line in log.splitlines():
        if "sweep done" in line or "own trees" in line:
            assert other not in line, line
    assert client.exists(bait) is not None
    assert proxy.metric("zkwarden_stale_locks_swept_total") == 0
    assert proxy.metric("zkwarden_registry_untrusted") == 1
    # Once the JobManager's own tree was walked whole the record's trees retire.
    wait_until(lambda: other.encode() not in client.get(node)[0], 10, what="the record written without it")
    status, body = proxy.admin_get("/v1/locks")
    assert status == 200, body
    assert other not in body and cluster in body, body


@pytest.mark.parametrize("kind", ["direct", "zkwarden"])
def test_nothing_waits_for_the_sweep(kind, private_zk, zkwarden_factory, kazoo_factory):
    """The JobManager subsumes a checkpoint whose stale lock (an earlier
    incarnation's, left by the ensemble) is in the way, and no sweep pass
    will ever read it: it appears after the incarnation's one pass
    (ZKWARDEN_SWEEP_INTERVAL_S=0: no later pass). Direct the delete fails
    with NOTEMPTY; through the sidecar reclaim at delete removes the stale
    lock and the delete goes through: nothing the JobManager does waits for,
    or depends on, a pass. (Before issue 35 the stale lock was there from
    the start and the test counted on a busy loop outpacing the pass's wait
    for the end of the recovery burst: under load the pass came first.)"""
    client = kazoo_factory(private_zk.hostport)
    me = "busy-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
    cluster = "/flink/n-%s" % uuid.uuid4().hex[:8]
    make_jobs(client, cluster, 1, 3)
    proxy = sidecar(zkwarden_factory, private_zk, me) if kind == "zkwarden" else None
    jm = kazoo_factory(proxy.hostport if proxy else private_zk.hostport)
    jm.create(cluster + "/leader/latch/_c_%s-latch-" % uuid.uuid4(), b"", ephemeral=True, sequence=True,
              makepath=True)
    jm.create("%s/%s" % (checkpoint_locks(cluster, 0, 2), uuid.uuid4()), b"127.0.0.1", ephemeral=True)
    if proxy:
        wait_until(lambda: sweeps(proxy) == 1, 40, what="the incarnation's pass")
    ghost = kazoo_factory(private_zk.hostport)
    stale = "%s/%s" % (checkpoint_locks(cluster, 0, 1), uuid.uuid4())
    ghost.create(stale, forged_tag(me, 0, session=ghost.client_id[0]), ephemeral=True)
    mine = "%s/%s" % (checkpoint_locks(cluster, 0, 1), uuid.uuid4())
    jm.create(mine, b"127.0.0.1", ephemeral=True)
    jm.delete(mine)
    if kind == "direct":
        with pytest.raises(NotEmptyError):
            jm.delete(checkpoint_locks(cluster, 0, 1))
        return
    jm.delete(checkpoint_locks(cluster, 0, 1))
    assert client.exists(stale) is None
    assert proxy.metric("zkwarden_reclaims_at_delete_total") == 1
    assert proxy.metric("zkwarden_stale_locks_swept_total") == 0
    assert sweeps(proxy) == 1


def test_a_candidate_whose_delete_failed_is_tried_again(private_zk, zkwarden_factory, kazoo_factory):
    """A stale lock whose delete gets NOAUTH (its `locks` container denies
    the JobManager delete) is tried again: the pass that could not delete it
    leaves it to the next one, which reads it again (issue 35; issue 30 made
    the next pass a walk), and once the ACL allows the delete the lock goes. Before, that walk counted as whole and the periodic passes after it
    read only what the watch saw change (a setACL is no change), so the lock
    stayed."""
    from kazoo.security import make_acl
    client = kazoo_factory(private_zk.hostport)
    me = "retry-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
    cluster = "/flink/r-%s" % uuid.uuid4().hex[:8]
    make_jobs(client, cluster, 1, 2)
    locks = checkpoint_locks(cluster, 0, 2)
    client.set_acls(locks, [make_acl("world", "anyone", read=True, write=True, create=True, admin=True)])
    ghost = kazoo_factory(private_zk.hostport)
    stale = "%s/%s" % (locks, uuid.uuid4())
    ghost.create(stale, forged_tag(me, 0, session=ghost.client_id[0]), ephemeral=True)
    proxy = sidecar(zkwarden_factory, private_zk, me, ZKWARDEN_SWEEP_INTERVAL_S=1)
    jm = kazoo_factory(proxy.hostport)
    jm.create(cluster + "/leader/latch/_c_%s-latch-" % uuid.uuid4(), b"", ephemeral=True, sequence=True,
              makepath=True)
    jm.create("%s/%s" % (checkpoint_locks(cluster, 0, 1), uuid.uuid4()), b"127.0.0.1", ephemeral=True)
    refused = "cannot delete the stale lock %s" % stale
    wait_until(lambda: refused in proxy.stderr(), 30, what="the delete refused (NOAUTH)")
    mark = len(proxy.stderr())
    wait_until(lambda: sweeps(proxy, mark) >= 2, 20, what="two passes after it")
    assert proxy.stderr()[mark:].count(refused) >= 2, "the next passes did not try it again"
    assert client.exists(stale) is not None
    client.set_acls(locks, [make_acl("world", "anyone", all=True)])
    wait_until(lambda: client.exists(stale) is None, 10, what="the next pass to delete it")
    assert proxy.metric("zkwarden_stale_locks_swept_total") == 1


def test_stop_while_a_pass_waits_for_a_busy_jobmanager(private_zk, zkwarden_factory, kazoo_factory):
    """SIGTERM while a pass reads beside a JobManager that always has a
    request outstanding (one read per 10 ms: most of the time the pass waits
    on its timer with nothing in flight): the pass ends with the sidecar,
    and the sanitizer build (LeakSanitizer on) exits clean. Before, the
    identity closed the timer under the waiting pass, which was never freed.
    The pass is in progress at the stop by its own line ("sweep stopped with
    zkwarden", and no "sweep done"), not by a guess at how long a pass takes
    beforehand: the tree is some 6,700 nodes (over a minute at one read per
    10 ms), and the stop follows the first 100 reads of the pass."""
    import threading
    from kazoo.exceptions import KazooException
    client = kazoo_factory(private_zk.hostport)
    me = "stopbusy-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
    cluster = "/flink/s-%s" % uuid.uuid4().hex[:8]
    make_jobs(client, cluster, 80, 40)
    proxy = sidecar(zkwarden_factory, private_zk, me, ZKWARDEN_SWEEP_INTERVAL_S=1, ZKWARDEN_SWEEP_WATCH="off")
    jm = kazoo_factory(proxy.hostport)
    done = threading.Event()
    answered = [0]

    def busy():
        while not done.is_set():
            try:
                for r in [jm.exists_async(cluster) for _ in range(16)]:
                    r.get(timeout=5)
                    answered[0] += 1
            except (KazooException, OSError):
                return

    t = threading.Thread(target=busy, daemon=True)
    try:
        jm.create(cluster + "/leader/latch/_c_%s-latch-" % uuid.uuid4(), b"", ephemeral=True, sequence=True,
                  makepath=True)
        jm.create("%s/%s" % (checkpoint_locks(cluster, 0, 1), uuid.uuid4()), b"127.0.0.1", ephemeral=True)
        t.start()
        wait_until(lambda: answered[0] > 100, 30, what="the JobManager busy")
        # The first pass waits out the recovery burst (at most 30 s), then reads.
        wait_until(lambda: proxy.metric("zkwarden_sweep_reads_total") > 100, 60,
                   what="a pass reading beside the busy JobManager")
        problems = proxy.stop()
        zkwarden_factory.procs.remove(proxy)
    finally:
        done.set()
        t.join(10)
    assert not problems, problems + [proxy.stderr()[-4000:]]
    log = proxy.stderr()
    assert "sweep stopped with zkwarden" in log, "the pass was not in progress at the stop:\n" + log[-3000:]
    assert sweeps(proxy) == 0, "a pass ended before the stop: the tree is too small for this machine"


def test_an_overflowed_watch_is_removed(tmp_path, zkwarden_factory, kazoo_factory):
    """More than 16,384 nodes change in the own tree between two passes: the
    set of changes is forgotten (the next pass walks) and the sweep's
    persistent recursive watch is removed in-band (removeWatches, type any),
    so the rest of the changes stop coming to the JobManager's connection.
    Before, the watch stayed and every change kept arriving there for
    nothing. The server's own list (`wchp`) tells."""
    zk = ZkServer(tmp_path / "zk", four_letter_words="srvr,ruok,stat,wchp")
    zk.start()
    try:
        client = kazoo_factory(zk.hostport)
        me = "overflow-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
        cluster = "/flink/o-%s" % uuid.uuid4().hex[:8]
        make_jobs(client, cluster, 1, 1)
        proxy = sidecar(zkwarden_factory, zk, me, ZKWARDEN_SWEEP_INTERVAL_S=3600)
        jm = kazoo_factory(proxy.hostport)
        jm.create(cluster + "/leader/latch/_c_%s-latch-" % uuid.uuid4(), b"", ephemeral=True, sequence=True,
                  makepath=True)
        jm.create("%s/%s" % (checkpoint_locks(cluster, 0, 1), uuid.uuid4()), b"127.0.0.1", ephemeral=True)

        def watched():
            return ("%s\n\t0x%x" % (cluster, jm.client_id[0])) in four_letter(zk.port, "wchp").decode()

        wait_until(lambda: sweeps(proxy) >= 1 and watched(), 30, what="the first pass and its watch")
        client.ensure_path(cluster + "/bulk")
        for k in range(17):  # 17,000 creates: past ZKW_SWEEPWATCH_MAX (16,384)
            t = client.transaction()
            for i in range(1000):
                t.create("%s/bulk/n%05d" % (cluster, k * 1000 + i))
            t.commit()
        wait_until(lambda: "more than 16384 nodes changed" in proxy.stderr(), 30, what="the overflow")
        wait_until(lambda: not watched(), 10, what="the watch removed")
        assert "removeWatches" not in proxy.stderr()  # no failure said
        assert jm.exists(cluster) is not None  # the JobManager's connection is fine
    finally:
        zk.stop()
