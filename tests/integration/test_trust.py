"""Trust only what only zkwarden can write (issue 35, items 1 and 7).

A registry record's content can make zkwarden delete: its dead sessions
(zombies), its trees (what the sweep reads), another identity's incarnation
(which of its locks are stale). It is trusted only when no one but
zkwarden's registry identity (the digest id ZKWARDEN_REGISTRY_AUTH
authenticates as) can write it, delete it or change its ACL, nor delete it
and create another (CREATE and DELETE on the registry's parents). Without
registry credentials nothing read from the registry drives a delete.

- A record of identity B recreated by another digest user with an
  `ip:0.0.0.0/0` ACL (every right), naming cluster A's tree and A's live
  session as dead: B's sidecar deletes nothing of A (before: all 4 of A's
  ephemerals went, as zombies "seen by zkwarden"). The registry's parents,
  left open by a credential-less first run, and the record are made
  zkwarden-only, and the record is written again by zkwarden.
- Another identity's record raised to incarnation 999 (a world ACL, an `ip`
  ACL, another user's digest ACL, or no credentials at all): a leader's
  delete does not take a live JobManager's lock (before: reclaim at delete
  removed it); a record only zkwarden could write still lets it reclaim a
  stale lock.
- The registry's parents left world-writable by a credential-less first run
  are made zkwarden-only, so no one else can create a record there.
- `zkwarden locks` in a pod whose registry is open lists its JobManager's
  locks without --all, marked untrusted, and --reclaim deletes nothing it
  cannot trust (before: "no own tree of identity ... is known"); so does
  /v1/locks of a sidecar restarted under its JobManager.

Each shows its failure on the code before the change (ZKW_BIN=<a build of
main>)."""

import base64
import hashlib
import json
import os
import subprocess
import time
import uuid

import pytest
from kazoo.exceptions import NoAuthError, NotEmptyError
from kazoo.security import make_acl, make_digest_acl

from checkpoints import forged_tag
from test_scope import ready, sidecar, stop, sweeps
from zkharness import default_zkwarden_bin, wait_until

pytestmark = pytest.mark.zkwarden

AUTH = "zkw:registry-s3cret"
JOB = "c" * 32


def latch(client, cluster):
    return client.create("%s/leader/latch/_c_%s-latch-" % (cluster, uuid.uuid4()), b"", ephemeral=True,
                         sequence=True, makepath=True)


def record_text(incarnation, session, dead_sessions=(), trees=(), dead=0):
    """A registry record as anyone could write it (zkw_record.h)."""
    lines = [b"zkwarden-registry 1", b"incarnation=%d" % incarnation, b"session=0x%x" % session,
             b"passwd=" + b"0" * 32, b"timeout=20000", b"instance=forged"]
    if dead_sessions:
        lines.append(b"dead_sessions=" + b",".join(b"0x%x:1:%d" % (s, ms) for s, ms in dead_sessions))
    lines += [b"tree=" + t.encode() for t in trees]
    lines.append(b"dead=%d" % dead)
    return b"\n".join(lines) + b"\n"


def schemes(client, path):
    return sorted("%s:%s" % (a.id.scheme, a.id.id.split(":")[0]) for a in client.get_acls(path)[0])


def credential_less_first_run(factory, zk, kazoo_factory, identity):
    """A sidecar that runs once without ZKWARDEN_REGISTRY_AUTH: the
    registry's root, identities and its record get a world ACL."""
    bare = sidecar(factory, zk, identity)
    jm = kazoo_factory(bare.hostport)
    latch(jm, "/flink/bare-%s" % identity)
    client = kazoo_factory(zk.hostport)
    wait_until(lambda: client.exists("/zkwarden/identities/%s" % identity) is not None
               and b"incarnation=1" in client.get("/zkwarden/identities/%s" % identity)[0], 10,
               what="the first incarnation recorded")
    jm.stop()
    stop(factory, bare)
    assert schemes(client, "/zkwarden/identities") == ["world:anyone"]


def test_a_record_another_user_recreated_deletes_nothing_of_a_live_cluster(private_zk, zkwarden_factory,
                                                                          kazoo_factory):
    zk = private_zk
    me = "jm-b-%s" % uuid.uuid4().hex[:6]
    node = "/zkwarden/identities/" + me
    credential_less_first_run(zkwarden_factory, zk, kazoo_factory, me)
    # Cluster A: a live JobManager's four ephemerals.
    a = kazoo_factory(zk.hostport)
    cluster = "/flink/a-%s" % uuid.uuid4().hex[:8]
    live = [latch(a, cluster),
            a.create(cluster + "/leader/rest_server/connection_info", b"akka://a", ephemeral=True, makepath=True),
            a.create("%s/jobgraphs/%s/locks/%s" % (cluster, JOB, uuid.uuid4()), b"127.0.0.1", ephemeral=True,
                     makepath=True),
            a.create("%s/checkpoints/%s/%019d/locks/%s" % (cluster, JOB, 1, uuid.uuid4()), b"127.0.0.1",
                     ephemeral=True, makepath=True)]
    # Another digest user deletes B's record (its sidecar is gone, and so is
    # its owner node) and creates it again with an `ip` ACL giving everyone
    # every right: no world entry. It names A's tree and A's live session.
    mallory = kazoo_factory(zk.hostport, auth_data=[("digest", "mallory:pw")])
    mallory.delete(node)
    now = int(time.time() * 1000)
    mallory.create(node, record_text(1, 0x1234, dead_sessions=[(a.client_id[0], now)], trees=[cluster], dead=1),
                   acl=[make_acl("ip", "0.0.0.0/0", all=True)])
    # B's sidecar, now with credentials, and B's JobManager: its incarnation's sweeps.
    proxy = sidecar(zkwarden_factory, zk, me, ZKWARDEN_REGISTRY_AUTH=AUTH, ZKWARDEN_SWEEP_INTERVAL_S=1)
    jm = kazoo_factory(proxy.hostport)
    latch(jm, "/flink/b-%s" % uuid.uuid4().hex[:8])
    wait_until(lambda: sweeps(proxy) >= 3, 30, what="three sweep passes")
    client = kazoo_factory(zk.hostport)
    gone = [p for p in live if client.exists(p) is None]
    assert not gone, "A's ephemerals deleted: %s\n%s" % (gone, proxy.stderr()[-4000:])
    assert proxy.metric("zkwarden_zombie_ephemerals_total") == 0
    log = proxy.stderr()
    assert "registry record %s of identity %s is not trusted: ip:0.0.0.0/0" % (node, me) in log, log
    assert "dead session(s) read from registry record %s are forgotten" % node in log
    assert "are not swept: the record is not trusted (ip:0.0.0.0/0" in log
    assert cluster not in "".join(l for l in log.splitlines() if "sweep done" in l or "own trees" in l)
    assert proxy.metric("zkwarden_untrusted_records_total") >= 1
    # Repaired: the record and the parents above it are zkwarden's alone, and
    # the record holds what zkwarden wrote since.
    admin = kazoo_factory(zk.hostport, auth_data=[("digest", AUTH)])
    for path in ("/zkwarden", "/zkwarden/identities", node):
        wait_until(lambda: schemes(admin, path) == ["digest:zkw"], 10, what="%s made zkwarden-only" % path)
    wait_until(lambda: proxy.metric("zkwarden_registry_untrusted") == 0, 10, what="the record trusted again")
    record = admin.get(node)[0]
    assert cluster.encode() not in record and b"0x%x" % a.client_id[0] not in record, record
    assert b"session=0x%x" % jm.client_id[0] in record
    with pytest.raises(NoAuthError):
        mallory.delete(node + "/owner")


@pytest.mark.parametrize("forgery", ["world_acl", "ip_acl", "other_user", "no_credentials", "trusted"])
def test_a_foreign_incarnation_raised_to_999_takes_no_live_lock(forgery, private_zk, zkwarden_factory,
                                                               kazoo_factory):
    """Identity X's record says incarnation 999 while X's JobManager holds a
    lock of incarnation 1 under a job graph; Y's leader deletes the job
    graph's `locks` node. The record is anyone's (a world ACL, another user's
    `ip` ACL), another user's alone to change, or Y's sidecar has no
    credentials: the delete gets the NOTEMPTY
    it would get direct, and the lock stays. `trusted`: the record was written
    by X's sidecar with the shared credentials (incarnation 2), and the lock
    of incarnation 1 is reclaimed as before."""
    zk = private_zk
    x, y = "jm-x-%s" % uuid.uuid4().hex[:6], "jm-y-%s" % uuid.uuid4().hex[:6]
    xnode = "/zkwarden/identities/" + x
    cluster = "/flink/c-%s" % uuid.uuid4().hex[:8]
    state = "%s/jobgraphs/%s/locks" % (cluster, JOB)
    client = kazoo_factory(zk.hostport)
    client.ensure_path(state)
    if forgery == "trusted":
        xs = sidecar(zkwarden_factory, zk, x, ZKWARDEN_REGISTRY_AUTH=AUTH)
        for _ in range(2):  # two incarnations
            j = kazoo_factory(xs.hostport)
            latch(j, cluster)
            j.stop()
        admin = kazoo_factory(zk.hostport, auth_data=[("digest", AUTH)])
        wait_until(lambda: b"incarnation=2" in admin.get(xnode)[0], 10, what="incarnation 2 recorded")
        stop(zkwarden_factory, xs)
    else:
        credential_less_first_run(zkwarden_factory, zk, kazoo_factory, "jm-bare-%s" % uuid.uuid4().hex[:6])
        forged = record_text(999, 0x4242, dead=998)
        mallory = kazoo_factory(zk.hostport, auth_data=[("digest", "mallory:pw")])
        if forgery == "ip_acl":
            mallory.create(xnode, forged, acl=[make_acl("ip", "0.0.0.0/0", all=True)])
        elif forgery == "other_user":  # another user's alone to change (anyone reads it): no world, no ip
            mallory.create(xnode, forged, acl=[make_digest_acl("mallory", "pw", all=True),
                                               make_acl("world", "anyone", read=True)])
        else:
            client.create(xnode, forged)  # a world ACL
    live = kazoo_factory(zk.hostport)  # X's JobManager, alive all along
    lock = "%s/%s" % (state, uuid.uuid4())
    live.create(lock, forged_tag(x, 1, session=live.client_id[0]), ephemeral=True)
    env = {} if forgery == "no_credentials" else {"ZKWARDEN_REGISTRY_AUTH": AUTH}
    ys = sidecar(zkwarden_factory, zk, y, **env)
    wait_until(lambda: ready(ys), 15, what="Y's sidecar ready")
    jm = kazoo_factory(ys.hostport)
    latch(jm, cluster)
    if forgery == "trusted":
        jm.delete(state)
        assert client.exists(lock) is None
        assert ys.metric("zkwarden_reclaims_at_delete_total") == 1
        return
    with pytest.raises(NotEmptyError):
        jm.delete(state)
    assert client.exists(lock) is not None and live.connected
    assert ys.metric("zkwarden_reclaims_at_delete_total") == 0
    assert ys.metric("zkwarden_untrusted_records_total") >= 1
    log = ys.stderr()
    said = "registry record %s of identity %s is not trusted: " % (xnode, x)
    assert said in log, log
    why = {"world_acl": "world:anyone", "ip_acl": "ip:0.0.0.0/0", "other_user": "digest:mallory may change it",
           "no_credentials": "ZKWARDEN_REGISTRY_AUTH is unset"}[forgery]
    assert [l for l in log.splitlines() if said in l and " warn " in l and why in l], log
    mallory_hash = base64.b64encode(hashlib.sha1(b"mallory:pw").digest()).decode()
    assert mallory_hash not in log  # a digest id is a hash of a password: the user alone is said
    assert "is a lock of an identity whose registry record is not trusted" in log
    # Said once per change, however often it is read.
    with pytest.raises(NotEmptyError):
        jm.delete(state)
    assert ys.stderr().count(said) == 1


def test_registry_parents_left_open_are_made_zkwarden_only(private_zk, zkwarden_factory, kazoo_factory):
    """A sidecar first ran without ZKWARDEN_REGISTRY_AUTH: the registry's root
    and identities nodes have a world ACL, so anyone can delete a record
    there and create another. A sidecar with credentials makes them
    zkwarden-only (one warn line each), after which another user can create
    nothing there; the sidecar goes on recording its incarnations."""
    zk = private_zk
    me = "jm-p-%s" % uuid.uuid4().hex[:6]
    credential_less_first_run(zkwarden_factory, zk, kazoo_factory, me)
    mallory = kazoo_factory(zk.hostport, auth_data=[("digest", "mallory:pw")])
    mallory.create("/zkwarden/identities/intruder", b"")  # the failure: anyone creates records
    mallory.delete("/zkwarden/identities/intruder")
    proxy = sidecar(zkwarden_factory, zk, me, ZKWARDEN_REGISTRY_AUTH=AUTH)
    admin = kazoo_factory(zk.hostport, auth_data=[("digest", AUTH)])
    for path in ("/zkwarden", "/zkwarden/identities"):
        wait_until(lambda: schemes(admin, path) == ["digest:zkw"], 15, what="%s made zkwarden-only" % path)
    with pytest.raises(NoAuthError):
        mallory.create("/zkwarden/identities/intruder", b"")
    anyone = kazoo_factory(zk.hostport)
    with pytest.raises(NoAuthError):
        anyone.create("/zkwarden/intruder", b"")
    log = proxy.stderr()
    for path in ("/zkwarden", "/zkwarden/identities"):
        lines = [l for l in log.splitlines() if "registry node %s could be changed" % path in l]
        assert len(lines) == 1 and " warn " in lines[0] and "world:anyone" in lines[0], lines
        assert "made zkwarden-only" in lines[0]
    wait_until(lambda: proxy.metric("zkwarden_registry_untrusted") == 0, 10, what="the record trusted")
    jm = kazoo_factory(proxy.hostport)
    latch(jm, "/flink/p-%s" % uuid.uuid4().hex[:8])
    wait_until(lambda: proxy.metric("zkwarden_identity_incarnation") == 2, 10, what="incarnation 2")
    assert "s3cret" not in proxy.stderr()


def run_locks(zk, identity, *args):
    """`zkwarden locks` as in the JobManager's pod: its sidecar's
    environment, here without ZKWARDEN_REGISTRY_AUTH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZKWARDEN_")}
    env.update({"ZKWARDEN_UPSTREAM": zk.hostport, "ZKWARDEN_IDENTITY": identity})
    r = subprocess.run([default_zkwarden_bin(), "locks"] + list(args), env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert "AddressSanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr
    return r.stdout, r.stderr


def test_locks_in_a_pod_with_an_open_registry(private_zk, zkwarden_factory, kazoo_factory):
    """Item 7: no ZKWARDEN_REGISTRY_AUTH anywhere. The JobManager holds four
    locks; `zkwarden locks` in its pod lists them without --all, marked
    untrusted (its trees come from a record anyone may write), and
    --reclaim deletes nothing: not a stale lock of its own identity either,
    whose verdict rests on that record. /v1/locks of its sidecar, restarted
    under the running JobManager (nothing learned yet), lists them too."""
    zk = private_zk
    me = "jm-open-%s" % uuid.uuid4().hex[:6]
    node = "/zkwarden/identities/" + me
    cluster = "/flink/open-%s" % uuid.uuid4().hex[:8]
    proxy = sidecar(zkwarden_factory, zk, me)
    jm = kazoo_factory(proxy.hostport)
    latch(jm, cluster)
    locks = ["%s/checkpoints/%s/%019d/locks/%s" % (cluster, JOB, n, uuid.uuid4()) for n in range(1, 4)]
    locks.append("%s/jobgraphs/%s/locks/%s" % (cluster, JOB, uuid.uuid4()))
    for p in locks:
        jm.create(p, b"127.0.0.1", ephemeral=True, makepath=True)
    client = kazoo_factory(zk.hostport)
    wait_until(lambda: b"\ntree=%s\n" % cluster.encode() in client.get(node)[0], 10,
               what="the record to name the tree")
    wait_until(lambda: sweeps(proxy) >= 1, 30, what="the incarnation's sweep")
    # A stale lock of this identity (an earlier incarnation's, a session the
    # fence never saw): stale by the record's incarnation.
    ghost = kazoo_factory(zk.hostport)
    stale = "%s/checkpoints/%s/%019d/locks/%s" % (cluster, JOB, 9, uuid.uuid4())
    ghost.create(stale, forged_tag(me, 0, session=ghost.client_id[0]), ephemeral=True, makepath=True)

    out, err = run_locks(zk, me, "--json")
    doc = json.loads(out)
    found = {e["path"]: e for e in doc["locks"]}
    assert set(locks) | {stale} <= set(found), (out, err)
    assert cluster in doc["untrusted_roots"].split(","), doc
    assert "are read and marked untrusted" in err, err
    for p in locks:
        assert found[p]["why"] == "held by its identity's current incarnation" and not found[p]["trusted"], found[p]
    assert found[stale]["stale"] and not found[stale]["trusted"], found[stale]
    assert doc["summary"]["untrusted"] >= 5
    table, _ = run_locks(zk, me)
    for p in locks:
        line = next(l for l in table.splitlines() if p.rsplit("/", 1)[1] in l)
        assert "[not trusted: found under a tree read from a registry record that is not trusted]" in line, line
    out, _ = run_locks(zk, me, "--json", "--reclaim")
    reclaim = json.loads(out)["reclaim"]
    assert reclaim["deleted"] == 0, reclaim
    assert [r["path"] for r in reclaim["results"] if r["result"] == "not deleted"] == [stale], reclaim
    for p in locks + [stale]:
        assert client.exists(p) is not None, p

    # The sidecar restarts under the running JobManager: its own trees are
    # the record's, not trusted: /v1/locks shows the locks, marked so.
    assert not proxy.stop()
    proxy.start()
    wait_until(lambda: ready(proxy) and jm.connected, 20, what="the sidecar back")
    status, body = proxy.admin_get("/v1/locks")
    assert status == 200, body
    live = json.loads(body)
    assert cluster in live["untrusted_roots"].split(","), live
    got = {e["path"]: e for e in live["locks"]}
    assert set(locks) <= set(got), body
    assert all(not got[p]["trusted"] for p in locks)
    assert client.exists(stale) is not None  # never swept from an untrusted tree
