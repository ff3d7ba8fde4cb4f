"""Only the JobManager's own session is an incarnation (issue 12).

Every other client that shares the JobManager's sidecar (Flink's CLI and
TaskManagers doing leader retrieval, zkCli, applications, health checks,
hostile input) is a plain client: relayed as in relay mode, never fencing and
never fenced. Each test here fails under the old rule ("every new session
through a sidecar is a new incarnation"), where the first other client fenced
the JobManager (all but the relay-mode half of 5, which shows the relay):

 1. the Flink-like Curator JobManager of the drills (both layouts) next to a
    Curator leader retrieval, zkCli, kazoo readers and writers and clients
    that connect and disconnect in a loop: its session, latch and leader
    nodes stay, its incarnation does not move; a real restart still fences
    at once;
 2. two live JobManager sessions behind one sidecar: a second session reads
    freely, takes over when it acts as the JobManager, and the superseded
    client's comeback is a plain client and an identity conflict, no ping-pong;
 3. client libraries (kazoo, Curator) behave through a shared sidecar exactly
    as direct, whatever they do outside the lock roots;
 4. hostile input with valid handshakes never fences the JobManager;
 5. an operator-like client (the Flink Kubernetes operator's HA metadata
    check and cleanup) through a relay-mode or sidecar-mode zkwarden of its
    own works as direct.
"""

import json
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from kazoo.exceptions import NoNodeError

import kazoo_workload
import rawzk
from test_curator_workload import run_curator
from test_hostile_input import closed_by_peer
from test_identity import new_latch
from test_kazoo_workload import assert_transcript
from test_zkcli import ZKCLI
from zkharness import HOST, run_bounded, wait_until

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "drills"))
import procs  # noqa: E402  (the drills' Flink-like JobManager process)

pytestmark = pytest.mark.zkwarden

PY = "/usr/bin/python3"
IDENTITY = "jm-0"
UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
# How long the other clients run next to the JobManager (the issue: a minute).
LOOP_S = float(os.environ.get("ZKW_PLAIN_LOOP_S", "60"))
SESSION_MS = 20000


def sidecar(factory, zk, **env):
    full = {"ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": IDENTITY, "ZKWARDEN_SWEEP_INTERVAL_S": "0"}
    full.update({k: str(v) for k, v in env.items()})
    return factory.start(zk, extra_env=full)


def sessions(proxy):
    status, body = proxy.admin_get("/v1/sessions")
    assert status == 200, body
    return json.loads(body)["sessions"]


def roles(proxy):
    """{session id: role} of the established sessions on /v1/sessions."""
    out = {}
    for s in sessions(proxy):
        sid = int(s["session"], 16)
        if sid:
            out[sid] = s.get("role", "<no role>")
    return out


def registry_incarnation(direct, identity=IDENTITY):
    """(incarnation, session) of the identity's registry record."""
    rec = dict(line.split("=", 1) for line in direct.get("/zkwarden/identities/" + identity)[0].decode().splitlines()
               if "=" in line)
    return int(rec["incarnation"]), int(rec["session"], 16)


def ephemerals(client, root, owner):
    """Every ephemeral node under root owned by session `owner`, path -> data."""
    out = {}

    def walk(p):
        try:
            data, st = client.get(p)
            kids = client.get_children(p)
        except NoNodeError:
            return
        if st.ephemeralOwner == owner:
            out[p] = data
        for k in kids:
            walk(p.rstrip("/") + "/" + k)
    walk(root)
    return out


def not_locks(nodes):
    """Latch and leader nodes (locks come and go with checkpoints)."""
    return {p: d for p, d in nodes.items() if not UUID_RE.search(p)}


# ---------------------------------------------------------------- the JobManager of the drills

@pytest.fixture(scope="session")
def flinklike_classpath():
    return procs.build_flinklike()


@pytest.fixture
def flink_jms():
    started = []
    yield started
    for j in started:
        j.stop(grace=10)


def start_flinklike(flink_jms, classpath, workdir, connect, layout, cluster, submit=True):
    args = ["--layout=" + layout, "--cluster-id=/" + cluster, "--checkpoint-interval-ms=200",
            "--num-retained=3", "--session-timeout-ms=%d" % SESSION_MS, "--ensemble-tracker=false",
            "--storage-dir=%s" % (workdir / "storage"), "--rpc-host=jm-0.jm.local"]
    jm = procs.JM(IDENTITY, workdir / "jm", classpath, connect, args)
    flink_jms.append(jm)
    jm.start(["--submit-job"] if submit else [])
    return jm


def running_leader(jm, since_ms=0, checkpoints=2, timeout=60):
    return jm.wait_stats(lambda s: s.get("job_master_leader") and s.get("job_state") == "RUNNING"
                         and s.get("leader_epoch_ms", 0) >= since_ms and s.get("master_added", 0) >= checkpoints,
                         timeout, "leading and checkpointing")


class Clients:
    """The other clients of the pod, each in its own thread; errors are kept."""

    def __init__(self):
        self.errors = []
        self.counts = {}
        self.stop = threading.Event()
        self.threads = []

    def run(self, name, fn):
        def body():
            try:
                fn()
            except BaseException as e:  # every failure is reported, not only the first
                self.errors.append("%s: %r" % (name, e))
        t = threading.Thread(target=body, name=name, daemon=True)
        self.threads.append(t)
        t.start()

    def count(self, name):
        self.counts[name] = self.counts.get(name, 0) + 1

    def join(self, timeout):
        self.stop.set()
        for t in self.threads:
            t.join(timeout)
            assert not t.is_alive(), "%s did not finish" % t.name


def kazoo_reader_writer(clients, client, ns, tag):
    """Reads and writes outside the lock roots (persistent and ephemeral), and
    persistent reads and writes under /flink, including the JobManager's nodes."""
    other = "/apps-%s" % tag
    client.ensure_path(other)
    client.create(other + "/eph", b"app", ephemeral=True)
    client.ensure_path("/flink/%s-tools" % tag)
    i = 0
    while not clients.stop.is_set():
        i += 1
        p = "%s/n%d" % (other, i % 5)
        if client.exists(p):
            client.set(p, b"%d" % i)
        else:
            client.create(p, b"%d" % i)
        client.delete(client.create("%s/seq-" % other, b"", ephemeral=True, sequence=True))
        assert client.get(p)[0] == b"%d" % i
        client.set("/flink/%s-tools" % tag, b"%d" % i)
        for k in client.get_children(ns + "/leader"):
            client.get("%s/leader/%s" % (ns, k))
        client.get_children(ns, watch=lambda ev: None)
        clients.count("kazoo ops")


def connect_loop(clients, hostport, port, kazoo_factory):
    """Clients that come and go: kazoo sessions closed cleanly, raw sessions
    dropped without closeSession (the server expires them)."""
    i = 0
    while not clients.stop.is_set():
        i += 1
        if i % 2:
            c = kazoo_factory(hostport, timeout=10)
            c.exists("/")
            c.stop()
            c.close()
        else:
            s = rawzk.RawSession(port, timeout_ms=4000)
            s.send(rawzk.exists(1, "/flink"))
            assert s.read_reply()[0] == 1
            s.close()
        clients.count("connect+disconnect")


def zkcli_loop(clients, hostport, ns, names, leader):
    while not clients.stop.is_set():
        rc, out, err = run_bounded([ZKCLI, "-server", hostport], timeout=90,
                                   input="ls %s/leader\nget %s\nstat %s\nquit\n" % (ns, leader, leader))
        assert rc == 0, err
        for n in names:
            assert n in out, "zkCli ls %s/leader: %s missing in\n%s" % (ns, n, out)
        assert "ephemeralOwner = 0x" in out and "ephemeralOwner = 0x0\n" not in out, out
        clients.count("zkCli runs")


@pytest.mark.parametrize("layout", ["1.7", "current"])
def test_jobmanager_survives_every_other_client_in_its_pod(layout, private_zk, zkwarden_factory, kazoo_factory,
                                                           java_classes, flinklike_classpath, flink_jms,
                                                           tmp_path):
    proxy = sidecar(zkwarden_factory, private_zk)
    cluster = "plain-" + layout.replace(".", "")
    ns = "/flink/" + cluster
    jm = start_flinklike(flink_jms, flinklike_classpath, tmp_path, proxy.hostport, layout, cluster)
    s = running_leader(jm)
    jm_sid = int(s["session_id"], 16)
    direct = kazoo_factory(private_zk.hostport)
    inc, rec_sid = registry_incarnation(direct)
    assert rec_sid == jm_sid
    held = not_locks(ephemerals(direct, ns, jm_sid))
    assert any("latch" in p for p in held) and any("/leader/" in p for p in held), held
    names = ["dispatcher_lock", "resource_manager_lock", "rest_server_lock"] if layout == "1.7" \
        else ["dispatcher", "resource_manager", "rest_server"]

    # Flink's CLI / a TaskManager: leader retrieval through the same sidecar.
    retrieval = subprocess.Popen(java_classes.cmd("LeaderRetrieval", proxy.hostport, ns[1:], layout,
                                                  int(LOOP_S * 1000)),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        early = []
        while not early or not (early[-1].startswith("READY 0x") or early[-1] == ""):
            early.append(retrieval.stdout.readline())  # STATE lines, then READY (or EOF)
        assert early[-1].startswith("READY 0x"), "".join(early) + retrieval.stderr.read()
        retrieval_sid = int(early[-1].split()[1], 16)
        app = kazoo_factory(proxy.hostport)
        # Quiet for a moment: the JobManager's incarnation and two plain clients.
        want = {jm_sid: "incarnation", retrieval_sid: "plain", app.client_id[0]: "plain"}
        wait_until(lambda: roles(proxy) == want, 10, what="/v1/sessions to show %s" % want)
        assert proxy.metric("zkwarden_plain_client_sessions") == 2

        clients = Clients()
        clients.run("kazoo reader/writer", lambda: kazoo_reader_writer(clients, app, ns, cluster))
        clients.run("connect loop", lambda: connect_loop(clients, proxy.hostport, proxy.port, kazoo_factory))
        leader = ns + ("/leader/dispatcher_lock" if layout == "1.7" else "/leader/dispatcher/connection_info")
        clients.run("zkCli", lambda: zkcli_loop(clients, proxy.hostport, ns, names, leader))
        deadline = time.monotonic() + LOOP_S
        while time.monotonic() < deadline and not clients.errors:
            r = roles(proxy)
            assert r.get(jm_sid) == "incarnation", r
            assert [k for k, v in r.items() if v == "incarnation"] == [jm_sid], r
            time.sleep(0.5)  # a sampling interval, not a wait for a condition
        clients.join(120)
        assert clients.errors == []
        out, err = retrieval.communicate(timeout=60)
    finally:
        if retrieval.poll() is None:
            retrieval.kill()
            retrieval.wait()
    assert retrieval.returncode == 0, err
    # It saw every leader node, in one session, never LOST.
    done = [l for l in out.splitlines() if l.startswith("DONE")]
    assert done == ["DONE 0x%x sessions=1 seen=3 lost=0" % retrieval_sid], out
    assert clients.counts.get("connect+disconnect", 0) >= 5 and clients.counts.get("zkCli runs", 0) >= 1 \
        and clients.counts.get("kazoo ops", 0) >= 10, clients.counts
    print("%s: %s next to the JobManager for %.0f s" % (layout, clients.counts, LOOP_S))

    # The JobManager never noticed.
    s = jm.stats()
    assert s.get("session_ids") == [s["session_id"]] and int(s["session_id"], 16) == jm_sid, s
    assert not s.get("state_lost") and not s.get("state_suspended"), s
    assert s.get("job_master_leader") and not s.get("revokes"), s
    assert not_locks(ephemerals(direct, ns, jm_sid)) == held
    assert registry_incarnation(direct) == (inc, jm_sid)
    for m in ("zkwarden_fences_total", "zkwarden_orphans_fenced_total", "zkwarden_identity_conflicts_total"):
        assert proxy.metric(m) == 0, m
    app.stop()
    wait_until(lambda: roles(proxy) == {jm_sid: "incarnation"}, 20, what="only the JobManager left")
    assert proxy.metric("zkwarden_plain_client_sessions") == 0

    # A real restart still fences at once.
    t_kill = int(time.time() * 1000)
    jm.kill9()
    jm.start()
    s = running_leader(jm, since_ms=t_kill, checkpoints=0, timeout=30)
    took = s["leader_epoch_ms"] - s["connect_start_epoch_ms"]
    print("%s: restarted JobManager leads %d ms after it began to connect" % (layout, took))
    assert took < 1000, "the restarted JobManager led after %d ms" % took
    new_sid = int(s["session_id"], 16)
    assert registry_incarnation(direct) == (inc + 1, new_sid)
    assert ephemerals(direct, ns, jm_sid) == {}  # the old latch and leader nodes went with the fence
    assert proxy.metric("zkwarden_fences_total") == 1


# ---------------------------------------------------------------- two live JobManager sessions

def test_two_live_jobmanager_sessions(private_zk, zkwarden_factory, kazoo_factory):
    """The old JobManager hangs with its connection open and its replacement
    arrives (the hung-old-JM case); the old one then wakes up, finds its
    session expired, opens a new one and acts as the JobManager again."""
    proxy = sidecar(zkwarden_factory, private_zk)
    ns = "/flink/two"
    graph = "%s/jobgraphs/%s" % (ns, "a" * 32)
    direct = kazoo_factory(private_zk.hostport)
    first = kazoo_factory(proxy.hostport, timeout=20)
    first_sid = first.client_id[0]
    first_latch = new_latch(first, ns + "/leader/latch")
    first.create(graph, b"graph", makepath=True)
    assert registry_incarnation(direct) == (1, first_sid)

    # A second client: until it acts as the JobManager it is plain.
    second = kazoo_factory(proxy.hostport, timeout=20)
    second_sid = second.client_id[0]
    second.get_children(ns + "/leader/latch")
    second.create("/apps-two/x", b"x", makepath=True, ephemeral=True)
    assert roles(proxy) == {first_sid: "incarnation", second_sid: "plain"}
    assert first.client_id[0] == first_sid and direct.exists(first_latch).ephemeralOwner == first_sid
    assert proxy.metric("zkwarden_fences_total") == 0

    # Its latch create: the new incarnation. The first session is fenced.
    second_latch = new_latch(second, ns + "/leader/latch")
    assert direct.exists(first_latch) is None  # fenced before the latch was forwarded
    assert registry_incarnation(direct) == (2, second_sid)
    assert proxy.metric("zkwarden_fences_total") == 1

    # The first client re-attaches, is told "expired", opens a new session
    # and acts as the JobManager within 60 s: a plain client and a conflict.
    wait_until(lambda: first.connected and first.client_id and first.client_id[0] not in (first_sid, second_sid), 30,
               what="the superseded client's new session")
    comeback = first.client_id[0]
    again = new_latch(first, ns + "/leader/latch")
    lock = "%s/%s" % (graph, uuid.uuid4())
    first.create(lock, b"127.0.0.1", ephemeral=True)
    wait_until(lambda: proxy.metric("zkwarden_identity_conflicts_total") == 1, 10, what="the conflict")
    for _ in range(3):  # it goes on acting as the JobManager: no ping-pong
        first.set(ns + "/leader/latch", b"")
        new_latch(first, ns + "/leader/latch")
    assert direct.get(lock)[0] == b"127.0.0.1"  # relayed untagged
    assert direct.exists(again).ephemeralOwner == comeback
    assert direct.exists(second_latch).ephemeralOwner == second_sid and second.client_id[0] == second_sid
    assert second.exists("/") is not None
    assert registry_incarnation(direct) == (2, second_sid)
    assert proxy.metric("zkwarden_fences_total") == 1
    assert roles(proxy) == {second_sid: "incarnation", comeback: "plain"}
    # The current incarnation's own locks are still tagged.
    mine = "%s/%s" % (graph, uuid.uuid4())
    second.create(mine, b"127.0.0.1", ephemeral=True)
    assert direct.get(mine)[0].startswith(b"zkwarden-lock 1 identity=jm-0 incarnation=2 ")


# ---------------------------------------------------------------- client libraries as direct

class Shared:
    """A workload target whose every session goes through one sidecar."""

    def __init__(self, kind, hostport):
        self.kind = kind
        self.hostport = hostport

    def another(self):
        return self.hostport


@pytest.mark.parametrize("library", ["kazoo", "curator"])
def test_client_libraries_through_a_shared_sidecar_as_direct(library, private_zk, zkwarden_factory,
                                                             kazoo_factory, java_classes):
    """The differential workloads (watches, ACLs, multi, containers, TTL,
    Curator's caches, latch and mutex) with all their sessions on one sidecar,
    outside the lock roots, against the same workload direct."""
    proxy = sidecar(zkwarden_factory, private_zk)

    def run(target):
        root = "/plain-%s-%s" % (library, target.kind)
        if library == "kazoo":
            return kazoo_workload.run(target.hostport, root, kazoo_factory, target.another).entries
        return run_curator(java_classes, target, root)
    direct = run(Shared("direct", private_zk.hostport))
    through = run(Shared("sidecar", proxy.hostport))
    assert_transcript(through, direct, "%s through one sidecar vs direct" % library)
    for m in ("zkwarden_fences_total", "zkwarden_orphans_fenced_total", "zkwarden_identity_conflicts_total"):
        assert proxy.metric(m) == 0, m
    assert "incarnation" not in roles(proxy).values()


# ---------------------------------------------------------------- hostile input

def jm_stand_in(hostport, ns, lock):
    p = subprocess.Popen([PY, str(HERE / "jm_proc.py"), hostport, str(SESSION_MS), ns + "/leader/latch", lock],
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line, "jm_proc exited with %s" % p.wait()
    return p, json.loads(line)


def test_hostile_input_next_to_a_healthy_jobmanager(private_zk, zkwarden_factory, kazoo_factory):
    proxy = sidecar(zkwarden_factory, private_zk, ZKWARDEN_ORPHAN_GRACE_MS=1000)
    ns = "/flink/hostile"
    lock = "%s/jobgraphs/%s/%s" % (ns, "b" * 32, uuid.uuid4())
    p, info = jm_stand_in(proxy.hostport, ns, lock)
    try:
        sid = info["session"]
        direct = kazoo_factory(private_zk.hostport)
        assert registry_incarnation(direct) == (1, sid)
        bad = [struct.pack(">I", 0x7FFFFFFF), struct.pack(">i", -7), b"\xff" * 100, b"GET / HTTP/1.0\r\n\r\n",
               rawzk.frame(struct.pack(">ii", 1, 9999)), rawzk.frame(struct.pack(">ii", 2, 4) + b"\0\0\3\xe8/abc")]
        for i in range(40):
            kind = i % 4
            if kind == 3:  # a handshake that claims the JobManager's session with a wrong password
                s = socket.create_connection((HOST, proxy.port), timeout=10)
                s.sendall(rawzk.connect_request(timeout_ms=SESSION_MS, session_id=sid, passwd=b"\1" * 16))
                expect_close(s)
                continue
            if kind == 0:  # garbage as the first bytes
                s = socket.create_connection((HOST, proxy.port), timeout=10)
                s.sendall(bad[i % len(bad)])
                expect_close(s)
                continue
            # a valid new session, then garbage (1) or requests and a drop (2)
            r = rawzk.RawSession(proxy.port, timeout_ms=4000)
            if kind == 1:
                try:
                    r.send(bad[i % len(bad)])
                except OSError:
                    pass
                expect_close(r.sock)
            else:
                r.send(rawzk.get_data(1, lock) + rawzk.exists(2, "/flink", watch=True))
                assert [r.read_reply()[0] for _ in range(2)] == [1, 2]
            r.close()
        # The valid sessions were dropped without closeSession: a plain client
        # is never orphan-fenced, so nothing may be fenced after the grace
        # (1 s) either. Absence cannot be waited for: wait past the grace.
        time.sleep(3)
        assert p.poll() is None
        assert direct.exists(lock).ephemeralOwner == sid
        assert direct.exists(info["latch"]).ephemeralOwner == sid
        assert registry_incarnation(direct) == (1, sid)
        for m in ("zkwarden_fences_total", "zkwarden_orphans_fenced_total", "zkwarden_identity_conflicts_total"):
            assert proxy.metric(m) == 0, m
        assert roles(proxy) == {sid: "incarnation"}
        assert proxy.alive()
    finally:
        p.kill()
        p.wait()


def expect_close(sock):
    """zkwarden (or the server behind it) must close this bad connection."""
    closed, data = closed_by_peer(sock)
    sock.close()
    assert closed, "a bad connection stayed open (read %r)" % data[:64]


# ---------------------------------------------------------------- the Flink Kubernetes operator

def operator_cleanup(client, ns):
    """What the operator does with a deployment's HA metadata from its own pod
    (FLINK-27273, FLINK-32890): check that it is there, delete the job graphs
    recursively (locks included), then the whole cluster subtree. Returns the
    steps' results."""
    out = [("available", bool(client.exists(ns + "/jobgraphs")) and client.get_children(ns + "/jobgraphs"))]
    out.append(("leader nodes", sorted(client.get_children(ns + "/leader"))))
    client.delete(ns + "/jobgraphs", recursive=True)
    out.append(("jobgraphs after delete", client.exists(ns + "/jobgraphs")))
    client.delete(ns, recursive=True)
    out.append(("cluster after delete", client.exists(ns)))
    out.append(("available after", bool(client.exists(ns + "/jobgraphs"))))
    return out


@pytest.mark.parametrize("mode", ["relay", "sidecar"])
def test_operator_like_client_reads_and_deletes_ha_metadata(mode, private_zk, zkwarden_factory, kazoo_factory):
    """The operator's pod runs a zkwarden of its own where the deployment's
    flink-conf points (relay mode, or the sidecar image as it is: the
    operator is a plain client there). Its HA metadata cleanup of a
    deployment whose JobManager runs behind its own sidecar works as direct,
    and fences nobody."""
    jm_proxy = sidecar(zkwarden_factory, private_zk)
    env = {"ZKWARDEN_MODE": mode}
    if mode == "sidecar":
        env.update({"ZKWARDEN_IDENTITY": "flink-kubernetes-operator-0", "ZKWARDEN_SWEEP_INTERVAL_S": "0"})
    op_proxy = zkwarden_factory.start(private_zk, extra_env=env)
    results = {}
    for where, hostport in (("direct", private_zk.hostport), (mode, op_proxy.hostport)):
        ns = "/flink/op-" + where
        jm = kazoo_factory(jm_proxy.hostport)
        new_latch(jm, ns + "/leader/latch")
        jm.create(ns + "/leader/dispatcher/connection_info", b"\xac\xedaddr", ephemeral=True, makepath=True)
        graph = "%s/jobgraphs/%s" % (ns, "c" * 32)
        jm.create(graph, b"graph", makepath=True)
        jm.create("%s/%s" % (graph, uuid.uuid4()), b"127.0.0.1", ephemeral=True)
        jm_sid = jm.client_id[0]
        operator = kazoo_factory(hostport)
        results[where] = operator_cleanup(operator, ns)
        if where != "direct" and mode == "sidecar":
            assert roles(op_proxy) == {operator.client_id[0]: "plain"}
        operator.stop()
        assert jm.client_id[0] == jm_sid and jm.exists("/") is not None  # the JobManager's session lives on
        jm.stop()
    assert results[mode] == results["direct"]
    assert results["direct"][0] == ("available", ["c" * 32])
    assert results["direct"][-2:] == [("cluster after delete", None), ("available after", False)]
    for proxy in (jm_proxy, op_proxy):
        for m in ("zkwarden_fences_total", "zkwarden_orphans_fenced_total", "zkwarden_identity_conflicts_total"):
            assert proxy.metric(m) == 0, m
