"""Lock inspection: `zkwarden locks` (table, --json, --reclaim, --dry-run)
and GET /v1/locks on a running sidecar, against a real ZooKeeper.

The tree holds one lock of each kind the report tells apart: a current
incarnation's lock (tagged by a real zkwarden), a stale lock of an older
incarnation held by a live session zkwarden cannot fence (the tag written
directly, as a superseded incarnation left it), an untagged lock (created
without zkwarden), a tagged persistent node, a lock of an identity the
registry does not know, and a subtree only another digest user may read.
Direct to ZooKeeper the stale lock keeps its state node from being deleted;
`zkwarden locks --reclaim` removes exactly that lock, and nothing else, where
the registry is trusted (ZKWARDEN_REGISTRY_AUTH on every sidecar and on the
command); without credentials the verdicts that rest on the registry are
marked untrusted and --reclaim deletes nothing."""

import json
import os
import time
import uuid

import pytest
from kazoo.exceptions import NotEmptyError
from kazoo.security import make_digest_acl

from zkharness import run_bounded
from checkpoints import forged_tag

pytestmark = pytest.mark.zkwarden

JOB = "b" * 32
AUTH = {"ZKWARDEN_REGISTRY_AUTH": "zkw:s3cret-registry"}



def sidecar(zk, factory, identity, **env):
    full = {"ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": identity, "ZKWARDEN_SWEEP_INTERVAL_S": "0"}
    full.update(env)
    return factory.start(zk, extra_env=full)


def run_locks(zkw_bin, zk, *args, env=None, timeout=120, scope="--all"):
    """`zkwarden locks`; by default of every lock root (--all): these tests
    arrange trees of several identities (the own trees' report:
    test_report_reads_the_own_trees_by_default)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("ZKWARDEN_")}
    e.update({"ZKWARDEN_UPSTREAM": zk.hostport, "ZKWARDEN_IDENTITY": "ops-cli"})
    e.update(env or {})
    return run_bounded([zkw_bin, "locks"] + ([scope] if scope else []) + list(args), timeout, env=e)


def locks_json(zkw_bin, zk, *args, env=None, scope="--all"):
    rc, out, err = run_locks(zkw_bin, zk, "--json", *args, env=env, scope=scope)
    assert rc == 0, err
    assert "AddressSanitizer" not in err and "runtime error" not in err, err
    return json.loads(out)


class Tree:
    """The arranged tree (see the module docstring)."""

    def __init__(self, zk, factory, kazoo_factory, env=None):
        env = env or {}
        # jm-1 had one incarnation through its sidecar, which is gone now:
        # its registry record says incarnation 1.
        gone = sidecar(zk, factory, "jm-1", **env)
        first = kazoo_factory(gone.hostport)
        first.create("/flink/c1/leader/latch/_c_%s-latch-" % uuid.uuid4(), b"", ephemeral=True,
                     sequence=True, makepath=True)  # acts as the JobManager: incarnation 1
        first.stop()
        assert not gone.stop()
        factory.procs.remove(gone)  # stopped and checked here: its sweep would take jm-1's stale lock
        # jm-0 runs: its JobManager holds a job graph lock (incarnation 1).
        self.proxy = sidecar(zk, factory, "jm-0", **env)
        self.jm = kazoo_factory(self.proxy.hostport)
        self.graph = "/flink/c1/jobgraphs/%s" % JOB
        self.jm.create(self.graph, b"graph", makepath=True)
        self.jm.create(self.graph + "/locks")
        self.current = "%s/locks/%s" % (self.graph, uuid.uuid4())
        self.jm.create(self.current, b"127.0.0.1", ephemeral=True)
        # A live session of jm-1's superseded incarnation 0 (never fenced)
        # holds a checkpoint lock (Flink 1.15 layout).
        self.old = kazoo_factory(zk.hostport)
        self.checkpoint = "/flink/c1/checkpoints/%s/%019d" % (JOB, 7)
        self.old.create(self.checkpoint + "/locks", makepath=True)
        self.stale = "%s/locks/%s" % (self.checkpoint, uuid.uuid4())
        self.old.create(self.stale, forged_tag("jm-1", 0), ephemeral=True)
        # A JobManager without zkwarden (Flink 1.7 layout).
        self.checkpoint6 = "/flink/c1/checkpoints/%s/%019d" % (JOB, 6)
        self.old.create(self.checkpoint6, b"handle")
        self.untagged = "%s/%s" % (self.checkpoint6, uuid.uuid4())
        self.old.create(self.untagged, b"127.0.0.1", ephemeral=True)
        # Tagged, but persistent; and an identity without a record.
        self.persistent = "/flink/c1/x/%s" % uuid.uuid4()
        self.old.create(self.persistent, forged_tag("jm-1", 0), makepath=True)
        self.unknown = "/flink/c1/y/%s" % uuid.uuid4()
        self.old.create(self.unknown, forged_tag("jm-9", 0), ephemeral=True, makepath=True)
        # A subtree only user "other" may read.
        other = kazoo_factory(zk.hostport, auth_data=[("digest", "other:pw")])
        self.secret = "/flink/c1/secret"
        other.create(self.secret, b"", acl=[make_digest_acl("other", "pw", all=True)])
        other.create("%s/%s" % (self.secret, uuid.uuid4()), forged_tag("jm-1", 0), ephemeral=True,
                     acl=[make_digest_acl("other", "pw", all=True)])
        self.other = other

    def survivors(self):
        return [self.graph, self.current, self.checkpoint, self.untagged, self.checkpoint6, self.persistent,
                self.unknown, self.secret]


@pytest.fixture
def tree(private_zk, zkwarden_factory, kazoo_factory):
    return Tree(private_zk, zkwarden_factory, kazoo_factory)


def by_path(doc):
    return {e["path"]: e for e in doc["locks"]}


def test_report_names_each_lock_its_state_node_and_the_rule_verdict(tree, private_zk, zkw_bin, admin):
    doc = locks_json(zkw_bin, private_zk)
    locks = by_path(doc)
    assert set(locks) == {tree.current, tree.stale, tree.untagged, tree.persistent, tree.unknown}
    cur = locks[tree.current]
    assert (cur["state_node"], cur["identity"], cur["incarnation"], cur["stale"], cur["why"]) == (
        tree.graph, "jm-0", 1, False, "held by its identity's current incarnation")
    assert cur["session"] == "0x%x" % tree.jm.client_id[0]
    st = locks[tree.stale]
    assert (st["state_node"], st["identity"], st["incarnation"], st["stale"], st["why"]) == (
        tree.checkpoint, "jm-1", 0, True, None)
    assert st["session"] == "0x%x" % tree.old.client_id[0]
    un = locks[tree.untagged]
    assert (un["state_node"], un["tagged"], un["identity"], un["stale"], un["why"]) == (
        tree.checkpoint6, False, None, False, "not tagged by zkwarden")
    assert locks[tree.persistent]["why"] == "not an ephemeral"
    assert locks[tree.unknown]["why"] == "its identity's current incarnation is unknown"
    ids = {i["identity"]: i for i in doc["identities"]}
    assert (ids["jm-0"]["current_incarnation"], ids["jm-0"]["locks"], ids["jm-0"]["record"]) == (1, 1, "ok")
    assert (ids["jm-1"]["current_incarnation"], ids["jm-1"]["locks"], ids["jm-1"]["stale"]) == (1, 2, 1)
    assert (ids["jm-9"]["current_incarnation"], ids["jm-9"]["record"]) == (0, "no registry record")
    assert doc["summary"] == {"locks": 5, "stale": 1, "untagged": 1, "unreadable": 1, "state_nodes": 5,
                              "state_nodes_held": 4, "zombies": 0, "untrusted": 2}
    # Without ZKWARDEN_REGISTRY_AUTH nothing read from the registry is trusted:
    # the verdicts that weigh an incarnation say so.
    assert not doc["registry_trusted"] and "ZKWARDEN_REGISTRY_AUTH is unset" in doc["registry_trust"]
    assert not ids["jm-1"]["record_trusted"] and "ZKWARDEN_REGISTRY_AUTH is unset" in ids["jm-1"]["record_trust"]
    assert (st["trusted"], cur["trusted"], un["trusted"], locks[tree.persistent]["trusted"]) == (
        False, False, True, True)
    assert "not trusted" in st["untrusted"] and un["untrusted"] is None
    assert all(e["zombie"] is None for e in doc["locks"])
    states = {s["path"]: s for s in doc["state_nodes"]}
    assert states[tree.checkpoint]["held"] is False and "only stale locks" in states[tree.checkpoint]["why"]
    assert states[tree.graph]["held_by"] == tree.current
    assert doc["unreadable"] == [{"path": tree.secret, "error": "not authenticated"}]

    # The table for people says the same.
    rc, out, err = run_locks(zkw_bin, private_zk)
    assert rc == 0, err
    print(out)
    assert out.startswith("5 lock(s): 1 stale, 1 untagged; 5 state node(s), 4 held; 1 unreadable")
    line = next(ln for ln in out.splitlines() if tree.stale.rsplit("/", 1)[1] in ln)
    assert "jm-1" in line and "STALE [not trusted: its verdict rests on its identity's registry record" in line
    assert "not stale: held by its identity's current incarnation" in out
    assert "%s  not authenticated" % tree.secret in out

    # The running sidecar answers the same report, without a CLI.
    r = admin(tree.proxy).get("/v1/locks?all=1")
    assert r.status == 200 and r.headers["content-type"] == "application/json"
    live = r.json()
    keep = ("path", "state_node", "identity", "incarnation", "session", "stale", "why")
    assert [{k: e[k] for k in keep} for e in live["locks"]] == [{k: e[k] for k in keep} for e in doc["locks"]]
    assert live["summary"] == doc["summary"] and live["unreadable"] == doc["unreadable"]
    assert live["identities"] == doc["identities"]


def test_reclaim_deletes_only_stale_locks_and_dry_run_nothing(private_zk, zkwarden_factory, kazoo_factory,
                                                              zkw_bin):
    """The sidecars and the command share ZKWARDEN_REGISTRY_AUTH: the records
    are trusted, and --reclaim deletes the stale lock (where the registry is
    open, it deletes nothing: test_integration's test_trust.py)."""
    tree = Tree(private_zk, zkwarden_factory, kazoo_factory, env=AUTH)
    direct = kazoo_factory(private_zk.hostport)
    # The failure: Flink's delete of the checkpoint is blocked by the stale lock.
    with pytest.raises(NotEmptyError):
        direct.delete(tree.checkpoint + "/locks")

    # Without the registry's credentials the records are unreadable: no verdict, nothing deleted.
    doc = locks_json(zkw_bin, private_zk, "--reclaim")
    assert doc["reclaim"]["deleted"] == 0 and direct.exists(tree.stale) is not None

    # In a pod still in observe mode, --reclaim deletes nothing (it says so).
    rc, out, err = run_locks(zkw_bin, private_zk, "--reclaim", env=dict(AUTH, ZKWARDEN_MODE="observe"))
    assert rc == 0 and "ZKWARDEN_MODE=observe: --reclaim deletes nothing" in err, err
    assert "would delete %s" % tree.stale in out
    assert direct.exists(tree.stale) is not None

    rc, out, err = run_locks(zkw_bin, private_zk, "--reclaim", "--dry-run", env=AUTH)
    assert rc == 0, err
    assert "would delete %s (identity jm-1, incarnation 0" % tree.stale in out
    assert "reclaim (dry run: nothing deleted): 0 deleted, 0 not deleted" in out
    assert direct.exists(tree.stale) is not None

    doc = locks_json(zkw_bin, private_zk, "--reclaim", env=AUTH)
    assert doc["registry_trusted"] and all(i["record_trusted"] for i in doc["identities"] if i["record"] == "ok")
    assert doc["reclaim"]["dry_run"] is False and doc["reclaim"]["deleted"] == 1
    (res,) = doc["reclaim"]["results"]
    assert (res["path"], res["result"]) == (tree.stale, "deleted")
    assert direct.exists(tree.stale) is None
    for path in tree.survivors():
        assert direct.exists(path) is not None, path
    assert tree.old.connected  # its owner was alive all along
    direct.delete(tree.checkpoint + "/locks")  # and Flink's delete goes through now
    direct.delete(tree.checkpoint)

    # Nothing stale is left: a second reclaim deletes nothing.
    again = locks_json(zkw_bin, private_zk, "--reclaim", env=AUTH)
    assert again["reclaim"]["results"] == [] and again["summary"]["stale"] == 0


def test_usage_errors(zkw_bin, zk_server):
    rc, _, err = run_locks(zkw_bin, zk_server, "--dry-run")
    assert rc == 2 and "--dry-run goes with --reclaim" in err
    rc, _, err = run_locks(zkw_bin, zk_server, "--bogus")
    assert rc == 2 and "unknown argument '--bogus'" in err
    rc, _, err = run_locks(zkw_bin, zk_server, env={"ZKWARDEN_LOCK_ROOTS": "flink"})
    assert rc == 2 and "ZKWARDEN_LOCK_ROOTS" in err


def test_v1_locks_unavailable_in_relay_mode(zk_server, zkwarden_factory, admin):
    proxy = zkwarden_factory.start(zk_server, extra_env={"ZKWARDEN_MODE": "relay"})
    r = admin(proxy).get("/v1/locks")
    assert r.status == 503 and r.text.startswith("lock report unavailable: relay mode")


def test_big_tree_within_seconds(private_zk, zkw_bin, kazoo_factory, zkwarden_factory, admin):
    """ZKW_LOCKS_BIG_N locks (default 20000) under one state node per 10;
    both the CLI and /v1/locks report every one within the bound."""
    n = int(os.environ.get("ZKW_LOCKS_BIG_N", "20000"))
    c = kazoo_factory(private_zk.hostport, timeout=30.0)
    c.create("/flink/big", makepath=True)
    t0 = time.monotonic()
    data = forged_tag("jm-big", 1)
    for start in range(0, n, 1000):
        t = c.transaction()
        for i in range(start, min(n, start + 1000)):
            if i % 10 == 0:
                t.create("/flink/big/s%07d" % (i // 10))
            t.create("/flink/big/s%07d/%s" % (i // 10, uuid.uuid4()), data, ephemeral=True)
        assert all(r is not None and not isinstance(r, Exception) for r in t.commit())
    made = time.monotonic() - t0
    nodes = n + n // 10
    t0 = time.monotonic()
    doc = locks_json(zkw_bin, private_zk)
    took = time.monotonic() - t0
    print("big tree: %d nodes (%d locks) made in %.1f s; zkwarden locks --json: %.2f s (walk %.2f s)"
          % (nodes, n, made, took, doc["seconds"]))
    assert doc["summary"]["locks"] == n and doc["nodes_visited"] == nodes + 1  # and /flink/big
    assert doc["summary"]["state_nodes"] == n // 10
    # Generous for a loaded 2-core machine under ASan; docs/operating.md has the measured figures.
    assert doc["seconds"] < max(15.0, n / 2000.0)
    proxy = sidecar(private_zk, zkwarden_factory, "jm-big-view")
    t0 = time.monotonic()
    r = admin(proxy).get("/v1/locks?all", timeout=60)
    live_took = time.monotonic() - t0
    print("big tree: GET /v1/locks %.2f s" % live_took)
    assert r.status == 200 and r.json()["summary"]["locks"] == n
    # The admin loop served other requests meanwhile (it never blocks).
    assert admin(proxy).get("/healthz").status == 200


def test_shutdown_during_a_lock_walk(private_zk, zkwarden_factory, kazoo_factory):
    """SIGTERM while /v1/locks and / wait for their walk: zkwarden exits 0,
    with nothing leaked (the factory's shutdown check reads the sanitizer's
    report), and the waiting clients see their connections close."""
    import socket
    c = kazoo_factory(private_zk.hostport, timeout=30.0)
    c.create("/flink/many", makepath=True)
    t = c.transaction()
    for i in range(3000):
        t.create("/flink/many/%s" % uuid.uuid4(), forged_tag("jm-many", 1), ephemeral=True)
    t.commit()
    proxy = sidecar(private_zk, zkwarden_factory, "jm-shutdown")
    from zkharness import wait_until
    wait_until(lambda: proxy.admin_get("/readyz")[0] == 200, 15, what="the sidecar ready")
    socks = []
    for path in ("/v1/locks", "/"):
        s = socket.create_connection(("127.0.0.1", proxy.admin_port))
        s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
        socks.append(s)
    problems = proxy.stop()
    zkwarden_factory.procs.remove(proxy)
    assert not problems, "\n".join(problems) + proxy.stderr()[-3000:]
    for s in socks:
        s.settimeout(10)
        try:
            while s.recv(65536):  # an answer, or nothing: then the close
                pass
        except ConnectionResetError:
            pass  # closed before its request was read (the kernel answers with a reset)
        s.close()


def test_registry_auth_reads_records_under_their_acl(private_zk, zkwarden_factory, kazoo_factory, zkw_bin):
    """With ZKWARDEN_REGISTRY_AUTH the records carry a digest ACL: without the
    credentials the CLI cannot tell a lock's verdict (and says so), with them
    it can; no password is ever printed."""
    auth = {"ZKWARDEN_REGISTRY_AUTH": "zkw:s3cret-registry"}
    proxy = sidecar(private_zk, zkwarden_factory, "jm-acl", **auth)
    jm = kazoo_factory(proxy.hostport)
    lock = "/flink/c1/jobgraphs/%s/locks/%s" % (JOB, uuid.uuid4())
    jm.create(lock, b"127.0.0.1", ephemeral=True, makepath=True)

    blind = locks_json(zkw_bin, private_zk)
    (ident,) = blind["identities"]
    assert (ident["identity"], ident["record"], ident["current_incarnation"]) == ("jm-acl", "not authenticated", 0)
    assert by_path(blind)[lock]["why"] == "its identity's current incarnation is unknown"

    rc, out, err = run_locks(zkw_bin, private_zk, "--json", env=auth)
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["identities"][0]["record"] == "ok" and doc["identities"][0]["current_incarnation"] == 1
    assert by_path(doc)[lock]["why"] == "held by its identity's current incarnation"
    rc, table, err2 = run_locks(zkw_bin, private_zk, env=auth)
    for text in (out, err, table, err2):
        assert "s3cret-registry" not in text and "passwd" not in text
