"""TLS rows of the benchmark: a client speaking TLS straight to ZooKeeper
against the same client speaking plaintext to zkwarden with TLS upstream.

ZooKeeper 3.8 serves TLS only (secureClientPort, ssl.clientAuth=need, PEM
keystores; zkharness.ZkServer with tls=); certificates come from the openssl
CLI (zkharness.TlsCerts). zkwarden runs as a sidecar (ZKWARDEN_MODE=sidecar,
its registry through the internal relay) with ZKWARDEN_UPSTREAM_TLS=on. The
load is zkw_bench_load raw-latency / raw-throughput (getData of a 32-byte
node on one raw-socket session per target, OpenSSL for the direct one): the
two targets take turns request by request (latency) or in 200 ms slices
(throughput, 32 in flight). Ratios zkwarden/direct per round; median and
min..max over the rounds. The plaintext rows of bench.py are not touched.

usage: tests/bench/tls.sh [--rounds N] [--seconds S] [--out DIR]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))
from zkharness import TlsCerts, ZkServer, Zkwarden  # noqa: E402


def run_load(load, mode, targets, labels, certs, seconds, extra=()):
    cmd = [load, mode, "-s", ",".join(targets), "-l", ",".join(labels), "-t", str(seconds), "-w", "1",
           "-K", str(certs.ca), "-E", str(certs.client), "-Y", str(certs.key(certs.client))] + list(extra)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 4 + 60)
    if out.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), out.returncode, out.stderr))
    return {r["label"]: r for r in map(json.loads, out.stdout.splitlines())}


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5, help="measured seconds per target and test")
    ap.add_argument("--out", help="results directory (default: a temporary one, printed)")
    ap.add_argument("--zkwarden", default=os.environ.get("ZKW_BIN") or str(REPO / "build" / "zkwarden"))
    ap.add_argument("--load", default=os.environ.get("ZKW_BENCH_LOAD")
                    or str(REPO / "build" / "tests" / "bench" / "zkw_bench_load"))
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="zkw-tls-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    certs = TlsCerts(out / "certs")
    zk = ZkServer(out / "zk", tls=(certs, certs.server, "need"), max_session_ms=120000,
                  extra_cfg=["forceSync=no"])
    zkw = None
    results = []
    try:
        zk.start()
        zkw = Zkwarden(out / "zkwarden", [zk.hostport], binary=args.zkwarden, log_level="warn", extra_env={
            "ZKWARDEN_MODE": "sidecar", "ZKWARDEN_IDENTITY": "bench", "ZKWARDEN_SWEEP_INTERVAL_S": "0",
            "ZKWARDEN_UPSTREAM_TLS": "on", "ZKWARDEN_TLS_CA_FILE": str(certs.ca),
            "ZKWARDEN_TLS_CERT_FILE": str(certs.client), "ZKWARDEN_TLS_KEY_FILE": str(certs.key(certs.client))})
        zkw.start()
        direct, proxied = "tls:" + zk.hostport, zkw.hostport
        # JIT warm-up of the server, not measured.
        run_load(args.load, "raw-throughput", [direct, proxied], ["direct", "zkwarden"], certs, 3, ["-d", "32"])
        for rnd in range(args.rounds):
            order = [(direct, "direct"), (proxied, "zkwarden")][:: 1 if rnd % 2 == 0 else -1]
            targets, labels = [t for t, _ in order], [l for _, l in order]
            lat = run_load(args.load, "raw-latency", targets, labels, certs, args.seconds)
            thr = run_load(args.load, "raw-throughput", targets, labels, certs, args.seconds, ["-d", "32"])
            row = {"round": rnd, "latency": lat, "throughput": thr}
            results.append(row)
            print("round %d: p50 direct %.0f us, zkwarden %.0f us; ops/s direct %.0f, zkwarden %.0f"
                  % (rnd, lat["direct"]["p50_us"], lat["zkwarden"]["p50_us"],
                     thr["direct"]["ops_per_s"], thr["zkwarden"]["ops_per_s"]), flush=True)
    finally:
        problems = zkw.stop() if zkw else []
        zk.stop()
    (out / "tls-results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    p50 = [r["latency"]["zkwarden"]["p50_us"] / r["latency"]["direct"]["p50_us"] for r in results]
    p99 = [r["latency"]["zkwarden"]["p99_us"] / r["latency"]["direct"]["p99_us"] for r in results]
    thr = [r["throughput"]["zkwarden"]["ops_per_s"] / r["throughput"]["direct"]["ops_per_s"] for r in results]
    med = lambda key, t, k: median([r[key][t][k] for r in results])  # noqa: E731
    lines = [
        "TLS rows, %s, %d rounds of %.0f s per target (nproc %s)" % (time.strftime("%Y-%m-%d"), args.rounds,
                                                                   args.seconds, os.cpu_count()),
        "",
        "| what | target | zkwarden / direct TLS | direct TLS | zkwarden |",
        "|---|---|---|---|---|",
        "| p50 latency, getData, one client | <= 1.15x | %.2fx (%.2f..%.2f) | %.0f us | %.0f us |"
        % (median(p50), min(p50), max(p50), med("latency", "direct", "p50_us"),
           med("latency", "zkwarden", "p50_us")),
        "| p99 latency, getData, one client | | %.2fx (%.2f..%.2f) | %.0f us | %.0f us |"
        % (median(p99), min(p99), max(p99), med("latency", "direct", "p99_us"),
           med("latency", "zkwarden", "p99_us")),
        "| throughput, 32 getData in flight | >= 0.90x | %.2fx (%.2f..%.2f) | %.0f ops/s | %.0f ops/s |"
        % (median(thr), min(thr), max(thr), med("throughput", "direct", "ops_per_s"),
           med("throughput", "zkwarden", "ops_per_s")),
    ]
    text = "\n".join(lines) + "\n"
    (out / "tls-summary.md").write_text(text)
    print(text + "results in %s" % out)
    if problems:
        print("zkwarden shutdown: %s" % problems)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
