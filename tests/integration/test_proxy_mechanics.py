"""The relay's own mechanics, against a real ZooKeeper: upstream failover,
backpressure against a client that does not read, no allocation per frame,
shutdown with live sessions."""

import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

import rawzk
from zkharness import REPO, free_port, wait_until

pytestmark = pytest.mark.zkwarden


def rss_kib(pid):
    for line in Path("/proc/%d/status" % pid).read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS for %d" % pid)


def test_failover_skips_a_dead_upstream(zk_server, zkwarden_factory, kazoo_factory):
    dead = "127.0.0.1:%d" % free_port()  # nothing listens there
    proxy = zkwarden_factory.start(dead, zk_server)
    # Round robin: of several connections, some start at the dead server and
    # must go on to the live one; all of them get a session.
    clients = [kazoo_factory(proxy.hostport) for _ in range(3)]
    for i, c in enumerate(clients):
        c.ensure_path("/failover")
        c.create("/failover/n%d" % i, b"x", ephemeral=True)
    assert sorted(clients[0].get_children("/failover")) == ["n0", "n1", "n2"]
    log = proxy.stderr()
    assert "upstream %s: connect failed" % dead in log
    assert "session established via %s" % zk_server.hostport in log


def test_all_upstreams_down_closes_only_that_client(zkwarden_factory):
    proxy = zkwarden_factory.start("127.0.0.1:%d" % free_port())
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
        sock.sendall(rawzk.connect_request())
        assert sock.recv(100) == b""  # closed, no reply
    wait_until(lambda: "no upstream server reachable (tried 1)" in proxy.stderr(), 5,
               what="the log line")
    assert proxy.alive()


def test_client_that_never_reads_is_bounded(zk_server, zkwarden_factory, kazoo_factory):
    """Pipelines 200 getData of a 512 KiB node (100 MiB of replies) and reads
    nothing: zkwarden stops reading the server instead of buffering it all,
    and once the client reads, every reply arrives, in order."""
    setup = kazoo_factory(zk_server.hostport)
    setup.ensure_path("/bp")
    setup.create("/bp/big", b"b" * (512 * 1024))
    proxy = zkwarden_factory.start(zk_server)
    base = rss_kib(proxy.proc.pid)
    s = rawzk.RawSession(proxy.port, timeout_ms=30000)
    n = 200
    s.send(b"".join(rawzk.get_data(i + 1, "/bp/big") for i in range(n)))
    # Wait until zkwarden has taken all it will take: its RSS stops moving.
    samples = []

    def settled():
        samples.append(rss_kib(proxy.proc.pid))
        return len(samples) > 10 and max(samples[-10:]) - min(samples[-10:]) < 256
    wait_until(settled, 20, interval=0.1, what="zkwarden RSS to settle")
    grown_mib = (max(samples) - base) / 1024
    # 100 MiB were requested; the high-water mark is 1 MiB plus a frame or two
    # in each direction (the sanitizer build adds its own overhead).
    assert grown_mib < 24, "zkwarden grew %.1f MiB for a client that does not read" % grown_mib
    for i in range(n):
        xid, _, err, body = s.read_reply()
        assert (xid, err) == (i + 1, 0)
        assert len(body) == 4 + 512 * 1024 + 68
    s.close()


def _valgrind_allocs(binary, upstream, requests, tmp_path):
    port = free_port()
    log = tmp_path / ("valgrind-%d.log" % requests)
    env = dict(os.environ, ZKWARDEN_UPSTREAM=upstream, ZKWARDEN_LISTEN="127.0.0.1:%d" % port,
               ZKWARDEN_ADMIN_LISTEN="127.0.0.1:%d" % free_port(), ZKWARDEN_LOG_LEVEL="warn")
    p = subprocess.Popen(["valgrind", "--log-file=%s" % log, binary], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0, 60,
                   interval=0.1, what="zkwarden under valgrind")
        s = rawzk.RawSession(port)
        batch = 100
        for start in range(0, requests, batch):
            s.send(b"".join(rawzk.exists(start + i + 1, "/") for i in range(batch)))
            for i in range(batch):
                assert s.read_reply()[0] == start + i + 1
        s.close()
    finally:
        p.terminate()
        p.wait(60)
    text = log.read_text()
    m = re.search(r"total heap usage: ([\d,]+) allocs", text)
    assert m, text
    return int(m.group(1).replace(",", ""))


def test_no_allocation_per_frame(zk_server, tmp_path):
    """valgrind counts zkwarden's heap allocations for a session of 100
    requests and one of 20,100: the difference must not grow with the frames."""
    # valgrind cannot run the ASan build: use the release build.
    binary = os.environ.get("ZKW_RELEASE_BIN") or str(REPO / "build" / "zkwarden")
    if not os.access(binary, os.X_OK):
        pytest.skip("release build %s not built" % binary)
    small = _valgrind_allocs(binary, zk_server.hostport, 100, tmp_path)
    large = _valgrind_allocs(binary, zk_server.hostport, 20100, tmp_path)
    print("allocations: %d for 100 requests, %d for 20,100" % (small, large))
    # One allocation per frame would add 40,000 (requests and replies). What
    # may grow is time-based: the registry session's pings and the readiness
    # probe, during the longer run (valgrind is slow).
    assert large - small < 1000, "allocations: %d for 100 requests, %d for 20,100" % (small, large)


def test_sigterm_with_live_sessions_exits_cleanly(zk_server, zkwarden_factory, kazoo_factory):
    proxy = zkwarden_factory.start(zk_server)
    clients = [kazoo_factory(proxy.hostport) for _ in range(20)]
    for c in clients:
        c.exists("/")
    t0 = time.monotonic()
    problems = proxy.stop()
    assert problems == []
    assert time.monotonic() - t0 < 5
    assert "closing 20 connection(s)" in proxy.stderr()
    proxy.proc = None  # stopped and checked here; nothing left for the fixture
