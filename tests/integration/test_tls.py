"""TLS to the ensemble (issue 14), against ZooKeeper 3.8 serving TLS only
(NettyServerCnxnFactory, secureClientPort, PEM keystores, no plaintext client
port) with real kazoo clients.

The failure first: a client (or today's zkwarden) speaking plaintext gets
nowhere with a TLS-only server; then zkwarden with ZKWARDEN_UPSTREAM_TLS=on
carries plaintext JobManager sessions to it, with clientAuth none and need.
Servers that fail verification (untrusted CA, wrong name, expired) are refused
with OpenSSL's reason and /readyz 503. A sidecar's registry and fences go
through its internal relay over TLS. Certificates rotate under load without a
session lost. Certificates are made per run by the openssl CLI (TlsCerts).
"""

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from calendar import timegm

import pytest
from kazoo.client import KazooState
from kazoo.handlers.threading import KazooTimeoutError

from checkpoints import forged_tag
from test_identity import Jm, hard_kill, time_to_leadership
from zkharness import (TlsCerts, ZkServer, default_zkwarden_bin, four_letter, four_letter_tls, run_bounded,
                       wait_until)

pytestmark = pytest.mark.zkwarden


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return TlsCerts(tmp_path_factory.mktemp("tls-certs"))


@pytest.fixture
def tls_zk(tmp_path, request):
    """tls_zk(server_cert=None, client_auth="none"): a TLS-only server of the test's own."""
    started = []

    def start(certs, server_cert=None, client_auth="none", protocol=None):
        extra = ["ssl.protocol=%s" % protocol, "ssl.enabledProtocols=%s" % protocol] if protocol else []
        if protocol == "TLSv1.3":  # ZooKeeper 3.8's default cipher list has only TLS 1.2 suites
            extra.append("ssl.ciphersuites=TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384")
        srv = ZkServer(tmp_path / ("zk%d" % len(started)),
                       tls=(certs, server_cert or certs.server, client_auth), extra_cfg=extra)
        started.append(srv)
        srv.start()
        return srv
    yield start
    for srv in started:
        srv.stop()


def tls_env(certs, client=False, **more):
    env = {"ZKWARDEN_UPSTREAM_TLS": "on", "ZKWARDEN_TLS_CA_FILE": str(certs.ca)}
    if client:
        env.update({"ZKWARDEN_TLS_CERT_FILE": str(certs.client),
                    "ZKWARDEN_TLS_KEY_FILE": str(certs.key(certs.client))})
    env.update(more)
    return env


def direct_tls(kazoo_factory, srv, certs, client=True, **kw):
    """A kazoo client speaking TLS straight to the server (an observer)."""
    extra = {"certfile": str(certs.client), "keyfile": str(certs.key(certs.client))} if client else {}
    return kazoo_factory(srv.hostport, use_ssl=True, ca=str(certs.ca), verify_certs=True, **extra, **kw)


def cannot_connect(kazoo_factory, hostport, **kw):
    """True when a kazoo client gets no session within 4 s."""
    c = kazoo_factory(hostport, start=False, **kw)
    try:
        c.start(timeout=4)
    except KazooTimeoutError:
        return True
    finally:
        c.stop()
    return False


def not_ready(proxy, *needles):
    """/readyz answers 503 with every needle in its reason."""
    status, body = proxy.admin_get("/readyz")
    return status == 503 and all(n in body for n in needles) and body


def not_after(cert):
    out = subprocess.run(["openssl", "x509", "-noout", "-enddate", "-in", str(cert)], check=True,
                         capture_output=True, text=True).stdout.strip()
    return timegm(time.strptime(out.split("=", 1)[1], "%b %d %H:%M:%S %Y GMT"))


# ------------------------------------------------------------ the failure, then TLS

def test_tls_only_server_through_zkwarden(certs, tls_zk, zkwarden_factory, kazoo_factory):
    srv = tls_zk(certs)
    # Nothing goes plaintext: a plaintext client gets no session from it...
    assert cannot_connect(kazoo_factory, srv.hostport)
    # ...and neither does zkwarden without TLS (what zkwarden did before issue 14).
    plain = zkwarden_factory.start(srv)
    assert cannot_connect(kazoo_factory, plain.hostport)
    wait_until(lambda: not_ready(plain, "no upstream server reachable"), 15, what="/readyz 503")

    proxy = zkwarden_factory.start(srv, extra_env=tls_env(certs))
    c = kazoo_factory(proxy.hostport)
    c.create("/tls-a", b"over tls")
    observer = direct_tls(kazoo_factory, srv, certs)
    assert observer.get("/tls-a")[0] == b"over tls"
    wait_until(lambda: proxy.admin_get("/readyz")[0] == 200, 15, what="/readyz 200 over TLS")
    assert proxy.metric("zkwarden_tls_handshakes_total") >= 2  # the session and the probe
    assert proxy.metric("zkwarden_tls_handshake_failures_total") == 0
    assert proxy.metric("zkwarden_tls_cert_expiry_timestamp_seconds") == 0  # no client certificate
    # Four-letter words are relayed raw, over TLS upstream too.
    assert b"Mode: standalone" in four_letter(proxy.port, "srvr")

    # The name to verify can be the DNS SAN instead of the address (sent as SNI).
    named = zkwarden_factory.start(srv, extra_env=tls_env(certs, ZKWARDEN_TLS_SERVER_NAME="zk.test"))
    assert kazoo_factory(named.hostport).get("/tls-a")[0] == b"over tls"
    wrong = zkwarden_factory.start(srv, extra_env=tls_env(certs, ZKWARDEN_TLS_SERVER_NAME="other.test"))
    assert cannot_connect(kazoo_factory, wrong.hostport)
    assert "certificate verify failed: hostname mismatch" in wrong.stderr()


@pytest.mark.parametrize("protocol", ["TLSv1.2", "TLSv1.3"])
def test_client_auth_need(protocol, certs, tls_zk, zkwarden_factory, kazoo_factory):
    srv = tls_zk(certs, client_auth="need", protocol=protocol)
    # Without a client certificate the server refuses the handshake (in
    # TLS 1.3 right after it: the first read then fails, with the alert).
    bare = zkwarden_factory.start(srv, extra_env=tls_env(certs))
    assert cannot_connect(kazoo_factory, bare.hostport)
    wait_until(lambda: not_ready(bare, "TLS"), 15, what="/readyz 503 without a client certificate")
    notes = [l for l in bare.stderr().splitlines() if "TLS to %s" % srv.hostport in l]
    assert len(notes) == 1 and "refused: " in notes[0], notes  # one line, however many attempts

    proxy = zkwarden_factory.start(srv, extra_env=tls_env(certs, client=True))
    c = kazoo_factory(proxy.hostport)
    c.create("/need-a", b"mutual")
    assert direct_tls(kazoo_factory, srv, certs).get("/need-a")[0] == b"mutual"
    wait_until(lambda: proxy.admin_get("/readyz")[0] == 200, 15, what="/readyz 200")
    assert proxy.metric("zkwarden_tls_cert_expiry_timestamp_seconds") == not_after(certs.client)
    assert "TLS verified (%s " % protocol in proxy_debug_line(zkwarden_factory, srv, certs)


def proxy_debug_line(zkwarden_factory, srv, certs):
    """The debug line of one verified connection (its protocol and cipher)."""
    z = zkwarden_factory.start(srv, extra_env=tls_env(certs, client=True), log_level="debug")
    assert b"Mode: standalone" in four_letter(z.port, "srvr")
    return wait_until(lambda: [l for l in z.stderr().splitlines() if "TLS verified" in l], 10,
                      what="the TLS debug line")[0]


@pytest.mark.parametrize("bad,reason", [
    ("untrusted", "certificate verify failed: unable to get local issuer certificate"),
    ("wrong_name", "certificate verify failed: IP address mismatch"),
    ("expired", "certificate verify failed: certificate has expired"),
])
def test_bad_server_certificate_refused(bad, reason, certs, tls_zk, zkwarden_factory, kazoo_factory):
    srv = tls_zk(certs, server_cert=getattr(certs, bad))
    # The server does serve TLS (unverified, it answers)...
    assert b"Mode: standalone" in four_letter_tls(srv.port, "srvr", srv.check_ctx)
    # ...but zkwarden never uses it: one line with OpenSSL's reason, however
    # many attempts (and each client connection's attempt in its own line).
    proxy = zkwarden_factory.start(srv, extra_env=tls_env(certs))
    assert cannot_connect(kazoo_factory, proxy.hostport)
    body = wait_until(lambda: not_ready(proxy, reason), 15, what="/readyz 503 with the reason")
    print("/readyz:", body)
    lines = proxy.stderr().splitlines()
    assert [l for l in lines if "TLS to %s refused" % srv.hostport in l][0].endswith(reason)
    assert len([l for l in lines if "refused" in l]) == 1
    line = [l for l in lines if "TLS handshake failed" in l and "conn=" in l][0]
    assert reason in line and srv.hostport in line
    assert proxy.metric("zkwarden_tls_handshake_failures_total") >= 2  # a session and a probe
    assert proxy.metric("zkwarden_tls_handshakes_total") == 0
    assert proxy.metric("zkwarden_sessions_established_total") == 0


def test_bad_tls_files_stop_the_start(certs, tmp_path, zkwarden_factory):
    """A CA, certificate or key that does not load stops zkwarden at start
    (exit 2, one line saying which): it never starts without TLS."""
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    cases = [
        ({"ZKWARDEN_TLS_CA_FILE": str(garbage)}, "ZKWARDEN_TLS_CA_FILE"),
        ({"ZKWARDEN_TLS_CERT_FILE": str(certs.client), "ZKWARDEN_TLS_KEY_FILE": str(certs.key(certs.server))},
         "ZKWARDEN_TLS_KEY_FILE"),
        ({"ZKWARDEN_TLS_CERT_FILE": str(garbage), "ZKWARDEN_TLS_KEY_FILE": str(certs.key(certs.client))},
         "ZKWARDEN_TLS_CERT_FILE"),
    ]
    for more, needle in cases:  # the key case: OpenSSL says "key values mismatch"
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZKWARDEN_")}
        env.update({"ZKWARDEN_UPSTREAM": "127.0.0.1:1", "ZKWARDEN_UPSTREAM_TLS": "on",
                    "ZKWARDEN_TLS_CA_FILE": str(certs.ca)})
        env.update(more)
        r = subprocess.run([default_zkwarden_bin()], env=env, capture_output=True, text=True, timeout=10)
        assert r.returncode == 2, r.stderr
        assert "cannot load the TLS configuration: " + needle in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_refused_server_is_skipped_for_a_good_one(certs, tls_zk, zkwarden_factory, kazoo_factory):
    """With one server refused (expired certificate) and one good, every
    session lands on the good one, never in plaintext, and zkwarden is ready."""
    bad = tls_zk(certs, server_cert=certs.expired)
    good = tls_zk(certs)
    proxy = zkwarden_factory.start(bad, good, extra_env=tls_env(certs))
    clients = [kazoo_factory(proxy.hostport) for _ in range(4)]  # the rotation starts on each in turn
    for i, c in enumerate(clients):
        c.create("/skip-%d" % i, b"")
    observer = direct_tls(kazoo_factory, good, certs)
    assert all(observer.exists("/skip-%d" % i) for i in range(4))
    wait_until(lambda: proxy.admin_get("/readyz")[0] == 200, 15, what="/readyz 200 with one good server")
    refused = [l for l in proxy.stderr().splitlines() if "upstream %s: TLS handshake failed" % bad.hostport in l]
    assert refused and all("certificate has expired" in l for l in refused)
    assert proxy.metric("zkwarden_upstream_failovers_total") >= 1


# ------------------------------------------------------------ sidecar: registry and fences

def test_sidecar_registry_and_fence_through_tls(certs, tls_zk, zkwarden_factory, kazoo_factory):
    """The pod-restart drill (test_identity) against a TLS-only ensemble with
    clientAuth=need: the registry session and the fence (libzookeeper_mt,
    which has no TLS) go through the sidecar's internal relay."""
    srv = tls_zk(certs, client_auth="need")
    env = tls_env(certs, client=True, ZKWARDEN_MODE="sidecar", ZKWARDEN_IDENTITY="jm-0",
                  ZKWARDEN_SWEEP_INTERVAL_S="0")
    first = zkwarden_factory.start(srv, extra_env=env)
    assert "internal relay on 127.0.0.1:" in first.stderr()
    latch_dir = "/flink/c1/leader/latch"
    old = Jm(first.hostport, 15000, latch_dir)
    try:
        observer = direct_tls(kazoo_factory, srv, certs)
        assert observer.exists("/zkwarden/identities/jm-0/owner") is not None  # the registry, over TLS
    finally:
        old.kill()
    hard_kill(first)
    second = zkwarden_factory.start(srv, extra_env=env)
    took = time_to_leadership(second.hostport, latch_dir, kazoo_factory, 15000, limit=30)
    print("pod restart through TLS (session timeout 15 s): leads after %.3f s" % took)
    assert took < 8.0, "leadership after %.2f s" % took  # the registry session (4 s) expires first
    assert "fenced: closed" in second.stderr()
    assert "internal/" not in second.stderr()  # zkwarden's own sessions log at debug
    assert second.metric("zkwarden_fences_total") == 1
    # The internal relay's sessions (registry, fence) are not JobManager sessions.
    assert second.metric("zkwarden_identity_conflicts_total") == 0
    assert second.metric("zkwarden_connections_accepted_total") == 1


REGISTRY_AUTH = "zkw:registry-s3cret"


def test_registry_is_zkwarden_only_under_tls_with_a_client_certificate(certs, tls_zk, zkwarden_factory,
                                                                        kazoo_factory):
    """With a client certificate (clientAuth=need) the server adds the
    certificate's x509 id to every creator ACL, and every session through
    the sidecar has that id, the JobManager's and any plain client's in its
    pod. The registry's nodes end with zkwarden's digest id alone, each made
    so once, and the record is trusted; a client through the sidecar cannot
    write the record. Before: every owner check (every 2 s) made all four
    nodes "zkwarden-only" again (a creator ACL, the x509 id back in it) with
    a warn line each, the record was never trusted, and a client through the
    sidecar could overwrite it."""
    srv = tls_zk(certs, client_auth="need")
    env = tls_env(certs, client=True, ZKWARDEN_MODE="sidecar", ZKWARDEN_IDENTITY="jm-0",
                  ZKWARDEN_SWEEP_INTERVAL_S="0", ZKWARDEN_REGISTRY_AUTH=REGISTRY_AUTH)
    proxy = zkwarden_factory.start(srv, extra_env=env)
    jm = Jm(proxy.hostport, 15000, "/flink/c1/leader/latch")
    try:
        admin = direct_tls(kazoo_factory, srv, certs, auth_data=[("digest", REGISTRY_AUTH)])
        record = "/zkwarden/identities/jm-0"
        nodes = ["/zkwarden", "/zkwarden/identities", record, record + "/owner"]

        def ids(path):
            return sorted("%s:%s" % (a.id.scheme, a.id.id.split(":")[0]) for a in admin.get_acls(path)[0])
        wait_until(lambda: all(ids(p) == ["digest:zkw"] for p in nodes), 20,
                   what="the registry's nodes zkwarden's digest id's alone")
        wait_until(lambda: proxy.metric("zkwarden_registry_untrusted") == 0, 10, what="the record trusted")
        # Three owner checks (2 s apart) later, nothing was made zkwarden-only again.
        aversions = {p: admin.get_acls(p)[1].aversion for p in nodes}
        deadline = time.monotonic() + 6.5
        while time.monotonic() < deadline:
            assert {p: admin.get_acls(p)[1].aversion for p in nodes} == aversions
            time.sleep(0.5)
        for p in nodes:
            fixed = [l for l in proxy.stderr().splitlines() if "registry node %s could be changed" % p in l]
            assert len(fixed) <= 1 and all("x509:" in l for l in fixed), fixed
        assert proxy.metric("zkwarden_registry_untrusted") == 0
        from kazoo.exceptions import NoAuthError
        plain = kazoo_factory(proxy.hostport)  # a client in the JobManager's pod, through the sidecar
        with pytest.raises(NoAuthError):
            plain.set(record, b"zkwarden-registry 1\nincarnation=999\n")
    finally:
        jm.kill()


# ------------------------------------------------------------ the lock report under TLS


def test_lock_report_under_tls(certs, tls_zk, zkwarden_factory, kazoo_factory, tmp_path):
    """Issue 20: the registry session reads the locks through the internal
    relay. Its getData replies must reach it as the server sent them (tag
    and all): /v1/locks, the status page and `zkwarden locks` then name the
    holder's identity and incarnation of every lock of a Flink-like
    JobManager and report a superseded incarnation's lock stale. Before,
    the relay untagged them ("not tagged by zkwarden", 0 stale), and
    `zkwarden locks` spoke plaintext to the TLS port and failed."""
    srv = tls_zk(certs, client_auth="need")
    env = tls_env(certs, client=True, ZKWARDEN_MODE="sidecar", ZKWARDEN_SWEEP_INTERVAL_S="0")
    observer = direct_tls(kazoo_factory, srv, certs)
    # jm-1 had an incarnation (1) through its sidecar, gone now; a live
    # session of its superseded incarnation 0 still holds a checkpoint lock.
    gone = zkwarden_factory.start(srv, extra_env=dict(env, ZKWARDEN_IDENTITY="jm-1"))
    first = kazoo_factory(gone.hostport)
    first.create("/flink/c1/leader/latch/_c_%s-latch-" % uuid.uuid4(), b"", ephemeral=True, sequence=True,
                 makepath=True)
    first.stop()
    assert not gone.stop()
    zkwarden_factory.procs.remove(gone)
    stale = "/flink/c1/checkpoints/%s/%019d/locks/%s" % ("a" * 32, 7, uuid.uuid4())
    observer.create(stale, forged_tag("jm-1", 0), ephemeral=True, makepath=True)
    # jm-0: a Flink-like JobManager (latch, job graph and checkpoint locks).
    proxy = zkwarden_factory.start(srv, extra_env=dict(env, ZKWARDEN_IDENTITY="jm-0"))
    locks = ["/flink/c1/jobgraphs/%s/locks/%s" % ("a" * 32, uuid.uuid4()),
             "/flink/c1/checkpoints/%s/%019d/locks/%s" % ("a" * 32, 8, uuid.uuid4())]
    jm = Jm(proxy.hostport, 15000, "/flink/c1/leader/latch", *locks)
    try:
        wait_until(lambda: "admin endpoint on" in proxy.stderr(), 10, what="the admin endpoint")
        # The locks are tagged on the server (what a direct TLS client reads).
        for p in locks:
            assert observer.get(p)[0].startswith(b"zkwarden-lock 1 identity=jm-0 incarnation=1 ")

        def check(doc, what):
            by = {e["path"]: e for e in doc["locks"]}
            assert set(by) == set(locks) | {stale}, (what, doc)
            for p in locks:
                e = by[p]
                assert (e["tagged"], e["identity"], e["incarnation"], e["stale"], e["why"]) == (
                    True, "jm-0", 1, False, "held by its identity's current incarnation"), (what, e)
                assert e["session"] == "0x%x" % jm.session, (what, e)
            e = by[stale]
            assert (e["tagged"], e["identity"], e["incarnation"], e["stale"]) == (True, "jm-1", 0, True), (what, e)
            assert doc["summary"]["stale"] == 1 and doc["summary"]["untagged"] == 0, (what, doc["summary"])

        status, body = proxy.admin_get("/v1/locks", timeout=30)
        assert status == 200, body
        check(json.loads(body), "/v1/locks")
        status, page = proxy.admin_get("/", timeout=30)
        assert status == 200
        assert "3 lock(s): 1 stale, 0 untagged" in page, page
        assert "<tr><td>jm-0</td><td>1</td><td>2</td>" in page, page
        assert "<tr><td>jm-1</td><td>1</td><td>1</td><td class=\"bad\">1</td>" in page, page

        # `zkwarden locks` with the proxy's TLS settings: the same report.
        cli_env = {k: v for k, v in os.environ.items() if not k.startswith("ZKWARDEN_")}
        cli_env.update(env)
        cli_env.update({"ZKWARDEN_UPSTREAM": srv.hostport, "ZKWARDEN_IDENTITY": "ops-cli"})
        rc, out, err = run_bounded([default_zkwarden_bin(), "locks", "--all", "--json"], 60, env=cli_env)
        assert rc == 0, err
        assert "AddressSanitizer" not in err and "runtime error" not in err, err
        check(json.loads(out), "zkwarden locks")
        rc, out, err = run_bounded([default_zkwarden_bin(), "locks", "--all"], 60, env=cli_env)
        assert rc == 0 and "3 lock(s): 1 stale, 0 untagged" in out, (out, err)
        # Never plaintext: the server name must match, the CA must be trusted.
        rc, out, err = run_bounded([default_zkwarden_bin(), "locks", "--json"], 60,
                                   env=dict(cli_env, ZKWARDEN_TLS_SERVER_NAME="other.test"))
        assert rc != 0 and out == "", (out, err)
        assert "hostname mismatch" in err, err
        # And nothing in plaintext reaches the TLS port's clients: without a
        # client certificate (clientAuth need) the server refuses it.
        bare = {k: v for k, v in cli_env.items() if k not in ("ZKWARDEN_TLS_CERT_FILE", "ZKWARDEN_TLS_KEY_FILE")}
        rc, out, err = run_bounded([default_zkwarden_bin(), "locks", "--json"], 60, env=bare)
        assert rc != 0 and out == "", (out, err)
    finally:
        jm.kill()
    assert observer.exists(stale) is not None  # reading is all the report does


# ------------------------------------------------------------ rotation

class Secret:
    """A Kubernetes Secret volume: tls.crt, tls.key, ca.crt are symlinks to
    ..data/, and ..data is a symlink swapped at once to a new version."""

    def __init__(self, root):
        self.root = root
        root.mkdir()
        self.version = 0
        for name in ("tls.crt", "tls.key", "ca.crt"):
            os.symlink("..data/" + name, str(root / name))

    def put(self, cert, key, ca):
        self.version += 1
        d = self.root / ("..v%d" % self.version)
        d.mkdir()
        for name, src in (("tls.crt", cert), ("tls.key", key), ("ca.crt", ca)):
            (d / name).write_bytes(src.read_bytes())
        tmp = self.root / "..data_tmp"
        os.symlink(d.name, str(tmp))
        os.replace(str(tmp), str(self.root / "..data"))


class Load:
    """Clients doing set/get in a loop; records errors and state changes."""

    def __init__(self, clients):
        self.clients, self.errors, self.states, self.ops = clients, [], [], 0
        self.sessions = [c.client_id[0] for c in clients]
        self.stop = threading.Event()
        for c in clients:
            c.add_listener(lambda st: self.states.append(st) if st != KazooState.CONNECTED else None)
        self.threads = [threading.Thread(target=self.run, args=(i, c)) for i, c in enumerate(clients)]
        for t in self.threads:
            t.start()

    def run(self, i, c):
        path = "/rot/%d" % i
        c.ensure_path(path)
        n = 0
        while not self.stop.is_set():
            try:
                c.set(path, b"%d" % n)
                assert c.get(path)[0] == b"%d" % n
                n += 1
                self.ops += 1
            except Exception as e:  # any failure is a lost request
                self.errors.append(repr(e))
                return

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(10)


def test_rotation_under_load_keeps_sessions(certs, tls_zk, zkwarden_factory, kazoo_factory, tmp_path):
    srv = tls_zk(certs, client_auth="need")
    secret = Secret(tmp_path / "secret")
    secret.put(certs.client, certs.key(certs.client), certs.ca)
    proxy = zkwarden_factory.start(srv, extra_env={
        "ZKWARDEN_UPSTREAM_TLS": "on", "ZKWARDEN_TLS_CA_FILE": str(secret.root / "ca.crt"),
        "ZKWARDEN_TLS_CERT_FILE": str(secret.root / "tls.crt"),
        "ZKWARDEN_TLS_KEY_FILE": str(secret.root / "tls.key")})
    expiry = lambda: proxy.metric("zkwarden_tls_cert_expiry_timestamp_seconds")  # noqa: E731
    assert expiry() == not_after(certs.client)
    load = Load([kazoo_factory(proxy.hostport) for _ in range(4)])
    try:
        def ops_go_on():
            before = load.ops
            wait_until(lambda: load.ops > before + 20 or load.errors, 10, what="operations")

        # 1. A broken version (the key of another certificate): the old
        #    context stays, new connections still work.
        secret.put(certs.client, certs.key(certs.server), certs.ca)
        wait_until(lambda: proxy.metric("zkwarden_tls_reload_failures_total") == 1, 25,
                   what="the failed reload")
        assert "TLS reload (the certificate files changed) failed, the previous certificates stay" \
            in proxy.stderr()
        assert expiry() == not_after(certs.client)
        assert kazoo_factory(proxy.hostport).exists("/rot") is not None
        ops_go_on()

        # 2. A client certificate the server does not trust: taken (the files
        #    are valid), so new connections fail; established ones go on.
        untrusted = certs.new_client("client-other-ca", days=20, ca="other-ca")
        secret.put(untrusted, certs.key(untrusted), certs.ca)
        wait_until(lambda: proxy.metric("zkwarden_tls_reloads_total") == 1, 25, what="the reload")
        assert expiry() == not_after(untrusted)
        assert cannot_connect(kazoo_factory, proxy.hostport)
        ops_go_on()

        # 3. The renewed certificate, picked up by SIGHUP before the poll.
        renewed = certs.new_client("client-renewed", days=90)
        secret.put(renewed, certs.key(renewed), certs.ca)
        proxy.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: expiry() == not_after(renewed), 25, what="the renewed certificate")
        assert "TLS reloaded (SIGHUP)" in proxy.stderr()
        assert kazoo_factory(proxy.hostport).exists("/rot") is not None
        ops_go_on()
    finally:
        load.finish()
    print("rotation under load: %d operations, errors %s, state changes %s"
          % (load.ops, load.errors, load.states))
    assert load.errors == [] and load.states == []
    assert [c.client_id[0] for c in load.clients] == load.sessions  # no session lost or renewed
