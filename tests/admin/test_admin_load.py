"""The admin endpoint while the proxy carries load, and the process's
operational behaviour: many concurrent scrapes during a kazoo workload,
SIGTERM under load, the log file and SIGHUP."""

import json
import os
import signal
import threading
import time

import pytest

import promcheck
from adminclient import curl_parallel
from zkharness import wait_until

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
