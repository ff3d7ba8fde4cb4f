"""Incident drills: Flink-like JobManagers (tests/flinklike) against a 3-server
ZooKeeper ensemble, each JM through its own zkwarden sidecar ("zkwarden") or
straight to the ensemble ("direct", the baseline). See tests/drills/README.md.

Run it with tests/drills/run.sh; this file needs /usr/bin/python3 (kazoo).
"""

import argparse
import json
import logging
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import procs
from procs import Ensemble, JM, Sidecar, wait_until

try:
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError
except ImportError:  # pragma: no cover
    sys.exit("drill: kazoo is missing: run under /usr/bin/python3 with python3-kazoo installed")

JOB = "a5b1c0de0f1e2d3c4b5a69788796a5b4"
SESSION_TIMEOUT_MS = 20000
CHECKPOINT_MS = 100
NUM_RETAINED = 10
LEADER_TARGET_MS = 1000
# Scenario 2b: a new sidecar whose predecessor died waits for the dead one's
# registry session to expire before it owns the identity and may fence. zkwarden
# asks for this timeout (ZKW_REGISTRY_SESSION_MS in proxy/sidecar/identity/zkw_registry.h); the
# servers clamp it to [minSessionTimeout, maxSessionTimeout]. The bound on
# leadership is what the server granted plus this margin.
REGISTRY_SESSION_REQUESTED_MS = 4000
NODE_CRASH_MARGIN_MS = 2000
# Lines of the JM's ZooKeeper client log that mean a reply came out of order or
# was malformed: the client drops the connection on them.
REORDER_MARKERS = ("Xid out of order", "Unexpected reply", "Packet len", "Unreasonable length",
                   "Nothing in the queue, but got")

SCENARIOS = {
    "restart": "1. leader kill -9, restarted at once",
    "pod-restart": "2. pod restart: leader kill -9, its sidecar SIGTERM, both restarted",
    "node-crash": "2b. node crash: leader and its sidecar kill -9, both restarted",
    "superseded": "3. superseded incarnation alive with its locks",
    "failover-cancel": "4. failover, old leader restarted as standby, cancel",
    "zk-restart": "5. ZooKeeper server restart mid-checkpointing",
}

# Scenarios about the sidecar itself: without one they are scenario 1.
SIDECAR_ONLY = ("pod-restart", "node-crash")
# Modes run through sidecars, and their ZKWARDEN_MODE. observe (--observe):
# zkwarden must change nothing (the baseline's incident shows) and report
# every fence and delete of the zkwarden run as a would-action.
SIDECAR_MODES = {"zkwarden": "sidecar", "observe": "observe"}

log = logging.getLogger("drill")


class DrillError(Exception):
    pass


def now_ms():
    return int(time.time() * 1000)


# ---------------------------------------------------------------- ZooKeeper views

class Inspector:
    """The drill's own ZooKeeper session, straight to the ensemble: reads the
    stores and performs the fault injections."""

    def __init__(self, connect, **tls):
        self.zk = KazooClient(hosts=connect, timeout=15.0, **tls)
        self.zk.start(timeout=30)

    def close(self):
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:
            pass

    def children(self, path):
        try:
            return self.zk.get_children(path)
        except NoNodeError:
            return []

    def stat(self, path):
        try:
            return self.zk.exists(path)
        except NoNodeError:
            return None

    def locks_of(self, state_path, layout):
        """[(lock path, ephemeralOwner)] of one state node."""
        base = state_path if layout == "1.7" else state_path + "/locks"
        out = []
        for c in self.children(base):
            st = self.stat(base + "/" + c)
            if st is not None:
                out.append((base + "/" + c, st.ephemeralOwner))
        return out

    def scan(self, ns, layout):
        # The inspector's server may be a follower behind the leader's last
        # writes: without the sync, the full drill once read a checkpoint the
        # JobManager had just subsumed (and not the one it had just added)
        # and counted it as leaked.
        self.zk.sync(ns)
        cp_root = ns + ("/checkpoints/%s" % JOB if layout == "1.7" else "/jobs/%s/checkpoints" % JOB)
        jg = ns + ("/jobgraphs/" if layout == "1.7" else "/execution-plans/") + JOB
        checkpoints = {}
        marked = set()
        for c in self.children(cp_root):
            try:
                cid = int(c)
            except ValueError:
                continue
            checkpoints[cid] = self.locks_of(cp_root + "/" + c, layout)
            if layout != "1.7" and self.stat(cp_root + "/" + c + "/locks") is None:
                # numChildren == 0: "marked for deletion", non-existent for Flink
                marked.add(cid)
        jst = self.stat(jg)
        return {
            "checkpoints": checkpoints,
            "marked": marked,
            "jobgraph_exists": jst is not None,
            "jobgraph_children": jst.numChildren if jst is not None else 0,
            "jobgraph_locks": self.locks_of(jg, layout) if jst is not None else [],
        }

    def latch_nodes(self, ns, layout):
        if layout == "1.7":
            roots = [ns + "/leaderlatch/" + c for c in ("dispatcher_lock", "resource_manager_lock",
                                                         "rest_server_lock")]
            roots.append(ns + "/leaderlatch/%s/job_manager_lock" % JOB)
        else:
            roots = [ns + "/leader/latch"]
        out = []
        for r in roots:
            for c in self.children(r):
                st = self.stat(r + "/" + c)
                if st is not None:
                    out.append((r + "/" + c, st.ephemeralOwner))
        return out

    def delete_latch_nodes_of(self, ns, layout, session):
        """The fault injection of scenarios 3 and 4: the latch nodes of a session
        that is still alive are deleted by name, as Curator's LeaderLatch does when
        it moves to a new session (flink-zk-ha.md §3, case (b)). Its locks stay."""
        n = 0
        for path, owner in self.latch_nodes(ns, layout):
            if owner == session:
                try:
                    self.zk.delete(path)
                    n += 1
                except NoNodeError:
                    pass
        return n


def sid(hexstr):
    return int(hexstr, 16) if hexstr else 0


# ---------------------------------------------------------------- one scenario run

class Run:
    """One scenario in one layout and one mode, in its own cluster id (namespace)."""

    def __init__(self, d, scenario, layout, mode):
        self.d = d
        self.scenario = scenario
        self.layout = layout
        self.mode = mode
        self.tag = "%s-%s-%s" % (scenario, layout.replace(".", ""), mode)
        self.cluster = self.tag
        self.ns = "/flink/" + self.cluster
        self.dir = d.workdir / self.tag
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sidecars = {}
        self.jms = {}
        self.retired = []
        self.retired_sidecars = []
        self.error_kinds = {}
        self.notempty_total = 0
        self.cycles = []
        self.notes = []
        self.failures = []
        self.result = None
        self.t0 = time.time()

    # --- processes

    def sidecar(self, name):
        if self.mode not in SIDECAR_MODES:
            return None
        if name not in self.sidecars:
            # Every action, done or would-be, goes to an audit file per sidecar
            # (it outlives the sidecar's restarts): the run's record of actions.
            env = {"ZKWARDEN_ORPHAN_GRACE_MS": str(self.d.args.orphan_grace_ms),
                   "ZKWARDEN_MODE": SIDECAR_MODES[self.mode],
                   "ZKWARDEN_AUDIT_FILE": str(self.dir / "sidecars" / ("audit-%s.jsonl" % name))}
            env.update(self.d.tls_env)
            sc = Sidecar(self.dir / "sidecars", name, self.d.ens.connect, "/zkwarden-" + self.cluster,
                         log_level=self.d.args.zkwarden_log_level, extra_env=env)
            sc.start()
            self.sidecars[name] = sc
        return self.sidecars[name]

    def storage(self):
        return self.dir / "storage" / self.cluster

    def new_cluster(self, cluster):
        """Stops every process and moves on to a fresh namespace (and registry)."""
        self.stop_all()
        self.retired.extend(self.jms.values())
        self.retired_sidecars.extend(self.sidecars.values())
        self.jms = {}
        self.sidecars = {}
        self.cluster = cluster
        self.ns = "/flink/" + cluster

    def jm(self, name, submit=False, extra=()):
        if name not in self.jms:
            sc = self.sidecar(name)
            connect = sc.hostport if sc else self.d.ens.connect
            args = ["--layout=" + self.layout, "--cluster-id=/" + self.cluster, "--job-id=" + JOB,
                    "--checkpoint-interval-ms=%d" % CHECKPOINT_MS, "--num-retained=%d" % NUM_RETAINED,
                    "--session-timeout-ms=%d" % SESSION_TIMEOUT_MS,
                    "--storage-dir=%s" % self.storage(),
                    "--rpc-host=%s.jm.local" % name]
            if not self.d.args.ensemble_tracker:
                args.append("--ensemble-tracker=false")
            self.jms[name] = JM(name, self.dir / "jms" / self.cluster, self.d.classpath, connect, args)
        j = self.jms[name]
        j.start(["--submit-job"] if submit else [])
        return j

    def stop_all(self):
        """Graceful stops (SIGTERM), all JMs at once, then all sidecars."""
        jms = [j for j in self.jms.values() if j.alive()]
        for j in jms:
            j.terminate()
        for j in jms:
            j.stop(grace=10)
        scs = [sc for sc in self.sidecars.values() if sc.alive()]
        for sc in scs:
            sc.terminate()
        for sc in scs:
            sc.stop()

    # --- waits and measurements

    def leader(self, since_ms=0, min_added=NUM_RETAINED + 1, timeout=None):
        """Waits for a JM (alive, latest incarnation) whose job master got
        leadership after since_ms and has added min_added checkpoints since."""
        timeout = timeout or (SESSION_TIMEOUT_MS / 1000.0 + 40)

        def find():
            for j in self.jms.values():
                if not j.alive() or j.stopped_state:
                    continue
                s = j.stats()
                if (s.get("job_master_leader") and s.get("job_state") == "RUNNING"
                        and s.get("job_master_epoch_ms", 0) >= since_ms
                        and s.get("master_added", 0) >= min_added):
                    return j, s
            return None
        return wait_until(find, timeout, interval=0.05, what="%s: a leader running the job" % self.tag)

    def current_sessions(self):
        out = set()
        for j in self.jms.values():
            if j.alive() and not j.stopped_state and not getattr(j, "frozen", False):
                s = j.stats()
                if s.get("session_id"):
                    out.add(sid(s["session_id"]))
        return out

    def paused_scan(self, leader_jm):
        """Pauses the leader's checkpointing, reads the store, resumes."""
        leader_jm.control("pause")
        seq = leader_jm.control_seq
        s = leader_jm.wait_stats(lambda s: s.get("checkpoints_paused") and s.get("control_seq") == seq, 10,
                                 "checkpointing paused")
        view = self.d.insp.scan(self.ns, self.layout)
        leader_jm.control("resume")
        return s, view

    def measure(self, view, retained):
        live = self.current_sessions()
        retained = set(retained or [])
        # A state node a JM left "marked for deletion" (killed or frozen between
        # delete(p/locks) and delete(p)) is skipped by every later recovery: a Flink
        # leak, but no lock is involved and zkwarden must never delete state nodes.
        # It is counted on its own, not as a lock leak.
        marked = sorted(c for c in view["checkpoints"] if c not in retained and c in view["marked"])
        leaked = sorted(c for c in view["checkpoints"] if c not in retained and c not in view["marked"])
        stale = []
        for cid, locks in view["checkpoints"].items():
            stale += [p for p, owner in locks if owner not in live]
        stale += [p for p, owner in view["jobgraph_locks"] if owner not in live]
        return {"leaked": len(leaked), "leaked_ids": leaked[:20], "marked_left": len(marked),
                "marked_ids": marked[:20], "stale": len(stale),
                "stale_paths": stale[:10], "state_nodes": len(view["checkpoints"])}

    def jm_totals(self):
        """Errors and reordered replies over every incarnation of every JM."""
        errors = 0
        reordered = 0
        unhandled = 0
        bypassed = []
        for j in list(self.jms.values()) + self.retired:
            for n in range(1, j.n + 1):
                s = j.stats(n)
                errors += s.get("errors_total", 0)
                self.notempty_total += s.get("notempty", 0)
                for k, v in (s.get("errors") or {}).items():
                    self.error_kinds["%s x%d (%s#%d)" % (k, v, j.name, n)] = 1
                unhandled += s.get("unhandled_errors", 0)
                text = j.log_text(n)
                reordered += sum(text.count(m) for m in REORDER_MARKERS)
                # through zkwarden the JM must only ever talk to its sidecar
                if self.mode in SIDECAR_MODES and any(x != j.connect for x in s.get("servers_seen", [])):
                    bypassed.append("%s#%d" % (j.name, n))
        return errors, reordered, unhandled, bypassed

    def actions(self):
        """{(kind, "done" | "would" | "failed"): count} from every sidecar's
        audit file of this run (a step that failed is neither done nor would:
        a server restarted under a sweep fails its reads in sidecar mode too)."""
        out = {}
        for sc in list(self.sidecars.values()) + self.retired_sidecars:
            path = sc.dir / ("audit-%s.jsonl" % sc.identity)
            if not path.exists():
                continue
            for line in path.read_text().splitlines():
                a = json.loads(line)
                k = (a["kind"], "done" if a["done"] else "would" if a.get("would") else "failed")
                out[k] = out.get(k, 0) + 1
        return out

    def sidecar_problems(self):
        out = []
        for sc in list(self.sidecars.values()) + self.retired_sidecars:
            name = sc.identity
            if sc.proc is not None and sc.proc.poll() is not None and sc.proc.returncode not in (0, -9):
                out.append("zkwarden %s exited with %s" % (name, sc.proc.returncode))
            for how, status in sc.exits:
                if how == "SIGTERM" and status != 0:
                    out.append("zkwarden %s exited with %s on SIGTERM" % (name, status))
            text = procs.tail(sc.log, limit=2_000_000)
            for m in procs.zkharness.SANITIZER_MARKERS:
                if m in text:
                    out.append("zkwarden %s log contains %r" % (name, m))
        return out


# ---------------------------------------------------------------- scenarios

def registry_session(r, sc):
    """(session, timeout the server granted) of the registry session that owns
    sc's identity, read from the owner node and the servers' cons; None if unknown."""
    st = r.d.insp.stat("%s/identities/%s/owner" % (sc.registry_root, sc.identity))
    if st is None or not st.ephemeralOwner:
        return None, None
    return st.ephemeralOwner, r.d.ens.session_timeout(st.ephemeralOwner)


def scenario_restart(r, cycles, pod=None):
    """1/2/2b: two JMs; each cycle the leader is killed -9 and restarted at once.
    pod="pod-restart": its sidecar is stopped with SIGTERM (the pod is replaced)
    and started again before the JM; pod="node-crash": the sidecar is killed -9
    too (the node died), then both start again."""
    r.jm("jm-0", submit=True)
    r.leader(0, min_added=0)  # jm-0 runs the job: jm-1 joins as the standby
    j1 = r.jm("jm-1")
    j1.wait_stats(lambda s: s.get("connected"), 30, "connected")
    for c in range(1, cycles + 1):
        lj, ls = r.leader(0, min_added=NUM_RETAINED + 1)
        old_sid = ls.get("session_id")
        sc = r.sidecars.get(lj.name) if pod and r.mode == "zkwarden" else None
        bound = LEADER_TARGET_MS
        reg = {}
        if sc is not None and pod == "node-crash":
            # the dead sidecar's registry session is what the new one waits for
            reg_sid, granted = registry_session(r, sc)
            expected = r.d.ens.granted_timeout(REGISTRY_SESSION_REQUESTED_MS)
            reg = {"registry_session": hex(reg_sid or 0), "registry_timeout_ms": granted,
                   "registry_timeout_expected_ms": expected}
            if granted is None:
                r.notes.append("cycle %d: the registry session's timeout was not found in cons; bound from "
                               "the expected %d ms" % (c, expected))
            bound = (granted or expected) + NODE_CRASH_MARGIN_MS
        t_kill = now_ms()
        lj.kill9()
        if sc is not None:
            if pod == "node-crash":
                sc.kill9()
            else:
                sc.stop()
            sc.start()
        lj.start()
        t_start = now_ms()
        nl, ns = r.leader(t_kill)
        rs = lj.wait_stats(lambda s: s.get("connected_epoch_ms"), 30, "connected")
        to_leader = ns["leader_epoch_ms"] - rs["connect_start_epoch_ms"]
        s, view = r.paused_scan(nl)
        m = r.measure(view, s.get("retained"))
        cyc = {"cycle": c, "killed": lj.name, "killed_session": old_sid, "new_leader": nl.name,
               "to_leader_ms": to_leader, "connect_ms": rs["connected_epoch_ms"] - rs["connect_start_epoch_ms"],
               "kill_to_leader_ms": ns["leader_epoch_ms"] - t_kill,
               "restart_to_leader_ms": ns["leader_epoch_ms"] - t_start,
               "notempty": sum(j.stats().get("notempty", 0) for j in r.jms.values() if j.alive()),
               "recovered": s.get("recovered"), "bound_ms": bound}
        cyc.update(reg)
        if sc is not None:
            owned = sc.owned_at()
            # when the new sidecar owned the identity (it may fence only from then on)
            cyc["sidecar_owned_after_kill_ms"] = int(owned * 1000) - t_kill if owned else None
            cyc["sidecar_owned_after_start_ms"] = int((owned - sc.started_at) * 1000) if owned else None
        cyc.update(m)
        r.cycles.append(cyc)
        log.info("%s cycle %d: killed %s%s, %s leads %d ms after the restarted JM began to connect "
                 "(%ssession established after %d ms; %d ms after the kill%s); leaked %d, stale %d",
                 r.tag, c, lj.name,
                 "" if sc is None else " and %s its sidecar" % ("killed -9" if pod == "node-crash" else "SIGTERMed"),
                 nl.name, cyc["to_leader_ms"], "bound %d; " % bound if r.mode == "zkwarden" else "",
                 cyc["connect_ms"], cyc["kill_to_leader_ms"],
                 "" if sc is None else "; new sidecar owned the identity %s ms after the kill, %s ms after its start"
                 % (cyc["sidecar_owned_after_kill_ms"], cyc["sidecar_owned_after_start_ms"]),
                 m["leaked"], m["stale"])
        if r.d.args.quick and r.mode == "zkwarden" and cyc["to_leader_ms"] > bound:
            r.notes.append("stopped after cycle %d: leadership took %d ms (bound %d)"
                           % (c, cyc["to_leader_ms"], bound))
            break


def latch_injection(r):
    """Scenarios 3 and 4 delete the old session's latch nodes in the baseline
    only: without a sidecar that is the state that leaks (README.md, "Why"). Through
    zkwarden the old session keeps its latch nodes: the new incarnation can lead
    at once only if zkwarden fences it, hung (scenario 3) or dead (4)."""
    return r.mode in ("direct", "observe") and not r.d.args.no_latch_injection


def scenario_superseded(r, cycles):
    """3: the old incarnation of jm-0 is frozen (SIGSTOP) with its session and
    locks; its latch nodes are removed; a new incarnation starts and subsumes."""
    j0 = r.jm("jm-0", submit=True)
    r.leader(0)
    for c in range(1, cycles + 1):
        s_old = j0.stats()
        old_sid = sid(s_old.get("session_id"))
        old_n = j0.n
        frozen = j0.proc
        j0.sigstop()
        removed = r.d.insp.delete_latch_nodes_of(r.ns, r.layout, old_sid) if latch_injection(r) else 0
        t = now_ms()
        # The new incarnation: same identity, same sidecar, a new process. The
        # frozen one stays tracked (by pid) until the end of the cycle.
        j0.proc = None
        j0.start()
        nl, ns = r.leader(t)
        rs = j0.wait_stats(lambda s: s.get("connected_epoch_ms"), 30, "connected")
        s, view = r.paused_scan(nl)
        m = r.measure(view, s.get("retained"))
        cyc = {"cycle": c, "old_incarnation": old_n, "old_session": hex(old_sid),
               "latch_nodes_removed": removed, "to_leader_ms": ns["leader_epoch_ms"] - rs["connect_start_epoch_ms"],
               "notempty": s.get("notempty", 0), "recovered": s.get("recovered")}
        cyc.update(m)
        r.cycles.append(cyc)
        log.info("%s cycle %d: old #%d frozen (%d latch nodes removed), new #%d leads %d ms after it began to connect; "
                 "NOTEMPTY %d, leaked %d, stale %d", r.tag, c, old_n, removed, j0.n, cyc["to_leader_ms"],
                 cyc["notempty"], m["leaked"], m["stale"])
        # end of the cycle: the frozen process dies (kill -9)
        try:
            os.kill(frozen.pid, signal.SIGKILL)
        except OSError:
            pass
        frozen.wait(10)
        procs._untrack(frozen)


def scenario_failover_cancel(r, cycles):
    """4: jm-0 leads, jm-1 stands by; jm-0 is killed -9 and restarted at once as
    standby, the old session's latch nodes are removed if it still lives (so jm-1
    leads while that session's locks stay); jm-1 cancels the job."""
    for c in range(1, cycles + 1):
        if c > 1:
            # a fresh job in a fresh namespace for every cycle
            r.new_cluster("%s-%d" % (r.tag, c))
        j0 = r.jm("jm-0", submit=True)
        r.leader(0, min_added=0)  # jm-0 runs the job: jm-1 joins as the standby
        j1 = r.jm("jm-1")
        j1.wait_stats(lambda s: s.get("connected"), 30, "connected")
        r.leader(0)  # jm-0 with its retained checkpoints, all locked by its session
        old_sid = sid(j0.stats().get("session_id"))
        t_kill = now_ms()
        j0.kill9()
        j0.start()
        rs = j0.wait_stats(lambda s: s.get("connected_epoch_ms"), 30, "connected")
        removed = r.d.insp.delete_latch_nodes_of(r.ns, r.layout, old_sid) if latch_injection(r) else 0
        nl, ns = r.leader(t_kill)
        s, view = r.paused_scan(nl)
        m = r.measure(view, s.get("retained"))
        nl.control("cancel")
        nl.wait_stats(lambda s: s.get("cancelled") and s.get("jobgraph_remove_attempts", 0) >= 1, 30,
                      "cancel and first job graph removal")
        time.sleep(r.d.args.cancel_check_s)
        after = r.d.insp.scan(r.ns, r.layout)
        fs = nl.stats()
        left = after["jobgraph_exists"] and not (r.layout == "current" and after["jobgraph_children"] == 0)
        cyc = {"cycle": c, "old_session": hex(old_sid), "latch_nodes_removed": removed,
               "new_leader": nl.name,
               "to_leader_ms": ns["leader_epoch_ms"] - rs["connect_start_epoch_ms"],
               "connect_ms": rs["connected_epoch_ms"] - rs["connect_start_epoch_ms"],
               "notempty": s.get("notempty", 0),
               "jobgraph_left": 1 if left else 0,
               "jobgraph_notempty": fs.get("jobgraph_notempty", 0),
               "jobgraph_remove_attempts": fs.get("jobgraph_remove_attempts", 0),
               "checkpoints_after_cancel": len(after["checkpoints"]),
               # state files of the job still there after the cancel: never discarded
               "state_files_left": count_state_files(r.storage())}
        cyc.update(m)
        if r.d.args.wait_cleanup and left and r.layout == "current":
            # the current layout retries: how long until the execution plan goes?
            try:
                fin = nl.wait_stats(lambda s: s.get("jobgraph_removed"), SESSION_TIMEOUT_MS / 1000.0 + 40,
                                    "execution plan removed")
                cyc["jobgraph_removed_after_ms"] = fin.get("jobgraph_removed_after_ms")
            except TimeoutError:
                cyc["jobgraph_removed_after_ms"] = None
        r.cycles.append(cyc)
        log.info("%s cycle %d: %s leads %d ms after the restarted jm-0 began to connect (%d latch nodes removed); "
                 "NOTEMPTY %d, leaked %d, stale %d; after cancel: job graph %s (%d NOTEMPTY)",
                 r.tag, c, nl.name, cyc["to_leader_ms"], removed, cyc["notempty"], m["leaked"], m["stale"],
                 "LEFT" if left else "removed", cyc["jobgraph_notempty"])


def count_state_files(storage):
    d = storage / JOB
    if not d.is_dir():
        return 0
    return sum(1 for f in d.iterdir() if f.name.startswith("chk-"))


def scenario_zk_restart(r, cycles):
    """5: the ZooKeeper server that holds the leader's connection is restarted
    while the leader checkpoints."""
    r.jm("jm-0", submit=True)
    r.leader(0, min_added=0)  # jm-0 runs the job: jm-1 joins as the standby
    j1 = r.jm("jm-1")
    j1.wait_stats(lambda s: s.get("connected"), 30, "connected")
    for c in range(1, cycles + 1):
        lj, ls = r.leader(0)
        added_before = sum(j.stats().get("added", 0) for j in r.jms.values() if j.alive())
        server = r.d.ens.server_of_session(ls.get("session_id", ""))
        if server is None:
            raise DrillError("no server shows session %s in cons" % ls.get("session_id"))
        was_leader = r.d.ens.leader_id() == server
        t = now_ms()
        r.d.ens.restart_server(server, down_for=r.d.args.zk_down_s)

        def progressed():
            tot = sum(j.stats().get("added", 0) for j in r.jms.values() if j.alive())
            return tot >= added_before + NUM_RETAINED + 1
        wait_until(progressed, SESSION_TIMEOUT_MS / 1000.0 + 40, interval=0.1,
                   what="%s: checkpoints after the server restart" % r.tag)
        nl, ns = r.leader(0, min_added=1)
        s, view = r.paused_scan(nl)
        m = r.measure(view, s.get("retained"))
        # leaderless gap: from the revoke (after the restart began) to the next grant
        revokes = [j.stats().get("revoke_epoch_ms", 0) for j in r.jms.values() if j.alive()]
        revokes = [x for x in revokes if x >= t]
        gap = ns["leader_epoch_ms"] - min(revokes) if revokes and ns.get("leader_epoch_ms", 0) > t else 0
        cyc = {"cycle": c, "server": server, "server_was_quorum_leader": was_leader,
               "leader_after": nl.name, "to_leader_ms": gap,
               "revokes": sum(j.stats().get("revokes", 0) for j in r.jms.values() if j.alive()),
               "notempty": s.get("notempty", 0)}
        cyc.update(m)
        r.cycles.append(cyc)
        log.info("%s cycle %d: restarted zk%d (%s); leader %s (re-granted %d ms after); leaked %d, stale %d",
                 r.tag, c, server, "quorum leader" if was_leader else "follower", nl.name, gap, m["leaked"],
                 m["stale"])


# ---------------------------------------------------------------- the drill

class Drill:
    def __init__(self, args):
        self.args = args
        self.workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="zkwarden-drill."))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ens = None
        self.insp = None
        self.runs = []
        self.classpath = None
        self.tls_env = {}  # --tls: the sidecars' TLS configuration

    def setup(self):
        t = time.time()
        self.classpath = procs.build_flinklike()
        log.info("JM stand-in built (%.1f s)", time.time() - t)
        t = time.time()
        tls, insp_tls = None, {}
        if self.args.tls:
            # A TLS-only ensemble with clientAuth=need (certificates from the
            # openssl CLI); the sidecars and the drill's own session speak TLS.
            certs = procs.zkharness.TlsCerts(self.workdir / "certs")
            tls = (certs, certs.server, "need")
            client = {"ca": str(certs.ca), "certfile": str(certs.client), "keyfile": str(certs.key(certs.client))}
            insp_tls = dict(client, use_ssl=True, verify_certs=True)
            self.tls_env = {"ZKWARDEN_UPSTREAM_TLS": "on", "ZKWARDEN_TLS_CA_FILE": client["ca"],
                            "ZKWARDEN_TLS_CERT_FILE": client["certfile"], "ZKWARDEN_TLS_KEY_FILE": client["keyfile"]}
        self.ens = Ensemble(self.workdir / "ensemble", tls=tls).start()
        log.info("ensemble up in %.1f s: %s%s", time.time() - t, self.ens.connect, " (TLS only)" if tls else "")
        self.insp = Inspector(self.ens.connect, **insp_tls)

    def teardown(self):
        if self.insp:
            self.insp.close()
        procs.stop_all_started()

    def run_one(self, scenario, layout, mode):
        r = Run(self, scenario, layout, mode)
        self.runs.append(r)
        cycles = self.args.cycles
        log.info("=== %s / %s / %s", SCENARIOS[scenario], layout, mode)
        try:
            if scenario == "restart":
                scenario_restart(r, cycles)
            elif scenario in SIDECAR_ONLY:
                scenario_restart(r, cycles, pod=scenario)
            elif scenario == "superseded":
                scenario_superseded(r, self.args.repeat)
            elif scenario == "failover-cancel":
                scenario_failover_cancel(r, self.args.repeat)
            elif scenario == "zk-restart":
                scenario_zk_restart(r, self.args.repeat)
        except Exception as e:
            r.failures.append("%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
            log.error("%s failed: %s", r.tag, e)
            log.debug("%s", traceback.format_exc())
        finally:
            try:
                errors, reordered, unhandled, bypassed = r.jm_totals()
            except Exception as e:  # measurement must not hide the scenario's own failure
                errors, reordered, unhandled, bypassed = -1, -1, -1, []
                r.failures.append("totals: %s" % e)
            r.stop_all()
            problems = r.sidecar_problems()
            r.result = summarize(r, errors, reordered, unhandled, bypassed, problems)
            acts = r.actions()
            r.result["done_actions"] = {k: n for (k, d), n in sorted(acts.items()) if d == "done"}
            r.result["would_actions"] = {k: n for (k, d), n in sorted(acts.items()) if d == "would"}
            r.result["failed_actions"] = {k: n for (k, d), n in sorted(acts.items()) if d == "failed"}
            r.elapsed = time.time() - r.t0
            log.info("--- %s done in %.0f s: %s", r.tag, r.elapsed, json.dumps(r.result))
        return r


def summarize(r, errors, reordered, unhandled, bypassed, problems):
    cy = r.cycles
    to = [c["to_leader_ms"] for c in cy if c.get("to_leader_ms") is not None]
    res = {
        "scenario": r.scenario, "layout": r.layout, "mode": r.mode, "cycles": len(cy),
        # leaks and stale locks can persist from one cycle to the next: the
        # worst cycle end, not a sum
        "leaked": max([c.get("leaked", 0) for c in cy] or [0]),
        "leaked_last": cy[-1].get("leaked", 0) if cy else 0,
        "notempty": r.notempty_total,
        "stale": max([c.get("stale", 0) for c in cy] or [0]),
        "jobgraph_left": sum(c.get("jobgraph_left", 0) for c in cy) if r.scenario == "failover-cancel" else None,
        "to_leader_ms_median": int(statistics.median(to)) if to else None,
        "to_leader_ms_max": max(to) if to else None,
        "to_leader_ms_min": min(to) if to else None,
        "errors": errors, "reordered": reordered, "unhandled": unhandled,
        "bypassed": bypassed, "failures": r.failures + problems, "notes": r.notes,
    }
    if r.scenario == "failover-cancel":
        res["jobgraph_removed_after_ms"] = [c.get("jobgraph_removed_after_ms") for c in cy
                                            if "jobgraph_removed_after_ms" in c]
    kill = [c["kill_to_leader_ms"] for c in cy if c.get("kill_to_leader_ms") is not None]
    res["kill_to_leader_ms_min"] = min(kill) if kill else None
    res["leader_bound_ms"] = min([c["bound_ms"] for c in cy if "bound_ms" in c] or [LEADER_TARGET_MS])
    if r.scenario == "node-crash" and cy:
        granted = sorted({c.get("registry_timeout_ms") for c in cy})
        res["registry_timeout_ms"] = granted
        kill = [c["kill_to_leader_ms"] for c in cy]
        owned = [c.get("sidecar_owned_after_kill_ms") for c in cy if c.get("sidecar_owned_after_kill_ms")]
        r.notes.append("registry session timeout granted by the server: %s ms (requested %d; this ensemble: "
                       "tickTime %d, minSessionTimeout %d, maxSessionTimeout %d, so %d expected); bound %d ms = "
                       "granted + %d; from the kill: new sidecar owned the identity after %s ms, leader after "
                       "median %d / max %d ms"
                       % ("/".join(fmt(g) for g in granted), REGISTRY_SESSION_REQUESTED_MS, r.d.ens.tick_ms,
                          r.d.ens.min_session_ms, r.d.ens.max_session_ms, cy[0].get("registry_timeout_expected_ms"),
                          res["leader_bound_ms"], NODE_CRASH_MARGIN_MS, "/".join(str(x) for x in owned),
                          int(statistics.median(kill)), max(kill)))
    if r.scenario == "pod-restart" and cy:
        owned = [c.get("sidecar_owned_after_start_ms") for c in cy]
        r.notes.append("the restarted sidecar owned the identity %s ms after it started (its predecessor, "
                       "stopped with SIGTERM, released it)" % "/".join(fmt(x) for x in owned))
    res["error_kinds"] = sorted(r.error_kinds)
    res["marked_left"] = sum(c.get("marked_left", 0) for c in cy)
    if res["marked_left"]:
        r.notes.append("%d checkpoint state node(s) left marked for deletion by a kill/freeze mid-removal "
                       "(not a lock leak)" % res["marked_left"])
    if r.scenario == "failover-cancel":
        res["state_files_left"] = sum(c.get("state_files_left", 0) for c in cy)
    return res


# ---------------------------------------------------------------- verdicts

def verdict(res, args):
    """(ok, reasons) of one result against what its mode must show."""
    why = []
    if res["failures"]:
        why += res["failures"]
    if res["cycles"] == 0:
        why.append("no cycle completed")
        return False, why
    sc = res["scenario"]
    if res["mode"] == "observe":
        # Exactly the baseline's incident, nothing done, the actions reported.
        base = dict(res, mode="direct")
        why += verdict(base, args)[1]
        if res.get("done_actions"):
            why.append("observe mode did actions: %s" % res["done_actions"])
        if sc in ("restart", "superseded", "failover-cancel") and not res.get("would_actions", {}).get("fence"):
            why.append("observe mode reported no would-fence")
        if res["bypassed"]:
            why.append("JM left the sidecar (ensemble tracker): %s" % ",".join(res["bypassed"]))
        return not why, why
    if res["mode"] == "zkwarden":
        if res["leaked"]:
            why.append("%d leaked checkpoint znodes" % res["leaked"])
        if res["stale"]:
            why.append("%d stale locks" % res["stale"])
        if res["jobgraph_left"]:
            why.append("job graph left after cancel")
        if sc in ("restart", "pod-restart", "superseded", "failover-cancel") and \
                (res["to_leader_ms_max"] or 0) > LEADER_TARGET_MS:
            why.append("leadership after %d ms (target %d)" % (res["to_leader_ms_max"], LEADER_TARGET_MS))
        if sc == "node-crash":
            bound = res["leader_bound_ms"]
            if (res["to_leader_ms_max"] or 0) > bound:
                why.append("leadership after %d ms (bound %d: registry session timeout + %d)"
                           % (res["to_leader_ms_max"], bound, NODE_CRASH_MARGIN_MS))
            if bound >= SESSION_TIMEOUT_MS / 2:
                why.append("bound %d ms is not far below the JM session timeout %d" % (bound, SESSION_TIMEOUT_MS))
        if res["reordered"]:
            why.append("%d reordered/malformed replies seen by the JM" % res["reordered"])
        if res["bypassed"]:
            why.append("JM left the sidecar (ensemble tracker): %s" % ",".join(res["bypassed"]))
        if sc != "zk-restart" and res["errors"]:
            why.append("%d failed requests seen by the JM" % res["errors"])
        if res.get("would_actions"):
            why.append("sidecar mode reported would-actions: %s" % res["would_actions"])
    else:
        # The baseline must show the incident, or the drill cannot fail.
        # The old session expires a session timeout after the kill, however long
        # the restarted JVM took to start: the wait is judged from the kill.
        if sc == "restart" and (res["kill_to_leader_ms_min"] or 0) < 0.75 * SESSION_TIMEOUT_MS:
            why.append("baseline did not wait for the session timeout (min %s ms from the kill)"
                       % res["kill_to_leader_ms_min"])
        if sc == "superseded" and not res["leaked"]:
            why.append("baseline shows no leaked checkpoint")
        if sc == "failover-cancel" and not res["jobgraph_left"]:
            why.append("baseline shows no job graph left after cancel")
        if res["reordered"]:
            why.append("%d reordered/malformed replies seen by the JM (direct!)" % res["reordered"])
    return not why, why


def fmt(v):
    if v is None:
        return "–"
    return str(v)


def table(results):
    lines = ["| scenario | layout | mode | cycles | leaked znodes (worst cycle / last) | NOTEMPTY on subsume "
             "(total) | stale locks (worst cycle) | job graph left after cancel | to leader, ms (median / max) | "
             "JM failed requests | reordered | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        ok, why = res["verdict"]
        lines.append("| %s | %s | %s | %d | %d (%d) | %d | %d | %s | %s / %s | %d | %d | %s |" % (
            SCENARIOS[res["scenario"]], res["layout"], res["mode"], res["cycles"], res["leaked"],
            res["leaked_last"], res["notempty"], res["stale"], fmt(res["jobgraph_left"]),
            fmt(res["to_leader_ms_median"]), fmt(res["to_leader_ms_max"]), res["errors"], res["reordered"],
            "ok" if ok else "FAIL: " + "; ".join(why)))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(prog="tests/drills/run.sh", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="both layouts, 3 cycles, pass/fail exit code")
    ap.add_argument("--direct-only", action="store_true", help="only the baseline (no zkwarden)")
    ap.add_argument("--zkwarden-only", action="store_true", help="only through zkwarden")
    ap.add_argument("--layouts", default="1.7,current")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--cycles", type=int, default=None, help="kill/restart cycles (quick 3, full 50)")
    ap.add_argument("--repeat", type=int, default=None,
                    help="repetitions of scenarios 3-5 (quick 1, full 10)")
    ap.add_argument("--workdir", default=None, help="default: a new /tmp/zkwarden-drill.* (kept on failure)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--json", default=None, help="write every result and cycle to this file")
    ap.add_argument("--no-ensemble-tracker", dest="ensemble_tracker", action="store_false",
                    help="start the JMs with Curator's ensemble tracker off")
    ap.add_argument("--zkwarden-log-level", default="info")
    ap.add_argument("--orphan-grace-ms", type=int, default=10000)
    ap.add_argument("--cancel-check-s", type=float, default=2.0,
                    help="seconds after the cancel at which leftover job graphs are counted")
    ap.add_argument("--no-latch-injection", action="store_true",
                    help="scenarios 3 and 4, direct: do not delete the old session's latch nodes (the new "
                         "incarnation then waits for that session, like scenario 1); through zkwarden they "
                         "are never deleted")
    ap.add_argument("--zk-down-s", type=float, default=2.0,
                    help="scenario 5: seconds the restarted ZooKeeper server stays down")
    ap.add_argument("--wait-cleanup", action="store_true",
                    help="current layout: also wait for the retried execution-plan removal")
    ap.add_argument("--tls", action="store_true",
                    help="a TLS-only ensemble (clientAuth=need), the sidecars with ZKWARDEN_UPSTREAM_TLS=on; "
                    "implies --zkwarden-only (the JM stand-in speaks plaintext)")
    ap.add_argument("--observe", action="store_true",
                    help="also run each scenario through sidecars in ZKWARDEN_MODE=observe: the baseline's "
                    "incident must show, nothing done, and every kind of action the zkwarden run did reported "
                    "as a would-action")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    if args.cycles is None:
        args.cycles = 3 if args.quick else 50
    if args.repeat is None:
        args.repeat = 1 if args.quick else 10
    if not args.quick:
        args.wait_cleanup = True
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    modes = ["direct", "zkwarden"]
    if args.direct_only:
        modes = ["direct"]
    if args.zkwarden_only or args.tls:
        modes = ["zkwarden"]
    if args.observe:
        modes.append("observe")
    layouts = [x for x in args.layouts.split(",") if x]
    scenarios = [x for x in args.scenarios.split(",") if x]
    for s in scenarios:
        if s not in SCENARIOS:
            sys.exit("unknown scenario %s (known: %s)" % (s, ", ".join(SCENARIOS)))
    if "zkwarden" in modes and not os.access(procs.zkwarden_binary(), os.X_OK):
        sys.exit("drill: zkwarden binary %s not found: build it (cmake), set ZKW_BIN, or use --direct-only"
                 % procs.zkwarden_binary())

    d = Drill(args)
    t0 = time.time()
    results = []

    def on_signal(signum, frame):
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, on_signal)
    try:
        d.setup()
        for layout in layouts:
            for sc in scenarios:
                for mode in modes:
                    if sc in SIDECAR_ONLY and mode != "zkwarden":
                        # without a sidecar a pod restart or node crash is a JM restart: scenario 1
                        continue
                    r = d.run_one(sc, layout, mode)
                    r.result["verdict"] = verdict(r.result, args)
                    r.result["elapsed_s"] = round(r.elapsed, 1)
                    r.result["cycle_details"] = r.cycles
                    results.append(r.result)
    except KeyboardInterrupt:
        log.error("interrupted")
    finally:
        d.teardown()
    elapsed = time.time() - t0
    print()
    print("## Incident drills (%s, %s, session timeout %d s, checkpoint every %d ms, num-retained %d)"
          % ("quick" if args.quick else "full", time.strftime("%Y-%m-%d"), SESSION_TIMEOUT_MS // 1000,
             CHECKPOINT_MS, NUM_RETAINED))
    print()
    print(table(results))
    print()
    for res in results:
        for n in res["notes"]:
            print("- %s / %s / %s: %s" % (res["scenario"], res["layout"], res["mode"], n))
        for e in res.get("error_kinds", []):
            print("- %s / %s / %s: JM error %s" % (res["scenario"], res["layout"], res["mode"], e))
    print("to leader: from the restarted JM beginning to connect (Curator start; JVM start-up excluded) "
          "to a JM holding leadership "
          "(scenario 5: from the revoke caused by the server restart to the next grant). "
          "Bound through zkwarden: %d ms in 1, 2, 3 and 4; in 2b the registry session timeout the server granted + %d ms. "
          "Work directory: %s" % (LEADER_TARGET_MS, NODE_CRASH_MARGIN_MS, d.workdir))
    print("drill time: %.0f s" % elapsed)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    # Observe mode reports every kind of action the zkwarden run of the same
    # scenario and layout did (counts differ with timing: both are shown).
    for res in results:
        if res["mode"] != "observe":
            continue
        for other in results:
            if (other["mode"], other["scenario"], other["layout"]) != ("zkwarden", res["scenario"], res["layout"]):
                continue
            missing = sorted(set(other.get("done_actions", {})) - set(res.get("would_actions", {})))
            print("- %s / %s: zkwarden did %s; observe would have done %s"
                  % (res["scenario"], res["layout"], other.get("done_actions"), res.get("would_actions")))
            if missing:
                res["verdict"] = (False, res["verdict"][1] + ["no would-action of kind(s) %s" % ", ".join(missing)])
                print("  FAIL: observe reported no would-action of kind(s) %s" % ", ".join(missing))
    ok = bool(results) and all(r["verdict"][0] for r in results)
    expected = len([1 for l in layouts for s in scenarios for m in modes
                    if not (s in SIDECAR_ONLY and m != "zkwarden")])
    if len(results) != expected:
        ok = False
    if ok and not args.keep and not args.workdir:
        shutil.rmtree(d.workdir, ignore_errors=True)
    print("RESULT: %s" % ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
