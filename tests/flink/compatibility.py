"""Writes docs/compatibility.md from the JSON results of tests/flink/run.sh:
every Flink x ZooKeeper pair that was run, each scenario's figures direct and
through zkwarden, the findings, the date and the commands that made them.
The page is generated: change this file, not the page.

  /usr/bin/python3 tests/flink/compatibility.py --out docs/compatibility.md RESULT.json...

A result file holds one cell (an object) or many (a list, --matrix); runs of
the same pair from several files are kept together: the pair's table shows
each scenario's last run (by date and start time), and its section
every earlier run of a scenario that was run again, with its figures and what
it did not hold. The page states only what the runs recorded; the closing
background section explains Flink's code and measures nothing.
"""

import argparse
import copy
import json
import re
import sys


ORDER = ["s1", "s2", "s3", "pod_crash", "observe", "application", "s1_60s", "rolling_restart", "standby",
         "reconnect", "sidecar_crash", "sidecar_upgrade", "sidecar_restart"]
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
                       "SUSPENDED / failed checkpoint triggers; failed removals (direct: with Flink's default, "
                       "and with `tolerate-suspended-connections: true`)",
    "standby": "Standby JobManager, each with its own sidecar: every job RUNNING on the new leader, s after the "
               "kill -9 of (a) the leader (gone), (b) both (both started again), (c) the leader (started again); "
               "left behind: failed removals / locks of another session",
    "reconnect": "The JobManager's connection dropped: its ZooKeeper client back with the same session, s after "
                 "the close (min / median / max); sessions fenced",
    "sidecar_crash": "zkwarden crash (kill -9 of the relaying process), busy JobManager: job restarts / leadership "
                     "revocations / SUSPENDED / JobManager reconnects; checkpoints grew across every handover",
    "sidecar_upgrade": "zkwarden upgrade (another build taking over), busy JobManager: as above",
    "sidecar_restart": "zkwarden restart (the same build taking over), busy JobManager: as above",
}
HANDOVERS = ("sidecar_crash", "sidecar_upgrade", "sidecar_restart")


MODES = ("direct", "zkwarden", "observe", "direct_tolerate", "stop_start")
# the mode a failure text without one is about (pod_crash: "pod_crash: ...")
DEFAULT_MODE = {"pod_crash": "zkwarden", "observe": "observe"}
# the cluster ids of flinktest.py's clusters ("s-zkwarden-3"): what they ran
CLUSTER_SCENARIOS = {"s": ["s1", "s2", "s3"], "pod": ["pod_crash"], "obs": ["observe"],
                     "app": ["application"], "s60": ["s1_60s"], "zkroll": ["rolling_restart"],
                     "standby": ["standby"], "reconnect": ["reconnect"], "sccrash": ["sidecar_crash"],
                     "scupgrade": ["sidecar_upgrade"], "screstart": ["sidecar_restart"]}


def attribute(text):
    """(scenarios, mode) a failure or finding text is about, for results that
    recorded no details (each of scenarios, mode may be None: not known)."""
    head = text.split(":", 1)[0].strip()
    m = re.fullmatch(r"([a-z0-9]+)-(direct|zkwarden|observe)-\d+", head)
    if m and m.group(1) in CLUSTER_SCENARIOS:
        return list(CLUSTER_SCENARIOS[m.group(1)]), m.group(2)
    words = head.split()
    if words and words[0] in ORDER:
        s = words[0]
        mode = words[1] if len(words) > 1 and words[1] in MODES else DEFAULT_MODE.get(s)
        return [s], mode
    return None, None


def requested(command):
    """The scenarios a recorded command asked for."""
    from flinktest import FULL, QUICK
    argv = command.split()
    for i, a in enumerate(argv):
        if a == "--scenarios" and i + 1 < len(argv):
            return argv[i + 1].split(",")
        if a.startswith("--scenarios="):
            return a.split("=", 1)[1].split(",")
    return list(QUICK if "--quick" in argv else FULL)


def normalize(r):
    """A copy of one result (the input is never changed) with failure and
    finding details: recorded by the run, else read from their texts. An
    error whose scenario the text does not name is about every scenario the
    run asked for and did not finish (every one it ran, if none)."""
    from flinktest import MUST_HOLD, RAN_TO_END, SIDECAR_EXIT, canonical_command
    r = copy.deepcopy(r)
    r["command"] = canonical_command(r["command"].split()[1:])
    unfinished = [s for s in requested(r["command"]) if s not in r["scenarios"]] or list(r["scenarios"])
    for kind in ("failure", "finding"):
        if kind + "_details" in r:
            continue
        details = []
        for text in r[kind + "s"]:
            scens, mode = attribute(text)
            d = {"scenarios": scens or unfinished, "mode": mode, "text": text}
            if kind == "failure":
                if text.startswith("error:"):
                    d["must_hold"] = RAN_TO_END
                elif "zkwarden exited" in text and "on SIGTERM" in text:
                    d["must_hold"] = SIDECAR_EXIT
                else:
                    d["must_hold"] = MUST_HOLD.get((d["scenarios"][0] if d["scenarios"] else None, mode), "")
            details.append(d)
        r[kind + "_details"] = details
    return r


def merge(results):
    """{(flink, zookeeper, session timeout): pair} of every result, each pair
    with its runs in the order of their dates (start times where recorded;
    else the order given): a later run of a scenario is the one its table
    shows; the earlier ones stay on the page."""
    cells = {}
    for r in sorted(results, key=lambda r: (r["date"], r.get("started", ""))):
        r = normalize(r)
        key = (r["flink"], r["zookeeper"], r["session_timeout_s"])
        cells.setdefault(key, {"flink": r["flink"], "zookeeper": r["zookeeper"],
                               "session_timeout_s": r["session_timeout_s"], "runs": []})["runs"].append(r)
    for c in cells.values():
        analyse(c)
    return cells


def _ran(run, s, mode):
    modes = run["scenarios"].get(s) or {}
    return bool(modes) if mode is None else mode in modes


def analyse(c):
    """Per pair: each scenario and mode's last run, which scenarios ran more
    than once, and each failure and finding as current (no later run of what
    it is about) or earlier (run again since)."""
    runs = c["runs"]
    c["last"] = {}
    for i, r in enumerate(runs):
        for s, modes in r["scenarios"].items():
            for m in modes:
                c["last"][(s, m)] = i
    # run again: in more than one run with figures or a failure (an error leaves no figures)
    c["again"] = [s for s in ORDER if sum(1 for r in runs if r["scenarios"].get(s) or any(
        s in d["scenarios"] for d in r["failure_details"])) > 1]
    for kind in ("failure", "finding"):
        cur, earlier = [], []
        for i, r in enumerate(runs):
            for d in r[kind + "_details"]:
                later = [j for j in range(i + 1, len(runs))
                         if d["scenarios"] and all(_ran(runs[j], s, d["mode"]) for s in d["scenarios"])]
                (earlier if later else cur).append(dict(d, run=i, later=later))
        c[kind + "s"] = cur
        c["earlier_" + kind + "s"] = earlier


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
        triggers = f.get("failed_checkpoint_triggers")
        return "%d / %d / %d / %s; %d" % (f["job_restarts"], f["leadership_revoked"], f["suspended"],
                                          "?" if triggers is None else triggers, f["failed_removals"])
    if s == "standby":
        parts = []
        for key, word in (("leader_gone", "a"), ("both_restarted", "b"), ("leader_restarted", "c")):
            p = f.get(key)
            if p:
                parts.append("%s %.1f" % (word, p["running_after_s"]))
        left = [sum(f[k].get(x, 0) for k in ("leader_gone", "both_restarted", "leader_restarted") if f.get(k))
                for x in ("failed_removals", "lock_owner_sessions_not_the_leader")]
        grace = " (orphan grace %d ms)" % f["orphan_grace_ms"] if f.get("orphan_grace_ms") else ""
        return "%s%s; left %d / %d" % (", ".join(parts), grace, left[0], left[1])
    if s == "reconnect":
        return "%d drops: %.2f / %.2f / %.2f; fenced %s (grace %s ms)" % (
            f["drops"], f["min_s"], f["median_s"], f["max_s"], f["orphans_fenced"], f.get("orphan_grace_ms"))
    if s in HANDOVERS:
        grew = sum(1 for r in f["rounds"] if all(a > b for a, b in zip(
            r.get("latest_checkpoint_after", r["checkpoints_after"]),
            r.get("latest_checkpoint_before", r["checkpoints_before"]))))
        return "%d / %d / %d / %d; %d of %d rounds" % (f["job_restarts"], f["leadership_revoked"], f["suspended"],
                                                       f["jm_reconnects"], grew, len(f["rounds"]))
    return json.dumps(f, sort_keys=True)


# What Flink's own code does when a removal fails (read in the bytecode of
# flink-runtime 1.18.1, 1.20.5 and 2.3.0 with javap, and in Flink's source).
# Explanation only: no run's result may be stated here (the page's figures and
# what did not hold come from the runs, above it).
FLINK_FACTS = """## Background: when Flink's removals fail, and what it logs

*Explanation, not measurement: what Flink's code does, read in flink-runtime 1.18.1, 1.20.5 and 2.3.0 (`javap -c`
of the shipped classes) and in Flink's source. What the runs above measured is in their tables.*

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
  transaction: the restarted JobManager leads only after that. By this code, a plain crash direct leaves
  no lock behind for S2 and S3 to find, and costs the wait (S1); the findings above say whether each run
  agreed. Leftovers come from what the incident drills produce on purpose (a live old session without its
  latch: a hung JobManager replaced, overlapping instances, a Curator session change inside the process)
  and from a release that fails while the connection is down (`releaseAll` on a leadership revoked by
  SUSPENDED, then a new store instance on the same session: a foreign lock of the same session, which no
  fence ends).
- The job graph store's name: `jobgraphs` in 1.18 to 1.20, `execution-plans` from 2.0 on; 2.3 adds an
  `applications` store beside them. zkwarden's lock rule (a UUID-named ephemeral under `/flink`) depends
  on none of these names.
"""

MODE_WORDS = {"direct": "direct", "zkwarden": "through zkwarden", "observe": "observe mode",
              "direct_tolerate": "direct with tolerate-suspended-connections",
              "stop_start": "the sidecar stopped and started", None: "any"}


def _pair(c):
    return "Flink %s on ZooKeeper %s, session timeout %.0f s" % (c["flink"], c["zookeeper"], c["session_timeout_s"])


def _anchor(c):
    """GitHub's anchor of a pair's heading."""
    text = _pair(c).lower()
    return re.sub(r"[^a-z0-9 _-]", "", text).replace(" ", "-")


def _zkwarden(r):
    """Which zkwarden a run measured, short: its repository's describe and its binary's sha256 (12 digits)."""
    z = r.get("zkwarden")
    if not z:
        return "zkwarden not recorded by this run"
    t = "zkwarden `%s`" % z.get("commit", "unknown")
    sha = z.get("binary_sha256")
    if sha:
        t += ", binary sha256 `%s`" % sha[:12]
        if z.get("binary_sha256_at_end"):
            t += " (**changed during the run**: `%s` at its end)" % str(z["binary_sha256_at_end"])[:12]
    else:
        t += ", binary %s" % z.get("binary", "not recorded")
    return t


def _container(c):
    """(flink-container, flink-runtime, recorded) of a pair's last application run, or None."""
    i = c["last"].get(("application", "zkwarden"), c["last"].get(("application", "direct")))
    if i is None:
        return None
    r = c["runs"][i]
    if r.get("flink_container"):
        return r["flink_container"], r.get("flink_runtime") or r["flink"], True
    from flinkcluster import pinned_container_versions
    line = r.get("flink_line") or ".".join(r["flink"].split(".")[:2])
    v = pinned_container_versions().get(line)
    return (v, r["flink"], False) if v else None


def _scenario_cell(c, s, mode):
    i = c["last"].get((s, mode))
    if i is None:
        return "not run"
    t = figure(s, c["runs"][i]["scenarios"][s][mode])
    if len(c["runs"]) > 1:
        t += " (run %d)" % (i + 1)
    return t


def _figures_of(r, s):
    modes = r["scenarios"].get(s) or {}
    return "; ".join("%s %s" % (MODE_WORDS[m], figure(s, f)) for m, f in sorted(modes.items()))


def summary(c):
    n = len({s for r in c["runs"] for s in r["scenarios"]})
    cur, earlier = len(c["failures"]), len(c["earlier_failures"])
    text = ("%d scenarios, **%d %s not hold**" % (n, cur, "does" if cur == 1 else "do")) if cur else \
        ("%d scenarios, all hold%s" % (n, " in their last run" if c["again"] else ""))
    if c["again"]:
        text += " (run again: %s" % ", ".join(c["again"])
        if earlier:
            text += "; %d earlier did not hold" % earlier
        text += ")"
    elif earlier:  # cannot be: an earlier failure is one whose scenario ran again
        text += " (%d earlier did not hold)" % earlier
    return text


def did_not_hold(cells, keys):
    """Every failure of every run given, pair by pair: generated, never fixed text."""
    rows = []
    for key in keys:
        c = cells[key]
        for d in sorted(c["failures"] + c["earlier_failures"], key=lambda d: (d["run"], d["text"])):
            if d["later"]:
                j = d["later"][-1]
                again = [e for e in c["failures"] + c["earlier_failures"] if e["run"] == j
                         and set(e["scenarios"]) & set(d["scenarios"]) and e["mode"] == d["mode"]]
                later = ("run %d: did not hold either" if again else "run %d: held") % (j + 1)
            else:
                later = "not run again"
            rows.append("| [%s %s](#%s) | %s | %s | %s | %d (%s) | %s | %s |" % (
                c["flink"], c["zookeeper"], _anchor(c), ", ".join(d["scenarios"]) or "?",
                MODE_WORDS.get(d["mode"], d["mode"]), d.get("must_hold") or "", d["run"] + 1,
                c["runs"][d["run"]]["date"], d["text"].replace("|", "\\|"), later))
    out = ["## What did not hold", ""]
    if not rows:
        return out + ["Nothing: in the runs given, everything that must hold held, and direct showed every fault "
                      "that must show.", ""]
    return out + ["Every failure of every run given (a scenario run again has its later run named).", "",
                  "| pair | scenario | mode | what must hold | run | what the run recorded | later run |",
                  "|---|---|---|---|---|---|---|"] + rows + [""]


def render(cells):
    keys = sorted(cells, key=lambda k: (_vkey(k[0]), _vkey(k[1]), k[2]))
    runs = [r for k in keys for r in cells[k]["runs"]]
    dates = sorted({r["date"] for r in runs})
    out = ["# Compatibility: real Flink through zkwarden", "",
           "Flink's own JobManager and TaskManager (module jars from Maven Central), our own checkpointing job, "
           "direct to ZooKeeper and through a zkwarden sidecar, on each Flink line and ZooKeeper server line "
           "below. Part of the [zkwarden documentation](../README.md#documentation); how it runs and what each "
           "scenario does: [tests/flink](../tests/flink/README.md). Check your own pair before you deploy: "
           "`tests/flink/run.sh --flink 1.20 --zookeeper 3.8` ([Adopting](adopting.md)).", "",
           "**This page is generated** by `tests/flink/compatibility.py` from %d run%s (%s), named under each "
           "pair with the zkwarden each measured (its repository's `git describe` and its binary's sha256); "
           "every figure comes from Flink's REST API, the ZooKeeper tree, the disk or the JobManager's own log "
           "(observe mode's would-actions are zkwarden's report). Times from a JobManager's launch include its "
           "JVM's start; the figure in brackets is from its first ZooKeeper connect. Where a scenario was run "
           "more than once, its table shows the last run and its section every earlier one."
           % (len(runs), "" if len(runs) == 1 else "s",
              dates[0] if len(dates) == 1 else "%s to %s" % (dates[0], dates[-1])), ""]
    flinks = sorted({k[0] for k in cells}, key=_vkey)
    zks = sorted({k[1] for k in cells}, key=_vkey)
    out += ["## Pairs run", "",
            "| Flink \\ ZooKeeper | " + " | ".join(zks) + " |",
            "|---" * (len(zks) + 1) + "|"]
    for f in flinks:
        row = []
        for z in zks:
            mine = [k for k in keys if k[:2] == (f, z)]
            texts = [summary(cells[k]) + ("" if len(mine) == 1 else " (session timeout %.0f s)" % k[2])
                     for k in mine]
            row.append("; ".join(texts) or "not run")
        out.append("| %s | %s |" % (f, " | ".join(row)))
    out.append("")
    mixed = []
    for k in keys:
        got = _container(cells[k])
        if got and got[0] != got[1]:
            mixed.append("%s (flink-container %s%s)" % (got[1], got[0], "" if got[2] else ", the pom's pin: "
                                                                      "not recorded by the run"))
    if mixed:
        out += ["The application cluster's entry point comes from `flink-container`, which Maven Central serves "
                "for some patch releases only: where it is older than the rest of the jars, the application "
                "cluster ran that entry point with the newer `flink-runtime`: %s." % ", ".join(sorted(set(mixed))),
                ""]
    out += did_not_hold(cells, keys)
    for key in keys:
        c = cells[key]
        out += ["## " + _pair(c), ""]
        if len(c["runs"]) == 1:
            r = c["runs"][0]
            out += ["Run on %s with `%s`; %s%s." % (r["date"], r["command"], _zkwarden(r),
                                                    ", %d CPUs" % r["cpus"] if r.get("cpus") else ""), ""]
        else:
            out += ["Runs:", ""]
            for i, r in enumerate(c["runs"]):
                out.append("%d. %s, `%s`: %s; %s%s." % (i + 1, r["date"], r["command"], ", ".join(
                    s for s in ORDER if s in r["scenarios"]) or "no scenario finished", _zkwarden(r),
                    ", %d CPUs" % r["cpus"] if r.get("cpus") else ""))
            out.append("")
        got = _container(c)
        if got and got[0] != got[1]:
            out += ["The application cluster ran the entry point of `flink-container` %s (%s) with `flink-runtime` "
                    "%s." % (got[0], "the newest published for this line" if got[2] else
                             "the pom's pin; the run did not record its jars", got[1]), ""]
        out += ["| scenario | direct | through zkwarden |", "|---|---|---|"]
        for s in ORDER:
            if not any(r["scenarios"].get(s) for r in c["runs"]):
                continue
            if s == "observe":
                out.append("| %s | (see S1 direct) | observe mode: %s |" % (TITLES[s], _scenario_cell(c, s, "observe")))
            elif s == "pod_crash":
                out.append("| %s | (without a sidecar this is S1) | %s |"
                           % (TITLES[s], _scenario_cell(c, s, "zkwarden")))
            elif s == "reconnect":
                out.append("| %s | (no sidecar) | %s |" % (TITLES[s], _scenario_cell(c, s, "zkwarden")))
            elif s in HANDOVERS:
                out.append("| %s | the sidecar stopped and started: %s | %s |"
                           % (TITLES[s], _scenario_cell(c, s, "stop_start"), _scenario_cell(c, s, "zkwarden")))
            elif s == "rolling_restart" and c["last"].get((s, "direct_tolerate")) is not None:
                out.append("| %s | default: %s; tolerate-suspended-connections: %s | %s |"
                           % (TITLES[s], _scenario_cell(c, s, "direct"), _scenario_cell(c, s, "direct_tolerate"),
                              _scenario_cell(c, s, "zkwarden")))
            else:
                out.append("| %s | %s | %s |" % (TITLES[s], _scenario_cell(c, s, "direct"),
                                                 _scenario_cell(c, s, "zkwarden")))
        out.append("")
        for d in c["findings"]:
            out.append("- Finding%s: %s." % (_of_run(c, d), d["text"]))
        for d in c["failures"]:
            out.append("- **Does not hold**%s: %s." % (_of_run(c, d), d["text"]))
        for s in c["again"]:
            ran = [i for i, r in enumerate(c["runs"]) if r["scenarios"].get(s) or any(
                s in d["scenarios"] for d in r["failure_details"])]
            out.append("- Run again: %s in runs %s; the table shows each mode's last run." % (
                s, ", ".join(str(i + 1) for i in ran)))
            for i in ran:
                r = c["runs"][i]
                bad = [d["text"] for d in c["failures"] + c["earlier_failures"]
                       if d["run"] == i and s in d["scenarios"]]
                out.append("  - run %d: %s; %s." % (i + 1, _figures_of(r, s) or "no figures",
                                                    ("did not hold: " + "; ".join(bad)) if bad else "held"))
        for d in [d for d in c["earlier_findings"] if d["text"] not in {e["text"] for e in c["findings"]}]:
            out.append("- Finding of run %d (run again since): %s." % (d["run"] + 1, d["text"]))
        if out[-1] != "":
            out.append("")
    out += [FLINK_FACTS]
    return "\n".join(out).rstrip() + "\n"


def _of_run(c, d):
    return " (run %d)" % (d["run"] + 1) if len(c["runs"]) > 1 else ""


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
