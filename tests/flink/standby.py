"""A standby JobManager leads in seconds (issue 37), in tests/flink:

- standby: one session cluster with two JobManagers (A leads, B waits), each
  with its own sidecar and identity (through zkwarden) or both direct to
  ZooKeeper, one TaskManager direct to ZooKeeper (its sessions are not the
  subject), two checkpointing jobs. Three failovers in one cluster's life:
  (a) the leader killed with -9 and gone: time from the kill to every job
  RUNNING on the standby; (b) A started again (now the standby), then both
  JobManagers killed with -9 and started again at once: time from the kill
  to every job RUNNING on whichever leads; (c) the leader
  killed with -9 and started again at once: the same. After each: nothing
  left behind (failed removals in every JobManager's log, checkpoint znodes
  older than the retained ones, locks of a session other than the leader's).
- reconnect: the Flink JobManager's own ZooKeeper client (Flink's shaded
  ZooKeeper and Curator) comes back after a drop of its connection: a relay
  between it and its sidecar resets the connection N times; the delay from
  each close to the ConnectRequest of the same session is read in the
  sidecar's log. What ZKWARDEN_ORPHAN_GRACE_MS must outlast.
"""

import calendar
import os
import re
import statistics
import subprocess
import sys
import time

import flinkcluster as fc
from flinkcluster import FlinkCluster, Tree, log, wait_until

sys.path.insert(0, str(fc.REPO / "tests" / "faults"))
import netfault  # noqa: E402  (the fault-injecting relay)

# What must hold through zkwarden: every job RUNNING on the standby within
# this many seconds of the leader's kill -9 (a); where a JobManager is
# started again meanwhile (b, c), its JVM's start shares the machine: within
# S1's bound (5 s) of the kill.
STANDBY_BOUND_S = 4.0
GRANTED = " was granted leadership with leaderSessionID"
PHASES = ("leader_gone", "both_restarted", "leader_restarted")


def _leader_of(jms, marks):
    """The JobManager (a key of jms) whose current process logged its
    leadership after its mark (its log's length when the failover began)."""
    for name, jm in jms.items():
        if jm.jm_alive() and GRANTED in jm.jm_log()[marks.get((name, jm.jm_n), 0):]:
            return name
    return None


def _wait_led(jms, jobs, t0, marks, timeout):
    """Waits until a JobManager leads again and every job is RUNNING (every
    task) on it; returns (its name, s from t0 to its leadership log line, s
    from t0 to every job RUNNING, the load average (1 min) at the start of
    the wait and at its end)."""
    got = {}

    def check():
        for jm in jms.values():
            _died(jm)
        name = got.get("name") or _leader_of(jms, marks)
        if name is None:
            return False
        got["name"] = name
        return jms[name].all_running(jobs)
    load0 = os.getloadavg()[0]
    wait_until(check, timeout, interval=0.05, what="a JobManager leading with every job RUNNING")
    t1 = time.time()
    got["load_avg_1m"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    name = got["name"]
    text = jms[name].jm_log()[marks.get((name, jms[name].jm_n), 0):]
    led = None
    for line in text.splitlines():
        if GRANTED in line:
            led = fc.log_time(line)
            break
    return name, (round(led - t0, 2) if led else None), round(t1 - t0, 2), got["load_avg_1m"]


def _marks(jms):
    """Where each JobManager process's log ends now (leadership after it counts)."""
    return {(n, jm.jm_n): len(jm.jm_log()) for n, jm in jms.items() if jm.jm_n}


def _wait_standing_by(jm, tree, zk_root, n_latches, timeout=120):
    """A JobManager process that came up and entered the election (the latch
    has n_latches nodes)."""
    latch = zk_root + "/leader/latch"
    wait_until(lambda: not _died(jm) and len(tree.children(latch)) >= n_latches, timeout, interval=0.2,
               what="JobManager %s standing by" % jm.dir.name)


def _died(jm):
    if not jm.jm_alive():
        raise RuntimeError("the JobManager %s exited with %s:\n%s" % (jm.dir.name, jm.jm.returncode,
                                                                     fc.tail(jm.jm_logs[-1], 8000)))
    return False


def _left_behind(cell, jms, leader, tree, jobs):
    """Nothing left behind after a failover: S2's figures read on the leader,
    with every JobManager's log (failed removals, completed checkpoints), and
    the locks of a session other than the leader's on checkpoints and job graphs."""
    c = jms[leader]
    c.peers = [jm for n, jm in jms.items() if n != leader]
    out = fc.leftovers(c, tree, jobs)
    lead = fc.leader_session(tree, c)
    owners = set()
    for j in jobs:
        for p in tree.job_graph_paths(c.zk_root, j):
            owners |= {o for _, o in tree.locks_of(p, "1.15")}
    out["job_graph_lock_sessions_not_the_leader"] = len(owners - {lead})
    return out


def standby(cell, mode):
    """The three failovers of one cluster with a standby (module docstring)."""
    zk = cell.server()
    cell.n += 1
    cid = "standby-%s-%d" % (mode, cell.n)
    d = cell.dir / cid
    jms, sidecars, tm, tree = {}, {}, None, None
    timeout_s = cell.timeout_ms / 1000
    wait_s = timeout_s * 3 + 90
    try:
        for name in ("a", "b"):
            quorum = zk.hostport
            if mode != "direct":
                sidecars[name] = cell.sidecar(d / ("sidecar-" + name), "jm-%s-%s" % (cid, name), zk.hostport,
                                              "/zkwarden-" + cid, mode)
                quorum = sidecars[name].hostport
            jms[name] = FlinkCluster(d / ("jm-" + name), cell.version, cell.classpath, cell.jar, quorum, cid,
                                     cell.timeout_ms, num_retained=cell.args.num_retained, shared_dir=d)
        tm = FlinkCluster(d / "tm", cell.version, cell.classpath, cell.jar, zk.hostport, cid, cell.timeout_ms,
                          num_retained=cell.args.num_retained, shared_dir=d)
        tree = Tree(zk.hostport)
        a, b = jms["a"], jms["b"]
        a.start_jm()
        wait_until(lambda: not _died(a) and GRANTED in a.jm_log(), 120, interval=0.2, what="JobManager A leading")
        tm.start_tm()
        b.start_jm()
        jobs = cell.start_jobs(a, 2)
        _wait_standing_by(b, tree, a.zk_root, 2)
        figures = {}

        # (a) the leader killed with -9 and gone: the standby leads
        marks, t0 = _marks(jms), time.time()
        a.kill_jm()
        name, led, ran, load = _wait_led({"b": b}, jobs, t0, marks, wait_s)
        figures["leader_gone"] = dict(led=name, leader_after_s=led, running_after_s=ran, load_avg_1m=load,
                                      **_left_behind(cell, jms, name, tree, jobs))
        log("standby %s (a) leader gone: %s" % (mode, figures["leader_gone"]))

        # (b) both killed with -9 and started again at once
        a.start_jm()
        _wait_standing_by(a, tree, a.zk_root, 2)
        marks, t0 = _marks(jms), time.time()
        a.kill_jm()
        b.kill_jm()
        a.start_jm()
        b.start_jm()
        name, led, ran, load = _wait_led(jms, jobs, t0, marks, wait_s)
        figures["both_restarted"] = dict(led=name, leader_after_s=led, running_after_s=ran, load_avg_1m=load,
                                         **_left_behind(cell, jms, name, tree, jobs))
        log("standby %s (b) both restarted: %s" % (mode, figures["both_restarted"]))

        # (c) the leader killed with -9 and started again at once
        other = "b" if name == "a" else "a"
        _wait_standing_by(jms[other], tree, a.zk_root, 2)
        leader = jms[name]
        marks, t0 = _marks(jms), time.time()
        leader.kill_jm()
        leader.start_jm()
        name2, led, ran, load = _wait_led(jms, jobs, t0, marks, wait_s)
        figures["leader_restarted"] = dict(killed=name, led=name2, leader_after_s=led, running_after_s=ran,
                                           load_avg_1m=load,
                                           **_left_behind(cell, jms, name2, tree, jobs))
        log("standby %s (c) leader restarted: %s" % (mode, figures["leader_restarted"]))
        figures["orphan_grace_ms"] = _grace(sidecars)
        cell.put("standby", mode, figures)
    finally:
        if tree is not None:
            tree.close()
        for c in [tm] + list(jms.values()):
            if c is not None:
                c.stop()
        for s in sidecars.values():
            cell.stop_sidecar(s, ["standby"], mode)


def join_and_fail_over(cell, c, sidecar, mode, upstream, jobs, tree):
    """The quick run's standby: a second JobManager (with a sidecar of its
    own unless direct) joins c's running cluster, then c's JobManager is
    killed with -9 and stays gone: (a) of the standby scenario, its figures
    under "leader_gone"."""
    sidecars = {"a": sidecar} if sidecar is not None else {}
    quorum = upstream
    b_sidecar = None
    if mode != "direct":
        b_sidecar = cell.sidecar(c.dir / "sidecar-b", sidecar.identity + "-b", upstream, sidecar.registry_root, mode)
        sidecars["b"] = b_sidecar
        quorum = b_sidecar.hostport
    b = FlinkCluster(c.dir / "jm-b", cell.version, cell.classpath, cell.jar, quorum, c.cluster_id, cell.timeout_ms,
                     num_retained=cell.args.num_retained, shared_dir=c.dir)
    jms = {"a": c, "b": b}
    try:
        b.start_jm()
        _wait_standing_by(b, tree, c.zk_root, 2)
        marks, t0 = _marks(jms), time.time()
        c.kill_jm()
        name, led, ran, load = _wait_led({"b": b}, jobs, t0, marks, cell.timeout_ms / 1000 * 3 + 90)
        out = {"leader_gone": dict(led=name, leader_after_s=led, running_after_s=ran, jobs=len(jobs), load_avg_1m=load,
                                   **_left_behind(cell, jms, name, tree, jobs)),
               "orphan_grace_ms": _grace(sidecars), "on_the_cluster_of": "s1"}
        cell.put("standby", mode, out)
    finally:
        b.stop()
        if b_sidecar is not None:
            cell.stop_sidecar(b_sidecar, ["standby"], mode)


def _grace(sidecars):
    """The sidecars' ZKWARDEN_ORPHAN_GRACE_MS (their --check-config), None direct."""
    for s in sidecars.values():
        out = subprocess.run([s.binary or fc.procs.zkwarden_binary(), "--check-config"], env=s.environment(),
                             capture_output=True, text=True, timeout=10).stdout
        m = re.search(r"^ZKWARDEN_ORPHAN_GRACE_MS=(\d+)", out, re.M)
        return int(m.group(1)) if m else None
    return None


def judge(cell, recover_bound_s):
    """Through zkwarden: the standby leads with every job RUNNING within
    STANDBY_BOUND_S of the leader's kill (a), within S1's bound
    (recover_bound_s) of the kill where a JobManager starts again meanwhile
    (b, c), nothing left behind in any; direct: the wait for the session
    timeout shows in (a)."""
    timeout_s = cell.timeout_ms / 1000
    for mode, r in (cell.results.get("standby") or {}).items():
        if not isinstance(r, dict) or "leader_gone" not in r:
            continue
        for phase in PHASES:
            f = r.get(phase)
            if f is None:
                continue
            bad = {k: f[k] for k in ("failed_removals", "left_in_zookeeper", "lock_owner_sessions_not_the_leader",
                                     "job_graph_lock_sessions_not_the_leader") if f.get(k)}
            if bad:
                cell.fail(["standby"], mode, "standby %s (%s): left behind: %s" % (mode, phase, bad),
                          MUST_HOLD[("standby", mode)] if mode == "zkwarden" else NOTHING_LEFT)
            if mode == "zkwarden":
                bound = STANDBY_BOUND_S if phase == "leader_gone" else recover_bound_s
                if f["running_after_s"] > bound:
                    cell.fail(["standby"], mode, "standby zkwarden (%s): every job RUNNING %.1f s after the kill "
                              "(bound %.0f s; leadership after %s s; orphan grace %s ms; load average (1 min) %s "
                              "at the kill and at RUNNING, %d CPUs)"
                              % (phase, f["running_after_s"], bound, f["leader_after_s"], r.get("orphan_grace_ms"),
                                 f.get("load_avg_1m"), os.cpu_count() or 0))
        d = r["leader_gone"]
        if mode == "direct" and d["running_after_s"] < 0.75 * timeout_s:
            cell.fail(["standby"], "direct", "standby direct (leader_gone): every job RUNNING %.1f s after the "
                      "leader's kill, less than 75%% of the session timeout (%.0f s): the wait did not show"
                      % (d["running_after_s"], timeout_s), MUST_HOLD[("standby", "direct")])


NOTHING_LEFT = "nothing left behind: no failed removal, no lock of a session other than the leader's"
MUST_HOLD = {
    ("standby", "zkwarden"): "every job RUNNING on the standby within %.0f s of the leader's kill -9 (a "
                             "JobManager started again meanwhile: within 5 s); %s" % (STANDBY_BOUND_S, NOTHING_LEFT),
    ("standby", "direct"): "direct shows the wait: the standby leads no sooner than 75% of the session timeout "
                           "after the leader's kill",
    ("reconnect", "zkwarden"): "the JobManager comes back with its session after every drop (never fenced): "
                               "its reconnect delay is within ZKWARDEN_ORPHAN_GRACE_MS",
}


# ---------------------------------------------------------------- reconnect

LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.(\d+)Z ")


def _zkw_time(line):
    m = LOG_TIME.match(line)
    if not m:
        return None
    return calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")) + int(m.group(2)) / 10 ** len(m.group(2))


def reconnect_delays(text, sid):
    """s from each close of the session's connection to the next
    ConnectRequest with its id, in a sidecar's log (debug)."""
    out, closed = [], None
    for line in text.splitlines():
        if ("session=0x%x " % sid) in line and " closed: " in line:
            closed = _zkw_time(line)
        elif ("connect request: session 0x%x," % sid) in line and closed is not None:
            t = _zkw_time(line)
            if t is not None:
                out.append(round(t - closed, 3))
            closed = None
    return out


def reconnect(cell, drops):
    """The JobManager alone (no jobs: a drop costs nothing but the drop),
    through its sidecar with a relay between them; drops resets of its
    connection, each once it is back with its session."""
    zk = cell.server()
    c, sidecar = cell.cluster("reconnect", "zkwarden", zk.hostport, log_level="debug")
    relay = None
    try:
        relay = netfault.Relay(sidecar.hostport, name="jm").start()
        c.quorum = relay.hostport
        c.write_config(2)
        c.start_jm()
        wait_until(lambda: not _died(c) and GRANTED in c.jm_log(), 120, interval=0.2, what="the JobManager leading")
        sid = _jm_session(sidecar)
        for i in range(drops):
            n = sidecar_log(sidecar).count("connect request: session 0x%x," % sid)
            relay.set_mode("reset")
            relay.set_mode("pass")
            wait_until(lambda: sidecar_log(sidecar).count("connect request: session 0x%x," % sid) > n and
                       _established(sidecar, sid) > i + 1, 60, interval=0.05,
                       what="drop %d: the JobManager's session back" % (i + 1))
        delays = reconnect_delays(sidecar_log(sidecar), sid)
        metrics = sidecar.metrics() or ""
        m = re.search(r"^zkwarden_orphans_fenced_total (\S+)$", metrics, re.M)
        text = c.jm_log()
        r = {"drops": drops, "delays_s": delays, "min_s": min(delays), "median_s": round(statistics.median(delays), 3),
             "max_s": max(delays), "orphans_fenced": int(float(m.group(1))) if m else None,
             "session_lost": len(fc.CURATOR_LOST.findall(text)), "orphan_grace_ms": _grace({"s": sidecar})}
        cell.put("reconnect", "zkwarden", r)
    finally:
        if relay is not None:
            relay.stop()
        cell.stop(c, sidecar, ["reconnect"], "zkwarden")


def sidecar_log(sidecar):
    return fc.tail(sidecar.log, limit=20_000_000)


def _established(sidecar, sid):
    mine = "session=0x%x " % sid
    return sum(1 for ln in sidecar_log(sidecar).splitlines() if mine in ln and "session established" in ln)


def _jm_session(sidecar):
    """The session of the JobManager's incarnation, from the sidecar's log."""
    m = re.findall(r"session=(0x[0-9a-f]+) \S+ identity \S+: this session acts as the JobManager",
                   sidecar_log(sidecar))
    if not m:
        raise RuntimeError("no JobManager session in %s" % sidecar.log)
    return int(m[-1], 16)


def judge_reconnect(cell):
    r = (cell.results.get("reconnect") or {}).get("zkwarden")
    if r is None:
        return
    if r["orphans_fenced"] or r["session_lost"] or len(r["delays_s"]) != r["drops"]:
        cell.fail(["reconnect"], "zkwarden", "reconnect zkwarden: the JobManager's session did not come back "
                  "after every drop: %s" % r, MUST_HOLD[("reconnect", "zkwarden")])
