"""Fault 5 (issue 7): the registry broken while zkwarden runs.

A sidecar (ZKWARDEN_MODE=sidecar) relays a JobManager-like session (a kazoo
process of its own: leader latch, a lock under /flink, and a steady stream of
acknowledged writes). While it runs, its registry is broken in one of four
ways:

- deleted: the record node <root>/identities/<id> and its `owner` child;
- garbage: the record overwritten with bytes that are no record;
- unreadable: setACL on the record to a digest the sidecar lacks (then
  restored by the operator);
- root_deleted: the whole registry root, recursively.

What must hold (DESIGN §4, and the decisions written in
docs/reliability.md, where the issue is silent):

- the JobManager notices nothing: no request lost, no state change, the same
  session, its latch and lock in place (a live current session is never
  fenced; no node zkwarden did not tag is deleted);
- zkwarden logs an error naming the registry node, counts it in
  zkwarden_registry_errors_total, and /readyz answers 503 "registry not
  usable" while it cannot use the registry;
- once the registry can be written again (at once for deleted, root_deleted
  and garbage: the owner's own record is written back; after the operator's
  repair for unreadable), the record is the current incarnation again, so
  that the NEXT JobManager restart is fenced and leads at once, as in
  tests/integration/test_identity.py.

The JobManager process is this file run as a script (`jm` mode), so that it
can be killed with -9 like a crashed JobManager.
"""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest

# Also run as a script (the JobManager process): find the harness there too.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from zkharness import HOST, wait_until  # noqa: E402

PY = "/usr/bin/python3"
ROOT = "/zkwarden"
IDENTITY = "jm-0"
RECORD = "%s/identities/%s" % (ROOT, IDENTITY)
LATCH_DIR = "/flink/c1/leader/latch"
SESSION_MS = 20000
SCENARIOS = ["deleted", "garbage", "unreadable", "root_deleted"]


# ------------------------------------------------------------ the JobManager process

def jm_main(hostport, timeout_ms, latch_dir, lock, counter):
    """Opens one session, creates its latch and lock, prints one JSON line,
    then writes `counter` forever, printing `ack N` for every acknowledged
    setData and `state S` for every connection state change."""
    from kazoo.client import KazooClient
    from kazoo.retry import KazooRetry
    c = KazooClient(hosts=hostport, timeout=timeout_ms / 1000.0,
                    connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=0.5))
    c.add_listener(lambda st: print("state %s" % st, flush=True))
    c.start(timeout=15)
    c.ensure_path(latch_dir)
    latch = c.create("%s/_c_%s-latch-" % (latch_dir, uuid.uuid4()), b"", ephemeral=True, sequence=True)
    c.ensure_path(lock.rsplit("/", 1)[0])
    c.create(lock, b"127.0.0.1", ephemeral=True)
    c.ensure_path(counter)
    print(json.dumps({"session": c.client_id[0], "latch": latch}), flush=True)
    n = 0
    while True:
        n += 1
        try:
            c.set(counter, b"%d" % n)
            print("ack %d" % n, flush=True)
        except Exception as e:  # reported to the test, which judges it
            print("error %d %r" % (n, e), flush=True)
        time.sleep(0.02)


class JmProc:
    """The JobManager stand-in, and what it reports."""

    def __init__(self, hostport, lock, counter):
        self.proc = subprocess.Popen([PY, os.path.abspath(__file__), "jm", hostport, str(SESSION_MS), LATCH_DIR,
                                      lock, counter], stdout=subprocess.PIPE, text=True)
        line = "state"
        while line.startswith("state"):
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("jm exited with %s" % self.proc.wait())
        info = json.loads(line)
        self.session, self.latch = info["session"], info["latch"]
        self.acked = 0
        self.problems = []
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.proc.stdout:
            if line.startswith("ack "):
                n = int(line.split()[1])
                if n != self.acked + 1:
                    self.problems.append("ack %d after %d" % (n, self.acked))
                self.acked = n
            else:
                self.problems.append(line.strip())

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def jm_procs():
    started = []

    def start(*a):
        jm = JmProc(*a)
        started.append(jm)
        return jm
    yield start
    for jm in started:
        jm.kill()


# ------------------------------------------------------------ helpers

def readyz(proxy):
    try:
        r = urllib.request.urlopen("http://%s:%d/readyz" % (HOST, proxy.admin_port), timeout=5)
        return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def record(zk):
    """The registry record as a dict, or None if absent or not a record."""
    try:
        data = zk.get(RECORD)[0].decode("utf-8", "replace")
    except Exception:
        return None
    lines = data.splitlines()
    if not lines or lines[0] != "zkwarden-registry 1":
        return None
    return dict(l.split("=", 1) for l in lines[1:] if "=" in l)


def is_leader(client, latch):
    kids = client.get_children(LATCH_DIR)
    return min(kids, key=lambda k: int(k[-10:])) == latch.rsplit("/", 1)[1]


def break_registry(scenario, admin):
    """Breaks the registry; returns the repair the operator does later (or None)."""
    from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl
    if scenario == "deleted":
        admin.delete(RECORD + "/owner")
        admin.delete(RECORD)
    elif scenario == "root_deleted":
        admin.delete(ROOT, recursive=True)
    elif scenario == "garbage":
        admin.set(RECORD, b"\x00\xffnot a zkwarden record\n")
    elif scenario == "unreadable":
        # Only the operator's digest may touch the record now.
        admin.set_acls(RECORD, [make_digest_acl("operator", "op-pw", all=True)])

        def repair():
            admin.set_acls(RECORD, OPEN_ACL_UNSAFE)
        return repair
    return None


# ------------------------------------------------------------ the test

@pytest.mark.zkwarden
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_registry_broken_while_running(scenario, private_zk, zkwarden_factory, kazoo_factory, jm_procs):
    env = {"ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": IDENTITY, "ZKWARDEN_SWEEP_INTERVAL_S": "0",
           "ZKWARDEN_REGISTRY_ROOT": ROOT}
    proxy = zkwarden_factory.start(private_zk, extra_env=env)
    admin = kazoo_factory(private_zk.hostport, auth_data=[("digest", "operator:op-pw")])
    lock = "/flink/c1/jobgraphs/%s/%s" % ("a" * 32, uuid.uuid4())
    untagged = "/flink/c1/other/%s" % uuid.uuid4()  # not a lock: never touched by zkwarden
    admin.create(untagged, b"keep", makepath=True)
    counter = "/flink/c1/counter-%s" % scenario
    jm = jm_procs(proxy.hostport, lock, counter)
    wait_until(lambda: (record(admin) or {}).get("session") == "0x%x" % jm.session, 30,
               what="incarnation 1 to be recorded")
    wait_until(lambda: readyz(proxy)[0] == 200, 20, what="/readyz 200")
    errors0 = proxy.metric("zkwarden_registry_errors_total")
    acked0 = jm.acked

    repair = break_registry(scenario, admin)
    wait_until(lambda: proxy.metric("zkwarden_registry_errors_total") > errors0, 15,
               what="the registry error to be counted")
    errors = [l for l in proxy.stderr().splitlines() if " error " in l and RECORD in l]
    assert errors, proxy.stderr()[-3000:]
    print("%s: %s" % (scenario, errors[0].split(" error ", 1)[1]))
    if repair:
        # A condition zkwarden cannot mend: reported until the operator does.
        wait_until(lambda: readyz(proxy)[0] == 503, 20, what="/readyz 503")
        status, body = readyz(proxy)
        assert "registry not usable" in body, body
        time.sleep(2)  # the JobManager keeps working meanwhile (checked below)
        repair()
    # Repaired: the owner's record is back, the current incarnation.
    wait_until(lambda: (record(admin) or {}).get("session") == "0x%x" % jm.session, 20,
               what="the record of incarnation 1 to be re-established")
    rec = record(admin)
    assert rec["incarnation"] == "1", rec
    wait_until(lambda: readyz(proxy)[0] == 200, 15, what="/readyz 200 after the repair")
    assert admin.exists(RECORD + "/owner") is not None

    # The JobManager noticed nothing.
    wait_until(lambda: jm.acked >= acked0 + 20, 30, what="the JobManager's writes to go on")
    assert jm.problems == [], jm.problems
    assert jm.proc.poll() is None
    assert admin.exists(lock).ephemeralOwner == jm.session
    assert admin.exists(jm.latch).ephemeralOwner == jm.session
    assert admin.get(untagged)[0] == b"keep"
    assert int(admin.get(counter)[0]) >= jm.acked
    assert "fenced" not in proxy.stderr()

    # The next restart is fenced and reclaimed as usual.
    jm.kill()
    t0 = time.monotonic()
    new = kazoo_factory(proxy.hostport, timeout=SESSION_MS / 1000.0)
    mine = new.create("%s/_c_%s-latch-" % (LATCH_DIR, uuid.uuid4()), b"", ephemeral=True, sequence=True)
    wait_until(lambda: is_leader(new, mine), 10, interval=0.01, what="leadership")
    took = time.monotonic() - t0
    new.create(lock, b"127.0.0.1", ephemeral=True)  # the same lock, re-created
    assert new.exists(lock).ephemeralOwner == new.client_id[0]
    print("%s: the restarted JobManager leads after %.3f s (session timeout %d s)"
          % (scenario, took, SESSION_MS // 1000))
    assert took < 3.0, "leadership after %.2f s" % took
    wait_until(lambda: "previous session 0x%x of incarnation 1 fenced" % jm.session in proxy.stderr(), 15,
               what="the fence of incarnation 1 to be logged")
    wait_until(lambda: (record(admin) or {}).get("incarnation") == "2", 20, what="incarnation 2 recorded")
    assert admin.get(untagged)[0] == b"keep"



@pytest.mark.zkwarden
def test_jm_restart_during_registry_outage(private_zk, zkwarden_factory, kazoo_factory, jm_procs):
    """The JobManager restarts while the record is unreadable. The sidecar
    cannot record a new incarnation, so it relays the new session at once
    without fencing (no identity features, as with a broken registry at
    start): the old session keeps its latch until the repair. Once repaired,
    the new session becomes incarnation 2 and the old one is fenced; the
    restart after that is fenced as usual."""
    env = {"ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": IDENTITY, "ZKWARDEN_SWEEP_INTERVAL_S": "0",
           "ZKWARDEN_REGISTRY_ROOT": ROOT}
    proxy = zkwarden_factory.start(private_zk, extra_env=env)
    admin = kazoo_factory(private_zk.hostport, auth_data=[("digest", "operator:op-pw")])
    graph = "/flink/c1/jobgraphs/%s" % ("b" * 32)
    old = jm_procs(proxy.hostport, "%s/%s" % (graph, uuid.uuid4()), "/flink/c1/counter-old")
    wait_until(lambda: (record(admin) or {}).get("session") == "0x%x" % old.session, 30,
               what="incarnation 1 to be recorded")
    errors0 = proxy.metric("zkwarden_registry_errors_total")
    repair = break_registry("unreadable", admin)
    wait_until(lambda: readyz(proxy)[0] == 503, 20, what="/readyz 503")
    assert proxy.metric("zkwarden_registry_errors_total") > errors0

    old.kill()  # crashed during the outage
    t0 = time.monotonic()
    new = jm_procs(proxy.hostport, "%s/%s" % (graph, uuid.uuid4()), "/flink/c1/counter-new")
    # It is up (session, latch, lock) while the registry is still unreadable:
    # not held for it. (The time includes starting a Python process.)
    print("JobManager restarted during the outage: up after %.2f s" % (time.monotonic() - t0))
    assert readyz(proxy)[0] == 503
    assert admin.exists(old.latch) is not None  # nothing fenced without the registry
    assert not is_leader(admin, new.latch)

    repair()
    wait_until(lambda: (record(admin) or {}).get("session") == "0x%x" % new.session, 20,
               what="the new session to be recorded once the registry is readable")
    assert record(admin)["incarnation"] == "2"
    wait_until(lambda: is_leader(admin, new.latch), 20, what="the new JobManager to lead (old one fenced)")
    wait_until(lambda: "previous session 0x%x of incarnation 1 fenced" % old.session in proxy.stderr(), 15,
               what="the fence of incarnation 1 to be logged")
    assert new.problems == [] and admin.exists(new.latch).ephemeralOwner == new.session
    wait_until(lambda: readyz(proxy)[0] == 200, 15, what="/readyz 200")

    new.kill()
    t0 = time.monotonic()
    c = kazoo_factory(proxy.hostport, timeout=SESSION_MS / 1000.0)
    mine = c.create("%s/_c_%s-latch-" % (LATCH_DIR, uuid.uuid4()), b"", ephemeral=True, sequence=True)
    wait_until(lambda: is_leader(c, mine), 10, interval=0.01, what="leadership")
    assert time.monotonic() - t0 < 3.0
    wait_until(lambda: "previous session 0x%x of incarnation 2 fenced" % new.session in proxy.stderr(), 15,
               what="the fence of incarnation 2 to be logged")

def test_registry_auth_refused_at_open(private_zk, zkwarden_factory, kazoo_factory):
    """zoo_add_auth refuses while the registry handle is between connections
    (ZINVALIDSTATE: a server of the list refused the first connect, or a
    re-attached session's connection dropped). The long consistency run met
    it after a kill -9 of zkwarden under server kills: the handle went on
    without its digest auth, every create with the creator ACL failed
    (invalid acl), and the registry stayed unusable until the session ended.
    Here the first zoo_add_auth is made to fail (the fault seam); the auth is
    added when the session connects, the registry claims the identity and
    writes the record zkwarden-only, and /readyz answers 200."""
    env = {"ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": IDENTITY, "ZKWARDEN_SWEEP_INTERVAL_S": "0",
           "ZKWARDEN_REGISTRY_ROOT": ROOT, "ZKWARDEN_REGISTRY_AUTH": "zkw:registry-pw",
           "ZKW_TEST_FAULT": "zk:1@add-auth"}
    binary = os.environ.get("ZKW_BIN") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                       "build-asan", "zkwarden")
    with open(binary, "rb") as f:
        assert b"ZKW_TEST_FAULT" in f.read(), "%s was built without -DZKW_FAULT_INJECTION=ON" % binary
    proxy = zkwarden_factory.start(private_zk, extra_env=env, binary=binary)
    wait_until(lambda: "fault injection: failing" in proxy.stderr(), 10, what="the first add_auth to fail")
    assert "digest auth not taken yet" in proxy.stderr()
    wait_until(lambda: readyz(proxy)[0] == 200, 20, what="/readyz 200: the registry usable")
    admin = kazoo_factory(private_zk.hostport, auth_data=[("digest", "zkw:registry-pw")])
    jm = kazoo_factory(proxy.hostport)
    jm.create("%s/_c_%s-latch-" % (LATCH_DIR, uuid.uuid4()), b"", ephemeral=True, sequence=True, makepath=True)
    wait_until(lambda: (record(admin) or {}).get("session") == "0x%x" % jm.client_id[0], 20,
               what="the JobManager's incarnation recorded")
    acl = admin.get_acls(RECORD)[0]
    assert [a.id.scheme for a in acl] == ["digest"] and acl[0].id.id.startswith("zkw:"), acl
    assert "invalid acl" not in proxy.stderr()


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "jm":
    jm_main(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6])
