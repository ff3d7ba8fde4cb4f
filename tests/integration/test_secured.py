"""Reclaim on secured ensembles (issue 13): the drill scenarios that reclaim,
with the JobManager authenticated and creating every node with Flink's
`high-availability.zookeeper.client.acl: creator`, in four modes:

  open      no authentication, open ACLs (the baseline of the other three)
  digest    addAuth digest jm:<password>, creator ACL (digest:jm:...)
  sasl      SASL DIGEST-MD5 against a server with a JAAS Server section, creator ACL
  kerberos  SASL GSSAPI with a real MIT KDC in a temp dir (krbrealm.py), creator ACL

The JobManager stand-ins are kazoo clients with Flink's requests, as in
test_identity.py. A stale lock (a live session of the same principal holding
a lock tagged with an older incarnation, or one the ensemble forgot) is left
under a subsumed checkpoint; the JobManager's deletes must succeed through
zkwarden (0 leaks) and get NOTEMPTY direct (the leak). With zkwarden's reads
and deletes on its own registry session (before in-band reclaim), the
creator-ACL modes leaked too: the registry session cannot read the locks.
"""

import itertools
import json
import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kazoo.exceptions import NoAuthError, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE

import krbrealm
import rawzk
from checkpoints import forged_tag, new_uuid, plant_stale_lock, subsume
from zkharness import HOST, ZkServer, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "faults"))
import netfault  # noqa: E402  (tests/faults: the fault-injecting relay)

MODES = ["open", "digest", "sasl", "kerberos"]
JM_USER, JM_PASSWORD = "jm", "jm-secret"
OTHER_USER, OTHER_PASSWORD = "other", "other-secret"
_SEQ = itertools.count(1)

SASL_PROVIDER = {"zookeeper.authProvider.1": "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"}
DIGEST_JAAS = """Server {
  org.apache.zookeeper.server.auth.DigestLoginModule required
  user_%s="%s"
  user_%s="%s";
};
""" % (JM_USER, JM_PASSWORD, OTHER_USER, OTHER_PASSWORD)
# Behind a sidecar every client dials 127.0.0.1: the server's principal is
# the name kazoo's GSSAPI asks for there (zookeeper@127.0.0.1, no DNS).
ZK_SERVICE = "zookeeper/%s" % HOST


def krb5_server_jaas(keytab, principal):
    """A JAAS Server section: the ZooKeeper server's Kerberos identity."""
    return ("Server {\n  com.sun.security.auth.module.Krb5LoginModule required\n  useKeyTab=true\n"
            "  keyTab=\"%s\"\n  storeKey=true\n  useTicketCache=false\n  principal=\"%s\";\n};\n"
            % (keytab, principal))


def krb5_client_jaas(keytab, principal):
    """A JAAS Client section: a Java client's Kerberos login from a keytab."""
    return ("Client {\n  com.sun.security.auth.module.Krb5LoginModule required\n  useKeyTab=true\n"
            "  keyTab=\"%s\"\n  storeKey=false\n  useTicketCache=false\n  doNotPrompt=true\n"
            "  principal=\"%s\";\n};\n" % (keytab, principal))


def digest_client_jaas(user, password):
    """A JAAS Client section for SASL DIGEST-MD5."""
    return ('Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n'
            '  username="%s"\n  password="%s";\n};\n' % (user, password))






class Secured:
    """One ZooKeeper server set up for a mode, and how a JobManager (or
    another principal) authenticates to it."""

    def __init__(self, mode, workdir, realm=None, sysprops=None):
        self.mode = mode
        self.realm = realm
        self.dir = workdir
        kw = {}
        if mode == "sasl":
            kw = {"sysprops": dict(SASL_PROVIDER), "jaas": DIGEST_JAAS}
        elif mode == "kerberos":
            principal, keytab = realm.principal(ZK_SERVICE)
            self.jm_principal, self.jm_keytab = realm.principal(JM_USER)
            self.other_principal, self.other_keytab = realm.principal(OTHER_USER)
            props = dict(SASL_PROVIDER)
            props["java.security.krb5.conf"] = str(realm.krb5_conf)
            kw = {"sysprops": props, "jaas": krb5_server_jaas(keytab, principal)}
        if sysprops:
            kw["sysprops"] = dict(kw.get("sysprops", {}), **sysprops)
        self.zk = ZkServer(workdir / "zk", **kw)

    def start(self):
        self.zk.start()
        return self

    @property
    def acl(self):
        return OPEN_ACL_UNSAFE if self.mode == "open" else CREATOR_ALL_ACL

    def client(self, kazoo_factory, hostport, who="jm", **kw):
        """A kazoo client authenticated as `who` ("jm" or "other"), creating
        every node with the mode's ACL (Flink: client.acl: creator)."""
        user, password = (JM_USER, JM_PASSWORD) if who == "jm" else (OTHER_USER, OTHER_PASSWORD)
        if self.mode == "digest":
            kw["auth_data"] = [("digest", "%s:%s" % (user, password))]
        elif self.mode == "sasl":
            kw["sasl_options"] = {"mechanism": "DIGEST-MD5", "username": user, "password": password}
        elif self.mode == "kerberos":
            # The GSSAPI library reads the credential cache from the environment.
            principal, keytab = ((self.jm_principal, self.jm_keytab) if who == "jm"
                                 else (self.other_principal, self.other_keytab))
            ccache = self.dir / ("%s.ccache" % who)
            self.realm.kinit(principal, keytab, ccache)
            os.environ["KRB5CCNAME"] = "FILE:%s" % ccache
            kw["sasl_options"] = {"mechanism": "GSSAPI", "service": "zookeeper"}
        return kazoo_factory(hostport, default_acl=self.acl, **kw)


@pytest.fixture(scope="module")
def realm(tmp_path_factory):
    if not krbrealm.available():
        pytest.skip("MIT Kerberos (krb5-kdc, krb5-admin-server, krb5-user) is not installed: "
                    "deploy/install-deps.sh")
    saved = {k: os.environ.get(k) for k in ("KRB5_CONFIG", "KRB5CCNAME")}
    r = krbrealm.Realm(tmp_path_factory.mktemp("krb5"))
    try:
        r.start()
        os.environ["KRB5_CONFIG"] = str(r.krb5_conf)  # for python-kerberos in this process
        yield r
    finally:
        r.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module", params=MODES)
def secured(request, tmp_path_factory):
    mode = request.param
    realm = request.getfixturevalue("realm") if mode == "kerberos" else None
    sec = Secured(mode, tmp_path_factory.mktemp("secured-%s" % mode), realm)
    try:
        sec.start()
        yield sec
    finally:
        sec.zk.stop()


def sidecar(secured, zkwarden_factory, **env):
    """A sidecar in front of the mode's server, with an identity of its own."""
    identity = "sec-%s-%d-%d" % (secured.mode, os.getpid(), next(_SEQ))
    full = {"ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": identity, "ZKWARDEN_SWEEP_INTERVAL_S": "0"}
    full.update({k: str(v) for k, v in env.items()})
    return zkwarden_factory.start(secured.zk, extra_env=full), identity


def spy_zxids(client):
    """Records the zxid of every reply header the kazoo client reads."""
    seen = []
    conn = client._connection
    read = conn._read_header

    def spy(timeout):
        header, buf, offset = read(timeout)
        if header.zxid > 0:
            seen.append(header.zxid)
        return header, buf, offset
    conn._read_header = spy
    return seen


def assert_no_failures(proxy):
    failures = {k: v for k, v in proxy.metrics().items() if k.startswith("zkwarden_reclaim_failures_total")}
    assert failures and not any(failures.values()), failures


def checkpoint(mode, layout):
    state = "/flink/sec-%s-%s/checkpoints/%s/%019d" % (mode, new_uuid()[:8], "b" * 32, 7)
    return state, (state if layout == "1.7" else state + "/locks")


# ------------------------------------------------------------ restart with stale locks

@pytest.mark.zkwarden
def test_restart_with_stale_locks(secured, zkwarden_factory, kazoo_factory):
    """The JobManager restarts while its old session is alive and holds a lock
    on a checkpoint the new one subsumes: fenced, then deleted (both layouts)."""
    proxy, _ = sidecar(secured, zkwarden_factory)
    old = secured.client(kazoo_factory, proxy.hostport)
    paths = []
    for layout in ("1.7", "1.15"):
        state, locks = checkpoint(secured.mode, layout)
        old.create(state, b"handle", makepath=True)
        if layout == "1.15":
            old.create(locks)
        old.create("%s/%s" % (locks, new_uuid()), b"127.0.0.1", ephemeral=True)
        paths.append((layout, state, locks))
    new = secured.client(kazoo_factory, proxy.hostport)  # the restarted JobManager
    for layout, state, locks in paths:
        mine = "%s/%s" % (locks, new_uuid())
        new.create(mine, b"127.0.0.1", ephemeral=True)
        new.delete(mine)
        new.delete(locks)
        if layout == "1.15":
            new.delete(state)
        assert new.exists(state) is None, "leaked: %s" % state
    assert proxy.metric("zkwarden_fences_total") == 1
    assert_no_failures(proxy)


# ------------------------------------------------------------ reclaim at delete

@pytest.mark.parametrize("kind", ["direct", pytest.param("zkwarden", marks=pytest.mark.zkwarden)])
@pytest.mark.parametrize("layout", ["1.7", "1.15"])
def test_reclaim_at_delete(kind, layout, secured, zkwarden_factory, kazoo_factory):
    """A live session of the JobManager's principal that zkwarden cannot fence
    (a tagged lock of an older incarnation) blocks the subsumed checkpoint's
    delete with NOTEMPTY: direct it leaks; through zkwarden the stale lock is
    deleted in-band, with the JobManager's rights, and the delete replayed."""
    proxy, identity = sidecar(secured, zkwarden_factory) if kind == "zkwarden" else (None, "jm-0")
    hostport = proxy.hostport if proxy else secured.zk.hostport
    state, locks = checkpoint(secured.mode, layout)
    old = secured.client(kazoo_factory, secured.zk.hostport)
    stale = plant_stale_lock(old, state, locks, layout, forged_tag(identity, 0))
    if secured.mode != "open":  # readable and deletable by the JobManager's principal only
        assert [a.id.scheme for a in old.get_acls(stale)[0]] == [{"digest": "digest"}.get(secured.mode, "sasl")]

    jm = secured.client(kazoo_factory, hostport)
    zxids = spy_zxids(jm)
    subsume(jm, state, locks, layout, stale, leaks=kind == "direct")
    if kind == "direct":
        return
    assert old.connected  # only its stale lock went, not its session
    assert proxy.metric("zkwarden_reclaims_at_delete_total") == 1
    assert_no_failures(proxy)
    # The in-band reads and deletes' replies were consumed: what the client
    # saw never went backwards.
    assert zxids == sorted(zxids), zxids
    # The JobManager's session did the work: nothing went through the registry.
    history = json.loads(proxy.admin_get("/v1/reclaims")[1])["reclaims"]
    assert [e["path"] for e in history if e["kind"] == "reclaim_at_delete"] == [stale]


# ------------------------------------------------------------ reclaim at create

@pytest.mark.zkwarden
def test_reclaim_at_create(secured, zkwarden_factory, kazoo_factory):
    """The new session re-creates its store's lock while a stale one of the
    same name exists: without zkwarden Flink takes NODEEXISTS as "held" and
    the lock vanishes later; through zkwarden the JobManager gets the same
    NODEEXISTS and the stale one is replaced by its own, in-band with its
    rights."""
    proxy, identity = sidecar(secured, zkwarden_factory)
    state, locks = checkpoint(secured.mode, "1.15")
    old = secured.client(kazoo_factory, secured.zk.hostport)
    old.create(locks, b"", makepath=True)
    lock = "%s/%s" % (locks, new_uuid())
    old.create(lock, forged_tag(identity, 0), ephemeral=True)
    jm = secured.client(kazoo_factory, proxy.hostport)
    zxids = spy_zxids(jm)
    with pytest.raises(NodeExistsError):
        jm.create(lock, b"127.0.0.1", ephemeral=True)
    wait_until(lambda: jm.exists(lock).ephemeralOwner == jm.client_id[0], 10,
               what="the stale lock replaced by the JobManager's own")
    assert jm.get(lock)[0] == b"127.0.0.1"
    assert proxy.metric("zkwarden_reclaims_at_create_total") == 1
    assert_no_failures(proxy)
    assert zxids == sorted(zxids), zxids


# ------------------------------------------------------------ sweep

@pytest.mark.zkwarden
def test_sweep_of_a_leftover_lock(secured, zkwarden_factory, kazoo_factory):
    """A stale lock the ensemble failed to remove: swept in-band."""
    state, locks = checkpoint(secured.mode, "1.15")
    # Its latch lies elsewhere: the checkpoint's cluster is named as its tree.
    proxy, identity = sidecar(secured, zkwarden_factory, ZKWARDEN_SWEEP_INTERVAL_S=1,
                              ZKWARDEN_SWEEP_TREES="/".join(state.split("/")[:3]))
    ghost = secured.client(kazoo_factory, secured.zk.hostport)
    orphan = "%s/%s" % (locks, new_uuid())
    ghost.create(orphan, forged_tag(identity, 0), ephemeral=True, makepath=True)
    jm = secured.client(kazoo_factory, proxy.hostport)
    zxids = spy_zxids(jm)
    jm.create("/flink/sec-latch-%s" % new_uuid(), b"", ephemeral=True)  # acts as the JobManager
    # The JobManager's reads (every 20 ms) go on while the sweep's requests
    # share its connection: kazoo drops the connection on any xid out of order.
    wait_until(lambda: jm.exists(orphan) is None, 20, what="the sweep to delete %s" % orphan)
    jm.delete(locks)
    jm.delete(state)
    assert proxy.metric("zkwarden_stale_locks_swept_total") == 1
    assert_no_failures(proxy)
    assert zxids == sorted(zxids), zxids
    assert proxy.metric("zkwarden_connections_accepted_total") == 1  # never dropped and reconnected


# ------------------------------------------------------------ no silent failure

@pytest.mark.zkwarden
@pytest.mark.parametrize("secured", [m for m in MODES if m != "open"], indirect=True)  # open: all readable
def test_lock_the_jobmanager_cannot_read_is_a_visible_failure(secured, zkwarden_factory, kazoo_factory):
    """A stale-looking lock created by another principal with a creator ACL:
    the JobManager itself may not read it, so zkwarden cannot tell or delete
    it. The JobManager gets its NOTEMPTY, and the failure is logged at warn,
    counted by reason and shown in /v1/reclaims."""
    proxy, identity = sidecar(secured, zkwarden_factory)
    state, locks = checkpoint(secured.mode, "1.15")
    jm = secured.client(kazoo_factory, proxy.hostport)
    jm.create(locks, b"", makepath=True, acl=OPEN_ACL_UNSAFE)
    other = secured.client(kazoo_factory, secured.zk.hostport, who="other")
    foreign = "%s/%s" % (locks, new_uuid())
    other.create(foreign, forged_tag(identity, 0), ephemeral=True)
    mine = jm.create("%s/%s" % (locks, new_uuid()), b"127.0.0.1", ephemeral=True)
    jm.delete(mine)
    with pytest.raises(NoAuthError):
        jm.get(foreign)
    with pytest.raises(NotEmptyError):
        jm.delete(locks)
    assert other.exists(foreign)
    assert proxy.metric('zkwarden_reclaim_failures_total{reason="noauth"}') == 1
    assert "reclaim_at_delete: cannot read the lock %s: not authenticated (noauth)" % foreign in proxy.stderr()
    history = json.loads(proxy.admin_get("/v1/reclaims")[1])["reclaims"]
    assert any(e["path"] == foreign and e["reason"].startswith("failed (noauth)") for e in history), history


# ------------------------------------------------------------ SASL through the sidecar, Java

def run_jm(java_classes, hostport, lock, jaas_text, workdir, *props):
    """SecuredJm (Curator, creator ACL) with a JAAS Client section; returns
    (exit status, its last output line)."""
    from zkharness import run_bounded
    jaas = workdir / ("client-%d.jaas" % next(_SEQ))
    jaas.write_text(jaas_text)
    cmd = java_classes.cmd("SecuredJm", hostport, lock)
    cmd = cmd[:3] + ["-Djava.security.auth.login.config=%s" % jaas] + list(props) + cmd[3:]
    rc, out, err = run_bounded(cmd, 90)
    lines = out.strip().splitlines()
    return rc, (lines[-1] if lines else err[-2000:])


@pytest.mark.zkwarden
@pytest.mark.parametrize("secured", ["sasl"], indirect=True)  # a SASL DIGEST-MD5 server
def test_curator_sasl_digest_through_the_sidecar(secured, zkwarden_factory, java_classes, tmp_path):
    """A Curator JobManager with a JAAS Client section (DIGEST-MD5): its SASL
    exchange is relayed untouched and its locks carry its own identity."""
    proxy, _ = sidecar(secured, zkwarden_factory)
    client = digest_client_jaas(JM_USER, JM_PASSWORD)
    lock = "/flink/sec-curator/%s" % new_uuid()
    rc, line = run_jm(java_classes, proxy.hostport, lock, client, tmp_path)
    assert rc == 0 and line == "ok sasl:%s" % JM_USER, line
    wrong = client.replace(JM_PASSWORD, "not-the-password")
    rc, line = run_jm(java_classes, proxy.hostport, lock + "-2", wrong, tmp_path)
    assert rc != 0, line  # a failed SASL exchange reaches the client as it would direct


@pytest.mark.zkwarden
def test_kerberos_jobmanager_behind_a_sidecar_needs_the_server_principal(realm, zkwarden_factory,
                                                                          java_classes, tmp_path):
    """The Java client asks for a ticket for zookeeper/<canonical name of the
    address it dials>: behind a sidecar that is the sidecar's loopback
    address, not the server's name. Without -Dzookeeper.server.principal the
    JobManager cannot authenticate; with it (Flink: env.java.opts) it can."""
    server_principal, keytab = realm.principal("zookeeper/zk-0.zk.example")
    jm_principal, jm_keytab = realm.principal("jm-curator")
    props = dict(SASL_PROVIDER)
    props["java.security.krb5.conf"] = str(realm.krb5_conf)
    zk = ZkServer(tmp_path / "zk", sysprops=props, jaas=krb5_server_jaas(keytab, server_principal))
    try:
        zk.start()
        proxy = zkwarden_factory.start(zk, extra_env={"ZKWARDEN_MODE": "sidecar",
                                                      "ZKWARDEN_IDENTITY": "sec-krb-%d" % os.getpid()})
        client = krb5_client_jaas(jm_keytab, jm_principal)
        krb5 = "-Djava.security.krb5.conf=%s" % realm.krb5_conf
        lock = "/flink/sec-krb/%s" % new_uuid()
        rc, line = run_jm(java_classes, proxy.hostport, lock, client, tmp_path, krb5)
        assert rc != 0, "authenticated without zookeeper.server.principal: %s" % line
        print("without zookeeper.server.principal: %s" % line)
        rc, line = run_jm(java_classes, proxy.hostport, lock, client, tmp_path, krb5,
                          "-Dzookeeper.server.principal=%s" % server_principal)
        assert rc == 0 and line == "ok sasl:%s" % jm_principal, line
    finally:
        zk.stop()


# ------------------------------------------------------------ enforced authentication

ENFORCE = {"zookeeper.enforce.auth.enabled": "true"}
REGISTRY_AUTH = "zkwarden:registry-secret"


def ready(proxy):
    try:
        return proxy.admin_get("/readyz")[0] == 200
    except OSError:  # the admin endpoint is not listening yet
        return False


def restart_with_a_stale_lock(sec, proxy, kazoo_factory):
    """The old JobManager session holds a lock; a new one subsumes the
    checkpoint (takes and drops a lock of its own, as Flink does). Returns the
    new session's client, the checkpoint's locks path and the old lock."""
    state, locks = checkpoint(sec.mode, "1.15")
    old = sec.client(kazoo_factory, proxy.hostport)
    old.create(locks, b"", makepath=True)
    old_lock = old.create("%s/%s" % (locks, new_uuid()), b"127.0.0.1", ephemeral=True)
    new = sec.client(kazoo_factory, proxy.hostport)
    mine = new.create("%s/%s" % (locks, new_uuid()), b"127.0.0.1", ephemeral=True)
    new.delete(mine)
    return new, locks, old_lock


@pytest.mark.zkwarden
def test_enforced_digest_auth(zkwarden_factory, kazoo_factory, tmp_path):
    """zookeeper.enforce.auth.enabled=true, schemes=digest: the server closes
    every connection that has not authenticated. The registry session and
    fences authenticate with ZKWARDEN_REGISTRY_AUTH first and work; without
    it zkwarden says which server setting stops it (and nothing is fenced)."""
    sec = Secured("digest", tmp_path, sysprops=dict(ENFORCE, **{"zookeeper.enforce.auth.schemes": "digest"}))
    sec.start()
    try:
        bare, _ = sidecar(sec, zkwarden_factory)
        wait_until(lambda: "zookeeper.enforce.auth.enabled=true" in bare.stderr(), 20,
                   what="the enforced-auth error")
        assert "ZKWARDEN_REGISTRY_AUTH is not set" in bare.stderr()
        new, locks, _ = restart_with_a_stale_lock(sec, bare, kazoo_factory)
        with pytest.raises(NotEmptyError):  # not fenced: the old lock stays
            new.delete(locks)
        assert bare.metric("zkwarden_fences_total") == 0

        proxy, _ = sidecar(sec, zkwarden_factory, ZKWARDEN_REGISTRY_AUTH=REGISTRY_AUTH)
        wait_until(lambda: ready(proxy), 20, what="the sidecar to be ready")
        new, locks, old_lock = restart_with_a_stale_lock(sec, proxy, kazoo_factory)
        # The fence closed the old session before the new one was forwarded:
        # its lock went with it (not the in-band reclaim or sweep, which would
        # also remove it).
        assert new.exists(old_lock) is None
        new.delete(locks)
        assert proxy.metric("zkwarden_fences_total") == 1
        assert proxy.metric("zkwarden_reclaims_at_delete_total") == 0
        assert proxy.metric("zkwarden_stale_locks_swept_total") == 0
        assert "zookeeper.enforce.auth" not in proxy.stderr()
        assert REGISTRY_AUTH.split(":")[1] not in proxy.stderr()
    finally:
        sec.zk.stop()


@pytest.mark.zkwarden
def test_enforced_sasl_auth_is_reported_at_start(zkwarden_factory, kazoo_factory, tmp_path):
    """schemes=sasl: zkwarden's own sessions cannot do SASL (libzookeeper_mt
    has none). It says so at start, naming the server setting; the
    JobManager's own SASL session is still relayed."""
    sec = Secured("sasl", tmp_path, sysprops=dict(ENFORCE, **{"zookeeper.enforce.auth.schemes": "sasl"}))
    sec.start()
    try:
        proxy, _ = sidecar(sec, zkwarden_factory, ZKWARDEN_REGISTRY_AUTH=REGISTRY_AUTH)
        wait_until(lambda: "so the server requires SASL" in proxy.stderr(), 20, what="the enforced-SASL error")
        assert "zookeeper.enforce.auth.schemes" in proxy.stderr()
        wait_until(lambda: proxy.admin_get("/readyz")[0] == 503, 10, what="/readyz to answer 503")
        jm = sec.client(kazoo_factory, proxy.hostport)
        jm.create("/flink/sec-enforced/%s" % new_uuid(), b"x", makepath=True)
    finally:
        sec.zk.stop()


# ------------------------------------------------------------ a server that stops answering

INBAND_XID_BASE = 0x7fff0000


class StallAtInband(netfault.Relay):
    """A relay in front of the server that, on the connection where zkwarden
    writes its first in-band request (xid >= 0x7fff0000), holds everything
    zkwarden sends from that request on: the server seems to stop answering
    that connection. release() delivers what was held."""

    def __init__(self, target):
        super().__init__(target, name="stall-at-inband")
        self.stalled = threading.Event()
        self._armed = True
        self._release = threading.Event()
        self._held = {}   # pair -> bytes held back
        self._parse = {}  # pair -> [bytes of a frame still to skip, partial frame header]

    def release(self):
        self._release.set()
        self._wake()

    def _inband_in(self, p, data):
        st = self._parse.setdefault(p, [0, bytearray()])
        found = False
        while data:
            if st[0]:
                k = min(st[0], len(data))
                st[0] -= k
                data = data[k:]
                continue
            st[1] += data
            data = b""
            while len(st[1]) >= 8:
                n, xid = struct.unpack(">ii", bytes(st[1][:8]))
                found = found or xid >= INBAND_XID_BASE
                if len(st[1]) < 4 + n:
                    st[0], st[1] = 4 + n - len(st[1]), bytearray()
                    break
                st[1] = st[1][4 + n:]
        return found

    def _io(self, p, side, ev):
        before = len(p.to_upstream)
        super()._io(p, side, ev)  # a client-side event only ever adds to to_upstream
        if side != "client" or not self._armed or len(p.to_upstream) <= before:
            return
        new = bytes(p.to_upstream[before:])
        if p in self._held or self._inband_in(p, new):
            # What came before the in-band request in this read still goes.
            at = 0 if p in self._held else self._first_inband(new)
            self._held.setdefault(p, bytearray()).extend(new[at:])
            del p.to_upstream[before + at:]
            self.stalled.set()

    @staticmethod
    def _first_inband(data):
        off = 0
        while off + 8 <= len(data):
            n, xid = struct.unpack(">ii", data[off:off + 8])
            if xid >= INBAND_XID_BASE:
                return off
            off += 4 + n
        return 0

    def _apply_pending_mode(self):
        super()._apply_pending_mode()
        if self._release.is_set() and self._armed:
            self._armed = False
            for p, held in self._held.items():
                p.to_upstream[:0] = held
            self._held.clear()


def stalled_reclaim(private_zk, zkwarden_factory):
    """A sidecar behind StallAtInband, and a checkpoint whose locks hold a
    stale lock (of a live session zkwarden cannot fence)."""
    relay = StallAtInband(private_zk.hostport).start()
    identity = "sec-stall-%d-%d" % (os.getpid(), next(_SEQ))
    proxy = zkwarden_factory.start(relay.hostport, extra_env={
        "ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": identity, "ZKWARDEN_SWEEP_INTERVAL_S": "0"})
    _, locks = checkpoint("stall", "1.15")
    return relay, proxy, identity, locks


def failures_shown(proxy, reason, path):
    history = json.loads(proxy.admin_get("/v1/reclaims")[1])["reclaims"]
    return [e for e in history if e["path"] == path and e["reason"].startswith("failed (%s)" % reason)]


@pytest.mark.zkwarden
def test_reclaim_step_that_times_out_is_visible(private_zk, zkwarden_factory, kazoo_factory):
    """The server stops answering zkwarden's in-band read: after a third of
    the session timeout the reclaim gives up, the JobManager gets its
    NOTEMPTY, and the timeout is logged, counted and shown. The late reply,
    once it comes, is consumed: the JobManager's session goes on."""
    relay, proxy, identity, locks = stalled_reclaim(private_zk, zkwarden_factory)
    try:
        old = kazoo_factory(private_zk.hostport)
        old.create(locks, b"", makepath=True)
        stale = old.create("%s/%s" % (locks, new_uuid()), forged_tag(identity, 0), ephemeral=True)
        jm = kazoo_factory(proxy.hostport, timeout=6.0)
        zxids = spy_zxids(jm)
        mine = jm.create("%s/%s" % (locks, new_uuid()), b"127.0.0.1", ephemeral=True)
        jm.delete(mine)
        t0 = time.monotonic()
        with pytest.raises(NotEmptyError):
            jm.delete(locks)
        took = time.monotonic() - t0
        relay.release()
        assert relay.stalled.is_set()
        assert 1.5 < took < 3.5, "NOTEMPTY after %.2f s (in-band bound: 6 s / 3)" % took
        assert jm.exists(stale) is not None and jm.exists(locks) is not None
        assert proxy.metric('zkwarden_reclaim_failures_total{reason="timeout"}') == 1
        assert ("reclaim_at_delete: cannot list the locks under %s: operation timeout (timeout)" % locks
                in proxy.stderr())
        assert failures_shown(proxy, "timeout", locks)
        assert proxy.metric("zkwarden_connections_accepted_total") == 1  # never dropped
        assert zxids == sorted(zxids), zxids
    finally:
        relay.stop()


@pytest.mark.zkwarden
def test_reclaim_cut_by_the_jobmanager_leaving_is_visible(private_zk, zkwarden_factory, kazoo_factory):
    """The JobManager's connection closes while zkwarden's in-band read is
    outstanding: the step fails with a connection loss (logged, counted,
    shown) and nothing more is sent for it."""
    relay, proxy, identity, locks = stalled_reclaim(private_zk, zkwarden_factory)
    try:
        old = kazoo_factory(private_zk.hostport)
        old.create(locks, b"", makepath=True)
        old.create("%s/%s" % (locks, new_uuid()), forged_tag(identity, 0), ephemeral=True)
        jm = rawzk.RawSession(proxy.port, timeout_ms=6000)
        acl = struct.pack(">ii", 1, 31) + rawzk.ustring("world") + rawzk.ustring("anyone")
        mine = "%s/%s" % (locks, new_uuid())
        jm.send(rawzk.request(1, 1, rawzk.ustring(mine) + struct.pack(">i", 1) + b"x" + acl
                              + struct.pack(">i", 1)))
        assert jm.read_reply()[2] == 0
        jm.send(rawzk.request(2, 2, rawzk.ustring(mine) + struct.pack(">i", -1)))
        assert jm.read_reply()[2] == 0
        jm.send(rawzk.request(3, 2, rawzk.ustring(locks) + struct.pack(">i", -1)))
        wait_until(relay.stalled.is_set, 10, what="the in-band read")
        jm.close()
        wait_until(lambda: proxy.metric('zkwarden_reclaim_failures_total{reason="connection_loss"}') == 1, 10,
                   what="the connection loss to be counted")
        assert "cannot list the locks under %s: connection loss" % locks in proxy.stderr()
        assert failures_shown(proxy, "connection_loss", locks)
        relay.release()
    finally:
        relay.stop()


# ------------------------------------------------------------ the Flink-like JobManager

FLINKLIKE = Path(__file__).resolve().parent.parent / "flinklike"
FLINK_JOB = "a5b1c0de0f1e2d3c4b5a69788796a5b4"  # FlinkLikeJM's default job id


@pytest.fixture(scope="session")
def flinklike_classpath():
    r = subprocess.run([str(FLINKLIKE / "build.sh")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, "tests/flinklike/build.sh failed:\n" + r.stdout + r.stderr
    return (FLINKLIKE / "build" / "classpath").read_text().strip()


class FlinkJm:
    """One FlinkLikeJM process (tests/flinklike), killed with -9 or at teardown."""

    def __init__(self, classpath, props, args, workdir, n):
        self.stats_file = workdir / ("jm.%d.stats.json" % n)
        self.err = workdir / ("jm.%d.err" % n)
        cmd = (["java", "-Xmx160m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"] + props
               + ["-cp", classpath, "flinklike.FlinkLikeJM"] + args
               + ["--stats-file=%s" % self.stats_file, "--stats-interval-ms=250"])
        with open(self.err, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)

    def stats(self):
        if self.proc.poll() is not None:
            raise RuntimeError("FlinkLikeJM exited with %s:\n%s" % (self.proc.returncode, self.err.read_text()[-4000:]))
        try:
            return json.loads(self.stats_file.read_text())
        except (OSError, ValueError):
            return {}

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def flink_jvm_props(sec, workdir):
    """The JobManager's JVM options for the mode (Flink: env.java.opts.jobmanager)."""
    if sec.mode == "sasl":
        client = digest_client_jaas(JM_USER, JM_PASSWORD)
    elif sec.mode == "kerberos":
        client = krb5_client_jaas(sec.jm_keytab, sec.jm_principal)
    else:
        return []
    jaas = workdir / "jm.jaas"
    jaas.write_text(client)
    props = ["-Djava.security.auth.login.config=%s" % jaas]
    if sec.mode == "kerberos":
        props += ["-Djava.security.krb5.conf=%s" % sec.realm.krb5_conf,
                  "-Dzookeeper.server.principal=%s@%s" % (ZK_SERVICE, krbrealm.REALM)]
    return props


@pytest.mark.parametrize("kind", ["direct", pytest.param("zkwarden", marks=pytest.mark.zkwarden)])
@pytest.mark.parametrize("secured", [m for m in MODES if m != "digest"], indirect=True)  # Flink: SASL only
def test_flinklike_jobmanager_restarts_leak_nothing(kind, secured, zkwarden_factory, kazoo_factory,
                                                    flinklike_classpath, tmp_path):
    """The drills' restart scenario with the Flink-like JobManager (Curator,
    checkpoints every 100 ms, 10 retained), authenticated with SASL and
    creating with high-availability.zookeeper.client.acl: creator: killed -9
    and restarted at once, twice. Direct, the restarted JobManager leads only
    once the dead one's session (8 s) has expired; through the sidecar it
    leads at once (its predecessor is fenced: its latch and locks go), and
    after it has added 11 checkpoints nothing is leaked and no lock is stale."""
    if kind == "zkwarden":
        proxy, _ = sidecar(secured, zkwarden_factory)
        connect = proxy.hostport
    else:
        connect = secured.zk.hostport
    cluster = "/sec-flink-%s-%s-%s" % (secured.mode, kind, new_uuid()[:8])
    args = ["--connect=" + connect, "--layout=current", "--identity=jm-0", "--submit-job",
            "--checkpoint-interval-ms=100", "--session-timeout-ms=8000", "--cluster-id=" + cluster,
            "--acl=" + ("open" if secured.mode == "open" else "creator")]
    props = flink_jvm_props(secured, tmp_path)
    jms = []
    try:
        for n in range(3):
            jm = FlinkJm(flinklike_classpath, props, args, tmp_path, n)
            jms.append(jm)

            def running():
                st = jm.stats()
                ok = st.get("job_state") == "RUNNING" and st.get("job_master_leader") and st.get("master_added", 0) >= 11
                return st if ok else None
            st = wait_until(running, 90, interval=0.05, what="JobManager #%d to add 11 checkpoints" % n)
            if n > 0:
                to_leader = (st["leader_epoch_ms"] - st["connect_start_epoch_ms"]) / 1000.0
                print("%s, %s: restarted JobManager #%d leads %.2f s after connecting"
                      % (secured.mode, kind, n, to_leader))
                # The old session's 8 s timeout divides the two (the drills judge the 1 s target).
                if kind == "direct":
                    assert to_leader > 6.0, "direct: led after %.2f s, before the old session expired" % to_leader
                else:
                    assert to_leader < 4.0, "through the sidecar: led after %.2f s\n%s" % (
                        to_leader, jm.err.read_text()[-3000:])
            if n < 2:
                jm.kill()
        # The JobManager's principal may read what it created (creator ACL).
        inspector = secured.client(kazoo_factory, secured.zk.hostport)
        root = "/flink%s/jobs/%s/checkpoints" % (cluster, FLINK_JOB)
        if secured.mode != "open":  # Flink's SecureAclProvider: the JobManager's own principal only
            assert [acl.id.scheme for acl in inspector.get_acls(root)[0]] == ["sasl"]
        oldest_retained = min(st["retained"])
        live = int(st["session_id"], 16)

        def leaked():
            """Subsumed checkpoints still there with their `locks` node. One a
            killed JobManager left "marked for deletion" (between deleting
            p/locks and p) has none: Flink skips it at every recovery, a leak
            of Flink's own that no lock causes (zkwarden never deletes state
            nodes); the drills count those apart too."""
            inspector.sync(root)
            old = [c for c in inspector.get_children(root) if int(c) < oldest_retained]
            return sorted(int(c) for c in old if inspector.exists("%s/%s/locks" % (root, c)))
        if kind == "direct":
            return  # the wait above is the failure; its old session expired before it led
        wait_until(lambda: not leaked(), 5, what="no checkpoint older than the retained ones (leaked: %s)"
                   % leaked())
        stale = []
        for c in inspector.get_children(root):
            locks = "%s/%s/locks" % (root, c)
            try:  # the live JobManager goes on subsuming: a checkpoint can go between two reads
                names = inspector.get_children(locks)
            except NoNodeError:
                names = []
            for name in names:
                owner = inspector.exists("%s/%s" % (locks, name))
                if owner is not None and owner.ephemeralOwner != live:
                    stale.append("%s/%s" % (locks, name))
        assert stale == [], stale
        assert proxy.metric("zkwarden_fences_total") == 2
        assert_no_failures(proxy)
    finally:
        for jm in jms:
            jm.kill()
