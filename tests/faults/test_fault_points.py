"""Failure points (issue 19): every point where zkwarden's own work can fail,
made to fail, one at a time, in the style of SQLite's OOM and I/O-error
loops.

The sanitizer build of tests/run.sh is configured with
-DZKW_FAULT_INJECTION=ON: ZKW_TEST_FAULT=kind:N makes the Nth call of that
kind fail once (proxy/base/zkw_fault.h: alloc, write, zk, tls, reply). For
each kind a JobManager's life through a sidecar is run again and again with
N = 1, 2, ... until a run completes with nothing injected. The life
(`lifecycle`): an incarnation begins (fence of nothing, registry record),
a reclaim at create, a reclaim at delete in both Flink layouts, a sweep
deleting a stale lock (a walk of the own tree, setting its watch; a stale
lock it may not delete and one it may not read, left to the next pass), a
periodic pass reading what changed (and what was left) and deleting a stale
lock that appeared, a session move (issue 22: the connection to the
server is reset under a session with an auth and a watch, zkwarden
re-attaches it), a second incarnation fencing the first, and an orphan
fence of a JobManager whose connection went away. After every run:

- zkwarden is alive, and exits 0 on SIGTERM with no sanitizer report and no
  leak (LeakSanitizer is on in ASan builds);
- every request of the JobManager got its reply or its connection closed
  (kazoo's async results, each bounded);
- nothing is held: a JobManager that connects afresh creates a lock on a
  fresh path within 1 s;
- the connection and session gauges return to zero once the clients close.

A clean run first reports every point (file:line) with the number of the
first call of its kind made there. The default run fails each point's first
call, and every call up to DENSE; `tests/faults/run.sh --long` fails every
call of every kind. docs/reliability.md gives the counts.
"""

import os
import re
import signal
import time
import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

import rawzk
from netfault import Relay
from zkharness import REPO, TlsCerts, Zkwarden, ZkServer, wait_until
from checkpoints import forged_tag

pytestmark = pytest.mark.zkwarden

LONG = os.environ.get("ZKW_FAULTS_LONG", "") not in ("", "0")
DENSE = 8
REPLY_BOUND = 8.0  # a request of the JobManager answered (or its connection closed) within this
FRESH_LOCK_BOUND = 1.0
IDENTITY_SEQ = iter(range(1, 1 << 30))


def fault_binary():
    """The zkwarden with the fault-injection seam: ZKW_BIN (tests/run.sh
    passes its build-asan, configured with -DZKW_FAULT_INJECTION=ON), else
    build-asan/zkwarden. A binary without the seam is a failure, not a skip:
    the failure points would go untested."""
    b = os.environ.get("ZKW_BIN") or str(REPO / "build-asan" / "zkwarden")
    assert os.access(b, os.X_OK), "%s not built (tests/run.sh builds build-asan with the seam)" % b
    with open(b, "rb") as f:
        assert b"ZKW_TEST_FAULT" in f.read(), (
            "%s was built without -DZKW_FAULT_INJECTION=ON: run with ZKW_BIN=build-asan/zkwarden" % b)
    return b


def kazoo(hostport, timeout=6.0, **tls):
    c = KazooClient(hosts=hostport, timeout=timeout, connection_retry={"max_tries": 0},
                    command_retry={"max_tries": 0}, **tls)
    c.start(timeout=10)
    return c


class Outcome:
    """What the JobManager saw: every request's fate."""

    def __init__(self):
        self.unanswered = []

    def call(self, what, async_result):
        """Waits for one async request: a reply or an error (connection
        lost, session expired) are both answers; a wait past REPLY_BOUND is
        a request held by zkwarden."""
        try:
            return async_result.get(timeout=REPLY_BOUND)
        except KazooTimeoutError:
            self.unanswered.append(what)
        except (KazooException, Exception):  # noqa: B014 the JobManager got an answer
            return None


def move(proxy, relay, jm, direct, base, out):
    """The server's connection is reset under the JobManager's session,
    which has an auth, a watch and a lock create in flight (its barrier: the
    server took it, its answer is held): zkwarden moves it (or drops the
    client when a failure point stops the move), then the session is used
    again."""
    out.call("addauth", jm.add_auth_async("digest", "faults:secret"))
    out.call("watch", jm.exists_async(base + "/watched", watch=lambda ev: None))
    lines = len(proxy.stderr())
    lock = "%s/checkpoints/%019d/locks/%s" % (base, 9, uuid.uuid4())
    direct.ensure_path(lock.rsplit("/", 1)[0])
    relay.set_mode("mute")
    try:
        in_flight = jm.create_async(lock, b"127.0.0.1", ephemeral=True)
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline and direct.exists(lock) is None and proxy.alive():
            time.sleep(0.02)
    finally:
        relay.set_mode("reset")
        relay.set_mode("pass")
    out.call("lock in flight", in_flight)
    deadline = time.monotonic() + 4.0
    while time.monotonic() < deadline and not re.search(r"session moved from|closed:", proxy.stderr()[lines:]):
        time.sleep(0.05)
    out.call("after the move", jm.exists_async(base))


def lifecycle(proxy, direct, identity, out, rotate=False, relay=None):
    """One JobManager's life through the sidecar (see the module doc)."""
    base = "/flink/%s" % uuid.uuid4().hex[:8]
    latch_dir = base + "/leader/latch"
    lock_115 = "%s/checkpoints/%019d/locks" % (base, 1)
    state_17 = "%s/checkpoints/%019d" % (base, 2)
    stale_create = "%s/jobgraphs/%s" % (base, uuid.uuid4())
    swept = "%s/checkpoints/%019d/locks/%s" % (base, 3, uuid.uuid4())
    # A ghost (a session zkwarden never saw) keeps tagged locks of incarnation 0.
    for p in ("%s/%s" % (lock_115, uuid.uuid4()), "%s/%s" % (state_17, uuid.uuid4()), stale_create, swept):
        direct.create(p, forged_tag(identity, 0), ephemeral=True, makepath=True)
    # Two the sweep cannot settle, met by every pass and left to the next
    # (issue 35): one the JobManager may not delete (its container denies
    # it), one it may not read.
    from kazoo.security import make_acl
    denied = "%s/checkpoints/%019d/locks" % (base, 5)
    direct.create("%s/%s" % (denied, uuid.uuid4()), forged_tag(identity, 0), ephemeral=True, makepath=True)
    direct.set_acls(denied, [make_acl("world", "anyone", read=True, write=True, create=True, admin=True)])
    direct.create("%s/checkpoints/%019d/locks/%s" % (base, 6, uuid.uuid4()), forged_tag(identity, 0),
                  ephemeral=True, makepath=True,
                  acl=[make_acl("world", "anyone", write=True, create=True, delete=True, admin=True)])
    jm = kazoo(proxy.hostport)
    try:
        out.call("latch", jm.create_async("%s/_c_%s-latch-" % (latch_dir, uuid.uuid4()), b"",
                                          ephemeral=True, sequence=True))
        if rotate:  # a TLS rotation (SIGHUP re-reads the files) with a session open
            proxy.proc.send_signal(signal.SIGHUP)
        out.call("create over a stale lock", jm.create_async(stale_create, b"127.0.0.1", ephemeral=True))
        mine = "%s/%s" % (lock_115, uuid.uuid4())
        out.call("own lock", jm.create_async(mine, b"127.0.0.1", ephemeral=True))
        out.call("delete own lock", jm.delete_async(mine))
        out.call("delete locks (1.15)", jm.delete_async(lock_115))
        out.call("delete state (1.7)", jm.delete_async(state_17))
        # The sweep (once the incarnation's requests calm down) deletes the last one.
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline and direct.exists(swept) is not None:
            time.sleep(0.05)
        # A periodic pass (every second) reads only what changed since that
        # walk, told by its watch: a stale lock that appears meanwhile.
        changed = "%s/checkpoints/%019d/locks/%s" % (base, 4, uuid.uuid4())
        direct.create(changed, forged_tag(identity, 0), ephemeral=True, makepath=True)
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline and direct.exists(changed) is not None:
            time.sleep(0.05)
        move(proxy, relay, jm, direct, base, out)
        # A second incarnation (a restarted JobManager) fences the first.
        jm2 = kazoo(proxy.hostport)
        try:
            out.call("latch of the second", jm2.create_async("%s/_c_%s-latch-" % (latch_dir, uuid.uuid4()),
                                                             b"", ephemeral=True, sequence=True))
        finally:
            jm2.stop()
            jm2.close()
    finally:
        jm.stop()
        jm.close()
    # A third one whose connection just goes (a crash): fenced as an orphan.
    raw = rawzk.RawSession(proxy.port, timeout_ms=6000)
    try:
        raw.create_latch(latch_dir)
    except (ConnectionError, OSError):
        pass
    finally:
        raw.close()
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline and "not re-attached within" not in proxy.stderr():
        time.sleep(0.05)


def nothing_held(proxy):
    """A JobManager connecting afresh works: its latch (a new incarnation),
    then a lock on a fresh path within FRESH_LOCK_BOUND."""
    jm = kazoo(proxy.hostport, timeout=10.0)
    try:
        base = "/flink/%s" % uuid.uuid4().hex[:8]
        jm.create("%s/leader/latch/_c_%s-latch-" % (base, uuid.uuid4()), b"", ephemeral=True, sequence=True,
                  makepath=True)
        jm.ensure_path(base + "/checkpoints/locks")
        t0 = time.monotonic()
        jm.create("%s/checkpoints/locks/%s" % (base, uuid.uuid4()), b"x", ephemeral=True)
        took = time.monotonic() - t0
        assert took < FRESH_LOCK_BOUND, "a fresh lock create took %.2f s" % took
    finally:
        jm.stop()
        jm.close()


def gauge(proxy, name):
    """One sample of /metrics; a scrape the admin endpoint dropped (its own
    allocation failed: the point under test) is asked again."""
    for _ in range(3):
        try:
            return proxy.metric(name)
        except (OSError, RuntimeError) as e:
            last = e
    raise last


def after_life(proxy, out, problems):
    """The checks after every run: each request answered, zkwarden alive,
    nothing held, the gauges back to 0."""
    if out.unanswered:
        problems.append("requests never answered: %s" % ", ".join(out.unanswered))
    if not proxy.alive():
        problems.append("zkwarden died")
    else:
        nothing_held(proxy)
        wait_until(lambda: gauge(proxy, "zkwarden_connections_active") == 0
                   and gauge(proxy, "zkwarden_sessions_active") == 0, 10,
                   what="connection and session gauges back to 0")


def one_run_with(tmp_path, binary, zk, kind, n, certs=None, code=""):
    """Runs the life with the nth call of kind failing (n=0: none). Returns
    (injected, calls of kind, {point: number of its first call})."""
    identity = "faults-%d-%d" % (os.getpid(), next(IDENTITY_SEQ))
    env = {"ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": identity, "ZKWARDEN_ORPHAN_GRACE_MS": "300",
           "ZKWARDEN_FENCE_TIMEOUT_MS": "2000", "ZKWARDEN_SWEEP_INTERVAL_S": "1",
           "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0"}
    if n:
        env["ZKW_TEST_FAULT"] = "%s:%d%s" % (kind, n, code)
    tls = {}
    if certs:
        env.update({"ZKWARDEN_UPSTREAM_TLS": "on", "ZKWARDEN_TLS_CA_FILE": str(certs.ca)})
        tls = {"use_ssl": True, "ca": str(certs.ca), "verify_certs": True}
    relay = Relay(zk.hostport, name="fp-%s-%d" % (kind, n)).start()
    proxy = Zkwarden(tmp_path / ("%s-%d" % (kind, n)), [relay.hostport], binary=binary, extra_env=env)
    proxy.start()
    direct = kazoo(zk.hostport, **tls)
    out = Outcome()
    problems = []
    try:
        try:
            lifecycle(proxy, direct, identity, out, rotate=certs is not None, relay=relay)
        except (KazooException, KazooTimeoutError, ConnectionError, OSError):
            pass  # a connection refused or lost mid-life: the checks below decide
        after_life(proxy, out, problems)
    finally:
        direct.stop()
        direct.close()
        problems += proxy.stop()
        relay.stop()
    text = proxy.stderr()
    if not n and "session moved from" not in text:
        problems.append("the session did not move in a run with nothing injected")
    if problems:
        pytest.fail("%s:%d: %s\n----- zkwarden stderr (tail) -----\n%s"
                    % (kind, n, "; ".join(problems), text[-6000:]), pytrace=False)
    m = re.search(r"fault injection: %s: (\d+) calls" % kind, text)
    points = {p: int(first) for p, first in
              re.findall(r"fault injection: point (\S+) first at %s #(\d+)" % kind, text)}
    return "fault injection: failing %s #" % kind in text, int(m.group(1)) if m else 0, points


def schedule(calls, points):
    """The N to run: every call (the long run), else the first call at each
    point (every point fails once) and every call up to DENSE (the start:
    the registry, the first connection, the incarnation)."""
    if LONG:
        return list(range(1, calls + 1))
    return sorted(set(points.values()) | set(range(1, min(calls, DENSE) + 1)))


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    """A TLS-only ZooKeeper (PEM keystores): the TLS points, handshake and rotation."""
    certs = TlsCerts(tmp_path_factory.mktemp("fp-certs"))
    srv = ZkServer(tmp_path_factory.mktemp("fp-tls-zk"), tls=(certs, certs.server, "none"))
    srv.start()
    yield certs, srv
    srv.stop()


# zk-noauth: the registry's calls fail with NOAUTH (-102)
# instead of a connection loss.
@pytest.mark.parametrize("kind", ["alloc", "write", "zk", "zk-noauth", "reply", "tls"])
def test_every_failure_point(kind, tmp_path, request):
    binary = fault_binary()
    code = ""
    if kind == "zk-noauth":
        kind, code = "zk", ":-102"
    certs = None
    if kind == "tls":
        certs, zk_server = request.getfixturevalue("tls_server")
    else:
        zk_server = request.getfixturevalue("zk_server")

    def one_run(*a):
        return one_run_with(*a, certs=certs, code=code)
    _, calls, points = one_run(tmp_path, binary, zk_server, kind, 0)
    assert calls > 0 and points, "the life made no %s call: the seam is not wired" % kind
    injected = 0
    for n in schedule(calls, points):
        injected += one_run(tmp_path, binary, zk_server, kind, n)[0]
    # Past every call (their number varies with timing: retries, pings): a
    # run with nothing injected ends the loop.
    assert not one_run(tmp_path, binary, zk_server, kind, 100 * calls + 1000)[0]
    print("fault points %s: %d points, %d calls in a clean run, %d runs with a failure injected (%s)"
          % (kind, len(points), calls, injected, "every call" if LONG else "each point's first call"))
    assert injected >= len(points) // 2



# ---------------------------------------------------------------- registry trust (issue 35, item 1)

TRUST_AUTH = "zkw:fault-registry-pw"
TRUST_SEQ = iter(range(1, 1 << 30))


def trust_record(incarnation, dead_sessions=(), trees=()):
    """A registry record as anyone could write it (zkw_record.h)."""
    lines = [b"zkwarden-registry 1", b"incarnation=%d" % incarnation, b"session=0x4242", b"passwd=" + b"0" * 32,
             b"timeout=20000", b"instance=forged"]
    if dead_sessions:
        now = int(time.time() * 1000)
        lines.append(b"dead_sessions=" + b",".join(b"0x%x:1:%d" % (s, now) for s in dead_sessions))
    lines += [b"tree=" + t.encode() for t in trees]
    return b"\n".join(lines) + b"\ndead=0\n"


def trust_life(proxy, admin, root, base, out):
    """The JobManager: its latch (an incarnation), a delete that reclaims a
    stale lock of a trusted foreign record, a delete that meets a live lock
    of a forged one; then the sweep's pass and the registry's ACL passes
    (the parents, the record made zkwarden-only, the record trusted again
    once zkwarden wrote it), each waited for within a bound (a failure may
    keep one from happening: the next pass does it)."""
    jm = kazoo(proxy.hostport)
    try:
        out.call("latch", jm.create_async("%s/leader/latch/_c_%s-latch-" % (base, uuid.uuid4()), b"",
                                          ephemeral=True, sequence=True))

        def settled():
            parents = [a.id.scheme for a in admin.get_acls(root + "/identities")[0]]
            return proxy.stderr().count("sweep done") >= 1 and parents == ["digest"] and \
                gauge(proxy, "zkwarden_registry_untrusted") == 0
        deadline = time.monotonic() + 8.0
        while time.monotonic() < deadline and proxy.alive() and not settled():
            time.sleep(0.1)
        # Once the parents are zkwarden's alone another identity's record may be trusted.
        out.call("delete over a trusted foreign record's stale lock",
                 jm.delete_async("%s/jobgraphs/%s/locks" % (base, "d" * 32)))
        out.call("delete over a forged foreign record's live lock",
                 jm.delete_async("%s/jobgraphs/%s/locks" % (base, "e" * 32)))
    finally:
        jm.stop()
        jm.close()


def trust_run(tmp_path, binary, zk, fault):
    """The trust life with one failure injected (fault: ZKW_TEST_FAULT's
    value, or None), on a registry a credential-less run left open: its root
    and identities world-writable, this identity's record rewritten by
    someone else (an `ip` ACL) naming a live cluster's tree and session as
    dead, a foreign record zkwarden wrote and one anyone did. Besides the
    checks of one_run_with: nothing of the live cluster, and not the forged
    foreign record's live lock, was deleted, whatever failed. Returns
    (injected, [(point, kind)] of the run)."""
    from kazoo.security import make_acl, make_digest_acl
    k = next(TRUST_SEQ)
    identity, root = "trust-%d-%d" % (os.getpid(), k), "/zkwtrust-%d-%d" % (os.getpid(), k)
    direct, victim, ghost = kazoo(zk.hostport), kazoo(zk.hostport), kazoo(zk.hostport)
    admin = KazooClient(hosts=zk.hostport, auth_data=[("digest", TRUST_AUTH)])
    admin.start(timeout=10)
    problems, proxy, out = [], None, Outcome()
    try:
        direct.create(root + "/identities", b"", makepath=True)
        cluster = "/flink/victim-%s" % uuid.uuid4().hex[:8]
        live = [victim.create(cluster + "/leader/latch/_c_%s-latch-" % uuid.uuid4(), b"", ephemeral=True,
                              sequence=True, makepath=True),
                victim.create("%s/jobgraphs/%s/locks/%s" % (cluster, "f" * 32, uuid.uuid4()), b"127.0.0.1",
                              ephemeral=True, makepath=True)]
        direct.create("%s/identities/%s" % (root, identity),
                      trust_record(1, dead_sessions=[victim.client_id[0]], trees=[cluster]),
                      acl=[make_acl("ip", "0.0.0.0/0", all=True)])
        admin.create("%s/identities/trusted-f" % root, trust_record(5),
                     acl=[make_digest_acl(*TRUST_AUTH.split(":"), all=True)])
        direct.create("%s/identities/forged-g" % root, trust_record(999))
        base = "/flink/%s" % uuid.uuid4().hex[:8]
        planted = {}
        for name, tag in (("d", "trusted-f"), ("e", "forged-g")):
            planted[name] = "%s/jobgraphs/%s/locks/%s" % (base, name * 32, uuid.uuid4())
            ghost.create(planted[name], forged_tag(tag, 1, session=ghost.client_id[0]), ephemeral=True,
                         makepath=True)
        env = {"ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": identity, "ZKWARDEN_REGISTRY_ROOT": root,
               "ZKWARDEN_REGISTRY_AUTH": TRUST_AUTH, "ZKWARDEN_SWEEP_INTERVAL_S": "1",
               "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0"}
        if fault:
            env["ZKW_TEST_FAULT"] = fault
        proxy = Zkwarden(tmp_path / ("trust-%d" % k), [zk.hostport], binary=binary, extra_env=env)
        proxy.start()
        try:
            trust_life(proxy, admin, root, base, out)
        except (KazooException, KazooTimeoutError, ConnectionError, OSError):
            pass  # a connection refused or lost mid-life: the checks below decide
        gone = [p for p in live + [planted["e"]] if direct.exists(p) is None]
        if gone:
            problems.append("deleted what no trusted record names: %s" % gone)
        if not fault and direct.exists(planted["d"]) is not None:
            problems.append("a clean run did not reclaim the trusted foreign record's stale lock")
        after_life(proxy, out, problems)
    finally:
        for c in (direct, admin, victim, ghost):
            c.stop()
            c.close()
        if proxy:
            problems += proxy.stop()
    text = proxy.stderr() if proxy else ""
    if problems:
        log = "\n".join(l for l in text.splitlines() if "fault injection: point" not in l)
        pytest.fail("%s: %s\n----- zkwarden stderr (tail) -----\n%s" % (fault, "; ".join(problems), log[-8000:]),
                    pytrace=False)
    return "fault injection: failing" in text, re.findall(r"fault injection: point (\S+) first at (\w+) #", text)


TRUST_DETAILS = {"acl-parent", "setacl-parent", "acl-record", "setacl-record", "acl-owner", "acl-foreign"}


def test_registry_trust_failure_points(tmp_path, zk_server):
    """The failure points of the registry's trust (issue 35, item 1): every
    ACL read and setACL of the registry's parents, record and owner node and
    of another identity's record (their call and their completion, named
    apart: zk:N@acl-parent, ...), failed with a connection loss, the setACLs
    with NOAUTH too, and the allocations of reclaim's read of another
    identity's record; each run must keep every safety check of trust_run."""
    binary = fault_binary()
    _, points = trust_run(tmp_path, binary, zk_server, None)
    details = {p.rsplit("/", 1)[1] for p, kind in points if kind == "zk" and "/" in p.rsplit(":", 1)[1]}
    assert TRUST_DETAILS <= details, points
    allocs = sorted({p.rsplit("/", 1)[-1] for p, kind in points if kind == "alloc" and "zkw_reclaim.c" in p})
    runs = ["zk:%d@%s" % (n, d) for d in sorted(TRUST_DETAILS) for n in range(1, 5)]
    runs += ["zk:%d:-102@%s" % (n, d) for d in ("setacl-parent", "setacl-record") for n in range(1, 3)]
    runs += ["alloc:1@%s" % p for p in allocs]
    injected = sum(trust_run(tmp_path, binary, zk_server, spec)[0] for spec in runs)
    print("registry trust fault points: %d runs, %d with a failure injected" % (len(runs), injected))
    assert injected >= len(TRUST_DETAILS) * 2
