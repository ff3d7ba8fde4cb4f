"""Zombie ephemerals (issue 21): nodes a ZooKeeper server keeps after their
session ended (ZOOKEEPER-2355, -4541, -4712: the seed incident's own cause).

The server is Debian's ZooKeeper 3.8, run in-process by java/ZombieServer.java,
which can put into its in-memory tree a node owned by any session id: exactly
the state those bugs leave. The JobManager is the Flink-like one
(tests/flinklike, Curator), in both layouts: Flink 1.7-1.14 (`<state>/<uuid>`)
and 1.15+ (`<state>/locks/<uuid>`).

A JobManager runs, adds checkpoints, and is killed -9. Once its session has
ended (direct: expired; through zkwarden: fenced as an orphan), every
ephemeral it had is put back, owned by the dead session. Then it restarts.

- Direct: the zombie latch stands first in line and the restarted
  JobManager never leads; with the latch removed by hand it leads, but the
  zombie locks keep their subsumed checkpoints forever.
- Through zkwarden: the sweep after the new incarnation deletes each zombie
  (the owner is a session zkwarden saw end), the JobManager leads within 1 s
  of that, the checkpoints are removed, each zombie is reported (warn line,
  counter, /v1/reclaims), and nothing else is deleted: a live session's
  ephemeral and another identity's zombie stay (the latter, in another
  cluster's tree, is not even read: its own sidecar's to find).
- A zombie in one follower's tree alone (3-server ensemble): reported with
  the server that serves it, no delete loop."""

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from kazoo.exceptions import NoNodeError

from zkharness import HOST, ZkServer, wait_until, zk_classpath

FLINKLIKE = Path(__file__).resolve().parent.parent / "flinklike"
FLINK_JOB = "a5b1c0de0f1e2d3c4b5a69788796a5b4"  # FlinkLikeJM's default job id
SESSION_MS = 4000
ORPHAN_GRACE_MS = 500


class ZombieZk(ZkServer):
    """A ZkServer run by java/ZombieServer.java: zombie(path, owner, data)
    creates a node in the server's tree owned by the session `owner`."""

    def __init__(self, workdir, java_classes, **kw):
        super().__init__(workdir, **kw)
        self.classes = java_classes.outdir
        self.replies = self.dir / "harness.replies"
        self.sent = 0

    def start(self, timeout=30.0, wait=True):
        assert self.proc is None or self.proc.poll() is not None
        # Containers keep the default check interval (60 s): a latch or
        # `locks` parent emptied by the session's end stays for the zombies.
        cmd = ["java", "-Dzookeeper.extendedTypesEnabled=true", "-Dorg.slf4j.simpleLogger.showDateTime=true",
               "-cp", self.classes + ":" + zk_classpath(), "ZombieServer", str(self.cfg), str(self.replies)]
        self.replies.write_text("")
        self.sent = 0
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=str(self.dir))
        if wait:
            self.wait_ready(timeout)
        return self

    def command(self, line, timeout=10.0):
        self.sent += 1
        n = self.sent
        self.proc.stdin.write((line + "\n").encode())
        self.proc.stdin.flush()

        def answered():
            for got in self.replies.read_text().splitlines():
                num, _, rest = got.partition(" ")
                if int(num) == n:
                    return rest
            return None
        rest = wait_until(answered, timeout, what="the harness to answer %r" % line)
        assert rest.startswith("ok "), "harness: %s -> %s" % (line, rest)

    def zombie(self, path, owner, data, ctime_ms=None):
        """A node owned by the session `owner` (created at ctime_ms: now if None)."""
        self.command("zombie %s %x %s%s" % (path, owner, "-" if data is None else data.hex() or "~",
                                            "" if ctime_ms is None else " %d" % ctime_ms))

    def stop(self):
        if self.proc is not None and self.proc.stdin:
            try:
                self.proc.stdin.close()  # the harness halts when its stdin closes
            except OSError:
                pass
        super().stop()


@pytest.fixture
def zombie_zk(tmp_path, java_classes):
    zk = ZombieZk(tmp_path / "zk", java_classes, tick_ms=200, min_session_ms=1000)
    zk.start()
    yield zk
    zk.stop()


@pytest.fixture(scope="module")
def flinklike_classpath():
    r = subprocess.run([str(FLINKLIKE / "build.sh")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, "tests/flinklike/build.sh failed:\n" + r.stdout + r.stderr
    return (FLINKLIKE / "build" / "classpath").read_text().strip()


class FlinkJm:
    """One FlinkLikeJM process, killed with -9 or at teardown."""

    def __init__(self, classpath, args, workdir, n):
        self.stats_file = workdir / ("jm.%d.stats.json" % n)
        self.err = workdir / ("jm.%d.err" % n)
        cmd = (["java", "-Xmx160m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", classpath,
                "flinklike.FlinkLikeJM"] + args
               + ["--stats-file=%s" % self.stats_file, "--stats-interval-ms=100"])
        with open(self.err, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)

    def stats(self):
        if self.proc.poll() is not None:
            raise RuntimeError("FlinkLikeJM exited with %s:\n%s" % (self.proc.returncode,
                                                                    self.err.read_text()[-4000:]))
        try:
            return json.loads(self.stats_file.read_text())
        except (OSError, ValueError):
            return {}

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def crashed_jm(hostport, latch_dir, *locks):
    """A JobManager in its own process (jm_proc.py) makes its latch and locks
    and is killed -9. Returns its JSON line and when its nodes had been made
    (epoch ms: the ctime of the zombies they become)."""
    p = subprocess.Popen([sys.executable, str(Path(__file__).parent / "jm_proc.py"), hostport, str(SESSION_MS),
                          latch_dir] + list(locks), stdout=subprocess.PIPE)
    try:
        return json.loads(p.stdout.readline()), int(time.time() * 1000)
    finally:
        p.kill()
        p.wait(10)


def walk(client, root):
    """Every node under root (root included)."""
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            todo += ["%s/%s" % (p.rstrip("/"), c) for c in client.get_children(p)]
        except Exception:  # gone meanwhile
            pass
    return out


def ephemerals_of(client, root, session):
    """{path: (data, ctime)} of the nodes under root owned by session."""
    out = {}
    for p in walk(client, root):
        try:
            data, st = client.get(p)
        except Exception:
            continue
        if st.ephemeralOwner == session:
            out[p] = (data, st.ctime)
    return out


def restore_as_zombies(zk, client, nodes, owner):
    """Puts nodes back, owned by the ended session `owner`, parents first
    (a parent the session's end emptied is re-created as a plain node)."""
    for p in sorted(nodes, key=lambda p: (p.count("/"), p)):
        client.ensure_path(p.rsplit("/", 1)[0])
        zk.zombie(p, owner, *nodes[p])  # as it was: its data and when it was created
        st = client.exists(p)
        assert st is not None and st.ephemeralOwner == owner, (p, st)


def jm_args(connect, layout, cluster):
    return ["--connect=" + connect, "--layout=" + layout, "--identity=jm-0", "--submit-job",
            "--checkpoint-interval-ms=100", "--session-timeout-ms=%d" % SESSION_MS, "--root=/flink",
            "--cluster-id=" + cluster]


def checkpoints_root(layout, cluster):
    if layout == "1.7":
        return "/flink%s/checkpoints/%s" % (cluster, FLINK_JOB)
    return "/flink%s/jobs/%s/checkpoints" % (cluster, FLINK_JOB)


def lock_dir(layout, checkpoint):
    return checkpoint if layout == "1.7" else checkpoint + "/locks"


def running(jm, added=11):
    st = jm.stats()
    return st if (st.get("job_state") == "RUNNING" and st.get("job_master_leader")
                  and st.get("master_added", 0) >= added) else None


def first_run(classpath, connect, layout, cluster, tmp_path, client):
    """JobManager #0 runs and adds checkpoints, and is killed -9. Returns
    its session and {path: (data, ctime)} of its ephemerals as they were."""
    jm = FlinkJm(classpath, jm_args(connect, layout, cluster), tmp_path, 0)
    try:
        st = wait_until(lambda: running(jm), 90, interval=0.05, what="JobManager #0 to add 11 checkpoints")
        jm.proc.send_signal(19)  # SIGSTOP: a consistent picture of its nodes
        session = int(st["session_id"], 16)
        nodes = ephemerals_of(client, "/flink" + cluster, session)
    finally:
        jm.kill()
    kinds = {"latch": [p for p in nodes if "-latch-" in p],
             "locks": [p for p in nodes if "/checkpoints/" in p]}
    assert kinds["latch"] and kinds["locks"], nodes
    return session, nodes


def leaked(client, layout, cluster, oldest_retained):
    """Checkpoints older than the retained ones that still have their locks
    (one the JobManager removes between the listing and its read is not)."""
    root = checkpoints_root(layout, cluster)
    client.sync(root)

    def locked(c):
        try:
            return bool(client.get_children(lock_dir(layout, "%s/%s" % (root, c))))
        except NoNodeError:
            return False
    return sorted(int(c) for c in client.get_children(root) if int(c) < oldest_retained and locked(c))


@pytest.mark.parametrize("layout", ["1.7", "current"])
def test_zombies_direct(layout, zombie_zk, kazoo_factory, flinklike_classpath, tmp_path):
    """Direct: a zombie latch keeps the restarted JobManager from leading;
    with that latch deleted by hand, the zombie locks keep their checkpoints."""
    client = kazoo_factory(zombie_zk.hostport)
    cluster = "/zombies-direct-%s" % uuid.uuid4().hex[:8]
    session, nodes = first_run(flinklike_classpath, zombie_zk.hostport, layout, cluster, tmp_path, client)
    latches = [p for p in nodes if "-latch-" in p]
    wait_until(lambda: all(client.exists(p) is None for p in nodes), 3 * SESSION_MS / 1000.0,
               what="the killed JobManager's session to expire")
    restore_as_zombies(zombie_zk, client, nodes, session)

    jm = FlinkJm(flinklike_classpath, jm_args(zombie_zk.hostport, layout, cluster), tmp_path, 1)
    try:
        def latched():
            st = jm.stats()
            ours = [p for p in walk(client, "/flink" + cluster) if "-latch-" in p and p not in nodes]
            return st if ours and st.get("session_id") else None
        wait_until(latched, 60, interval=0.05, what="JobManager #1 to queue on its latch")
        # Three session timeouts after its latch: it would have led long ago.
        with pytest.raises(TimeoutError):
            wait_until(lambda: jm.stats().get("leader"), 3 * SESSION_MS / 1000.0, interval=0.05,
                       what="JobManager #1 to lead")
        assert all(client.exists(p) for p in latches), "the zombie latch went by itself"

        for p in latches:  # an operator ends the zombie latches
            client.delete(p)
        st = wait_until(lambda: running(jm), 90, interval=0.05, what="JobManager #1 to add 11 checkpoints")
        oldest_retained = min(st["retained"])
        left = leaked(client, layout, cluster, oldest_retained)
        assert left, "no zombie lock kept a subsumed checkpoint"
        root = checkpoints_root(layout, cluster) + "/"
        zombie_locked = {int(p[len(root):].split("/")[0]) for p in nodes if p.startswith(root)}
        assert set(left) <= zombie_locked, (left, zombie_locked)
    finally:
        jm.kill()


@pytest.mark.zkwarden
@pytest.mark.parametrize("layout", ["1.7", "current"])
def test_zombies_through_zkwarden(layout, zombie_zk, zkwarden_factory, kazoo_factory, flinklike_classpath,
                                  tmp_path):
    """Through zkwarden: the zombies of its own identity are deleted by the
    sweep after the new incarnation, the JobManager leads within 1 s of
    that, its checkpoints are removed, every zombie is reported, and a live
    session's ephemeral and another identity's zombie stay (in another
    cluster's tree: not read)."""
    client = kazoo_factory(zombie_zk.hostport)
    me = "zombies-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
    env = {"ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": me, "ZKWARDEN_SWEEP_INTERVAL_S": "0",
           "ZKWARDEN_ORPHAN_GRACE_MS": str(ORPHAN_GRACE_MS)}
    proxy = zkwarden_factory.start(zombie_zk, extra_env=env)
    cluster = "/zombies-%s-%s" % (layout.replace(".", ""), uuid.uuid4().hex[:8])

    # Another identity, its own sidecar: a JobManager-like session killed,
    # fenced as an orphan there; its latch comes back as a zombie.
    other = me + "-other"
    other_proxy = zkwarden_factory.start(zombie_zk, extra_env=dict(env, ZKWARDEN_IDENTITY=other))
    other_latch_dir = "/flink/zombies-other-%s/leader/latch" % uuid.uuid4().hex[:8]
    info, _ = crashed_jm(other_proxy.hostport, other_latch_dir)
    wait_until(lambda: other_proxy.metric("zkwarden_orphans_fenced_total") == 1, 20,
               what="the other identity's orphan fence")
    other_session = info["session"]
    # Its record keeps the session it saw end.
    rec = wait_until(lambda: b"dead_sessions=0x%x:" % other_session in client.get(
        "/zkwarden/identities/" + other)[0] and client.get("/zkwarden/identities/" + other)[0], 10,
        what="the other identity's record to list its dead session")
    assert b"\ndead=1\n" in rec
    assert client.exists(info["latch"]) is None
    zombie_zk.zombie(info["latch"], other_session, b"")

    # A live session's ephemeral under the lock roots (a lock name, untagged).
    live = kazoo_factory(zombie_zk.hostport)
    live_path = "/flink%s-live/%s" % (cluster, uuid.uuid4())
    live.create(live_path, b"live", ephemeral=True, makepath=True)

    session, nodes = first_run(flinklike_classpath, proxy.hostport, layout, cluster, tmp_path, client)
    wait_until(lambda: proxy.metric("zkwarden_orphans_fenced_total") == 1, 20,
               what="the killed JobManager's orphan fence")
    wait_until(lambda: all(client.exists(p) is None for p in nodes), 10,
               what="the fenced session's ephemerals to go")
    restore_as_zombies(zombie_zk, client, nodes, session)
    everything_before = set(walk(client, "/flink"))

    # Before the restart: the operator's views name the zombie locks.
    status, body = proxy.admin_get("/v1/locks")
    assert status == 200, body
    doc = json.loads(body)
    zombie_locks = {e["path"]: e["zombie"] for e in doc["locks"] if e["zombie"]}
    assert set(zombie_locks) == {p for p in nodes if p.startswith(checkpoints_root(layout, cluster) + "/")} | {
        p for p in nodes if "/jobgraphs/" in p or "/execution-plans/" in p}, zombie_locks
    assert all(z["seen_ended_by"] == me for z in zombie_locks.values()), zombie_locks
    assert doc["summary"]["zombies"] == len(zombie_locks)
    status, page = proxy.admin_get("/")
    assert status == 200 and "%d zombie(s)" % len(zombie_locks) in page

    jm = FlinkJm(flinklike_classpath, jm_args(proxy.hostport, layout, cluster), tmp_path, 1)
    try:
        st = wait_until(lambda: running(jm), 90, interval=0.05, what="JobManager #1 to add 11 checkpoints")
        rows = json.loads(proxy.admin_get("/v1/reclaims")[1])["reclaims"]
        zombies = [r for r in rows if r["kind"] == "zombie"]
        mine = {r["path"]: r for r in zombies if r["identity"] == me}
        # Every zombie of the killed JobManager was deleted, as a zombie.
        assert set(nodes) - set(mine) == set(), sorted(set(nodes) - set(mine))
        assert all(r["session"] == "0x%x" % session and r["incarnation"] == 1 and "deleted" in r["reason"]
                   for r in mine.values()), mine
        found = min(r["time_ms"] for p, r in mine.items() if "-latch-" in p)
        led = st["leader_epoch_ms"] - found
        print("%s: restarted JobManager leads %d ms after the sweep found its zombie latch" % (layout, led))
        assert led < 1000, "led %d ms after the zombie latch was deleted" % led
        # The other identity's zombie, in its own cluster's tree: never read
        # by this sidecar (its own sidecar's sweep finds it), not deleted.
        assert not [r for r in zombies if r["path"] == info["latch"]], zombies
        assert client.exists(info["latch"]).ephemeralOwner == other_session
        assert live.exists(live_path).ephemeralOwner == live.client_id[0]
        assert proxy.metric("zkwarden_zombie_ephemerals_total") == len(nodes)
        log = proxy.stderr()
        for p in nodes:
            assert "zombie ephemeral %s deleted" % p in log
        assert info["latch"] not in log
        # Nothing else was deleted by zkwarden: what went since is the
        # zombies, and what the JobManager removed itself (checkpoints).
        gone = everything_before - set(walk(client, "/flink"))
        root = checkpoints_root(layout, cluster)
        assert all(p in nodes or p.startswith(root + "/") for p in gone), sorted(gone)
        # The zombie locks no longer keep their checkpoints.
        oldest_retained = min(st["retained"])
        wait_until(lambda: not leaked(client, layout, cluster, oldest_retained), 10,
                   what="no subsumed checkpoint kept by a lock (leaked: %s)"
                   % leaked(client, layout, cluster, oldest_retained))
        failures = {k: v for k, v in proxy.metrics().items() if k.startswith("zkwarden_reclaim_failures_total")}
        assert failures and not any(failures.values()), failures
    finally:
        jm.kill()


@pytest.mark.zkwarden
@pytest.mark.parametrize("move", ["off", "on"])
def test_zombie_on_one_follower_only(move, tmp_path, java_classes, zkwarden_factory, kazoo_factory):
    """A zombie in one follower's tree alone (a 3-server ensemble; that
    follower runs the harness). Direct: a delete through it gets NONODE from
    the quorum, yet it still serves the node. Through zkwarden (its
    JobManager on that follower): the sweep reports the zombie with the
    server that serves it, counts it once, and does not loop on it. With
    ZKWARDEN_ZOMBIE_MOVE=on the next connection whose turn is that server
    goes to another one; off (the default), it goes there."""
    from kazoo.exceptions import NoNodeError
    from zkharness import Ensemble
    ens = Ensemble(tmp_path / "ens", n=3, tick_ms=200)
    first = ens.servers[0]
    harness = ZombieZk.__new__(ZombieZk)
    harness.__dict__.update(first.__dict__)
    harness.classes = java_classes.outdir
    harness.replies = first.dir / "harness.replies"
    harness.sent = 0
    ens.servers[0] = harness
    try:
        ens.start()
        if ens.leader() == 0:  # the harness must run a follower
            harness.stop()
            harness.start(wait=False)
            ens.wait_quorum()
        assert ens.modes()[0] == "follower"
        harness.command("ready")
        me = "zombie-follower-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
        # Connections take the servers in turn from a rotating start: the
        # first, fourth, seventh... go to the harness first.
        proxy = zkwarden_factory.start(*ens.servers, extra_env={
            "ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": me, "ZKWARDEN_SWEEP_INTERVAL_S": "1",
            "ZKWARDEN_ORPHAN_GRACE_MS": str(ORPHAN_GRACE_MS), "ZKWARDEN_ZOMBIE_MOVE": move})

        def upstream_of(client):
            sessions = json.loads(proxy.admin_get("/v1/sessions")[1])["sessions"]
            return [x["upstream"] for x in sessions if x["session"] == "0x%x" % client.client_id[0]][0]

        def take_turns(k):
            for _ in range(k):
                c = kazoo_factory(proxy.hostport)
                c.stop()
                c.close()
        latch_dir = "/flink/zombie-follower-%s/leader/latch" % uuid.uuid4().hex[:8]

        def jm():
            return subprocess.Popen([sys.executable, str(Path(__file__).parent / "jm_proc.py"), proxy.hostport,
                                     str(SESSION_MS), latch_dir], stdout=subprocess.PIPE)
        info, born = crashed_jm(proxy.hostport, latch_dir)  # connection 1: the harness
        wait_until(lambda: proxy.metric("zkwarden_orphans_fenced_total") == 1, 20, what="the orphan fence")
        on_follower = kazoo_factory(harness.hostport)
        elsewhere = kazoo_factory(ens.servers[1].hostport)
        wait_until(lambda: on_follower.exists(info["latch"]) is None, 10, what="the fenced latch to go")
        harness.zombie(info["latch"], info["session"], b"", born)

        # Direct: the follower serves it, the quorum does not know it.
        assert on_follower.exists(info["latch"]).ephemeralOwner == info["session"]
        elsewhere.sync(latch_dir)
        assert elsewhere.exists(info["latch"]) is None
        with pytest.raises(NoNodeError):
            on_follower.delete(info["latch"])
        assert on_follower.exists(info["latch"]) is not None

        # Through zkwarden: a restarted JobManager on that follower.
        take_turns(2)
        p1 = jm()  # connection 4: the harness
        try:
            json.loads(p1.stdout.readline())
            line = "is served by %s alone" % harness.hostport
            wait_until(lambda: line in proxy.stderr(), 20, what="the follower-only zombie to be reported")
            sweeps = proxy.stderr().count("sweep done")
            wait_until(lambda: proxy.stderr().count("sweep done") >= sweeps + 2, 20, what="two more sweeps")
            log = proxy.stderr()
            # One delete, one report per sweep at most: no loop.
            assert log.count(line) <= log.count("sweep done") + 1, log
            assert proxy.metric("zkwarden_zombie_ephemerals_total") == 1
            rows = json.loads(proxy.admin_get("/v1/reclaims")[1])["reclaims"]
            alone = [r for r in rows if r["kind"] == "zombie" and r["path"] == info["latch"]]
            assert alone and all(harness.hostport in r["reason"] for r in alone), rows
            assert on_follower.exists(info["latch"]) is not None
            take_turns(2)
            probe = kazoo_factory(proxy.hostport)  # connection 7: the harness's turn
            if move == "on":
                assert upstream_of(probe) != harness.hostport
                assert "%s is tried after the other servers" % harness.hostport in proxy.stderr()
            else:
                assert upstream_of(probe) == harness.hostport
        finally:
            p1.kill()
            p1.wait(10)
    finally:
        ens.stop()


@pytest.mark.zkwarden
@pytest.mark.parametrize("layout", ["1.7", "current"])
def test_zombie_lock_reclaimed_at_delete(layout, zombie_zk, zkwarden_factory, kazoo_factory):
    """A zombie lock that appears after the new incarnation's sweep (an
    untagged one, so the stale-lock rule cannot judge it): direct, the
    delete of its state node gets NOTEMPTY; through zkwarden, the JobManager's
    delete gets NOTEMPTY, the zombie is deleted, and the replay succeeds."""
    from kazoo.exceptions import NotEmptyError
    me = "zombie-reclaim-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
    proxy = zkwarden_factory.start(zombie_zk, extra_env={
        "ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": me, "ZKWARDEN_SWEEP_INTERVAL_S": "0",
        "ZKWARDEN_ORPHAN_GRACE_MS": str(ORPHAN_GRACE_MS)})
    base = "/flink/zombie-reclaim-%s" % uuid.uuid4().hex[:8]
    info, born = crashed_jm(proxy.hostport, base + "/leader/latch")
    wait_until(lambda: proxy.metric("zkwarden_orphans_fenced_total") == 1, 20, what="the orphan fence")

    jm = kazoo_factory(proxy.hostport)  # the restarted JobManager
    jm.create(base + "/leader/latch/_c_%s-latch-" % uuid.uuid4(), b"", ephemeral=True, sequence=True)
    state = base + "/checkpoints/0000000000000000007"
    locks = state if layout == "1.7" else state + "/locks"
    own = "%s/%s" % (locks, uuid.uuid4())
    jm.create(own, b"127.0.0.1", ephemeral=True, makepath=True)

    def swept():
        log = proxy.stderr()
        return log.rfind("sweep done") > log.find("incarnation 2 begins") > 0
    wait_until(swept, 20, what="the new incarnation's sweep")
    zombie = "%s/%s" % (locks, uuid.uuid4())
    zombie_zk.zombie(zombie, info["session"], b"127.0.0.1", born)  # as if made before its session ended

    jm.delete(own)
    direct = kazoo_factory(zombie_zk.hostport)
    with pytest.raises(NotEmptyError):
        direct.delete(locks)  # direct: the zombie keeps it
    jm.delete(locks)  # through zkwarden: the zombie goes, the delete is replayed
    assert direct.exists(locks) is None and direct.exists(zombie) is None
    assert direct.exists(base + "/leader/latch") is not None
    rows = json.loads(proxy.admin_get("/v1/reclaims")[1])["reclaims"]
    mine = [r for r in rows if r["kind"] == "zombie"]
    assert [(r["path"], r["session"]) for r in mine] == [(zombie, "0x%x" % info["session"])], rows
    assert "reclaim at delete" in mine[0]["reason"]
    assert proxy.metric("zkwarden_zombie_ephemerals_total") == 1
    assert proxy.metric("zkwarden_reclaims_at_delete_total") == 1


@pytest.mark.zkwarden
@pytest.mark.parametrize("level", ["info", "debug"])
def test_notempty_of_a_non_lock_child_is_logged_at_debug(level, zk_server, zkwarden_factory, kazoo_factory):
    """Flink 2.x deletes leader/job-<id> with its connection_info still
    there: a routine NOTEMPTY, logged at debug (the line is there at debug
    level), not at info."""
    from kazoo.exceptions import NotEmptyError
    proxy = zkwarden_factory.start(zk_server, log_level=level, extra_env={
        "ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": "notempty-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6]),
        "ZKWARDEN_SWEEP_INTERVAL_S": "0"})
    jm = kazoo_factory(proxy.hostport)
    job = "/flink/notempty-%s/leader/job-%s" % (uuid.uuid4().hex[:8], uuid.uuid4().hex)
    jm.create(job + "/connection_info", b"addr", ephemeral=True, makepath=True)
    wait_until(lambda: "incarnation 1 begins" in proxy.stderr(), 10, what="the incarnation")
    with pytest.raises(NotEmptyError):
        jm.delete(job)
    jm.delete(job + "/connection_info")
    jm.delete(job)
    line = "delete %s: not reclaimed: %s/connection_info is not a lock" % (job, job)
    if level == "debug":
        assert "debug" in [l.split()[1] for l in proxy.stderr().splitlines() if line in l]
    else:
        assert line not in proxy.stderr()
