"""zkwarden's own restart with a busy JobManager (issue 37), in tests/flink:
two checkpointing jobs, the leading JobManager's sidecar handed over
--rounds times (5), each at a random moment of the 1 s checkpoint cycle (--seed):

- sidecar_crash: kill -9 of the relaying process (the keeper's worker); the
  keeper starts the next one, as Kubernetes restarts a container whose
  process died;
- sidecar_upgrade: another build copied over the path the keeper runs
  (the same sources built with another version string, or --upgrade-bin),
  then `zkwarden upgrade` (odd rounds) or SIGUSR2 to the keeper (even
  rounds); the builds alternate, and the version the sidecar then serves
  must be the new one;
- sidecar_restart: the same build taking over with `zkwarden --takeover`
  (no keeper).

Mode zkwarden does the above; mode stop_start (--stop-start-rounds, 2) does
what a sidecar without them costs: kill -9 and start again, SIGTERM and
start the other build, SIGTERM and start again. Each round: the completed
checkpoints of every job before the handover and once two more completed
after it (they must grow); over the rounds, from the JobManager's log: job
restarts, leadership revocations, Curator's SUSPENDED, its reconnects
(connections opened after the first), failed checkpoint triggers and the
longest time without a completed checkpoint. Checkpoints are counted by the
REST API (completed, and the latest completed id, which keeps growing
across a JobMaster's restart where the count starts again).
"""

import random
import time

import flinkcluster as fc
import sidecars
from flinkcluster import log

SCENARIOS = ("sidecar_crash", "sidecar_upgrade", "sidecar_restart")
NEEDS_KEEPER = ("sidecar_crash", "sidecar_upgrade")
SHORT = {"sidecar_crash": "sccrash", "sidecar_upgrade": "scupgrade", "sidecar_restart": "screstart"}
MUST_HOLD = {(s, "zkwarden"): "0 job restarts, 0 leadership revocations, 0 SUSPENDED, the JobManager's "
                              "connection never closed, checkpoints completed after every handover, the new "
                              "process serving (the new build after an upgrade)" for s in SCENARIOS}
# What the stop_start comparison does per scenario, in words (the page says it).
STOP_START = {"sidecar_crash": "kill -9, started again", "sidecar_upgrade": "SIGTERM, the other build started",
              "sidecar_restart": "SIGTERM, started again"}


def handover(cell, scenario, mode, binaries):
    """One scenario in one mode (the module's docstring). binaries: {"zkwarden":
    path, "upgrade": the other build or None, "keeper": path or None}."""
    rounds = cell.args.rounds if mode == "zkwarden" else cell.args.stop_start_rounds
    if rounds <= 0:
        return
    kept = mode == "zkwarden" and scenario in NEEDS_KEEPER
    if kept and not binaries.get("keeper"):
        raise sidecars.KeeperMissing(binaries.get("keeper_error") or sidecars.KEEPER_HOW)
    builds = [binaries["zkwarden"], binaries.get("upgrade") or binaries["zkwarden"]]
    versions = [sidecars.version_of(b) for b in builds]
    if scenario == "sidecar_upgrade" and versions[0] == versions[1]:
        raise RuntimeError("sidecar_upgrade: both builds report version %s: the serving build could not be told "
                           "(give --upgrade-bin a build of another version)" % versions[0])

    def make(d, identity, upstream, registry_root, **kw):
        if kept:
            return sidecars.KeptSidecar(d, identity, upstream, registry_root, binaries["keeper"], builds[0], **kw)
        return fc.procs.Sidecar(d, identity, upstream, registry_root, binary=builds[0], **kw)

    zk = cell.server()
    c, sidecar = cell.cluster(SHORT[scenario], mode, zk.hostport, sidecar_class=make)
    rng = random.Random(cell.args.seed)
    try:
        jobs = cell.start(c, 2)
        mark = len(c.jm_log())
        done = []
        for k in range(rounds):
            time.sleep(rng.uniform(0.0, 1.0))  # a random moment of the checkpoint cycle
            before = _checkpoints(c, jobs)
            r = {"round": k + 1, "checkpoints_before": [before[j][0] for j in jobs],
                 "latest_checkpoint_before": [before[j][1] for j in jobs]}
            r.update(_hand_over(scenario, mode, sidecar, builds, versions, k))
            if mode == "stop_start":
                c.wait_running(jobs, cell.timeout_ms / 1000 * 3 + 90, what="every job RUNNING after round %d"
                               % (k + 1))
            # two more checkpoints of every job completed (their ids grow across a JobMaster's restart too)
            fc.wait_until(lambda: all(_checkpoints(c, [j])[j][1] >= before[j][1] + 2 for j in jobs), 120,
                          interval=0.2, what="round %d: two more checkpoints of every job" % (k + 1))
            after = _checkpoints(c, jobs)
            r["checkpoints_after"] = [after[j][0] for j in jobs]
            r["latest_checkpoint_after"] = [after[j][1] for j in jobs]
            log("%s %s round %d: %s" % (scenario, mode, k + 1, r))
            done.append(r)
        text = c.jm_log()[mark:]
        fig = {"rounds": done, "handover": STOP_START[scenario] if mode == "stop_start" else _how(scenario),
               "job_restarts": len(fc.JOB_RESTART.findall(text)),
               "leadership_revoked": len(fc.LEADERSHIP_REVOKED.findall(text)),
               "suspended": len(fc.CURATOR_SUSPENDED.findall(text)),
               "jm_reconnects": len(fc.JM_DIALS.findall(text)),
               "failed_checkpoint_triggers": len(fc.CHECKPOINT_TRIGGER_FAILED.findall(text)),
               "max_checkpoint_gap_s": fc.max_checkpoint_gap(text),
               "jm_processes": c.jm_n, "versions": versions if scenario == "sidecar_upgrade" else versions[:1],
               "takeover_exits": [e[1] for e in sidecar.exits if e[0] == "takeover"]}
        cell.put(scenario, mode, fig)
    finally:
        cell.stop(c, sidecar, [scenario], mode)


def _checkpoints(c, jobs):
    """{job: (completed checkpoints, the latest completed checkpoint's id, -1 if none)}
    from the REST API (a failed call reads as none yet)."""
    out = {}
    for j in jobs:
        n, latest = c.checkpoints(j)
        out[j] = (n, -1 if latest is None else latest)
    return out


def _how(scenario):
    return {"sidecar_crash": "kill -9 of the worker, restarted by zkwarden-keeper",
            "sidecar_upgrade": "the other build copied over the keeper's path, then zkwarden upgrade / SIGUSR2",
            "sidecar_restart": "zkwarden --takeover, the same build"}[scenario]


def _hand_over(scenario, mode, sidecar, builds, versions, k):
    """One handover; returns what it did: trigger, pids, seconds, versions."""
    t0 = time.monotonic()
    if mode == "stop_start":
        if scenario == "sidecar_crash":
            sidecar.kill9()
        else:
            sidecar.stop()
        if scenario == "sidecar_upgrade":
            sidecar.binary = builds[(k + 1) % 2]
        with fc.signals_held():
            sidecar.start()
        return {"trigger": STOP_START[scenario], "seconds": round(time.monotonic() - t0, 2),
                "pid": sidecar.proc.pid}
    if scenario == "sidecar_crash":
        old, new, s = sidecar.crash()
        return {"trigger": "kill -9", "old_pid": old, "new_pid": new, "seconds": s}
    if scenario == "sidecar_upgrade":
        trigger = "command" if k % 2 == 0 else "sigusr2"
        to = (k + 1) % 2
        old, new, s, rc = sidecar.upgrade(builds[to], trigger)
        serving = sidecar.wait_version(versions[to])
        return {"trigger": "zkwarden upgrade" if trigger == "command" else "SIGUSR2", "old_pid": old,
                "new_pid": new, "seconds": s, "to_version": versions[to], "serving_version": serving}
    old, new, s = sidecars.takeover(sidecar)
    return {"trigger": "zkwarden --takeover", "old_pid": old, "new_pid": new, "seconds": s}


def judge(cell):
    """Mode zkwarden: what MUST_HOLD says; stop_start: a finding when it shows no job restart."""
    for scenario in SCENARIOS:
        for mode, f in (cell.results.get(scenario) or {}).items():
            if mode == "stop_start":
                if not f["job_restarts"] and not f["suspended"]:
                    cell.find([scenario], mode, "%s stop_start (%s) showed no job restart and no SUSPENDED"
                              % (scenario, f["handover"]))
                continue
            bad = {k: f[k] for k in ("job_restarts", "leadership_revoked", "suspended", "jm_reconnects") if f[k]}
            if f["jm_processes"] != 1:
                bad["jm_processes"] = f["jm_processes"]
            if f["takeover_exits"] and any(f["takeover_exits"]):
                bad["old process exit status after --takeover"] = f["takeover_exits"]
            for r in f["rounds"]:
                if any(a <= b for a, b in zip(r["latest_checkpoint_after"], r["latest_checkpoint_before"])):
                    bad["round %d checkpoints" % r["round"]] = (r["latest_checkpoint_before"],
                                                                r["latest_checkpoint_after"])
                if "to_version" in r and r["serving_version"] != r["to_version"]:
                    bad["round %d serving" % r["round"]] = (r["serving_version"], "want", r["to_version"])
            if len(f["rounds"]) != cell.args.rounds:
                bad["rounds"] = len(f["rounds"])
            if bad:
                cell.fail([scenario], mode, "%s zkwarden: %s" % (scenario, bad), MUST_HOLD[(scenario, mode)])
