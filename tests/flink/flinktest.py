"""Real Flink through zkwarden: Flink's own JobManager and TaskManager (jars
from Maven Central), direct to ZooKeeper and through a zkwarden sidecar, on
any Flink line and any ZooKeeper server line. Run it with tests/flink/run.sh;
tests/flink/README.md says what each scenario does and measures.

One matrix cell = one Flink line x one ZooKeeper line. Every figure is read
from Flink (REST), ZooKeeper (our own session straight to the servers), the
disk and the JobManager's own log; only the observe scenario's report is
zkwarden's (its would-actions, by definition).
"""

import argparse
import datetime
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import flinkcluster as fc
import handover
import sidecars
import standby
from flinkcluster import FlinkCluster, Tree, log, procs, wait_until, zkharness

# What must hold through zkwarden (issue 28).
RECOVER_BOUND_S = 5.0
QUICK = ("s1", "s2", "s3", "standby")  # standby: its (a) only, on S1-S3's cluster
FULL = ("s1", "s2", "s3", "pod_crash", "observe", "application", "rolling_restart", "s1_60s", "standby",
        "reconnect") + handover.SCENARIOS
SESSION_LIFE = ("s1", "s2", "s3")  # one cluster's life measures all three

# What must hold, per scenario and mode: the words a failure is recorded with
# (and compatibility.py's, for runs that recorded none).
_IN_TIME = "every job RUNNING within %.0f s of the JobManager's launch" % RECOVER_BOUND_S
_THE_WAIT = "direct shows the wait: every job RUNNING no sooner than 75% of the session timeout after the launch"
MUST_HOLD = {
    ("s1", "zkwarden"): _IN_TIME, ("application", "zkwarden"): _IN_TIME, ("s1_60s", "zkwarden"): _IN_TIME,
    ("pod_crash", "zkwarden"): _IN_TIME,
    ("s1", "direct"): _THE_WAIT, ("application", "direct"): _THE_WAIT, ("s1_60s", "direct"): _THE_WAIT,
    ("s2", "zkwarden"): "0 failed removals, nothing left in ZooKeeper or on disk",
    ("s3", "zkwarden"): "the job graph node and its HA file removed after the cancel",
    ("observe", "observe"): "jobs as slow as direct (at least 75% of the session timeout), a would-fence "
                            "reported, nothing done",
    ("rolling_restart", "zkwarden"): "0 job restarts, 0 SUSPENDED, the JobManager dialing only its sidecar",
    **standby.MUST_HOLD, **handover.MUST_HOLD,
}
SIDECAR_EXIT = "zkwarden exits 0 on SIGTERM"
BINARY_SAME = "one zkwarden binary for the whole run"
RAN_TO_END = "the scenario runs to its end (the harness raised an error)"
# Flink's option to keep leading through SUSPENDED (off by default; issue 37's comparison).
TOLERATE_SUSPENDED = "high-availability.zookeeper.client.tolerate-suspended-connections"


class Cell:
    """One Flink line on one ZooKeeper line: the servers, the clusters, the figures."""

    def __init__(self, args, flink, zk, workdir):
        self.args = args
        self.line, self.version = flink
        self.zk_line, self.zk_version = zk
        self.dir = Path(workdir)
        self.timeout_ms = int(args.session_timeout_s * 1000)
        self.results = {}
        self.failures = []
        self.findings = []
        # the same, with the scenarios and the mode each is about (compatibility.py)
        self.failure_details = []
        self.finding_details = []
        self.current = (list(FULL), None)  # what runs now: an error is about it
        self.maven_s = 0.0
        self.cds_s = 0.0
        self.zk = None
        self.n = 0

    # -------------------------------------------------------- set-up

    def prepare(self):
        self.classpath, t1 = fc.flink_classpath(self.line, self.version, self.args.maven_repo)
        self.jars = fc.flink_jar_versions(self.classpath)
        self.jar = fc.job_jar(self.version, self.classpath)
        self.zk_classpath, t2 = fc.zookeeper_classpath(self.zk_line, self.zk_version, self.args.maven_repo)
        self.maven_s = t1 + t2
        if not fc.cds_archive(self.version).exists():
            zk = self.server()
            c, _ = self.cluster("cds", "direct", zk.hostport)
            try:
                self.cds_s = fc.make_cds_archive(c)
            finally:
                c.stop()

    def server(self, max_session_ms=30000):
        """One standalone server for the cell (every cluster has its own cluster id)."""
        if self.zk is None or self.zk.cfg_max < max_session_ms:
            if self.zk is not None:
                self.zk.stop()
            self.zk = zkharness.ZkServer(self.dir / ("zk-%d" % max_session_ms), tick_ms=500,
                                         max_session_ms=max_session_ms, jvm_args=zkharness.FAST_START_JVM,
                                         classpath=self.zk_classpath)
            self.zk.cfg_max = max_session_ms
            with fc.signals_held():  # the process is in self.zk before a SIGTERM ends the run
                self.zk.start(wait=False)
            self.zk.wait_ready(60)
        return self.zk

    def close(self):
        if self.zk is not None:
            self.zk.stop()

    def cluster(self, name, mode, upstream, kind="session", timeout_ms=None, sidecar_class=None, log_level=None):
        """A cluster of its own cluster id, with a sidecar in front of upstream
        unless mode is direct (direct_tolerate: direct with Flink's
        tolerate-suspended-connections; stop_start: a sidecar, for the
        scenarios of its own restart). sidecar_class(dir, identity, upstream,
        registry root, **kw): another kind of sidecar (sidecars.KeptSidecar).
        Returns (FlinkCluster, Sidecar or None)."""
        self.n += 1
        cid = "%s-%s-%d" % (name, mode.replace("_", ""), self.n)
        d = self.dir / cid
        sidecar = None
        quorum = upstream
        flink = {}
        if mode == "direct_tolerate":
            flink[TOLERATE_SUSPENDED] = "true"
        elif mode != "direct":
            sidecar = self.sidecar(d / "sidecar", "jm-" + cid, upstream, "/zkwarden-" + cid, mode, sidecar_class,
                                   log_level)
            quorum = sidecar.hostport
        c = FlinkCluster(d, self.version, self.classpath, self.jar, quorum, cid,
                         timeout_ms or self.timeout_ms, kind=kind, num_retained=self.args.num_retained,
                         extra_settings=flink)
        return c, sidecar

    def sidecar(self, d, identity, upstream, registry_root, mode, sidecar_class=None, log_level=None):
        """A started sidecar in front of upstream (mode zkwarden/stop_start: sidecar mode; observe)."""
        env = {"ZKWARDEN_MODE": "observe" if mode == "observe" else "sidecar",
               "ZKWARDEN_AUDIT_FILE": str(d.parent / ("zkwarden-audit-%s.jsonl" % identity))}
        sidecar = (sidecar_class or procs.Sidecar)(d, identity, upstream, registry_root,
                                                   log_level=log_level or self.args.zkwarden_log_level,
                                                   extra_env=env)
        with fc.signals_held():  # tracked (procs) before a SIGTERM ends the run
            sidecar.start()
        return sidecar

    def start(self, c, n_jobs):
        """JobManager, TaskManager, the jobs running and checkpointing; returns the job ids."""
        c.start_jm()
        c.start_tm()
        return self.start_jobs(c, n_jobs)

    def start_jobs(self, c, n_jobs):
        """With c's JobManager leading and a TaskManager started: the jobs
        running and checkpointing; returns the job ids."""
        if c.kind == "session":
            wait_until(lambda: not _died(c) and (fc.rest(c.rest_port, "/overview") or {}).get("taskmanagers", 0) >= 1,
                       120, interval=0.2, what="a TaskManager registered")
            jobs = c.submit(n_jobs)
        else:
            jobs = wait_until(lambda: not _died(c) and list(c.overview() or {}), 120, interval=0.2,
                              what="the application's job")
        c.wait_running(jobs, 120)
        c.wait_checkpoints(jobs, self.args.num_retained + 1, 90)
        return jobs

    def restart_jm(self, c, jobs, timeout_s):
        """kill -9 of the JobManager, started again at once; the time from its
        start to every job RUNNING with every task (and from its first ZooKeeper
        connection, read from its log)."""
        c.kill_jm()
        return self.relaunch_jm(c, jobs, timeout_s, "every job RUNNING after JobManager #%d started" % (c.jm_n + 1))

    def relaunch_jm(self, c, jobs, timeout_s, what):
        """Starts the JobManager and waits for every job RUNNING: the time from
        its launch, from its first ZooKeeper connection (its log), its JVM's
        start (launch to that connect) and the load average at the launch and
        at RUNNING: a miss of the bound says whether the JVM or the recovery
        took the time."""
        t0 = c.start_jm()
        load0 = os.getloadavg()[0]
        t1 = c.wait_running(jobs, timeout_s, what=what)
        load1 = os.getloadavg()[0]
        text = c.jm_log()
        connected = _log_time(text, "State change: CONNECTED")
        # the process's leadership (its REST endpoint's share of it): what the old
        # session's latch holds up direct, and what zkwarden's fence decides
        leader = _log_time(text, " was granted leadership with leaderSessionID")
        out = {"recovered_s": round(t1 - t0, 2), "load_avg_1m": [round(load0, 2), round(load1, 2)]}
        if connected is not None:
            out["jvm_start_s"] = round(connected - t0, 2)
            out["recovered_after_connect_s"] = round(t1 - connected, 2)
            if leader is not None:
                out["leader_after_connect_s"] = round(leader - connected, 2)
        return out

    def stop(self, c, sidecar, scenarios, mode):
        c.stop()
        if sidecar is not None:
            self.stop_sidecar(sidecar, scenarios, mode)

    def stop_sidecar(self, sidecar, scenarios, mode):
        """SIGTERM; an exit status other than 0 (or a keeper's worker left) is a failure."""
        sidecar.stop()
        bad = [e for e in sidecar.exits if (e[0] == "SIGTERM" and e[1] != 0) or e[0] == "worker left"]
        if bad:
            self.fail(scenarios, mode, "%s: zkwarden exited %s on SIGTERM" % (sidecar.identity[3:], bad),
                      SIDECAR_EXIT)

    def fail(self, scenarios, mode, text, must_hold=None):
        """A failure: what must hold did not (or the run raised), about these scenarios in this mode."""
        self.failures.append(text)
        first = scenarios[0] if scenarios else None
        self.failure_details.append({"scenarios": list(scenarios), "mode": mode, "text": text,
                                     "must_hold": must_hold or MUST_HOLD.get((first, mode), "")})

    def find(self, scenarios, mode, text):
        """A finding: direct did not show the failure a scenario is about (not a failure)."""
        self.findings.append(text)
        self.finding_details.append({"scenarios": list(scenarios), "mode": mode, "text": text})

    # -------------------------------------------------------- S1, S2, S3

    def session_life(self, mode, restarts, with_standby=False):
        """S1 (the first restart), S2 (over every restart), S3 (cancel after them)
        in one cluster's life; with_standby: then the standby scenario's (a)
        on it (standby.join_and_fail_over: the quick run's)."""
        zk = self.server()
        c, sidecar = self.cluster("s", mode, zk.hostport)
        tree = None
        try:
            tree = Tree(zk.hostport)
            jobs = self.start(c, 2)
            waits = []
            for k in range(restarts):
                r = self.restart_jm(c, jobs, self.timeout_ms / 1000 * 3 + 90)
                waits.append(r)
                log("%s: restart %d: %s" % (mode, k + 1, r))
                # every checkpoint of the earlier incarnation is subsumed by now
                c.wait_checkpoints(jobs, self.args.num_retained + 1, 90)
            self.put("s1", mode, dict(waits[0]))
            self.put("s2", mode, dict(fc.leftovers(c, tree, jobs), restarts=restarts,
                                       recovered_s=[w["recovered_s"] for w in waits]))
            self.put("s3", mode, fc.cancel_and_check(c, tree, jobs[0], self.args.cancel_check_s))
            if with_standby:
                self.current = (["standby"], mode)
                standby.join_and_fail_over(self, c, sidecar, mode, zk.hostport, jobs[1:], tree)
        finally:
            if tree is not None:
                tree.close()
            self.stop(c, sidecar, SESSION_LIFE, mode)

    # -------------------------------------------------------- the others

    def pod_crash(self):
        """JobManager and sidecar both killed with -9, both started again (the sidecar first)."""
        zk = self.server()
        c, sidecar = self.cluster("pod", "zkwarden", zk.hostport)
        try:
            jobs = self.start(c, 2)
            c.kill_jm()
            sidecar.kill9()
            with fc.signals_held():
                sidecar.start()
            self.put("pod_crash", "zkwarden", self.relaunch_jm(c, jobs, self.timeout_ms / 1000 * 3 + 90,
                                                               "every job RUNNING after the pod crash"))
        finally:
            self.stop(c, sidecar, ["pod_crash"], "zkwarden")

    def observe(self):
        """The JM crash through a sidecar in observe mode: the jobs meet what they
        meet direct; zkwarden's report names what sidecar mode would have done."""
        zk = self.server()
        c, sidecar = self.cluster("obs", "observe", zk.hostport)
        try:
            jobs = self.start(c, 2)
            r = self.restart_jm(c, jobs, self.timeout_ms / 1000 * 3 + 90)
            status, body = _admin(sidecar, "/v1/reclaims")
            actions = json.loads(body).get("reclaims", []) if status == 200 else []
            would = sorted({a["kind"] for a in actions if a.get("would")})
            done = sorted({a["kind"] for a in actions if a.get("done")})
            metrics = sidecar.metrics() or ""
            counts = {m.group(1): float(m.group(2)) for m in
                      re.finditer(r'^zkwarden_would_actions_total\{kind="([a-z_]+)"\} (\S+)$', metrics, re.M)}
            r.update({"would_actions": would, "done_actions": done,
                      "would_actions_total": {k: v for k, v in counts.items() if v}})
            self.put("observe", "observe", r)
        finally:
            self.stop(c, sidecar, ["observe"], "observe")

    def application(self, mode):
        """S1 on an application cluster (StandaloneApplicationClusterEntryPoint,
        as the Flink Kubernetes operator runs it)."""
        zk = self.server()
        c, sidecar = self.cluster("app", mode, zk.hostport, kind="application")
        try:
            jobs = self.start(c, 1)
            self.put("application", mode, self.restart_jm(c, jobs, self.timeout_ms / 1000 * 3 + 90))
        finally:
            self.stop(c, sidecar, ["application"], mode)

    def s1_60s(self, mode):
        """S1 at Flink's default session timeout (60 s)."""
        zk = self.server(max_session_ms=120000)
        c, sidecar = self.cluster("s60", mode, zk.hostport, timeout_ms=60000)
        try:
            jobs = self.start(c, 2)
            self.put("s1_60s", mode, self.restart_jm(c, jobs, 60 * 3 + 90))
        finally:
            self.stop(c, sidecar, ["s1_60s"], mode)

    def rolling_restart(self, mode):
        """3 servers, each stopped and started in turn while the jobs checkpoint."""
        ens = zkharness.Ensemble(self.dir / ("ensemble-%s" % mode), n=3, tick_ms=500, reconfig=False,
                                 max_session_ms=60000, jvm_args=zkharness.FAST_START_JVM,
                                 classpath=self.zk_classpath)
        c = sidecar = tree = None
        try:
            with fc.signals_held():  # every server's process is in ens before a SIGTERM ends the run
                for s in ens.servers:
                    s.start(wait=False)
            ens.wait_quorum(90)
            c, sidecar = self.cluster("zkroll", mode, ens.connect)
            tree = Tree(ens.connect)
            jobs = self.start(c, 2)
            before = len(c.all_jm_logs())
            for i, s in enumerate(ens.servers):
                s.stop()
                time.sleep(1.0)  # the server is down for a moment, as in a rolling restart
                with fc.signals_held():
                    s.start(wait=False)
                ens.wait_quorum(90)
                # the next server goes once this one serves again and the jobs checkpoint
                c.wait_checkpoints(jobs, 2, 120)
            c.wait_running(jobs, 120, what="every job RUNNING after the rolling restart")
            text = c.all_jm_logs()[before:]
            dialed = sorted({int(p) for p in re.findall(r"Opening socket connection to server /?[0-9.]+:(\d+)",
                                                         c.all_jm_logs())})
            r = {"job_restarts": len(fc.JOB_RESTART.findall(text)),
                 "leadership_revoked": len(fc.LEADERSHIP_REVOKED.findall(text)),
                 "suspended": len(fc.CURATOR_SUSPENDED.findall(text)),
                 "failed_checkpoint_triggers": len(fc.CHECKPOINT_TRIGGER_FAILED.findall(text)),
                 # the longest time without a completed checkpoint of a job
                 "max_checkpoint_gap_s": fc.max_checkpoint_gap(text),
                 # which Flink setting the run had: the default, or true (direct_tolerate)
                 "tolerate_suspended_connections": mode == "direct_tolerate",
                 "jm_processes": c.jm_n,
                 # Curator's ensemble tracker reads /zookeeper/config (which names
                 # the real servers): through zkwarden the JM must dial only its sidecar
                 "jm_dialed_ports": dialed}
            if sidecar is not None:
                r["jm_dialed_only_sidecar"] = dialed == [sidecar.port]
            r.update(fc.leftovers(c, tree, jobs))
            self.put("rolling_restart", mode, r)
        finally:
            if tree is not None:
                tree.close()
            if c is not None:
                self.stop(c, sidecar, ["rolling_restart"], mode)
            ens.stop()

    # -------------------------------------------------------- verdicts

    def put(self, scenario, mode, figures):
        self.results.setdefault(scenario, {})[mode] = figures
        log("%s %s: %s" % (scenario, mode, json.dumps(figures)))

    def judge(self):
        """Failures (what must hold through zkwarden, and the fault shown direct)
        and findings (where direct does not show a failure)."""
        r = self.results
        timeout_s = self.timeout_ms / 1000

        def get(s, m):
            return r.get(s, {}).get(m)

        for s, t in (("s1", timeout_s), ("application", timeout_s), ("s1_60s", 60.0)):
            d, z = get(s, "direct"), get(s, "zkwarden")
            if d is not None and d["recovered_s"] < 0.75 * t:
                self.fail([s], "direct", "%s direct: jobs RUNNING %.1f s after the JM's start, less than 75%% of "
                          "the session timeout (%.0f s): the fault did not show" % (s, d["recovered_s"], t))
            if z is not None and z["recovered_s"] > RECOVER_BOUND_S:
                self.fail([s], "zkwarden", "%s zkwarden: %s" % (s, slow_text(z)))
        z = get("pod_crash", "zkwarden")
        if z is not None and z["recovered_s"] > RECOVER_BOUND_S:
            self.fail(["pod_crash"], "zkwarden", "pod_crash zkwarden: %s" % slow_text(z))
        for mode in ("direct", "zkwarden"):
            s2 = get("s2", mode)
            if s2 is None:
                continue
            bad = {k: s2[k] for k in ("failed_removals", "left_in_zookeeper", "left_on_disk") if s2[k]}
            if bad and mode == "zkwarden":
                self.fail(["s2"], mode, "s2 zkwarden: %s" % bad)
            elif not bad and mode == "direct":
                self.find(["s2"], mode, "s2 direct shows no failed removal: a JobManager killed with -9 keeps its "
                          "leader latch until its session expires, and its locks go in the same "
                          "transaction, so no lock outlives it")
        for mode in ("direct", "zkwarden"):
            s3 = get("s3", mode)
            if s3 is None:
                continue
            if not s3["job_graph_removed"] and mode == "zkwarden":
                self.fail(["s3"], mode, "s3 zkwarden: the job graph was not removed: %s" % s3)
            elif s3["job_graph_removed"] and mode == "direct":
                self.find(["s3"], mode, "s3 direct removes the job graph: the restarted JobManager leads only "
                          "after the old session expired, so no foreign lock is left on it")
        o = get("observe", "observe")
        if o is not None:
            if o["recovered_s"] < 0.75 * timeout_s:
                self.fail(["observe"], "observe", "observe: jobs RUNNING %.1f s after the JM's start: not what "
                          "direct meets (the session timeout, %.0f s)" % (o["recovered_s"], timeout_s))
            if "fence" not in o["would_actions"] and "orphan_fence" not in o["would_actions"]:
                self.fail(["observe"], "observe", "observe: no would-fence reported: %s" % o)
            if o["done_actions"]:
                self.fail(["observe"], "observe", "observe: zkwarden did %s" % o["done_actions"])
        rr_d, rr_z = get("rolling_restart", "direct"), get("rolling_restart", "zkwarden")
        if rr_z is not None and (rr_z["job_restarts"] or rr_z["suspended"]):
            self.fail(["rolling_restart"], "zkwarden", "rolling_restart zkwarden: %d job restarts, %d SUSPENDED "
                      "(want 0)" % (rr_z["job_restarts"], rr_z["suspended"]))
        if rr_z is not None and not rr_z.get("jm_dialed_only_sidecar", True):
            self.fail(["rolling_restart"], "zkwarden", "rolling_restart zkwarden: the JobManager dialed %s, not "
                      "only its sidecar" % rr_z["jm_dialed_ports"])
        if rr_d is not None and not (rr_d["job_restarts"] or rr_d["suspended"]):
            self.find(["rolling_restart"], "direct", "rolling_restart direct showed no job restart and no SUSPENDED")
        standby.judge(self, RECOVER_BOUND_S)
        standby.judge_reconnect(self)
        handover.judge(self)


def slow_text(z):
    """A recovery over the bound, in words that say where the time went: the
    JVM's own start (launch to its ZooKeeper connect) or what came after the
    connect (the recovery through zkwarden), and how loaded the machine was."""
    t = "jobs RUNNING %.1f s after the JobManager's launch (bound %.0f s from the launch)" % (
        z["recovered_s"], RECOVER_BOUND_S)
    if "jvm_start_s" in z:
        t += ": its JVM's start (launch to its ZooKeeper connect) %.1f s, then %.1f s from the connect to " \
             "every job RUNNING" % (z["jvm_start_s"], z["recovered_after_connect_s"])
        if "leader_after_connect_s" in z:
            t += " (its leadership %.1f s after the connect)" % z["leader_after_connect_s"]
    elif "recovered_after_connect_s" in z:
        t += ", %.1f s after its ZooKeeper connect" % z["recovered_after_connect_s"]
    else:
        t += "; no ZooKeeper connect in its log, so the JVM's start is not known"
    if "load_avg_1m" in z:
        t += "; load average (1 min) %.1f at the launch, %.1f at RUNNING, %d CPUs" % (
            z["load_avg_1m"][0], z["load_avg_1m"][1], os.cpu_count() or 0)
    return t


def _died(c):
    if not c.jm_alive():
        raise RuntimeError("the JobManager exited with %s:\n%s" % (c.jm.returncode, fc.tail(c.jm_logs[-1], 8000)))
    return False


def _admin(sidecar, path):
    import urllib.request
    try:
        with urllib.request.urlopen("http://%s:%d%s" % (fc.HOST, sidecar.admin_port, path), timeout=3) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except Exception as e:  # the report is what we read; none is a failure the judge names
        return 0, str(e)


def _log_time(text, marker):
    """Epoch seconds of the first log line with marker (Flink's log4j pattern, local time)."""
    for line in text.splitlines():
        if marker in line:
            return fc.log_time(line)
    return None


# ---------------------------------------------------------------- a run

def run_cell(args, flink, zk, scenarios, workdir, zkwarden, binaries):
    """flink, zk: (line, version); zkwarden: zkwarden_build()'s, what the run
    measures; binaries: the paths of the builds (zkwarden_build())."""
    cell = Cell(args, flink, zk, workdir)
    flink_line, zk_line = flink[0], zk[0]
    t0 = time.time()
    out = {"flink": flink[1], "flink_line": flink_line,
           "zookeeper": zk[1] + (" (Debian)" if zk_line == "debian" else ""),
           "zookeeper_line": zk_line, "session_timeout_s": args.session_timeout_s,
           "num_retained": args.num_retained, "date": datetime.date.today().isoformat(),
           "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "cpus": os.cpu_count(), "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
           "zkwarden": dict(zkwarden)}
    modes = ["direct"] if args.direct_only else ["direct", "zkwarden"]

    def step(scens, mode, fn, *a):
        cell.current = (list(scens), mode)
        fn(*a)

    try:
        cell.current = (list(scenarios), None)
        cell.prepare()
        out["maven_s"] = round(cell.maven_s, 1)
        out["cds_training_s"] = round(cell.cds_s, 1)
        # the application cluster's entry point (flink-container) is published
        # for some patch releases only: the run names the jars it ran
        out["flink_runtime"] = cell.jars.get("flink-runtime")
        out["flink_container"] = cell.jars.get("flink-container")
        # the quick run adds the standby's (a) to the cluster of S1-S3 (under a minute)
        folded = args.quick and "standby" in scenarios and bool(set(scenarios) & set(SESSION_LIFE))
        if set(scenarios) & set(SESSION_LIFE):
            for m in modes:
                step(SESSION_LIFE, m, cell.session_life, m, args.restarts, folded)
        if "pod_crash" in scenarios and not args.direct_only:
            step(["pod_crash"], "zkwarden", cell.pod_crash)
        if "observe" in scenarios and not args.direct_only:
            step(["observe"], "observe", cell.observe)
        if "application" in scenarios:
            if flink_line in fc.NO_APPLICATION_CLUSTER:
                cell.find(["application"], None, "application cluster not run: no flink-container %s on Maven "
                          "Central" % flink_line)
            else:
                for m in modes:
                    step(["application"], m, cell.application, m)
        if "s1_60s" in scenarios:
            for m in modes:
                step(["s1_60s"], m, cell.s1_60s, m)
        if "rolling_restart" in scenarios:
            # direct with Flink's default, direct with tolerate-suspended-connections, through zkwarden
            for m in modes[:1] + ["direct_tolerate"] + modes[1:]:
                step(["rolling_restart"], m, cell.rolling_restart, m)
        if "standby" in scenarios and not folded:
            for m in modes:
                step(["standby"], m, standby.standby, cell, m)
        if "reconnect" in scenarios and not args.direct_only:
            step(["reconnect"], "zkwarden", standby.reconnect, cell, args.reconnect_drops)
        for s in handover.SCENARIOS:
            for m in ("stop_start", "zkwarden") if s in scenarios and not args.direct_only else ():
                try:
                    step([s], m, handover.handover, cell, s, m, binaries)
                except sidecars.KeeperMissing as e:  # never skipped: a failure that says what to build
                    cell.fail([s], m, "%s %s: %s" % (s, m, e), handover.MUST_HOLD[(s, "zkwarden")])
        cell.current = (list(scenarios), None)
        cell.judge()
    except Exception as e:
        cell.fail(cell.current[0], cell.current[1], "error: %s" % e, RAN_TO_END)
        log(traceback.format_exc())
    finally:
        cell.close()
        procs.stop_all_started()
    if not args.direct_only:
        now = _sha256(zkwarden.get("binary_path"))
        if now != zkwarden.get("binary_sha256"):
            out["zkwarden"]["binary_sha256_at_end"] = now
            cell.fail(list(cell.results) or list(scenarios), "zkwarden", "the zkwarden binary changed during the "
                      "run (sha256 %s at the start, %s at the end)" % (zkwarden.get("binary_sha256"), now),
                      BINARY_SAME)
    out["zkwarden"].pop("binary_path", None)
    out["scenarios"] = cell.results
    out["failures"] = cell.failures
    out["failure_details"] = cell.failure_details
    out["findings"] = cell.findings
    out["finding_details"] = cell.finding_details
    out["seconds"] = round(time.time() - t0, 1)
    return out


def _sha256(path):
    """The sha256 of a file, or None when it cannot be read."""
    if not path:
        return None
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return None
    return h.hexdigest()


def zkwarden_build(args, scenarios):
    """What zkwarden the run measures and the builds it runs: (zkwarden_build's
    record, {"zkwarden", "keeper", "upgrade": paths}), building what is missing
    (sidecars.py). A keeper that cannot be had leaves "keeper_error": the
    scenarios that need it fail with it."""
    out = _describe(args.direct_only)
    binaries = {"zkwarden": out.get("binary_path")}
    if args.direct_only:
        return out, binaries
    if set(scenarios) & set(handover.NEEDS_KEEPER):
        try:
            binaries["keeper"] = sidecars.keeper_binary(binaries["zkwarden"])
            out["keeper_sha256"] = _sha256(binaries["keeper"])
        except sidecars.KeeperMissing as e:
            binaries["keeper_error"] = str(e)
            log(str(e))
    if "sidecar_upgrade" in scenarios:
        binaries["upgrade"] = sidecars.upgrade_binary(args.upgrade_bin)
        out["upgrade_binary"] = "--upgrade-bin" if args.upgrade_bin else "build/flink/zkwarden-upgrade"
        out["upgrade_binary_sha256"] = _sha256(binaries["upgrade"])
        out["upgrade_version"] = sidecars.version_of(binaries["upgrade"])
    return out, binaries


def _describe(direct_only):
    """What zkwarden the run measures: the repository's `git describe --always
    --dirty` (the harness's checkout; "unknown" without git), the binary
    ($ZKW_BIN or build/zkwarden, built when missing) and its sha256 (None with
    --direct-only)."""
    commit = "unknown"
    try:
        r = subprocess.run(["git", "-C", str(fc.REPO), "describe", "--always", "--dirty"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode == 0 and r.stdout.strip():
            commit = r.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    out = {"commit": commit, "binary": "$ZKW_BIN" if os.environ.get("ZKW_BIN") else "build/zkwarden",
           "binary_sha256": None}
    if not direct_only:
        out["binary_path"] = sidecars.zkwarden_binary()  # this machine's path: dropped from the result
        out["binary_sha256"] = _sha256(out["binary_path"])
    else:
        out["binary"] = "none (--direct-only)"
    return out


def stop_on_signals():
    """SIGTERM and SIGHUP (a CI timeout, a plain kill, a closed terminal) end
    the run as an exception does, so that every finally block stops what it
    started: the JVMs run in sessions of their own and would outlive us. A
    signal that comes while a process is being started and registered
    (fc.signals_held) ends the run right after; later signals are logged and
    ignored, so the clean-up is not cut short."""
    def handler(signum, frame):
        if fc.hold_signal(signum):
            return
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, lambda n, f: log("signal %d ignored: stopping what was started" % n))
        log("signal %d: stopping every process this run started" % signum)
        raise SystemExit(128 + signum)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="S1, S2, S3 and the standby's (a) on their cluster only "
                   "(the test run's subset)")
    p.add_argument("--matrix", action="store_true", help="every Flink line x every ZooKeeper line")
    p.add_argument("--flink", default="1.20",
                   help="a Flink line (%s: its pinned patch release) or any release of one, e.g. 1.20.1"
                   % ", ".join(fc.FLINK_LINES))
    p.add_argument("--zookeeper", default="debian",
                   help="a ZooKeeper line (%s; debian: Debian's 3.8.0 package) or any release of one, e.g. 3.8.4"
                   % ", ".join(fc.ZK_LINES))
    p.add_argument("--scenarios", help="comma list of %s" % ",".join(FULL))
    p.add_argument("--restarts", type=int, help="JobManager restarts of S2 (quick 2, else 3)")
    p.add_argument("--session-timeout-s", type=float, default=20.0)
    p.add_argument("--num-retained", type=int, default=3)
    p.add_argument("--cancel-check-s", type=float, default=20.0)
    p.add_argument("--direct-only", action="store_true", help="no zkwarden binary needed")
    p.add_argument("--json", help="write the result (one cell: one object; --matrix: a list) to this file")
    p.add_argument("--docs", help="also write the compatibility page (docs/compatibility.md) from the result")
    p.add_argument("--maven-repo", help="Maven local repository (default ~/.m2; an empty one measures a cold run)")
    p.add_argument("--zkwarden-log-level", default=os.environ.get("ZKW_LOG_LEVEL", "info"))
    p.add_argument("--workdir", help="keep every log here (default: a temporary directory, removed after a pass)")
    p.add_argument("--rounds", type=int, default=5, help="handovers of each sidecar_* scenario (zkwarden's own "
                   "crash, upgrade, restart)")
    p.add_argument("--stop-start-rounds", type=int, default=2,
                   help="rounds of their comparison: the sidecar stopped and started (0: none)")
    p.add_argument("--upgrade-bin", help="the other build of sidecar_upgrade (default: the same sources built "
                   "again with the version suffix %s)" % sidecars.UPGRADE_SUFFIX)
    p.add_argument("--reconnect-drops", type=int, default=12, help="connection drops of the reconnect scenario")
    p.add_argument("--seed", type=int, default=37, help="the random moments of the handovers")
    args = p.parse_args()
    stop_on_signals()
    # our own ZooKeeper session's reconnects in the rolling restart are no news
    logging.basicConfig(level=logging.ERROR)
    scenarios = args.scenarios.split(",") if args.scenarios else (QUICK if args.quick else FULL)
    unknown = set(scenarios) - set(FULL)
    if unknown:
        p.error("unknown scenarios %s" % sorted(unknown))
    if args.restarts is None:
        args.restarts = 2 if args.quick else 3
    if args.matrix:
        cells = [((f, fv), (z, zv)) for f, fv in fc.FLINK_LINES.items() for z, zv in fc.ZK_LINES.items()]
    else:
        cells = [(_line(args.flink, fc.FLINK_LINES, p), _line(args.zookeeper, fc.ZK_LINES, p))]
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="zkwarden-flink."))
    work.mkdir(parents=True, exist_ok=True)
    log("work directory %s" % work)
    command = canonical_command(sys.argv[1:])
    try:
        zkwarden, binaries = zkwarden_build(args, scenarios)
    except sidecars.Missing as e:
        log(str(e))
        return 2
    log("zkwarden %s, binary %s sha256 %s" % (zkwarden["commit"], zkwarden["binary"], zkwarden["binary_sha256"]))
    results = []
    try:
        for i, (f, z) in enumerate(cells):
            this = scenarios
            if args.matrix and not args.scenarios and i > 0:
                # Flink's default 60 s session timeout once in the full run (the first pair)
                this = [s for s in scenarios if s != "s1_60s"]
            log("=== Flink %s on ZooKeeper %s: %s" % (f[1], z[1], ",".join(this)))
            r = run_cell(args, f, z, this, work / ("flink-%s-zk-%s" % (f[1], z[0] if z[0] == "debian" else z[1])),
                         zkwarden, binaries)
            r["command"] = command
            results.append(r)
            if args.json:
                _write_json(args.json, results if args.matrix else r)
            print_cell(r)
    finally:
        procs.stop_all_started()
    if args.docs:
        import compatibility
        compatibility.write(args.docs, results, command)
    failed = sum(1 for r in results if r["failures"])
    if failed == 0 and not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    elif failed:
        log("logs kept in %s" % work)
    print("%d passed, %d failed" % (len(results) - failed, failed))
    return 1 if failed else 0


# Options that name files of this machine: left out of the command a result records.
LOCAL_OPTIONS = ("--workdir", "--json", "--docs", "--maven-repo", "--upgrade-bin")


def canonical_command(argv):
    """The command that made a result, without this machine's paths."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in LOCAL_OPTIONS:
            skip = True
        elif not a.startswith(tuple(o + "=" for o in LOCAL_OPTIONS)):
            out.append(a)
    return " ".join(["tests/flink/run.sh"] + out)


def _line(v, table, p):
    """(line, version) of a line name or a release (X.Y.Z of a known line)."""
    if v in table:
        return v, table[v]
    m = re.fullmatch(r"(\d+\.\d+)\.\d+", v)
    if m and m.group(1) in table:
        return m.group(1), v
    p.error("unknown version %s (a line of %s, or a release of one)" % (v, ", ".join(table)))


def _write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def print_cell(r):
    print("Flink %s, ZooKeeper %s, session timeout %.0f s (%.0f s)" % (r["flink"], r["zookeeper"],
                                                                    r["session_timeout_s"], r["seconds"]))
    for s, modes in r["scenarios"].items():
        for m, fig in modes.items():
            print("  %-16s %-9s %s" % (s, m, json.dumps(fig, sort_keys=True)))
    for f in r["findings"]:
        print("  finding: " + f)
    for f in r["failures"]:
        print("  FAILED: " + f)
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
