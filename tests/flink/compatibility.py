"""Writes docs/compatibility.md from the JSON results of tests/flink/run.sh:
every Flink x ZooKeeper pair that was run, each scenario's figures direct and
through zkwarden, the findings, the date and the commands that made them.
The page is generated: change this file, not the page.

  /usr/bin/python3 tests/flink/compatibility.py --out docs/compatibility.md RESULT.json...

A result file holds one cell (an object) or many (a list, --matrix); cells of
the same pair from several files are merged (a later file's scenario wins).
"""

import argparse
import json
import sys


ORDER = ["s1", "s2", "s3", "pod_crash", "observe", "application", "s1_60s", "rolling_restart"]
TITLES = {
    "s1": "S1 JobManager crash: jobs RUNNING again, s after its start (after its ZooKeeper connect; its "
          "leadership after the connect)",
    "s2": "S2 retained checkpoints over restarts: failed removals / left in ZooKeeper / left on disk",
    "s3": "S3 cancel after a failover: job graph (2.x: execution plan) node and HA file removed",
    "pod_crash": "Pod crash (JobManager and sidecar kill -9): jobs RUNNING again, s after the JM's start",
    "observe": "Observe mode, JobManager crash: jobs RUNNING again, s; would-actions reported",
    "application": "Application cluster, JobManager crash: jobs RUNNING again, s after its start",
    "s1_60s": "S1 at Flink's default 60 s session timeout: jobs RUNNING again, s after its start",
    "rolling_restart": "ZooKeeper rolling restart (3 servers): job restarts / leadership revocations / "
                       "SUSPENDED; failed removals",
}


def merge(results):
    from flinktest import canonical_command
    cells = {}
    for r in results:
        r = dict(r, command=canonical_command(r["command"].split()[1:]))
        key = (r["flink"], r["zookeeper"], r["session_timeout_s"])
        if key in cells:
            old = cells[key]
            for s, modes in r["scenarios"].items():
                old["scenarios"].setdefault(s, {}).update(modes)
            # a scenario run again: what the earlier run found of it stays, marked as earlier
            again = set(r["scenarios"])
            for f in old["failures"]:
                (old["earlier"] if f.split(" ", 1)[0] in again else r["failures"]).append(f)
            old["failures"] = sorted(set(r["failures"]))
            old["findings"] = sorted(set(old["findings"]) | set(r["findings"]))
            old["commands"] = old["commands"] + [c for c in [r["command"]] if c not in old["commands"]]
            old["date"] = max(old["date"], r["date"])
        else:
            cells[key] = dict(r, commands=[r["command"]], earlier=[])
    return cells


def figure(s, f):
    if f is None:
        return "not run"
    if s in ("s1", "application", "s1_60s", "pod_crash"):
        t = "%.1f" % f["recovered_s"]
        if "recovered_after_connect_s" in f:
            t += " (%.1f" % f["recovered_after_connect_s"]
            if "leader_after_connect_s" in f:
                t += "; leader %.1f" % f["leader_after_connect_s"]
            t += ")"
        return t
    if s == "s2":
        t = "%d / %d / %d" % (f["failed_removals"], f["left_in_zookeeper"], f["left_on_disk"])
        if f.get("never_completed_dirs_left"):
            t += " (+%d never completed)" % f["never_completed_dirs_left"]
        return t + ", %d restarts" % f["restarts"]
    if s == "s3":
        return ("removed (%.1f s after CANCELED)" % f["removed_after_s"]) if f["job_graph_removed"] else \
            "**not removed** (node left: %s, files left: %d)" % (f["job_graph_node_left"], f["job_graph_files_left"])
    if s == "observe":
        kinds = ", ".join("%s %d" % (k, v) for k, v in sorted(f["would_actions_total"].items())) or "none"
        return "%.1f; would: %s; done: %s" % (f["recovered_s"], kinds, ", ".join(f["done_actions"]) or "none")
    if s == "rolling_restart":
        return "%d / %d / %d; %d" % (f["job_restarts"], f["leadership_revoked"], f["suspended"], f["failed_removals"])
    return json.dumps(f, sort_keys=True)


# What Flink's own code does when a removal fails (read in the bytecode of
# flink-runtime 1.18.1, 1.20.5 and 2.3.0 with javap, and in Flink's source).
FLINK_FACTS = """## When Flink's removals fail, and what it logs

Read in flink-runtime 1.18.1, 1.20.5 and 2.3.0 (`javap -c` of the shipped classes) and in Flink's source:

- A checkpoint is removed by `ZooKeeperStateHandleStore.releaseAndTryRemove`: delete the store's own lock
  (`<checkpoint>/locks/<uuid>`), then `locks`. While another lock remains, that delete fails with
  `NOTEMPTY`, and Flink logs it **only at DEBUG** (`Could not delete znode ... because it is still
  locked.`): a JobManager at the default log level says nothing. These runs turn that one logger to DEBUG
  to count it.
- On subsumption (`DefaultCompletedCheckpointStore.addCheckpointAndSubsumeOldestOne`) the result is
  ignored and the checkpoint is handed to the `CheckpointsCleaner` anyway: its `chk-N` files are deleted,
  but its znode (with the foreign lock) and its `completedCheckpoint` pointer file in the HA storage
  stay, and nothing retries. At a globally terminal shutdown (`tryRemoveCompletedCheckpoint`), the files
  are cleaned only when the removal succeeded; the job's whole `/jobs/<id>` tree then goes with a
  recursive delete. A job graph (`jobgraphs`, 2.x `execution-plans`) whose removal fails is retried by the
  resource cleaner (exponential, from 1 s), each attempt logged.
- A lock outlives its owner only when a session other than the leader's current one holds it, or the same
  session under an earlier store instance (a new UUID per JobMaster) whose release failed. A JobManager
  killed with -9 holds its leader latch until its session expires, and the latch and its locks go in one
  transaction: the restarted JobManager leads only after that, so **direct, S2 and S3 leave nothing
  behind; the cost of the crash is the wait** (S1). The leftovers come from what the incident drills
  produce on purpose (a live old session without its latch: a hung JobManager replaced, overlapping
  instances, a Curator session change inside the process) and from a release that fails while the
  connection is down (`releaseAll` on a leadership revoked by SUSPENDED, then a new store instance on the
  same session: a foreign lock of the same session, which no fence ends).
- Where the job graphs live (read from the JobManagers' logs of these runs): `jobgraphs` in 1.18 to
  1.20, `execution-plans` from 2.0 on; 2.3 adds an `applications` store beside them. zkwarden's lock rule
  (a UUID-named ephemeral under `/flink`) depends on none of these names.
"""


# What these runs showed that zkwarden does not do yet (its own log's words).
KNOWN_LIMITS = """## Not yet through zkwarden

- **A ZooKeeper rolling restart can still cost a failover** when the server holding the JobManager's
  session goes away while zkwarden holds one of that session's requests (a lock create or delete whose
  reply it is still deciding on): the session is not moved and the JobManager's connection is closed, as
  a plain proxy would. zkwarden logs `upstream ... closed the connection: not moving a request is held by
  zkwarden`; the JobManager reports SUSPENDED, revokes its leadership and restarts its jobs. Seen in 1 of
  the 4 rolling restarts run here (Flink 1.20.5 on Debian's 3.8.0, each job checkpointing every second);
  the other 3, and the one before it on the same pair, moved every session (0 SUSPENDED, 0 job restarts).
"""


def render(cells):
    out = ["# Compatibility: real Flink through zkwarden", "",
           "Flink's own JobManager and TaskManager (module jars from Maven Central), our own checkpointing job, "
           "direct to ZooKeeper and through a zkwarden sidecar, on each Flink line and ZooKeeper server line "
           "below. Part of the [zkwarden documentation](../README.md#documentation); how it runs and what each "
           "scenario does: [tests/flink](../tests/flink/README.md). Check your own pair before you deploy: "
           "`tests/flink/run.sh --flink 1.20 --zookeeper 3.8` ([Adopting](adopting.md)).", "",
           "**This page is generated** by `tests/flink/compatibility.py` from the runs named under each pair; "
           "every figure comes from Flink's REST API, the ZooKeeper tree, the disk or the JobManager's own log "
           "(observe mode's would-actions are zkwarden's report). Machine: 2 cores shared with other work: "
           "times from a JobManager's start include its JVM's start, which took up to 3 s more under load, "
           "so a pair whose run missed a time bound was run again, and the page says so.", ""]
    flinks = sorted({k[0] for k in cells}, key=_vkey)
    zks = sorted({k[1] for k in cells}, key=_vkey)
    out += ["## Pairs run", "",
            "| Flink \\ ZooKeeper | " + " | ".join(zks) + " |",
            "|---" * (len(zks) + 1) + "|"]
    for f in flinks:
        row = []
        for z in zks:
            runs = [c for k, c in cells.items() if k[0] == f and k[1] == z]
            if not runs:
                row.append("not run")
                continue
            bad = sum(len(c["failures"]) for c in runs)
            earlier = sum(len(c["earlier"]) for c in runs)
            n = len({s for c in runs for s in c["scenarios"]})
            text = ("%d scenarios, all hold" % n) if not bad else ("%d scenarios, **%d failed**" % (n, bad))
            if earlier:
                text += " (run again: %d earlier did not hold)" % earlier
            row.append(text)
        out.append("| %s | %s |" % (f, " | ".join(row)))
    out.append("")
    for key in sorted(cells, key=lambda k: (_vkey(k[0]), _vkey(k[1]), k[2])):
        c = cells[key]
        out += ["## Flink %s on ZooKeeper %s, session timeout %.0f s" % (c["flink"], c["zookeeper"],
                                                                        c["session_timeout_s"]), "",
                "Run on %s with %s." % (c["date"], "; ".join("`%s`" % cmd for cmd in c["commands"])), "",
                "| scenario | direct | through zkwarden |", "|---|---|---|"]
        for s in ORDER:
            modes = c["scenarios"].get(s)
            if not modes:
                continue
            if s == "observe":
                out.append("| %s | (see S1 direct) | observe mode: %s |" % (TITLES[s], figure(s, modes.get("observe"))))
            elif s == "pod_crash":
                out.append("| %s | (without a sidecar this is S1) | %s |" % (TITLES[s], figure(s, modes.get("zkwarden"))))
            else:
                out.append("| %s | %s | %s |" % (TITLES[s], figure(s, modes.get("direct")),
                                                 figure(s, modes.get("zkwarden"))))
        out.append("")
        for f in c["findings"]:
            out.append("- Finding: %s." % f)
        for f in c["failures"]:
            out.append("- **Does not hold**: %s." % f)
        for f in c["earlier"]:
            out.append("- An earlier run of the same scenario (the figures above are the later run's) did not "
                       "hold: %s." % f)
        if c["findings"] or c["failures"] or c["earlier"]:
            out.append("")
    out += [KNOWN_LIMITS, FLINK_FACTS]
    return "\n".join(out).rstrip() + "\n"


def _vkey(v):
    """Sort key of "3.8.0 (Debian)", "1.20.5": the numbers, Debian's after Maven's of the same release."""
    nums = [int(x) for x in v.split(" ")[0].split(".")]
    return nums + [1 if "Debian" in v else 0]


def write(path, results, command=None):
    with open(path, "w") as f:
        f.write(render(merge(results)))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("results", nargs="+")
    args = p.parse_args()
    results = []
    for path in args.results:
        with open(path) as f:
            r = json.load(f)
        results += r if isinstance(r, list) else [r]
    write(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
