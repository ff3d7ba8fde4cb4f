"""The consistency test (issue 36): histories of concurrent clients, direct
to a 3-server ZooKeeper ensemble and through zkwarden, under the nemesis's
faults, checked for linearizability and ZooKeeper's session guarantees, and
zkwarden's own rules; then each mutation of the test build (zkw_mutate.h)
must be caught by its checker. Run it as tests/consistency/run.sh (see there
and README.md); the JSON it writes is what docs/consistency.md is made from
(consistency_doc.py).

The two runs go at once against one ensemble with the same seed: the same
workload (each client's generator is seeded by the seed and its name) and
the same faults at the same moments. A run lasts at least --duration
seconds, and goes on (up to twice that) until it has --min-ops operations
and --min-faults faults, every kind at least twice.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import checkers  # noqa: E402
import nemesis  # noqa: E402
import runs  # noqa: E402
from runs import Run, admin_client, zkharness  # noqa: E402

SESSION_TIMEOUT = 8.0
# Each mutation and the checker that must catch it.
MUTATIONS = {"swap_replies": "xid_order", "drop_watch_event": "watch_before_data",
             "lower_zxid": "zxid_monotonic", "replay_create": "linearizable_counters"}
MUTATION_SECONDS = 14.0


def log(msg):
    print("consistency: " + msg, flush=True)


def build_checker(dest):
    go = shutil.which("go") or "/usr/local/go/bin/go"
    r = subprocess.run([go, "build", "-buildvcs=false", "-o", str(dest), "."], cwd=str(HERE / "checker"),
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError("go build of the checker failed:\n%s%s" % (r.stdout, r.stderr))
    return dest


def zookeeper_release(line):
    """(classpath, version) of the ensemble's ZooKeeper: Debian's, or one
    release line's pinned version resolved by Maven (tests/flink's pom)."""
    if line == "debian":
        return None, "3.8.0 (Debian)"
    sys.path.insert(0, str(HERE.parent / "flink"))
    import flinkcluster  # noqa: E402  (Maven classpaths of ZooKeeper releases)
    pom = (HERE.parent / "flink" / "maven" / "zookeeper" / "pom.xml").read_text()
    m = re.search(r"<id>zk-%s</id><properties><zookeeper.version>([0-9.]+)<" % re.escape(line), pom)
    if not m:
        raise SystemExit("consistency: no ZooKeeper line %r in tests/flink/maven/zookeeper/pom.xml" % line)
    classpath, _ = flinkcluster.zookeeper_classpath(line, m.group(1))
    return classpath, m.group(1)


def zkwarden_binary():
    b = os.environ.get("ZKW_BIN")
    if b:
        return os.path.abspath(b)
    for d in ("build-asan", "build"):
        p = runs.REPO / d / "zkwarden"
        if p.exists():
            return str(p)
    return str(runs.REPO / "build" / "zkwarden")


def keeper_binary(binary):
    """zkwarden-keeper beside the zkwarden binary (issue 37), or None."""
    p = os.path.join(os.path.dirname(binary), "zkwarden-keeper")
    return p if os.access(p, os.X_OK) else None


def takeover_supported(binary):
    try:
        r = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=10)
    except OSError:
        return False
    return "--takeover" in (r.stdout + r.stderr)


class Context:
    """What the nemesis acts on: the ensemble and every run's processes."""

    def __init__(self, ensemble, runs_, admin, binary):
        self.ensemble = ensemble
        self.runs = runs_
        self.admin = admin
        self.binary = binary
        self.session_timeout = SESSION_TIMEOUT
        self.t_start = time.monotonic()
        self._takeover = takeover_supported(binary) and any(r.zkwarden for r in runs_)

    def client_pids(self, with_jm):
        return [p for r in self.runs for p in r.client_pids(with_jm)]

    def restart_jobmanagers(self):
        return [r.restart_jm(self.admin) for r in self.runs if r.with_jm]

    def zkwarden_takeover_supported(self):
        return self._takeover

    def restart_zkwarden(self, rng):
        """A new zkwarden process takes over from the running one (issue 37).
        Under its keeper: kill -9 of the serving process (a crash: the next
        one takes the sessions up from the journal) or SIGUSR2 to the keeper
        (a planned restart), at random. Without one: `zkwarden --takeover`,
        same environment."""
        done = []
        for r in self.runs:
            z = r.zkwarden
            if z is None:
                continue
            if z.keeper:
                old = z.worker_pid()
                how = "kill -9" if rng.random() < 0.5 else "SIGUSR2"
                if old is None:
                    continue  # between two workers: the keeper is starting the next one
                if how == "kill -9":
                    os.kill(old, signal.SIGKILL)
                else:
                    z.proc.send_signal(signal.SIGUSR2)
                zkharness.wait_until(lambda: z.worker_pid() not in (None, old), 60,
                                     what="the keeper's next zkwarden")
                zkharness.wait_until(lambda: z.admin_get("/readyz")[0] == 200, 30, what="zkwarden ready")
                r.takeovers += 1
                r.restarts_by[how] = r.restarts_by.get(how, 0) + 1
                done.append(how)
                continue
            old = z.proc
            env = dict(os.environ)
            env.update({"ZKWARDEN_MODE": "sidecar", "ZKWARDEN_UPSTREAM": ",".join(z.upstreams),
                        "ZKWARDEN_LISTEN": z.hostport, "ZKWARDEN_ADMIN_LISTEN": "%s:%d" % (zkharness.HOST,
                                                                                            z.admin_port),
                        "ZKWARDEN_LOG_LEVEL": z.log_level})
            env.update(z.extra_env)
            z.proc = subprocess.Popen([z.binary, "--takeover"], env=env, stdin=subprocess.DEVNULL, stdout=z.out,
                                      stderr=z.err, cwd=str(z.dir))
            zkharness.wait_until(lambda: old.poll() is not None, 60, what="the old zkwarden to hand over and exit")
            r.takeovers += 1
            r.restarts_by["--takeover"] = r.restarts_by.get("--takeover", 0) + 1
            done.append("--takeover")
        return "zkwarden restarted: %s" % (", ".join(done) or "none (no worker at that moment)")


def done_condition(ctx, nem, args, t_start, zk_runs):
    kinds = set(nem.kinds())

    seen = {"t": 0.0, "ops": 0}

    def ops_through_zkwarden():  # about: a worker's history has about 2.3 lines per operation
        if time.monotonic() - seen["t"] > 2.0:
            seen["t"] = time.monotonic()
            seen["ops"] = min((int(sum(os.path.getsize(f) for f in (r.dir / "hist").glob("*.jsonl")) / 330)
                               for r in zk_runs), default=10**9)
        return seen["ops"]

    def done():
        el = time.monotonic() - t_start
        if el < args.duration:
            return False
        if el > 2 * args.duration:
            return True
        c = nem.counts()
        if sum(c.values()) < args.min_faults or any(c.get(k, 0) < 2 for k in kinds):
            return False
        return ops_through_zkwarden() >= args.min_ops
    return done


def finish_runs(all_runs, admin):
    """Stops the workloads, reads the snapshot, closes every session, waits
    until no ephemeral of theirs is left (each session closed, or expired)."""
    for r in all_runs:
        r.stop_workload()
    snap = runs.settled_client(all_runs[0].ensemble)
    for r in all_runs:
        r.snapshot_data = r.snapshot(snap)
        r.jm_current_sid = r.idle.get("jm%d" % r.jm_inc, {}).get("sid") if r.with_jm else None
        r.metrics = r.zkwarden_metrics()
        r.reclaims = r.reclaims_view()
    snap.stop()
    snap.close()
    for r in all_runs:
        r.close_sessions()
    deadline = time.monotonic() + SESSION_TIMEOUT * 2 + 10
    for r in all_runs:
        while True:
            r.leftover = r.leftover_ephemerals(admin)
            if not r.leftover or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    for r in all_runs:
        r.stop_zkwarden()


def check(r, checker_bin):
    info = {"root": r.root, "identity": r.identity, "snapshot": r.snapshot_data, "idle": r.idle,
            "audit": r.audit(), "leftover": r.leftover, "lock_snapshots": r.lock_snapshots,
            "jm_current_sid": r.jm_current_sid, "kind": r.kind, "reclaims": r.reclaims,
            "wall_minus_mono_ns": time.time_ns() - time.monotonic_ns(),
            "incarnation_recorded_ns": r.incarnations_recorded()}
    (r.dir / "info.json").write_text(json.dumps(info))  # for --recheck
    found, stats = checkers.check_run(r.histories(), info, checker_bin, r.dir, r.kind == "zkwarden")
    return found, stats


def recheck(workdir, json_path=None):
    """Runs the checkers again on the histories a run left in workdir; with
    json_path (that run's summary), writes the new anomalies into it."""
    checker_bin = build_checker(Path(workdir) / "checker")
    summary = json.loads(Path(json_path).read_text()) if json_path and Path(json_path).exists() else None
    for info_path in sorted(Path(workdir).glob("*/info.json")):
        d = info_path.parent
        info = json.loads(info_path.read_text())
        recs = []
        for f in sorted((d / "hist").glob("*.jsonl")):
            for line in f.read_text().splitlines():
                try:
                    recs.append(json.loads(line))
                except ValueError:
                    pass
        found, stats = checkers.check_run(recs, info, checker_bin, d, info["kind"] == "zkwarden")
        log("%s: %d ops, anomalies %s" % (d.name, stats["ops"], json.dumps(checkers.counts(found))))
        for k, v in found.items():
            for a in v[:5]:
                log("  %s: %s" % (k, json.dumps(a)))
        if summary is not None and summary.get(d.name):
            summary[d.name]["anomalies"] = checkers.counts(found)
            summary[d.name]["details"] = {k: v[:checkers.DETAILS] for k, v in found.items() if v}
        elif summary is not None and d.name.startswith("mut-") and d.name[4:] in summary.get("mutations", {}):
            m = summary["mutations"][d.name[4:]]
            m["found"] = len(found[m["checker"]])
            m["caught"] = m["found"] > 0 and m.get("applied", True)
            m["anomalies"] = checkers.counts(found)
    if summary is not None:
        summary["mutations_caught"] = sum(1 for v in summary.get("mutations", {}).values() if v["caught"])
        args = argparse.Namespace(min_ops=summary.get("min_ops", 0), min_faults=summary.get("min_faults", 0))
        summary["failures"] = verdict(summary, args)
        summary["passed"] = not summary["failures"]
        summary["rechecked"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        Path(json_path).write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return 0


def summarize(r, found, stats):
    return {"name": r.name, "anomalies": checkers.counts(found),
            "details": {k: v[:checkers.DETAILS] for k, v in found.items() if v},
            "ops": stats["ops"], "by_outcome": stats["by_outcome"], "by_kind": stats["by_kind"], "stats": stats,
            "jobmanager_incarnations": r.jm_inc, "zkwarden": r.metrics, "problems": r.problems,
            "takeovers": r.takeovers, "restarts_by": dict(r.restarts_by)}


def mutation_runs(args, ensemble, admin, binary, checker_bin, workdir):
    """Each mutation through its own zkwarden, at once, without faults: the
    checker named for it must find it."""
    muts = [m for m in MUTATIONS if args.mutations == "all" or m in args.mutations.split(",")]
    epochs = int(MUTATION_SECONDS * 2 / runs.EPOCH_S) + 4
    rs = [Run("mut-%s" % m, "zkwarden", workdir, ensemble, args.seed, SESSION_TIMEOUT, epochs,
              runs.MUTATION_MIX, with_jm=False, zkwarden_env={"ZKW_TEST_MUTATION": m}, binary=binary)
          for m in muts]
    out = {}
    try:
        for r in rs:
            r.start_zkwarden()
            r.prepare(admin)
        t0 = time.monotonic_ns()
        for r in rs:
            r.start(t0)
        time.sleep(MUTATION_SECONDS)
        finish_runs(rs, admin)
    finally:
        for r in rs:
            r.kill_all()
    for m, r in zip(muts, rs):
        applied = "test mutation %s" % m in (r.zkwarden.stderr() if r.zkwarden else "")
        found, stats = check(r, checker_bin)
        named = MUTATIONS[m]
        out[m] = {"checker": named, "caught": len(found[named]) > 0 and applied, "applied": applied,
                  "found": len(found[named]), "ops": stats["ops"], "anomalies": checkers.counts(found),
                  "example": found[named][0] if found[named] else None, "problems": r.problems}
        log("mutation %s: %s by %s (%d anomalies, %d ops)%s" % (
            m, "caught" if out[m]["caught"] else "NOT CAUGHT", named, len(found[named]), stats["ops"],
            "" if applied else "; zkwarden never applied it (not a -DZKW_FAULT_INJECTION=ON build?)"))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=110.0, help="seconds of the faulted run (at least)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--json", default=None, help="write the summary there")
    ap.add_argument("--direct-only", action="store_true")
    ap.add_argument("--zkwarden-only", action="store_true")
    ap.add_argument("--min-ops", type=int, default=None, help="operations through zkwarden (default 20000, "
                    "scaled to --duration past the default)")
    ap.add_argument("--min-faults", type=int, default=20)
    ap.add_argument("--mutations", default="all", help="all, none, or a comma list of " + ",".join(MUTATIONS))
    ap.add_argument("--zookeeper", default="debian", metavar="LINE",
                    help="the ensemble's release: debian (Debian's 3.8.0, the default) or a line of "
                         "tests/flink/maven/zookeeper/pom.xml (3.5 to 3.9), resolved by Maven")
    ap.add_argument("--workdir", default=None, help="keep the histories and logs there")
    ap.add_argument("--recheck", default=None, metavar="WORKDIR", help="only run the checkers again on the "
                    "histories of an earlier run's --workdir")
    args = ap.parse_args()
    if args.recheck:
        return recheck(args.recheck, args.json)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 10**9)
    if args.min_ops is None:
        args.min_ops = int(20000 * max(1.0, args.duration / 110.0))
    t_begin = time.monotonic()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="zkw-consistency-"))
    workdir.mkdir(parents=True, exist_ok=True)
    binary = zkwarden_binary()
    shown = os.path.relpath(binary, runs.REPO)  # no path of this machine in the summary
    if shown.startswith(".."):
        shown = os.path.join(os.path.basename(os.path.dirname(binary)), os.path.basename(binary))
    command = "%stests/consistency/run.sh --seed %d --duration %g%s%s%s%s" % (
        "ZKW_BIN=%s " % shown if os.environ.get("ZKW_BIN") else "", args.seed, args.duration,
        " --direct-only" if args.direct_only else "", " --zkwarden-only" if args.zkwarden_only else "",
        "" if args.zookeeper == "debian" else " --zookeeper " + args.zookeeper,
        "" if args.mutations == "all" else " --mutations " + args.mutations)
    log("seed %d, workdir %s, zkwarden %s; reproduce: %s" % (args.seed, workdir, binary, command))
    checker_bin = build_checker(workdir / "checker")
    classpath, zk_version = zookeeper_release(args.zookeeper)
    log("ZooKeeper %s" % zk_version)
    ensemble = zkharness.Ensemble(workdir / "ensemble", n=3, tick_ms=500, reconfig=False,
                                  jvm_args=zkharness.FAST_START_JVM, max_session_ms=30000,
                                  four_letter_words="srvr,ruok,stat,cons,dump,mntr", classpath=classpath)
    summary = {"seed": args.seed, "command": command, "duration_s": args.duration, "zkwarden_binary": shown,
               "min_ops": args.min_ops, "min_faults": args.min_faults, "zookeeper": zk_version,
               "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    main_runs = []
    epochs = int(args.duration * 2 / runs.EPOCH_S) + 8
    try:
        ensemble.start(timeout=120)
        admin = admin_client(ensemble)
        if not args.zkwarden_only:
            main_runs.append(Run("direct", "direct", workdir, ensemble, args.seed, SESSION_TIMEOUT, epochs,
                                 runs.MAIN_MIX))
        if not args.direct_only:
            main_runs.append(Run("zkwarden", "zkwarden", workdir, ensemble, args.seed, SESSION_TIMEOUT, epochs,
                                 runs.MAIN_MIX, binary=binary, keeper=keeper_binary(binary)))
        for r in main_runs:
            if r.kind == "zkwarden":
                r.start_zkwarden()
                zkharness.wait_until(lambda: r.zkwarden.admin_get("/readyz")[0] == 200, 30,
                                     what="zkwarden ready")
            r.prepare(admin)
        ctx = Context(ensemble, main_runs, admin, binary)
        rng = random.Random(args.seed)
        nem = nemesis.Nemesis(ctx, rng)
        t0 = time.monotonic_ns()
        for r in main_runs:
            r.start(t0)
        zk_runs = [r for r in main_runs if r.kind == "zkwarden"] or main_runs
        log("workload and nemesis running (faults: %s)" % ", ".join(nem.kinds()))
        fault_log = nem.run(done_condition(ctx, nem, args, time.monotonic(), zk_runs))
        summary["faulted_s"] = round(time.monotonic() - ctx.t_start, 1)
        summary["faults"] = nem.counts()
        summary["fault_log"] = fault_log
        summary["fault_kinds_enabled"] = nem.kinds()
        summary["faults_disabled"] = [f.kind for f in nemesis.FAULTS if f.kind not in nem.kinds()]
        problems = list(nem.errors)
        finish_runs(main_runs, admin)
        results = {}
        for r in main_runs:
            found, stats = check(r, checker_bin)
            results[r.name] = summarize(r, found, stats)
            problems += ["%s: %s" % (r.name, p) for p in r.problems]
            log("%s: %d ops, anomalies %s" % (r.name, stats["ops"], json.dumps(results[r.name]["anomalies"])))
        mut = {}
        if not args.direct_only and args.mutations != "none":
            mut = mutation_runs(args, ensemble, admin, binary, checker_bin, workdir)
        admin.stop()
        admin.close()
    finally:
        for r in main_runs:
            r.kill_all()
            if r.zkwarden and r.zkwarden.alive():
                r.zkwarden.kill()
        ensemble.stop()
    summary["direct"] = results.get("direct")
    summary["zkwarden"] = results.get("zkwarden")
    summary["ops"] = {k: v["ops"] for k, v in results.items()}
    summary["mutations"] = mut
    summary["mutations_run"] = len(mut)
    summary["mutations_caught"] = sum(1 for v in mut.values() if v["caught"])
    summary["problems"] = problems
    summary["took_s"] = round(time.monotonic() - t_begin, 1)
    failures = verdict(summary, args)
    summary["failures"] = failures
    summary["passed"] = not failures
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    for f in failures:
        log("FAILED: " + f)
    if failures or args.workdir:
        log("%s in %.0f s (seed %d; histories in %s)" % ("passed" if not failures else "failed",
                                                         summary["took_s"], args.seed, workdir))
    else:  # a passed run's histories (about 100 MB) go unless --workdir asked to keep them
        shutil.rmtree(workdir, ignore_errors=True)
        log("passed in %.0f s (seed %d)" % (summary["took_s"], args.seed))
    print("consistency: %d passed, %d failed" % (0 if failures else 1, 1 if failures else 0))
    return 1 if failures else 0


def verdict(s, args):
    out = []
    for name in ("direct", "zkwarden"):
        res = s.get(name)
        if res is None:
            continue
        for k, n in res["anomalies"].items():
            if n:
                out.append("%s: %d anomalies of %s (seed %d)" % (name, n, k, s["seed"]))
    if s.get("zkwarden") is not None:
        if s["zkwarden"]["ops"] < args.min_ops:
            out.append("only %d operations through zkwarden (want %d)" % (s["zkwarden"]["ops"], args.min_ops))
    total = sum(s.get("faults", {}).values())
    if total < args.min_faults:
        out.append("only %d faults (want %d)" % (total, args.min_faults))
    for k, n in s.get("faults", {}).items():
        if n == 0:
            out.append("no fault of kind %s" % k)
    for m, v in s.get("mutations", {}).items():
        if not v["caught"]:
            out.append("mutation %s not caught by %s" % (m, v["checker"]))
    out += s.get("problems", [])
    return out


if __name__ == "__main__":
    sys.exit(main())
