"""Only what the server speaks (issue 35, item 5): the sweep's persistent
recursive watch (addWatch, opcode 106, ZooKeeper 3.6+) goes on the
JobManager's own connection only where the server that connection is on said
it is 3.6 or newer, and never in observe mode.

- Observe mode sets no watch: the server's own list of watches (`wchp`, the
  four-letter word) never shows one on the JobManager's session, while in
  sidecar mode it does (so the probe can see it). Before, observe mode set it.
- A ZooKeeper 3.5 server (3.5.10 from Maven Central, tests/flink/maven)
  closes a connection that sends addWatch (its UnimplementedRequestProcessor).
  It is the second of ZKWARDEN_UPSTREAM, after a 3.8 server that answers the
  readiness probe; the JobManager's connection is on it. It never gets
  addWatch (its log has no request of unknown type), the JobManager's
  connection is never closed, and the sweep walks. Before, the 3.8 server's
  version stood for the unknown one: addWatch went to the 3.5 server, which
  closed the JobManager's connection."""

import json
import os
import sys
import time
import uuid

import pytest

from checkpoints import forged_tag
from zkharness import REPO, ZkServer, four_letter, tail, wait_until

pytestmark = pytest.mark.zkwarden


def sweeps(proxy, since=0):
    return proxy.stderr()[since:].count("sweep done")


def sidecar(factory, servers, identity, **env):
    full = {"ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": identity, "ZKWARDEN_SWEEP_INTERVAL_S": "1"}
    full.update({k: str(v) for k, v in env.items()})
    return factory.start(*servers, extra_env=full)


def jobmanager(kazoo_factory, proxy, cluster):
    """A JobManager: its latch and a lock make the cluster its own tree."""
    jm = kazoo_factory(proxy.hostport)
    jm.create(cluster + "/leader/latch/_c_%s-latch-" % uuid.uuid4(), b"", ephemeral=True, sequence=True,
              makepath=True)
    jm.create("%s/jobs/j/checkpoints/1/locks/%s" % (cluster, uuid.uuid4()), b"127.0.0.1", ephemeral=True,
              makepath=True)
    return jm


def watched(zk, cluster, session):
    """The server's list of watches (wchp) names one on cluster for session."""
    return ("%s\n\t0x%x" % (cluster, session)) in four_letter(zk.port, "wchp").decode()


@pytest.mark.parametrize("mode", ["sidecar", "observe"])
def test_observe_mode_sets_no_watch(mode, tmp_path, zkwarden_factory, kazoo_factory):
    zk = ZkServer(tmp_path / "zk", four_letter_words="srvr,ruok,stat,wchp")
    zk.start()
    try:
        me = "watch-%s-%d-%s" % (mode, os.getpid(), uuid.uuid4().hex[:6])
        cluster = "/flink/w-%s" % uuid.uuid4().hex[:8]
        proxy = sidecar(zkwarden_factory, [zk], me, ZKWARDEN_MODE=mode)
        jm = jobmanager(kazoo_factory, proxy, cluster)
        session = jm.client_id[0]
        if mode == "sidecar":
            wait_until(lambda: watched(zk, cluster, session), 30, what="the sweep's watch on the server")
            return
        # Passes walk (observe mode reads, as ever), and at no moment of them
        # is a watch of the JobManager's session on the server.
        deadline = time.monotonic() + 60
        while sweeps(proxy) < 4 and time.monotonic() < deadline:
            assert not watched(zk, cluster, session), "observe mode set the sweep's watch"
            time.sleep(0.05)
        assert sweeps(proxy) >= 4, proxy.stderr()[-3000:]
        assert not watched(zk, cluster, session), "observe mode set the sweep's watch"
        assert proxy.metric("zkwarden_sweep_change_passes_total") == 0
        assert jm.connected
    finally:
        zk.stop()


@pytest.fixture(scope="module")
def zookeeper_35_classpath():
    """ZooKeeper 3.5.10's server classpath from Maven Central (tests/flink's
    pom, profile zk-3.5), cached in build/flink as tests/flink caches its own."""
    sys.path.insert(0, str(REPO / "tests" / "flink"))
    import flinkcluster
    return flinkcluster.zookeeper_classpath("3.5", "3.5.10")[0]


def test_a_server_older_than_3_6_never_gets_addwatch(tmp_path, zkwarden_factory, kazoo_factory,
                                                     zookeeper_35_classpath):
    new = ZkServer(tmp_path / "zk38", four_letter_words="srvr,ruok,stat")
    old = ZkServer(tmp_path / "zk35", four_letter_words="srvr,ruok,stat,wchp",
                   classpath=zookeeper_35_classpath)
    new.start()
    old.start()
    try:
        assert b"Zookeeper version: 3.5.10" in four_letter(old.port, "srvr")
        me = "old-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
        cluster = "/flink/o-%s" % uuid.uuid4().hex[:8]
        # The 3.8 server is first: the readiness probe's srvr goes to it.
        proxy = sidecar(zkwarden_factory, [new, old], me)
        wait_until(lambda: proxy.admin_get("/readyz")[0] == 200, 20, what="ready")
        # The JobManager's connection lands on the 3.5 server (zkwarden
        # tries the servers in turn from a rotating start).
        for _ in range(8):
            jm = kazoo_factory(proxy.hostport)
            ups = [s["upstream"] for s in json.loads(proxy.admin_get("/v1/sessions")[1])["sessions"]
                   if int(s["session"], 16) == jm.client_id[0]]
            if ups == [old.hostport]:
                break
            jm.stop()
            jm.close()
        else:
            pytest.fail("no connection through zkwarden landed on the 3.5 server")
        states = []
        jm.add_listener(states.append)
        jm.create(cluster + "/leader/latch/_c_%s-latch-" % uuid.uuid4(), b"", ephemeral=True, sequence=True,
                  makepath=True)
        jm.create("%s/jobs/j/checkpoints/1/locks/%s" % (cluster, uuid.uuid4()), b"127.0.0.1", ephemeral=True,
                  makepath=True)
        # A stale lock the passes find: they read on the 3.5 server.
        ghost = kazoo_factory(old.hostport)
        stale = "%s/jobs/j/checkpoints/2/locks/%s" % (cluster, uuid.uuid4())
        ghost.create(stale, forged_tag(me, 0, session=ghost.client_id[0]), ephemeral=True, makepath=True)
        wait_until(lambda: sweeps(proxy) >= 4, 60, what="four sweep passes")
        assert ghost.exists(stale) is None
        log = tail(old.log, 400000)
        assert "unknown type 106" not in log and "type 106" not in log, "the 3.5 server got addWatch"
        assert states == [] and jm.connected, states
        assert "moving the session" not in proxy.stderr()
        assert "upstream server #2 is older than ZooKeeper 3.6" in proxy.stderr()
        assert proxy.metric("zkwarden_sweep_change_passes_total") == 0  # every pass walks there
        assert proxy.metric("zkwarden_sweep_full_passes_total") >= 4
    finally:
        old.stop()
        new.stop()
