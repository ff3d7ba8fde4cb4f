"""The admin endpoint while the proxy carries load, and the process's
operational behaviour: many concurrent scrapes during a kazoo workload,
SIGTERM under load, the log file and SIGHUP."""

import json
import os
import re
import signal
import threading
import time
import uuid

import pytest

import promcheck
from adminclient import curl_parallel
from kazoo.client import KazooState
from zkharness import ZkServer, four_letter, wait_until

pytestmark = pytest.mark.zkwarden


class Load:
    """Kazoo clients doing setData/getData through zkwarden until stopped."""

    def __init__(self, kazoo_factory, hostport, clients=4):
        self.ops = 0
        self.errors = []
        self.stop_event = threading.Event()
        self.threads = []
        self.clients = [kazoo_factory(hostport) for _ in range(clients)]
        for i, c in enumerate(self.clients):
            c.ensure_path("/load/c%d" % i)

    def _run(self, i, c):
        path = "/load/c%d" % i
        n = 0
        while not self.stop_event.is_set():
            try:
                c.set(path, b"%d" % n)
                data, _ = c.get(path)
                if data != b"%d" % n:
                    self.errors.append("client %d read %r after writing %d" % (i, data, n))
                n += 1
                self.ops += 2
            except Exception as e:  # any failure of the proxied traffic fails the test
                if not self.stop_event.is_set():
                    self.errors.append("client %d: %r" % (i, e))
                return

    def start(self):
        for i, c in enumerate(self.clients):
            t = threading.Thread(target=self._run, args=(i, c), daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def stop(self):
        self.stop_event.set()
        for t in self.threads:
            t.join(30)


def test_200_concurrent_scrapes_during_load(zk_server, zkwarden_factory, admin, kazoo_factory, tmp_path):
    proxy = zkwarden_factory.start(zk_server)
    adm = admin(proxy)
    load = Load(kazoo_factory, proxy.hostport).start()
    try:
        wait_until(lambda: load.ops > 200, 30, what="the load to run")
        ops0 = load.ops
        codes = curl_parallel(proxy.admin_port, "/metrics", 200, str(tmp_path / "scrapes"))
        codes += curl_parallel(proxy.admin_port, "/v1/sessions", 50, str(tmp_path / "sessions"))
        ops1 = load.ops
        time.sleep(0.5)
        assert load.ops > ops1, "the workload stalled"
    finally:
        load.stop()
    assert load.errors == []
    assert codes == [200] * 250
    assert ops1 > ops0
    for i in range(1, 201):
        text = (tmp_path / "scrapes" / ("r_%d.txt" % i)).read_text()
        problems = promcheck.check(text)
        assert problems == [], "scrape %d:\n%s" % (i, "\n".join(problems[:10]))
    for i in range(1, 51):
        doc = json.loads((tmp_path / "sessions" / ("r_%d.txt" % i)).read_text())
        assert doc["count"] == len(doc["sessions"]) == 4
    s = adm.samples()
    # Every admin request was answered and counted (a scrape counts itself
    # once it is answered).
    assert promcheck.value(s, "zkwarden_admin_requests_total") == 250
    assert promcheck.value(s, "zkwarden_requests_total", op="setData") >= load.ops // 2
    assert proxy.alive()


def test_sigterm_under_load_exits_0_within_seconds(zk_server, zkwarden_factory, admin, kazoo_factory,
                                                  tmp_path):
    proxy = zkwarden_factory.start(zk_server)
    load = Load(kazoo_factory, proxy.hostport).start()
    scrapes = threading.Thread(target=lambda: _scrape_until_gone(proxy.admin_port, tmp_path), daemon=True)
    try:
        wait_until(lambda: load.ops > 200, 30, what="the load to run")
        scrapes.start()
        time.sleep(0.3)
        held = admin(proxy).connect()  # an idle keep-alive admin connection too
        t0 = time.monotonic()
        problems = proxy.stop()  # SIGTERM, wait, exit status and sanitizer check
        took = time.monotonic() - t0
        held.close()
    finally:
        load.stop()
    assert problems == []
    assert proxy.returncode == 0
    assert took < 5, "zkwarden took %.1f s to exit" % took
    assert "received SIGTERM" in proxy.stderr()
    proxy.proc = None  # checked here


def _scrape_until_gone(port, tmp_path):
    import subprocess
    for i in range(50):
        r = subprocess.run(["curl", "-s", "--max-time", "5", "-o", os.devnull, "--parallel", "--parallel-max",
                            "20", "http://127.0.0.1:%d/metrics?x=[1-20]" % port], capture_output=True)
        if r.returncode == 7:  # connection refused: zkwarden is gone
            return


def test_log_file_and_sighup_reopen(zk_server, zkwarden_factory, kazoo_factory, tmp_path):
    log = tmp_path / "zkwarden.log"
    proxy = zkwarden_factory.start(zk_server, extra_env={"ZKWARDEN_LOG_FILE": str(log),
                                                         "ZKWARDEN_LOG_FORMAT": "json"})
    wait_until(lambda: log.exists() and "admin endpoint on" in log.read_text(), 10, what="the log file")
    assert "listening on" not in proxy.stderr()  # the log goes to the file only
    rotated = tmp_path / "zkwarden.log.1"
    os.rename(log, rotated)
    proxy.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: log.exists() and "SIGHUP: log reopened" in log.read_text(), 10,
               what="the log to be reopened")
    kz = kazoo_factory(proxy.hostport)
    kz.exists("/")
    wait_until(lambda: "session established" in log.read_text(), 10, what="a session line in the new log")
    old = rotated.read_text()
    assert "listening on" in old and "session established" not in old
    for f in (log, rotated):
        for line in f.read_text().splitlines():
            doc = json.loads(line)  # one JSON object per line
            assert {"ts", "level", "msg"} <= set(doc)
    assert proxy.alive()


def test_sighup_without_a_log_file_is_harmless(zk_server, zkwarden_factory, admin):
    proxy = zkwarden_factory.start(zk_server)
    adm = admin(proxy)
    proxy.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "SIGHUP: log reopened" in proxy.stderr(), 10, what="the SIGHUP line")
    assert adm.get("/healthz").status == 200


def own_reads(zk, exclude):
    """{session id: requests received} of every session on zk but those in
    exclude (the `cons` four-letter word): zkwarden's registry and walk
    sessions, as the server counts them."""
    text = four_letter(zk.port, "cons").decode()
    out = {}
    for recved, sid in re.findall(r"recved=(\d+),sent=\d+,sid=(0x[0-9a-f]+)", text):
        if int(sid, 16) not in exclude:
            out[sid] = int(recved)
    return out


def test_200_concurrent_lock_reports_while_a_jobmanager_works(zkwarden_factory, kazoo_factory, tmp_path):
    """Issue 20: 200 concurrent GET / and GET /v1/locks next to a working
    JobManager. At most one walk of the lock roots runs at a time and a
    report answers 5 s of requests, on a session of its own: the registry
    session never expires, /readyz stays 200, the JobManager's session and
    ephemerals are untouched, and the reads zkwarden sends the ensemble for
    them are bounded (before: a full walk per request, on the registry's
    4 s session)."""
    zk = ZkServer(tmp_path / "zk", four_letter_words="srvr,ruok,stat,cons")
    zk.start()
    try:
        direct = kazoo_factory(zk.hostport)
        job = "d" * 32
        for i in range(200):  # retained checkpoints: each walk reads every one
            direct.create("/flink/c1/checkpoints/%s/%019d" % (job, i), b"handle", makepath=True)
        proxy = zkwarden_factory.start(zk, extra_env={
            "ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": "jm-load", "ZKWARDEN_SWEEP_INTERVAL_S": "0"})
        jm = kazoo_factory(proxy.hostport, timeout=6.0)
        states = []
        jm.add_listener(lambda st: states.append(st) if st != KazooState.CONNECTED else None)
        session = jm.client_id[0]
        latch = jm.create("/flink/c1/leader/latch/_c_%s-latch-" % uuid.uuid4(), b"", ephemeral=True,
                          sequence=True, makepath=True)
        held = ["/flink/c1/jobgraphs/%s/locks/%s" % (job, uuid.uuid4())]
        held += ["/flink/c1/checkpoints/%s/%019d/locks/%s" % (job, i, uuid.uuid4()) for i in (198, 199)]
        for p in held:
            jm.create(p, b"127.0.0.1", ephemeral=True, makepath=True)
        stop, errors, ops = threading.Event(), [], [0]

        def work():  # the JobManager adds and subsumes checkpoints
            n = 1000
            while not stop.is_set():
                try:
                    state = "/flink/c1/checkpoints/%s/%019d" % (job, n)
                    lock = "%s/locks/%s" % (state, uuid.uuid4())
                    jm.create(lock, b"127.0.0.1", ephemeral=True, makepath=True)
                    assert jm.get(lock)[0] == b"127.0.0.1"  # untagged for the JobManager
                    jm.delete(lock)
                    jm.delete(state, recursive=True)
                    n += 1
                    ops[0] += 1
                except Exception as e:  # any failure of the JobManager's traffic fails the test
                    errors.append(repr(e))
                    return
        readyz = []

        def poll_readyz():
            while not stop.is_set():
                readyz.append(proxy.admin_get("/readyz", timeout=10)[0])
                time.sleep(0.05)
        wait_until(lambda: "admin endpoint on" in proxy.stderr(), 10, what="the admin endpoint")
        wait_until(lambda: proxy.admin_get("/readyz")[0] == 200, 15, what="/readyz 200")
        exclude = {session, direct.client_id[0]}
        before = own_reads(zk, exclude)
        threads = [threading.Thread(target=work), threading.Thread(target=poll_readyz)]
        for t in threads:
            t.start()
        results = {}

        def storm(path, name):
            results[name] = curl_parallel(proxy.admin_port, path, 100, str(tmp_path / name), timeout=60)
        t0 = time.monotonic()
        storms = [threading.Thread(target=storm, args=("/", "page")),
                  threading.Thread(target=storm, args=("/v1/locks", "locks"))]
        for t in storms:
            t.start()
        for t in storms:
            t.join(120)
        elapsed = time.monotonic() - t0
        ops_at_end = ops[0]
        wait_until(lambda: ops[0] > ops_at_end + 5 or errors, 15, what="the JobManager to go on")
        stop.set()
        for t in threads:
            t.join(30)
        after = own_reads(zk, exclude)
        walks = proxy.metric("zkwarden_lock_walks_total")
        print("200 lock reports in %.2f s: %d walks, JobManager ops %d, zkwarden's own reads %s -> %s"
              % (elapsed, walks, ops[0], before, after))
        assert errors == [] and states == [], (errors, states)
        assert results["page"] == [200] * 100 and results["locks"] == [200] * 100
        assert readyz and set(readyz) == {200}, readyz
        for i in range(1, 101):
            doc = json.loads((tmp_path / "locks" / ("r_%d.txt" % i)).read_text())
            mine = {e["path"]: e for e in doc["locks"] if e["path"] in held}
            assert len(mine) == 3 and all(e["identity"] == "jm-load" and e["incarnation"] == 1 and
                                          e["session"] == "0x%x" % session for e in mine.values()), doc
            assert "1 stale" not in (tmp_path / "page" / ("r_%d.txt" % i)).read_text()
        # Walks bounded: one at a time, a report answers 5 s of requests.
        assert 1 <= walks <= 2 + elapsed / 5, (walks, elapsed)
        reads = sum(after.values()) - sum(before.get(k, 0) for k in after)
        assert reads < 4 * 250, "zkwarden sent %d requests of its own for 200 reports" % reads
        # The JobManager's session and ephemerals are untouched; the registry
        # session never expired.
        assert jm.client_id[0] == session
        for p in held + [latch]:
            assert direct.exists(p).ephemeralOwner == session, p
        assert proxy.metric("zkwarden_registry_errors_total") == 0
        assert proxy.metric("zkwarden_identity_incarnation") == 1
        assert "expired" not in proxy.stderr().lower(), proxy.stderr()
        # Requests within 5 s of a walk reuse its report; a later one walks
        # again and sees the tree as it is now.
        direct.delete(held[1])  # the tree changes
        wait_until(lambda: proxy.admin_get("/v1/locks")[0] == 200 and
                   proxy.metric("zkwarden_lock_walks_total") == walks + 1, 15, interval=0.5,
                   what="a new walk after 5 s")
        doc = json.loads(proxy.admin_get("/v1/locks")[1])
        assert held[1] not in {e["path"] for e in doc["locks"]} and held[0] in {e["path"] for e in doc["locks"]}
    finally:
        zk.stop()
