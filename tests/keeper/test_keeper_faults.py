"""Every failure point of the keeper and of the hand-over (issue 37), made to
fail under the ASan+UBSan build, as tests/faults does for zkwarden's own
points (proxy/base/zkw_fault.h; ZKW_TEST_FAULT=kind:N fails the Nth call
of that kind, kind:N@point the Nth at that point).

Three lives, each run again and again with one process's calls failing:

- the keeper's (`keeper_life`, the keeper's faults): zkwarden-keeper
  --spawn, a worker serving a session and an idle connection (ADOPT), the
  worker killed -9 (its successor gets STATE and a CLIENT per connection,
  and FORGETs what it does not recover), a planned restart by SIGUSR2
  (QUIESCE, DONE), one by `zkwarden upgrade` (RESULT), the clients closing
  (FORGET, POLLRDHUP), SIGTERM (STOP);
- a worker's (`worker_life`, the faults of one worker of a keeper without
  --spawn): it inherits two connections after a kill -9 of the one before,
  closes them (FORGET), serves a session (ADOPT), and hands over to a
  `--takeover` (QUIESCE, DONE);
- a standalone zkwarden's (`standalone_life`, its faults): a session and an
  idle connection, then `zkwarden upgrade`: it starts its binary with
  --takeover and hands it STATE, a CLIENT per connection and READY.

A clean run of each reports the points each process reached and its calls
of the kind; then every call is failed in turn (the keeper's; a worker's
and a standalone's, whose allocations are failed at the hand-over's own
points only, the rest being tests/faults'), and every point the clean run
reached must have failed once. After every run: no sanitizer report and
no leak in any process's log (LeakSanitizer is on), no process died of a
signal the test did not send, the keeper (unless its start failed, which it
says) or the last zkwarden still serves a new session, the keeper holds no
connection its client closed, and every process exits 0 on SIGTERM.
"""

import os
import re
import signal
import socket

import pytest

import rawzk
from keeperlib import children, fault_build, held, pid_gone, stop_pid
from zkharness import HOST, wait_until

KEEPER_ON = {"ZKWARDEN_KEEPER": "on"}
KEEPER_KINDS = ["socket", "bind", "accept", "sendmsg", "recvmsg", "memfd", "fork", "exec", "alloc"]
WORKER_KINDS = ["socket", "bind", "accept", "sendmsg", "recvmsg", "memfd", "fork", "dup", "alloc"]
# The worker's own points of the hand-over (its other allocations are tests/faults').
WORKER_FILES = ("zkw_handover.c", "zkw_keeperlink.c", "zkw_takeover.c")


@pytest.fixture(scope="module", autouse=True)
def _needs_the_seam():
    assert fault_build(), ("the keeper was built without -DZKW_FAULT_INJECTION=ON: run with "
                           "ZKW_BIN=build-asan/zkwarden (tests/run.sh does)")


def try_step(fn, *a, **kw):
    """A step of a life: a failure point may make it fail; what follows
    and the checks at the end decide."""
    try:
        return fn(*a, **kw)
    except (OSError, ConnectionError, RuntimeError, TimeoutError):
        return None


def serves_count(k):
    return len(re.findall(r"keeper: worker pid \d+ serves", k.text()))


def faulty(fault):
    """The environment of the process whose calls fail (and that reports
    its points as "fault injection (faulty)")."""
    env = {"ZKW_TEST_FAULT_PROCESS": "faulty"}
    if fault:
        env["ZKW_TEST_FAULT"] = fault
    return env


def keeper_life(sc, fault=None):
    k = sc.keeper(env=faulty(fault))
    if try_step(sc.serves, 30, process=k) is None and not k.alive():
        return k
    s = try_step(rawzk.RawSession, sc.port, timeout_ms=10000)
    idle = try_step(socket.create_connection, (HOST, sc.port), timeout=5)
    try_step(wait_until, lambda: held(sc, k.pid) >= 2, 10, what="two connections held")
    # A crash: the successor inherits them.
    for pid in children(k.pid):
        os.kill(pid, signal.SIGKILL)
    try_step(sc.serves, 30, process=k)
    # A planned restart by signal, then by command.
    n = serves_count(k)
    k.signal(signal.SIGUSR2)
    try_step(wait_until, lambda: serves_count(k) > n or "keeps serving" in k.text() or not k.alive(), 40,
             what="the planned restart's outcome")
    try_step(sc.command, "upgrade", timeout=90)
    for c in (s, idle):
        if c is not None:
            c.close()
    return k


def worker_life(sc, fault=None):
    """Returns the keeper (no --spawn): the workers are the test's."""
    k = sc.keeper(spawn=False)
    w1 = sc.worker(env=KEEPER_ON)
    try_step(sc.serves, 30, process=w1)
    s = try_step(rawzk.RawSession, sc.port, timeout_ms=10000)
    idle = try_step(socket.create_connection, (HOST, sc.port), timeout=5)
    try_step(wait_until, lambda: held(sc, k.pid) >= 2, 10, what="two connections held")
    w1.kill()
    w1.stopped_by_test = True
    w2 = sc.worker(env=dict(KEEPER_ON, **faulty(fault)), name="faulty")
    try_step(sc.serves, 30, process=w2)
    s2 = try_step(rawzk.RawSession, sc.port, timeout_ms=10000)
    try_step(wait_until, lambda: held(sc, k.pid) >= 1 or not w2.alive(), 10, what="the new session held")
    w3 = sc.worker("--takeover", env=KEEPER_ON, name="successor")
    if w2.wait(60) is not None and w2.popen.returncode in (0, 1):
        w2.stopped_by_test = True  # handed over, or its start failed (it says so)
    try_step(sc.serves, 30, process=w3)
    for c in (s, idle, s2):
        if c is not None:
            c.close()
    return k


def standalone_life(sc, fault=None):
    """Returns (the pids of the processes an upgrade started: not the test's
    children, stopped by pid; problems; whether its start failed)."""
    old = sc.worker(env=faulty(fault))
    if try_step(sc.serves, 30, process=old) is None and not old.alive():
        if old.popen.returncode == 1 and "cannot" in old.text():
            old.stopped_by_test = True  # its start failed, and it says so: nothing to serve
            return [], [], True
        return [], ["the standalone zkwarden exited with %s at its start" % old.popen.returncode], True
    s = try_step(rawzk.RawSession, sc.port, timeout_ms=10000)
    idle = try_step(socket.create_connection, (HOST, sc.port), timeout=5)
    r = try_step(sc.command, "upgrade", timeout=90)
    problems = []
    ok = r is not None and r[0] == 0
    # Said ok: the new one serves and the old one has exited. Not ok: the
    # old one serves on, unless only the answer to the command was lost
    # (the check that someone serves decides).
    if not ok:  # it says it serves on, or it exits (it handed over but the answer was lost)
        try_step(wait_until, lambda: not old.alive() or re.search(r"serving on|keeps serving", old.text()), 5,
                 what="the old zkwarden's outcome")
    rc = old.wait(60 if ok else 0)
    if rc == 0:
        old.stopped_by_test = True
    elif ok:
        problems.append("`zkwarden upgrade` succeeded but the old zkwarden did not exit 0 (%s)" % rc)
    for c in (s, idle):
        if c is not None:
            c.close()
    return [int(p) for p in re.findall(r"upgrade: started pid (\d+)", old.text())], problems, False


def outcome(sc, k, serving=True):
    """The checks after a life; returns a list of problems."""
    problems = []
    if k is None and serving and try_step(sc.serves, 30) is None:
        problems.append("no zkwarden serves a new session")
    if k is not None:
        if k.alive():
            if try_step(sc.serves, 30, process=k) is None:
                problems.append("the keeper serves no new session")
            try_step(wait_until, lambda: held(sc, k.pid) == 0, 15, what="no connection held")
            if held(sc, k.pid):
                problems.append("the keeper still holds %d closed connection(s)" % held(sc, k.pid))
        elif k.popen.returncode in (1, 2) and re.search(r"keeper: cannot|could not start", k.text()):
            k.stopped_by_test = True  # its start failed, and it says so
        else:
            problems.append("the keeper exited with %s without saying why" % k.popen.returncode)
    for p in sc.procs:
        rc = p.popen.poll()
        if rc is not None and rc < 0 and rc != -signal.SIGKILL:
            problems.append("%s died of signal %d" % (p.name, -rc))
    return problems


TAG = r" \(faulty\)"


def points_of(text, kind, own_only):
    """{point: first call} of kind in the faulty process's report; with
    own_only, the hand-over's files only."""
    out = {}
    for point, first in re.findall(r"fault injection%s: point (\S+) first at %s #(\d+)" % (TAG, kind), text):
        if own_only and not split_point(point)[0].rsplit(":", 1)[0].endswith(WORKER_FILES):
            continue
        out.setdefault(point, int(first))
    return out


def split_point(point):
    """(file:line, detail or None) of a reported point."""
    m = re.match(r"^(.*?\.c(?::\d+)?)(?:/(.*))?$", point)
    return m.group(1), m.group(2)


def spec_of(kind, point):
    """kind:1@name: the first call at that point (its detail, else its file:line)."""
    where, detail = split_point(point)
    return "%s:1@%s" % (kind, detail or os.path.basename(where))


def run_life(sidecars, zk, life, kind, spec):
    """One life with spec failing in its faulty process. Returns (problems,
    the text of every log)."""
    sc = sidecars(zk.hostport, name="%s-%s-%d" % (life, kind, len(sidecars.all)))
    upgraded, problems, start_failed = [], [], False
    if life == "keeper":
        k = keeper_life(sc, spec)
    elif life == "worker":
        k = worker_life(sc, spec)
    else:
        k = None
        upgraded, problems, start_failed = standalone_life(sc, spec)
    problems += outcome(sc, k, serving=not start_failed)
    for pid in upgraded:
        stop_pid(pid)
    problems += sc.stop_all()
    text = "".join("----- %s -----\n%s" % (p.name, p.text()) for p in sc.procs)
    sc.procs.clear()  # stopped and checked here
    return problems, text


def calls_of(text, kind):
    """The faulty process's calls of kind."""
    return max([int(n) for n in re.findall(r"fault injection%s: %s: (\d+) calls" % (TAG, kind), text)] or [0])


def failed_points(text, kind):
    return set(re.findall(r"fault injection%s: failing %s #\d+ at (\S+)" % (TAG, kind), text))


def every_call(sidecars, zk, life, kind):
    """The clean life, then each call of kind of the faulty process failed
    in turn (N = 1, 2, ... up to the clean life's count); a worker's
    allocations are failed at the first call of each of the hand-over's
    points only (its other allocations are tests/faults'). Every point the
    clean life reached must have failed once. Returns the number of points."""
    own_only = kind == "alloc" and life != "keeper"
    problems, text = run_life(sidecars, zk, life, kind, None)
    assert not problems, "a clean %s life failed: %s\n%s" % (life, problems, text[-8000:])
    points = points_of(text, kind, own_only)
    if own_only:
        specs = [spec_of(kind, p) for p in sorted(points)]
    else:
        specs = ["%s:%d" % (kind, n) for n in range(1, calls_of(text, kind) + 1)]
    failed = set()
    for spec in specs:
        problems, text = run_life(sidecars, zk, life, kind, spec)
        if problems:
            pytest.fail("%s life, %s failing: %s\n%s" % (life, spec, "; ".join(problems), text[-12000:]),
                        pytrace=False)
        failed |= failed_points(text, kind)
    missed = sorted(set(points) - failed)
    assert not missed, "points never failed: %s" % missed
    print("%s life, %s: %d points, %d runs with a call failed" % (life, kind, len(points), len(specs)))
    return len(points)


@pytest.mark.parametrize("kind", KEEPER_KINDS)
def test_keeper_failure_points(kind, zk_server, sidecars):
    assert every_call(sidecars, zk_server, "keeper", kind) > 0, \
        "the keeper made no %s call in its life: the seam is not wired" % kind


@pytest.mark.parametrize("kind", WORKER_KINDS)
def test_worker_handover_failure_points(kind, zk_server, sidecars):
    n = every_call(sidecars, zk_server, "worker", kind)
    n += every_call(sidecars, zk_server, "standalone", kind)
    assert n > 0, "no worker made a %s call of the hand-over: the seam is not wired" % kind
