"""Writes docs/consistency.md from the JSON summaries of tests/consistency/run.sh
(--json): what each run did (operations, faults with their times, what
zkwarden did), the anomalies each checker found direct and through zkwarden
with the commands that reproduce them from their seed, and what each mutation
showed. The page is generated: change this file, not the page.

  /usr/bin/python3 tests/consistency/consistency_doc.py --out docs/consistency.md RUN.json...

Runs are shown newest first. The page states what the runs recorded; the
sections on the checkers explain what each one checks and measure nothing.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from checkers import CHECKERS  # noqa: E402

CHECKS = {
    "linearizable_registers": "each register (a znode, fresh every 4 s) is linearizable, checked with Porcupine: "
                              "creates, writes and compare-and-set (setData with a version, or a multi of check "
                              "and setData), each with the version it returned",
    "linearizable_counters": "each sequential parent is a linearizable counter (Porcupine): every create takes the "
                             "next number; no create made twice, no child that no create made, no acknowledged "
                             "create missing",
    "xid_order": "a session's replies come in the order of its requests (their xids), each once",
    "zxid_monotonic": "no reply's zxid is lower than an earlier reply's of the same session, across "
                      "reconnects and session moves",
    "read_your_writes": "a read never shows a node older than a write the session had already seen (covered by "
                        "the zxid of any earlier reply of the session: its own writes and everything before them), "
                        "nor a value whose write had not been sent yet",
    "watch_before_data": "a watch's notification reaches the client before any reply that shows the change it "
                         "reports (a read of the node with the newer version, or any reply whose zxid covers "
                         "the change)",
    "sequential_increasing": "a session's sequential creates under one parent get strictly increasing names",
    "ephemerals": "an ephemeral is there while its session lives and it was not deleted, and gone once its "
                  "session ended (closed, expired, or fenced by zkwarden)",
    "zkwarden_deletes": "zkwarden deletes only stale locks it tagged (an older incarnation's) and ephemerals of "
                        "sessions it saw end, and fences only the JobManager's earlier sessions (its audit file); "
                        "no node of the run vanishes that no client deleted",
    "locks_tagged": "every lock the JobManager creates through zkwarden as a recorded incarnation carries "
                    "zkwarden's tag (its identity and session) and the JobManager's own bytes; the JobManager "
                    "reads its own bytes back. A lock created before zkwarden could record the session (the "
                    "registry not usable within `ZKWARDEN_FENCE_TIMEOUT_MS`: the request goes on as a plain "
                    "client's, untagged, as documented) is counted apart, not an anomaly",
}

LOG_ROWS = 80  # nemesis log rows shown per run

DISABLED_WHY = {"zkwarden_restart": "the binary has no `--takeover`"}

MUTATION_TEXT = {
    "swap_replies": "two replies of a session sent out of order",
    "drop_watch_event": "a notification dropped",
    "lower_zxid": "a reply's zxid lowered below an earlier reply's",
    "replay_create": "a sequential create sent a second time",
}

ZKW_METRICS = [("zkwarden_session_moves_total{outcome=\"moved\"}", "sessions moved to another server"),
               ("zkwarden_fences_total", "earlier sessions fenced"),
               ("zkwarden_reclaims_at_create_total", "stale locks reclaimed at create"),
               ("zkwarden_reclaims_at_delete_total", "stale locks reclaimed at delete"),
               ("zkwarden_stale_locks_swept_total", "stale locks swept")]


def _n(v):
    return "{:,}".format(int(v)) if isinstance(v, (int, float)) else "-"


def _outcomes(r):
    b = r["by_outcome"]
    return "%s ok, %s failed, %s unknown" % (_n(b.get("ok", 0)), _n(b.get("fail", 0)), _n(b.get("unknown", 0)))


def run_section(s, anchor):
    out = []
    kinds = " ".join("%s %d" % (k, v) for k, v in sorted(s["faults"].items()))
    out.append("### %s: seed %d, %s\n" % (s["date"], s["seed"], "passed" if s["passed"] else "failed"))
    out.append("`%s` (ZooKeeper %s; %.0f s of faults, %.0f s in all; zkwarden: `%s`)%s\n"
               % (s["command"], s.get("zookeeper", "3.8.0 (Debian)"), s["faulted_s"], s["took_s"],
                  Path(s["zkwarden_binary"]).parent.name + "/zkwarden",
                  "; its histories checked again on %s (`--recheck`)" % s["rechecked"] if s.get("rechecked") else ""))
    out.append("| | direct | through zkwarden |")
    out.append("|---|---|---|")
    d, z = s.get("direct"), s.get("zkwarden")
    out.append("| operations | %s | %s |" % (_n(d["ops"]) if d else "-", _n(z["ops"]) if z else "-"))
    out.append("| outcomes | %s | %s |" % (_outcomes(d) if d else "-", _outcomes(z) if z else "-"))
    for key in ("register_ops", "counter_ops", "watch_events", "sessions"):
        label = {"register_ops": "register operations (linearizability)", "counter_ops":
                 "sequential creates (counters)", "watch_events": "notifications", "sessions":
                 "sessions"}[key]
        out.append("| %s | %s | %s |" % (label, _n(d["stats"][key]) if d else "-", _n(z["stats"][key]) if z else "-"))
    out.append("| JobManager incarnations | %s | %s |" % (d["jobmanager_incarnations"] if d else "-",
                                                          z["jobmanager_incarnations"] if z else "-"))
    if z:
        for key, label in ZKW_METRICS:
            out.append("| zkwarden: %s | - | %s |" % (label, _n(z["zkwarden"].get(key))))
    if z and "locks_before_recorded" in z["stats"]:
        out.append("| locks created before zkwarden could record the session (untagged, as documented) | - | %s |"
                   % _n(z["stats"]["locks_before_recorded"]))
    if z and z.get("restarts_by"):
        out.append("| zkwarden's own process replaced | - | %s |" % ", ".join(
            "%s %d" % (k, v) for k, v in sorted(z["restarts_by"].items())))
    for c in CHECKERS:
        dv = d["anomalies"][c] if d else "-"
        zv = z["anomalies"][c] if z else "-"
        out.append("| anomalies: `%s` | %s | %s |" % (c, _bold(dv), _bold(zv)))
    out.append("")
    out.append("Faults (%d): %s. Faults disabled: %s. Session moves are not a fault of their own: zkwarden "
               "moved sessions when their server went away (the table above).\n"
               % (sum(s["faults"].values()), kinds,
                  ", ".join("%s (%s)" % (k, DISABLED_WHY.get(k, "not enabled")) for k in s["faults_disabled"])
                  or "none"))
    out.append("<details><summary>The nemesis's log (seconds from the start)</summary>\n")
    out.append("| t | took | fault | what |")
    out.append("|---|---|---|---|")
    log = sorted(s["fault_log"], key=lambda e: e["t"])
    for e in log[:LOG_ROWS]:
        out.append("| %.1f | %.1f | %s | %s |" % (e["t"], e["took"], e["kind"], e["what"]))
    if len(log) > LOG_ROWS:
        out.append("| ... | | | %d more (the run's JSON has them all) |" % (len(log) - LOG_ROWS))
    out.append("\n</details>\n")
    for name, r in (("direct", d), ("through zkwarden", z)):
        if not r or not r["details"]:
            continue
        only = "--direct-only" if r is d else "--zkwarden-only"
        out.append("**Anomalies %s** (reproduce: `tests/consistency/run.sh --seed %d --duration %g %s "
                   "--workdir DIR`, then `tests/consistency/run.sh --recheck DIR` checks the kept histories "
                   "again):\n" % (name, s["seed"], s["duration_s"], only))
        for c, items in sorted(r["details"].items()):
            out.append("- `%s`: %d, for example:" % (c, r["anomalies"][c]))
            for a in items[:3]:
                out.append("  - %s" % _anomaly(a))
        out.append("")
    if s.get("mutations"):
        out.append("Mutations (%d run, %d caught):\n" % (s["mutations_run"], s["mutations_caught"]))
        out.append("| mutation | what it breaks | checker | caught | anomalies found | operations |")
        out.append("|---|---|---|---|---|---|")
        for m, v in sorted(s["mutations"].items()):
            out.append("| `%s` | %s | `%s` | %s | %d | %s |" % (m, MUTATION_TEXT.get(m, ""), v["checker"],
                                                               "yes" if v["caught"] else "**no**", v["found"],
                                                               _n(v["ops"])))
        out.append("")
    if s.get("failures"):
        out.append("What did not hold:\n")
        for f in s["failures"]:
            out.append("- %s" % f)
        out.append("")
    return out


def _bold(v):
    return "**%s**" % v if isinstance(v, int) and v else str(v)


def _anomaly(a):
    what = a.get("what", "")
    rest = ", ".join("%s %s" % (k, json.dumps(v) if not isinstance(v, str) else "`%s`" % v)
                     for k, v in a.items() if k not in ("what", "audit"))
    return "%s: %s" % (what, rest)


def render(results):
    results = sorted(results, key=lambda s: s["date"], reverse=True)
    out = ["# Consistency", "",
           "Is zkwarden transparent? Histories of concurrent clients, direct to a 3-server ZooKeeper 3.8 "
           "ensemble and through zkwarden, under server kills, pauses, session moves, client pauses and "
           "JobManager restarts, checked for linearizability and ZooKeeper's session guarantees, and for "
           "zkwarden's own rules. Part of the [zkwarden documentation](../README.md#documentation). "
           "This page is generated from the runs' JSON (`tests/consistency/results/`) by "
           "`tests/consistency/consistency_doc.py`: change that file, not the page.", "",
           "## The test", "",
           "`tests/consistency/run.sh` (in `tests/run.sh`; `--duration 1800` for the long run, `--seed N` "
           "to repeat one) starts the ensemble and one zkwarden sidecar (the ASan+UBSan build in "
           "`tests/run.sh`; each run below names its binary), run by its keeper, with the JobManager's "
           "identity and an audit file, and runs two workloads at once with the same seed: one "
           "direct to the ensemble (the control) and one through zkwarden. Each has kazoo sessions that "
           "record every operation's invocation and completion (monotonic clock), its arguments and "
           "result, and its reply's xid and zxid as kazoo's connection reader reads them: registers "
           "(reads, linearizable reads with sync, writes, compare-and-set, multi), a session pipelining "
           "40 requests at a time, sequential creates, ephemerals created and deleted, watches, and a "
           "JobManager doing what Flink's does: a leader latch, checkpoints added with their lock "
           "(`<state>/locks/<uuid>`) in one multi and subsumed, retained checkpoints locked again at "
           "start, job graphs locked and removed. Another session leaves stale locks the way a "
           "ZooKeeper that fails to remove a dead session's ephemerals does (zkwarden's tag, an older "
           "incarnation), so that zkwarden's reclaims at create and at delete and its sweep run; "
           "JobManager restarts make it fence. The nemesis (seeded, logged) kills servers with -9 and "
           "SIGTERM and pauses them past the read timeout (the leader half of the time), pauses the "
           "clients, restarts the JobManager without closeSession, and replaces zkwarden's own process: "
           "zkwarden runs under its keeper (`zkwarden-keeper --spawn`), and the serving process is "
           "killed with -9 (the next one takes the connections and sessions up from the journal) or "
           "restarted as planned (SIGUSR2 to the keeper), at random. An operation that ends in "
           "CONNECTIONLOSS or without a reply may or may not have happened and is checked as such.", "",
           "Then each mutation of the test build (`ZKW_TEST_MUTATION`, `proxy/relay/zkw_mutate.c`) "
           "breaks one guarantee through its own zkwarden, and the checker named for it must find it: a "
           "checker that never fires proves nothing. The test fails on any anomaly, direct or through "
           "zkwarden, on a mutation not caught, or on fewer than 20,000 operations through zkwarden or 20 "
           "faults (every kind at least twice).", "",
           "## The checkers", "",
           "| checker | what it checks |", "|---|---|"]
    for c in CHECKERS:
        out.append("| `%s` | %s |" % (c, CHECKS[c]))
    out += ["",
            "Reads are not in the linearizability check: ZooKeeper promises linearizable writes and "
            "sequentially consistent reads. Even a read after `sync` can be stale: the first runs showed it "
            "direct (seed 1: a `sync` and `getData` whose replies carried zxid 0x200000539, below a write "
            "another client had already been acknowledged at 0x200000543). One way this happens, in "
            "ZooKeeper 3.8's source: a `sync` from a client of the leader waits for nothing (the leader's CommitProcessor is built "
            "with `matchSyncs` false, and `needCommit` returns it for `sync`), so a commit the leader has "
            "sent but not yet applied is missing from the read; ZOOKEEPER-1675 (make sync a quorum "
            "operation) is still open. Reads are checked against what ZooKeeper does promise: "
            "`read_your_writes`, `watch_before_data`.", "",
            "The default run's ensemble is Debian's ZooKeeper 3.8.0 (no Maven needed); `--zookeeper 3.8` "
            "runs the line's pinned release from Maven Central (3.8.6), as the long run does. 3.8.0 can "
            "lose committed transactions when a server restarts during its DIFF sync with the leader "
            "(ZOOKEEPER-4785, fixed in 3.8.4; ZOOKEEPER-4646): an 1800 s run on it (seed 1801) lost "
            "acknowledged creates and a write of one epoch (zxids 0x8c0000092f to 0x8c000009b4, within "
            "0.3 s), direct and through zkwarden alike: `linearizable_counters` reported it on both sides "
            "(and `zkwarden_deletes` direct: a node no client deleted was gone).", "",
            "What the long runs found, each fixed with a test. In zkwarden: its own registry session lost "
            "its digest auth when `zoo_add_auth` ran while the handle was between connections (after a "
            "`kill -9` of zkwarden during server kills every create with the creator ACL failed, invalid "
            "acl, and the registry stayed unusable); the auth is now added again at the next connect "
            "(`test_registry_auth_refused_at_open`). In the checkers, three rules that were stricter than "
            "what zkwarden promises: a sweep or reclaim may delete the lock of a JobManager a later one "
            "replaced (the run records its clock to tell when); reclaim at create's replace (one multi: "
            "delete the stale lock, create the JobManager's) answered by a connection loss may have run, as "
            "a delete may; and a lock created while the registry could not record the JobManager's session "
            "within the fence bound is a plain client's, untagged, as documented: `locks_tagged` counts "
            "those apart.", "",
            "## Runs", ""]
    for i, s in enumerate(results):
        out += run_section(s, i)
    return "\n".join(out).rstrip() + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("results", nargs="+")
    a = ap.parse_args()
    results = [json.loads(Path(p).read_text()) for p in a.results]
    Path(a.out).write_text(render(results))


if __name__ == "__main__":
    main()
