"""The recovery benchmark (issue 30; run it through tests/bench/recovery.sh).

A session cluster's JobManager (tests/flinklike SessionCluster: --jobs jobs x
--retained checkpoints, Flink 1.15+ layout, Curator) recovers:

- direct, clean: its predecessor exited gracefully (closeSession);
- through a sidecar after a crash: its predecessor, through the same sidecar,
  was killed -9 while the sidecar lives (the new incarnation fences it).

The two alternate (direct; then through the sidecar a JobManager that
recovers and is killed, and the next one, measured), --runs times each
(median), on one ZooKeeper 3.8
(bench.py's: standalone, forceSync=no) that holds --foreign nodes of 100
other clusters under the same root, made first. Recovery: from leadership to
every job recovered (execution plans, then per job on 16 threads its
connection_info, its checkpoints' getAllAndLock and its counter), as the
stand-in reports it. Beside it, for each sidecar run: the new incarnation's
sweep, its reads as zkwarden counts them and as the server counts them (mntr
zk_packets_received from the recovery's end to the sweep's end, the
JobManager idle meanwhile), and when it ended after the recovery; then one
periodic pass of the unchanged tree, counted the same way.

Every process is started here and stopped by its pid (bench.py's start/stop),
also on errors and on SIGINT/SIGTERM. Writes results.jsonl and summary.md.
"""

import argparse
import datetime
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
import bench  # noqa: E402  (start, stop, the ZooKeeper server, machine)
from bench import HOST, four_letter, free_port, http_get, log, wait_until  # noqa: E402

FLINKLIKE = REPO / "tests" / "flinklike"
TARGET_RATIO = 1.15


def packets(zk):
    text = four_letter(zk.port, "mntr").decode()
    return int(re.search(r"zk_packets_received\s+(\d+)", text).group(1))


class Sidecar:
    """zkwarden in front of zk: sidecar mode (one JobManager identity), or
    relay mode (the proxy hop alone, to tell its cost from the sidecar's)."""

    def __init__(self, d, binary, zk, interval_s, mode="sidecar"):
        self.dir = d / ("zkwarden-" + mode)
        self.dir.mkdir()
        self.port, self.admin_port = free_port(), free_port()
        self.env = dict(os.environ, ZKWARDEN_UPSTREAM="%s:%d" % (HOST, zk.port),
                        ZKWARDEN_LISTEN="%s:%d" % (HOST, self.port),
                        ZKWARDEN_ADMIN_LISTEN="%s:%d" % (HOST, self.admin_port), ZKWARDEN_IDENTITY="jm-0",
                        ZKWARDEN_MODE=mode, ZKWARDEN_LOG_LEVEL="info",
                        ZKWARDEN_SWEEP_INTERVAL_S=str(interval_s))
        self.binary = binary
        self.log = self.dir / "zkwarden.log"
        self.proc = None

    def start(self):
        self.proc = bench.start([self.binary], self.log, env=self.env, cwd=str(self.dir))
        wait_until(lambda: http_get(self.admin_port, "/readyz")[0] == 200, 60, what="zkwarden ready")
        return self

    def text(self):
        return self.log.read_text(errors="replace")

    def sweeps(self):
        return re.findall(r"sweep done \(([^)]*)\): (\d+) node\(s\) read in ([\d.]+) s", self.text())

    def metric(self, name):
        code, body = http_get(self.admin_port, "/metrics")
        m = re.search(r"^%s (\S+)$" % re.escape(name), body, re.M) if code == 200 else None
        return float(m.group(1)) if m else 0.0


class Jm:
    """One SessionCluster JobManager process."""

    def __init__(self, classpath, connect, outdir, name, args):
        self.name = name
        cmd = ["java", "-Xmx1g", "-XX:+UseSerialGC", "-cp", classpath, "flinklike.SessionCluster",
               "--connect=" + connect] + args
        self.proc = bench.start(cmd, outdir / ("%s.log" % name), stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def result(self, timeout):
        """The JSON line it prints when done (populate, foreign) or recovered."""
        deadline = time.monotonic() + timeout
        line = b""
        os.set_blocking(self.proc.stdout.fileno(), False)
        while time.monotonic() < deadline:
            chunk = self.proc.stdout.read()
            if chunk:
                line += chunk
                if b"\n" in line:
                    return json.loads(line.split(b"\n", 1)[0])
            elif self.proc.poll() is not None:
                raise RuntimeError("%s exited with %s" % (self.name, self.proc.returncode))
            time.sleep(0.02)
        raise TimeoutError("%s: no result within %d s" % (self.name, timeout))

    def exit(self):
        """A graceful exit (closeSession)."""
        self.proc.stdin.close()
        self.proc.wait(60)
        bench.stop(self.proc)

    def crash(self):
        self.proc.kill()
        self.proc.wait(30)
        bench.stop(self.proc)


def one_size(a, classpath, binary, foreign, outdir):
    d = outdir / ("foreign-%d" % foreign)
    d.mkdir()
    zk = bench.Zk(d).start()
    jm_args = ["--jobs=%d" % a.jobs, "--retained=%d" % a.retained, "--session-timeout-ms=60000",
               "--io-threads=%d" % a.io_threads]
    res = {"foreign": foreign, "direct_ms": [], "relay_ms": [], "sidecar_ms": [], "sweeps": []}
    try:
        if foreign:
            j = Jm(classpath, "%s:%d" % (HOST, zk.port), d, "foreign", ["--foreign=%d" % foreign])
            made = j.result(1800)
            j.proc.wait(60)
            bench.stop(j.proc)
            log("foreign: %(nodes)d nodes of %(clusters)d clusters in %(ms)d ms" % made)
        direct = "%s:%d" % (HOST, zk.port)
        j = Jm(classpath, direct, d, "populate", jm_args + ["--populate"])
        made = j.result(3600)
        j.proc.wait(60)
        bench.stop(j.proc)
        log("populate: %(jobs)d jobs, %(checkpoints)d checkpoints in %(ms)d ms" % made)
        side = Sidecar(d, binary, zk, a.interval).start()
        through = "%s:%d" % (HOST, side.port)
        relay = Sidecar(d, binary, zk, a.interval, mode="relay").start()
        # Warm-up, not measured: a direct recovery.
        j = Jm(classpath, direct, d, "warm-direct", jm_args)
        j.result(1800)
        j.exit()
        for i in range(a.runs):
            # Direct, clean: its predecessor exited (no other JobManager holds the latch).
            j = Jm(classpath, direct, d, "direct-%d" % i, jm_args)
            r = j.result(1800)
            j.exit()
            res["direct_ms"].append(r["recovery_ms"])
            log("run %d direct: %d ms (%d checkpoints)" % (i, r["recovery_ms"], r["checkpoints"]))
            # Through zkwarden in relay mode, clean: what the proxy hop costs.
            j = Jm(classpath, "%s:%d" % (HOST, relay.port), d, "relay-%d" % i, jm_args)
            r = j.result(1800)
            j.exit()
            res["relay_ms"].append(r["recovery_ms"])
            log("run %d relay: %d ms" % (i, r["recovery_ms"]))
            # Through the sidecar: a JobManager recovers, crashes (kill -9, the
            # sidecar lives), and the next one recovers: the one measured.
            crashed = Jm(classpath, through, d, "crashed-%d" % i, jm_args)
            crashed.result(1800)
            crashed.crash()
            seen = len(side.sweeps())
            j = Jm(classpath, through, d, "sidecar-%d" % i, jm_args)
            r = j.result(1800)
            p0, t_end = packets(zk), r["end_epoch_ms"]
            wait_until(lambda: len(side.sweeps()) > seen, 600, what="the new incarnation's sweep")
            p1, t_sweep = packets(zk), int(time.time() * 1000)
            kind, nodes, secs = side.sweeps()[seen]
            sweep = {"kind": kind, "read": int(nodes), "seconds": float(secs), "server_packets": p1 - p0,
                     "after_recovery_s": (t_sweep - t_end) / 1000.0}
            res["sidecar_ms"].append(r["recovery_ms"])
            res["sweeps"].append(sweep)
            log("run %d sidecar after a crash: %d ms (%d checkpoints, %d NODEEXISTS); its sweep: %s"
                % (i, r["recovery_ms"], r["checkpoints"], r["lock_nodeexists"], sweep))
            if i == a.runs - 1:
                # One periodic pass of the unchanged tree (the JobManager idle).
                seen = len(side.sweeps())
                wait_until(lambda: len(side.sweeps()) > seen, a.interval + 600, what="a periodic pass")
                p0 = packets(zk)
                wait_until(lambda: len(side.sweeps()) > seen + 1, a.interval + 600, what="the next periodic pass")
                kind, nodes, secs = side.sweeps()[seen + 1]
                res["periodic"] = {"kind": kind, "read": int(nodes), "server_packets": packets(zk) - p0}
            j.exit()
        res["own_trees"] = side.metric("zkwarden_own_trees")
        res["incomplete"] = side.metric("zkwarden_sweep_incomplete_total")
        bench.stop(side.proc)
        bench.stop(relay.proc)
    finally:
        bench.stop(zk.proc)
    res["direct_median_ms"] = statistics.median(res["direct_ms"])
    res["sidecar_median_ms"] = statistics.median(res["sidecar_ms"])
    res["ratio"] = res["sidecar_median_ms"] / res["direct_median_ms"]
    res["relay_ratio"] = statistics.median(res["relay_ms"]) / res["direct_median_ms"]
    return res


def summary(a, results, meta):
    out = ["# Recovery of a session cluster: %d jobs x %d checkpoints, %d recovery threads"
           % (a.jobs, a.retained, a.io_threads), "",
           "%s; %s; load average %s at the start" % (meta["date"], meta["machine"], meta["load_start"]), "",
           "| other clusters' nodes | direct, clean (median of %d) | sidecar after a crash | ratio | relay mode, "
           "clean: ratio | sweep: nodes read / server packets / ended after the recovery | periodic pass: server "
           "packets |" % a.runs, "|---|---|---|---|---|---|---|"]
    for r in results:
        sw = r["sweeps"]
        out.append("| %d | %.1f s (%s) | %.1f s (%s) | **%.2fx** | %.2fx | %s / %s / %s | %d (%s) |" % (
            r["foreign"], r["direct_median_ms"] / 1000, ", ".join("%.1f" % (x / 1000) for x in r["direct_ms"]),
            r["sidecar_median_ms"] / 1000, ", ".join("%.1f" % (x / 1000) for x in r["sidecar_ms"]), r["ratio"],
            r["relay_ratio"],
            ", ".join(str(s["read"]) for s in sw), ", ".join(str(s["server_packets"]) for s in sw),
            ", ".join("%.1f s" % s["after_recovery_s"] for s in sw), r["periodic"]["server_packets"],
            r["periodic"]["kind"]))
    bad = [r for r in results if r["ratio"] > TARGET_RATIO]
    out += ["", "Target: the sidecar's median at most %.2fx direct's: %s" % (
        TARGET_RATIO, "met" if not bad else "missed at %s" % ", ".join(str(r["foreign"]) for r in bad))]
    return "\n".join(out) + "\n", bad


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--retained", type=int, default=10)
    p.add_argument("--foreign", default="0,100000,1000000",
                   help="nodes of other clusters, comma-separated: one ZooKeeper per value")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--io-threads", type=int, default=16,
                   help="the JobManager's recovery threads (Flink's cluster.io-pool.size)")
    p.add_argument("--interval", type=int, default=20, help="ZKWARDEN_SWEEP_INTERVAL_S of the sidecar")
    p.add_argument("--out", help="results directory (default: tests/bench/results/recovery-<timestamp>)")
    a = p.parse_args()
    signal.signal(signal.SIGTERM, bench.on_signal)
    binary = os.environ.get("ZKW_BIN", str(REPO / "build" / "zkwarden"))
    r = subprocess.run([str(FLINKLIKE / "build.sh")], capture_output=True, text=True)
    if r.returncode:
        sys.exit("tests/flinklike/build.sh failed:\n" + r.stdout + r.stderr)
    classpath = (FLINKLIKE / "build" / "classpath").read_text().strip()
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    outdir = Path(a.out) if a.out else HERE / "results" / ("recovery-" + stamp)
    outdir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="zkwarden-recovery."))
    meta = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "machine": bench.machine(),
            "load_start": bench.loadavg(), "args": vars(a), "binary": binary}
    results = []
    for f in [int(x) for x in a.foreign.split(",")]:
        log("foreign nodes: %d" % f)
        res = one_size(a, classpath, binary, f, work)
        results.append(res)
        with open(outdir / "results.jsonl", "a") as fh:
            fh.write(json.dumps(res) + "\n")
    meta["load_end"] = bench.loadavg()
    text, bad = summary(a, results, meta)
    (outdir / "summary.md").write_text(text)
    (outdir / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(text)
    print("results: %s (work directory %s)" % (outdir, work))
    return 1 if bad else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        bench.stop_all()
