"""Fault 1 of issue 7: zkwarden killed with -9 under load and restarted on
the same port.

- Within the session timeout (relay mode, several sessions; and sidecar mode
  with one session, as a JobManager): every session re-attaches through the
  new process with the same session id, its ephemeral survives, nothing
  acknowledged is lost and no reply is reordered or duplicated (the
  workload's check, read from the server directly), and no stale state is
  left: zkwarden's /v1/sessions and metrics show exactly the live sessions,
  and the server tracks no session beyond the workload's (plus, in sidecar
  mode, the registry session of the live zkwarden). Quick: 10 cycles
  (sidecar 3); --long: 100 (sidecar 30).
- After the session timeout: the sessions expire cleanly. Their ephemerals
  are gone within the timeout plus one tick, the clients see SUSPENDED then
  LOST (expired) when they come back, get new sessions through the restarted
  zkwarden, and the workload goes on with nothing acknowledged lost.

The same workload with no fault (direct and through zkwarden) and the proof
that its check can fail are in test_workload.py.
"""

import time
import uuid

import pytest

from faultlib import hexes, metric, open_fds, proxy_sessions, server_sessions
from workload import Workload
from zkharness import FAST_START_JVM, ZkServer, wait_until

TICK_MS = 500
SESSION_TIMEOUT = 6.0
pytestmark = pytest.mark.zkwarden


@pytest.fixture(scope="module")
def zk4(tmp_path_factory):
    """A server of this module's own whose `dump` and `cons` can be read.
    The tests here leave no session behind (that is what they check), so
    they can share it; each has its own root."""
    srv = ZkServer(tmp_path_factory.mktemp("zk-crash"), tick_ms=TICK_MS, jvm_args=FAST_START_JVM,
                   four_letter_words="srvr,ruok,stat,cons,dump,mntr")
    try:
        srv.start()
        yield srv
    finally:
        srv.stop()


def crash_cycles(wl, proxy, n, downs):
    """kill -9 zkwarden, restart it after downs[i % len] seconds (all well
    inside the session timeout), and wait for every session to come back on
    its own session id with its ephemeral; n times."""
    sids = wl.session_ids()
    assert None not in sids.values(), sids
    for i in range(n):
        acked = wl.snapshot()["acked"]
        assert wl.wait_progress(20, 30), "no progress before cycle %d: %s" % (i, wl.summary())
        mark = wl.mark()
        proxy.kill()
        down = downs[i % len(downs)]
        if down:
            time.sleep(down)  # the fault: zkwarden stays down this long
        proxy.start()
        assert wl.wait_reconnected(mark, SESSION_TIMEOUT * 3), \
            "cycle %d: sessions did not re-attach: %s %s" % (i, wl.states(), wl.summary())
        assert wl.session_ids() == sids, "cycle %d: a session changed (expired?)" % i
        assert wl.wait_progress(10, 30), "no progress after cycle %d: %s" % (i, wl.summary())
        assert wl.snapshot()["acked"] > acked
        assert wl.check_ephemerals() == [], "cycle %d" % i
    return sids


def assert_no_stale_state(wl, proxy, server, extra_server_sessions=0, others=()):
    """zkwarden lists exactly the workload's sessions, all active; the
    server tracks the workload's sessions, the test's own direct sessions
    (`others`) and nothing else (but `extra_server_sessions` of zkwarden's
    own, in sidecar mode)."""
    sids = set(wl.session_ids().values())
    others = set(others)

    def listed():
        s = proxy_sessions(proxy)
        return set(s) == sids and all(e["phase"] == "active" for e in s.values())
    wait_until(listed, 10, what="/v1/sessions to list exactly %s (has %s)"
               % (hexes(sids), hexes(proxy_sessions(proxy))))
    assert metric(proxy, "zkwarden_sessions_active") == len(sids)
    assert metric(proxy, "zkwarden_connections_active") == len(sids)

    def server_clean():
        extra = server_sessions(server.port) - sids - others
        return len(extra) <= extra_server_sessions and sids <= server_sessions(server.port)
    # A session the killed process held on its own (sidecar mode: the
    # registry's) lingers until it expires, and no longer.
    wait_until(server_clean, SESSION_TIMEOUT * 4,
               what="the server to track only the workload's sessions %s (tracks %s)"
               % (hexes(sids), hexes(server_sessions(server.port))))


def test_kill9_restart_within_timeout_relay(zk4, zkwarden_factory, long):
    cycles = 100 if long else 10
    proxy = zkwarden_factory.start(zk4, extra_env={"ZKWARDEN_MODE": "relay"})
    wl = Workload("/faults-crash-relay-%s" % uuid.uuid4().hex[:8], zk4.hostport, sessions=4,
                  session_timeout=SESSION_TIMEOUT)
    wl.start(proxy.hostport)
    try:
        sids = crash_cycles(wl, proxy, cycles, downs=[0, 0.5, 0, 1.5, 0, 3.0])
        assert_no_stale_state(wl, proxy, zk4)
        fds = open_fds(proxy.proc.pid)
    finally:
        wl.stop()
    problems = wl.check()
    assert problems == [], "\n".join(problems[:50])
    c = wl.snapshot()
    assert c["expired"] == 0, c
    assert c["reconnects"] >= cycles * len(sids), c  # each session came back each time
    for idx, seq in wl.states().items():
        assert seq[0] == "CONNECTED" and "LOST" not in seq, (idx, seq)
    print("relay kill -9 x%d: %s; fds after: %d" % (cycles, wl.summary(), fds))


def test_kill9_restart_within_timeout_sidecar(zk4, zkwarden_factory, long):
    cycles = 30 if long else 3
    env = {"ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": "jm-crash-%s" % uuid.uuid4().hex[:6],
           "ZKWARDEN_SWEEP_INTERVAL_S": "0"}
    proxy = zkwarden_factory.start(zk4, extra_env=env)
    wl = Workload("/faults-crash-sidecar-%s" % uuid.uuid4().hex[:8], zk4.hostport, sessions=1,
                  session_timeout=SESSION_TIMEOUT)
    wl.start(proxy.hostport)
    try:
        crash_cycles(wl, proxy, cycles, downs=[0, 1.0, 2.0])
        # zkwarden's own registry session is the one extra on the server
        assert_no_stale_state(wl, proxy, zk4, extra_server_sessions=1)
        assert metric(proxy, "zkwarden_fences_total") == 0
        assert metric(proxy, "zkwarden_identity_conflicts_total") == 0
    finally:
        wl.stop()
    problems = wl.check()
    assert problems == [], "\n".join(problems[:50])
    assert wl.snapshot()["expired"] == 0, wl.summary()


@pytest.mark.parametrize("mode", ["relay", "sidecar"])
def test_kill9_restart_after_timeout_expires_cleanly(mode, zk4, zkwarden_factory, kazoo_factory):
    env = {"ZKWARDEN_MODE": mode}
    nsessions = 3
    if mode == "sidecar":
        env.update({"ZKWARDEN_IDENTITY": "jm-expire-%s" % uuid.uuid4().hex[:6],
                    "ZKWARDEN_SWEEP_INTERVAL_S": "0"})
        nsessions = 1
    proxy = zkwarden_factory.start(zk4, extra_env=env)
    wl = Workload("/faults-expire-%s-%s" % (mode, uuid.uuid4().hex[:8]), zk4.hostport,
                  sessions=nsessions, session_timeout=SESSION_TIMEOUT)
    wl.start(proxy.hostport)
    direct = kazoo_factory(zk4.hostport)
    try:
        assert wl.wait_progress(50, 30), wl.summary()
        old = wl.session_ids()
        ephs = {s.idx: s.eph for s in wl.sessions}
        for idx, path in ephs.items():
            assert direct.exists(path).ephemeralOwner == old[idx]

        proxy.kill()
        t0 = time.monotonic()

        def ephemerals_gone():
            for idx, path in ephs.items():
                st = direct.exists(path)
                if st is not None and st.ephemeralOwner == old[idx]:
                    return False
            return True
        wait_until(ephemerals_gone, SESSION_TIMEOUT * 3, interval=0.05,
                   what="the ephemerals of the expired sessions to go")
        gone_after = time.monotonic() - t0
        # The server expires a session between timeout and timeout + 1 tick
        # after its last contact; 1 s more for a loaded 2-core machine.
        assert gone_after <= SESSION_TIMEOUT + TICK_MS / 1000.0 + 1.0, gone_after
        assert not (set(old.values()) & server_sessions(zk4.port))

        proxy.start()
        assert wl.wait_connected(SESSION_TIMEOUT * 3), wl.summary()
        new = wl.session_ids()
        for idx in old:
            assert new[idx] != old[idx], (idx, old, new)
        assert wl.wait_progress(50, 30), wl.summary()   # new sessions work
        assert wl.check_ephemerals() == []
        assert_no_stale_state(wl, proxy, zk4, extra_server_sessions=1 if mode == "sidecar" else 0,
                              others=[direct.client_id[0]])
    finally:
        wl.stop()
    problems = wl.check()
    assert problems == [], "\n".join(problems[:50])
    c = wl.snapshot()
    assert c["expired"] == nsessions, c
    for idx, seq in wl.states().items():
        # connected, then the crash, then the expiry reported on reconnect,
        # then a new session
        assert seq == ["CONNECTED", "SUSPENDED", "LOST", "CONNECTED"], (idx, seq)
    print("%s expiry: ephemerals gone %.2f s after the kill; %s" % (mode, gone_after, wl.summary()))
