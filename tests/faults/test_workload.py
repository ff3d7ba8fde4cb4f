"""The nothing-lost workload itself (tests/faults/workload.py), which every
fault test relies on: run direct to ZooKeeper and through zkwarden with no
fault it reports no problem, and check() does fail when something that was
acknowledged is lost or the server holds what the workload never sent (each
damage done directly on the server behind the workload's back). Without
these, a fault test that passes could be passing because its check is blind.
"""

import pytest

from workload import Workload

ST = 6.0


def run_workload(hostport, verify, root, acked=300):
    wl = Workload(root, verify, sessions=3, session_timeout=ST)
    wl.start(hostport)
    assert wl.wait_progress(acked, 60), wl.summary()
    return wl


@pytest.mark.parametrize("kind", ["direct", pytest.param("relay", marks=pytest.mark.zkwarden),
                                  pytest.param("sidecar", marks=pytest.mark.zkwarden)])
def test_no_fault_no_problem(kind, zk_server, request):
    root = "/faults-wl-clean-%s" % kind
    if kind == "direct":
        hostport = zk_server.hostport
    else:
        zkw = request.getfixturevalue("zkwarden_factory").start(
            zk_server, extra_env={"ZKWARDEN_MODE": kind})
        hostport = zkw.hostport
    sessions = 1 if kind == "sidecar" else 3  # a sidecar stands for one JM session
    wl = Workload(root, zk_server.hostport, sessions=sessions, session_timeout=ST)
    wl.start(hostport)
    try:
        assert wl.wait_progress(200, 60), wl.summary()
        assert wl.check() == []  # the live check
    finally:
        wl.stop()
    assert wl.check() == [], wl.summary()
    c = wl.snapshot()
    assert c["acked"] >= 200 and c["reads"] > 0
    assert c["indeterminate"] == 0 and c["expired"] == 0 and c["reconnects"] == 0, c
    assert all(st == ["CONNECTED"] for st in wl.states().values()), wl.states()


def test_check_reports_a_lost_create_and_counter(zk_server, kazoo_factory):
    wl = run_workload(zk_server.hostport, zk_server.hostport, "/faults-wl-lost")
    wl.stop()
    assert wl.check() == []
    s = wl.sessions[0]
    victim = sorted(s.acked.values())[len(s.acked) // 2]
    direct = kazoo_factory(zk_server.hostport)
    direct.delete(victim)
    direct.set(s.counter, b"-1")
    problems = wl.check()
    assert any(victim in p and "lost" in p for p in problems), problems
    assert any("counter holds" in p for p in problems), problems


def test_check_reports_a_duplicate_and_a_foreign_node(zk_server, kazoo_factory):
    wl = run_workload(zk_server.hostport, zk_server.hostport, "/faults-wl-dup")
    wl.stop()
    s = wl.sessions[1]
    tok = sorted(s.acked)[0]
    direct = kazoo_factory(zk_server.hostport)
    direct.create(s.seqdir + "/c-", tok, sequence=True)       # the same create applied twice
    direct.create(s.seqdir + "/c-", b"never-sent", sequence=True)
    problems = wl.check()
    assert any("applied 2 times" in p for p in problems), problems
    assert any("never sent" in p for p in problems), problems


def test_check_reports_a_missing_ephemeral(zk_server, kazoo_factory):
    wl = run_workload(zk_server.hostport, zk_server.hostport, "/faults-wl-eph", acked=50)
    try:
        assert wl.wait_connected(20)
        s = wl.sessions[2]
        direct = kazoo_factory(zk_server.hostport)
        direct.delete(s.eph)
        problems = wl.check_ephemerals()
        assert any("ephemeral" in p and "nobody" in p for p in problems), problems
    finally:
        wl.stop()
    # stop() checks the ephemerals too, and keeps what it found
    assert any("ephemeral" in p for p in wl.check())


def test_check_reports_reordered_replies(zk_server):
    """A reply handed to the wrong request: simulated by acking a setData
    with an older version than one already acked, as a reordering proxy
    would make the client see."""
    wl = run_workload(zk_server.hostport, zk_server.hostport, "/faults-wl-order", acked=50)
    wl.stop()
    s = wl.sessions[0]

    class Stat:
        version = 0
    s._acked("set", s.next_n, Stat())
    s._acked("get", s.next_n - 1, (b"%d" % (s.last_n - 5), Stat()))
    problems = wl.check()
    assert any("not above the last acked version" in p for p in problems), problems
    assert any("read of the counter returned" in p for p in problems), problems
