"""zkwarden's own restart is no event for its clients (issue 37): the
sessions a worker served are taken over by the next one from the journal
(zkw_journal.h, zkw_recover.h) with the client's connection kept open.

Clients: the fault tests' nothing-lost workload (tests/faults/workload.py:
kazoo sessions pipelining writes, sequential creates and reads, every reply
checked as it arrives, and everything acknowledged read back from the server
directly at the end) and a JobManager acting as one through the sidecar.
Each test first shows the same kill or restart without a keeper, where
every client connection drops, then with it, where none may.
"""

import os
import random
import signal
import sys
import time

import pytest

from zkharness import wait_until

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "faults")))
from workload import Workload  # noqa: E402

KILLS = int(os.environ.get("ZKW_TAKEOVER_KILLS", "100"))
SESSIONS = 3
JM_ENV = {"ZKWARDEN_MODE": "sidecar", "ZKWARDEN_SWEEP_INTERVAL_S": "0"}


def drops(wl):
    """Connection losses the workload's sessions saw (each leaves CONNECTED)."""
    return sum(sum(1 for s in states if s != "CONNECTED") for states in wl.states().values())


def start_workload(zk, sc, name, timeout=10.0):
    wl = Workload("/takeover-%s-%d" % (name, os.getpid()), zk.hostport, sessions=SESSIONS,
                  session_timeout=timeout)
    wl.start(sc.hostport)
    assert wl.wait_connected(30), "the workload did not connect"
    assert wl.wait_progress(50, 30), "the workload makes no progress"
    return wl


def finish(wl):
    wl.stop()
    problems = wl.check()
    assert problems == [], problems


def test_without_a_keeper_every_kill_drops_the_clients(zk_server, sidecars):
    """The baseline: a zkwarden serving alone, killed with -9 and started
    again at once: every session's connection drops (kazoo goes SUSPENDED and
    reconnects), though nothing is lost."""
    sc = sidecars(zk_server.hostport, extra_env=JM_ENV, name="alone")
    z = sc.worker()
    sc.serves()
    wl = start_workload(zk_server, sc, "alone")
    for i in range(2):
        before = drops(wl)
        z.kill()
        z.stopped_by_test = True
        z = sc.worker(name="zkwarden-%d" % i)
        sc.serves()
        wait_until(lambda: drops(wl) >= before + SESSIONS, 30, what="every session to see the drop")
        assert wl.wait_progress(20, 30), "no progress after the restart"
    finish(wl)


def test_random_kills_of_the_worker_keep_every_connection(zk_server, sidecars):
    """KILLS kill -9 of the relaying process at random moments under a
    pipelining workload, each worker a second or more old: the keeper starts the next worker, which takes every
    session over. Over all kills, at most one in a hundred may cost a client
    its connection (the windows zkw_journal.h names); no reply is wrong
    (the workload's checks), nothing acknowledged is lost, every session
    keeps its id."""
    rng = random.Random(int(os.environ.get("ZKW_TAKEOVER_SEED", "37")))
    sc = sidecars(zk_server.hostport, extra_env=JM_ENV, name="kept")
    k = sc.keeper()
    sc.serves()
    wl = start_workload(zk_server, sc, "kept")
    ids = wl.session_ids()
    worker = sc.worker_pid(k)
    costly = 0
    t0 = time.monotonic()
    for i in range(KILLS):
        # A worker that dies within 1 s of its start is restarted after a
        # pause (a crash loop): each one here lives past that, and is killed
        # at a moment of the load's own.
        born = time.monotonic()
        while time.monotonic() - born < 1.0:
            assert wl.wait_progress(rng.randint(1, 40), 30), "no progress"
        time.sleep(rng.uniform(0, 0.05))
        before = drops(wl)
        os.kill(worker, signal.SIGKILL)
        worker = sc.worker_pid(k, not_in=(worker,))
        assert wl.wait_progress(5, 30), "no progress after kill %d" % i
        if drops(wl) > before:
            costly += 1
    elapsed = time.monotonic() - t0
    taken = len([ln for ln in sc.text().splitlines() if "taken over from the previous zkwarden" in ln])
    print("%d kills in %.0f s: %d cost a client its connection; %d session take-overs; %s"
          % (KILLS, elapsed, costly, taken, wl.counters))
    assert costly * 100 <= KILLS, "%d of %d kills dropped a client" % (costly, KILLS)
    assert taken >= KILLS * SESSIONS * 99 // 100
    assert wl.session_ids() == ids  # the same sessions throughout (a dropped connection reconnects to its own)
    finish(wl)


@pytest.mark.parametrize("how", ["sigusr2", "upgrade", "takeover"])
def test_planned_handover_answers_what_is_in_flight(how, zk_server, sidecars):
    """A planned restart (SIGUSR2 to the keeper, `zkwarden upgrade`, or
    `zkwarden --takeover` of a zkwarden serving alone), three times under
    load with a JobManager on the sidecar: no client connection drops, the
    requests in flight are answered before the hand-over (none gets
    CONNECTIONLOSS), and the JobManager stays the same incarnation of the
    same session (no new incarnation, the identity's registry session
    re-attached)."""
    sc = sidecars(zk_server.hostport, extra_env=JM_ENV, name=how)
    if how == "takeover":
        current = sc.worker()
        sc.serves()
    else:
        k = sc.keeper()
        sc.serves()
    from kazoo.client import KazooClient
    jm = KazooClient(hosts=sc.hostport, timeout=10)
    jm_states = []
    jm.add_listener(jm_states.append)
    jm.start(30)
    latch = jm.create("/flink/takeover/leader/latch/_c_%s-latch-" % os.urandom(8).hex(), b"", ephemeral=True,
                      sequence=True, makepath=True)
    wl = start_workload(zk_server, sc, how)
    lost0 = wl.counters["indeterminate"]
    for i in range(3):
        if how == "sigusr2":
            old = sc.worker_pid(k)
            k.signal(signal.SIGUSR2)
            sc.worker_pid(k, not_in=(old,))
        elif how == "upgrade":
            old = sc.worker_pid(k)
            status, out, err = sc.command("upgrade")
            assert status == 0, (out, err)
            sc.worker_pid(k, not_in=(old,))
        else:
            nxt = sc.worker("--takeover", name="zkwarden-%d" % i)
            wait_until(lambda: not current.alive(), 30, what="the old zkwarden to exit")
            assert current.popen.returncode == 0
            current.stopped_by_test = True
            current = nxt
        assert wl.wait_progress(30, 30), "no progress after hand-over %d" % i
        assert jm.exists(latch) is not None  # the JobManager's session and latch live on, through the new process
    assert drops(wl) == 0, wl.states()
    assert [st for st in jm_states if st != "CONNECTED"] == [], jm_states
    assert wl.counters["indeterminate"] == lost0, wl.counters
    text = sc.text()
    assert text.count("taken over from the previous zkwarden") >= 3 * (SESSIONS + 1)
    assert "re-attaching registry session" in text
    assert text.count("a new incarnation") == 1, "a new incarnation began"
    jm.stop()
    finish(wl)
