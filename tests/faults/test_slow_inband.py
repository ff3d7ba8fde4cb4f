"""A reclaim whose steps the server answers slowly never costs the
JobManager its connection (issue 19, item 6).

A reclaim is a chain of in-band steps on the JobManager's own connection
(list the locks, read each, delete the stale ones, replay the request), each
bounded by a third of the session timeout, while the JobManager's request
waits behind it. Its client reads nothing else meanwhile unless its pings
go on: Curator's ZooKeeper client drops a connection that has heard nothing
for two thirds of the session timeout, goes SUSPENDED, and Flink revokes
leadership. Here a slow server (a relay in front of a real ZooKeeper that
holds each reply to a zkwarden in-band request, xid >= 0x7fff0000, for 0.3
of the session timeout, and everything behind it, as a busy server would)
answers the three steps of a reclaim at delete: 0.9 of the session timeout
in all. The Curator JobManager (tests/integration/java/StateSequence.java)
must stay CONNECTED throughout, with the same session, still leading, and
its delete must succeed once the stale lock is gone.
"""

import socket
import struct
import subprocess
import threading
import time
import uuid

import pytest
from kazoo.client import KazooClient

from test_partitions import JM
from zkharness import HOST, wait_until
from checkpoints import forged_tag

pytestmark = pytest.mark.zkwarden

SESSION_MS = 6000
DELAY_S = 0.3 * SESSION_MS / 1000.0
INBAND_XID_BASE = 0x7FFF0000




def _shut(*socks):
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def frames(sock):
    """The whole frames (length prefix included) read from sock, until it
    closes."""
    buf = b""
    while True:
        d = sock.recv(65536)
        if not d:
            return
        buf += d
        while len(buf) >= 4:
            (n,) = struct.unpack(">i", buf[:4])
            if len(buf) < 4 + n:
                break
            frame, buf = buf[:4 + n], buf[4 + n:]
            yield frame


class SlowInbandServer:
    """127.0.0.1:port in front of a ZooKeeper server: bytes pass both ways,
    but a reply to an in-band request (and what follows it) waits delay_s."""

    def __init__(self, target_port, delay_s):
        self.target = (HOST, target_port)
        self.delay_s = delay_s
        self.delayed = 0
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind((HOST, 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.socks = []
        self.stopping = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopping:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            u = socket.create_connection(self.target)
            for s in (c, u):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.socks += [c, u]
            threading.Thread(target=self._pipe, args=(c, u), daemon=True).start()
            threading.Thread(target=self._replies, args=(u, c), daemon=True).start()

    @staticmethod
    def _pipe(a, b):
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        _shut(a, b)

    def _replies(self, u, c):
        try:
            for frame in frames(u):
                (xid,) = struct.unpack(">i", frame[4:8]) if len(frame) >= 8 else (0,)
                if xid >= INBAND_XID_BASE:
                    self.delayed += 1
                    time.sleep(self.delay_s)
                c.sendall(frame)
        except OSError:
            pass
        _shut(u, c)

    def stop(self):
        self.stopping = True
        self.lsock.close()
        for s in self.socks:
            try:
                s.close()
            except OSError:
                pass


def test_slow_reclaim_steps_keep_the_jobmanager_connected(private_zk, zkwarden_factory, java_classes, tmp_path):
    # A server of its own: the incarnation's sweep walks every node under
    # /flink, each read slow too.
    zk_server = private_zk
    slow = SlowInbandServer(zk_server.port, DELAY_S)
    identity = "slow-inband-%s" % uuid.uuid4().hex[:6]
    proxy = zkwarden_factory.start(f"{HOST}:{slow.port}", extra_env={
        "ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": identity, "ZKWARDEN_SWEEP_INTERVAL_S": "0"})
    base = "/flink/%s" % uuid.uuid4().hex[:8]
    locks = "%s/checkpoints/%019d/locks" % (base, 7)
    ghost = KazooClient(hosts=zk_server.hostport, timeout=10)
    ghost.start(timeout=10)
    jm = JM(java_classes, proxy.hostport, SESSION_MS, base + "/leader/latch", tmp_path, "jm")
    try:
        _, ready = jm.wait_line(lambda l: l.startswith("READY"), 60, what="READY")
        sid = ready.split()[1]
        # The sweep a new incarnation starts (its reads are slow too) ends first.
        wait_until(lambda: "sweep done" in proxy.stderr(), 30, what="the incarnation's sweep")
        # A stale lock of an earlier incarnation of this identity (the
        # ensemble kept it), beside the JobManager's own.
        ghost.create("%s/%s" % (locks, uuid.uuid4()), forged_tag(identity, 0), ephemeral=True, makepath=True)
        mine = "%s/%s" % (locks, uuid.uuid4())
        for cmd in ("LOCK " + mine, "DELETE " + mine):
            since = jm.mark()
            jm.proc.stdin.write(cmd + "\n")
            jm.proc.stdin.flush()
            _, done = jm.wait_line(lambda l: l.startswith("DONE "), 30, since=since, what=cmd)
            assert done.endswith(" ok"), done
        since = jm.mark()
        t0 = time.monotonic()
        jm.proc.stdin.write("DELETE %s\n" % locks)
        jm.proc.stdin.flush()
        _, done = jm.wait_line(lambda l: l.startswith("DONE DELETE"), 60, since=since, what="the delete")
        took = time.monotonic() - t0
        print("reclaim at delete with each in-band reply %.1f s late: %.2f s, %d replies delayed; %s"
              % (DELAY_S, took, slow.delayed, done))
        assert slow.delayed >= 3, "the reclaim's steps did not go through the slow server"
        assert took > 2 * DELAY_S
        # Its pings were answered meanwhile: never SUSPENDED, same session, leading.
        assert jm.states(since) == [], jm.output()
        since = jm.mark()
        jm.proc.stdin.write("SID\n")
        jm.proc.stdin.flush()
        _, line = jm.wait_line(lambda l: l.startswith("SID "), 10, since=since, what="SID")
        assert line == "SID %s leader=true" % sid, line
        if "no reply within" not in proxy.stderr():  # a step past its bound on a loaded machine fails as NOTEMPTY
            assert done.endswith(" ok"), done
            wait_until(lambda: ghost.exists(locks) is None, 5, what="the locks node to be gone")
    finally:
        try:
            jm.proc.stdin.write("QUIT\n")
            jm.proc.stdin.flush()
            jm.proc.wait(20)
        except (OSError, subprocess.TimeoutExpired):
            jm.proc.kill()
        ghost.stop()
        ghost.close()
        slow.stop()
