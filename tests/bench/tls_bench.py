"""TLS rows of the benchmark: a client speaking TLS straight to ZooKeeper
against the same client speaking plaintext to zkwarden with TLS upstream.

ZooKeeper 3.8 serves TLS only (secureClientPort, ssl.clientAuth=need, PEM
keystores; zkharness.ZkServer with tls=); certificates come from the openssl
CLI (zkharness.TlsCerts). zkwarden runs as a sidecar (ZKWARDEN_MODE=sidecar,
its registry through the internal relay) with ZKWARDEN_UPSTREAM_TLS=on. The
load is zkw_bench_load raw-latency / raw-throughput (getData of a 32-byte
node on one raw-socket session per target, OpenSSL for the direct one): the
targets take turns request by request (latency) or in 200 ms slices
(throughput, 32 in flight). For reference, the same server also serves a
plaintext clientPort, and the same client measures it direct and through a
second zkwarden without TLS: the share of the proxy hop itself with this
client. Ratios zkwarden/direct per round; median and min..max over the
rounds. The plaintext rows of bench.py are not touched.

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
from zkharness import HOST, TlsCerts, ZkServer, Zkwarden, free_port  # noqa: E402

PAIRS = [("direct", "zkwarden"), ("direct-plain", "zkwarden-plain")]


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
    plain_port = free_port()
    zk = ZkServer(out / "zk", tls=(certs, certs.server, "need"), max_session_ms=120000,
                  extra_cfg=["forceSync=no", "clientPort=%d" % plain_port, "clientPortAddress=%s" % HOST])
    zkws = []
    results = []
    try:
        zk.start()
        common = {"ZKWARDEN_MODE": "sidecar", "ZKWARDEN_SWEEP_INTERVAL_S": "0"}
        tls = {"ZKWARDEN_UPSTREAM_TLS": "on", "ZKWARDEN_TLS_CA_FILE": str(certs.ca),
               "ZKWARDEN_TLS_CERT_FILE": str(certs.client), "ZKWARDEN_TLS_KEY_FILE": str(certs.key(certs.client))}
        for name, up, env in (("zkwarden", zk.hostport, dict(tls, ZKWARDEN_IDENTITY="bench")),
                              ("zkwarden-plain", "%s:%d" % (HOST, plain_port), {"ZKWARDEN_IDENTITY": "bench-plain"})):
            z = Zkwarden(out / name, [up], binary=args.zkwarden, log_level="warn", extra_env=dict(common, **env))
            zkws.append(z)
            z.start()
        where = {"direct": "tls:" + zk.hostport, "zkwarden": zkws[0].hostport,
                 "direct-plain": "%s:%d" % (HOST, plain_port), "zkwarden-plain": zkws[1].hostport}
        # JIT warm-up of the server, not measured.
        run_load(args.load, "raw-throughput", list(where.values()), list(where), certs, 3, ["-d", "32"])
        for rnd in range(args.rounds):
            labels = list(where)[:: 1 if rnd % 2 == 0 else -1]
            targets = [where[l] for l in labels]
            lat = run_load(args.load, "raw-latency", targets, labels, certs, args.seconds)
            thr = run_load(args.load, "raw-throughput", targets, labels, certs, args.seconds, ["-d", "32"])
            row = {"round": rnd, "latency": lat, "throughput": thr}
            results.append(row)
            print("round %d: p50 us %s; ops/s %s" % (
                rnd, ", ".join("%s %.0f" % (l, lat[l]["p50_us"]) for l in where),
                ", ".join("%s %.0f" % (l, thr[l]["ops_per_s"]) for l in where)), flush=True)
    finally:
        problems = [p for z in zkws for p in z.stop()]
        zk.stop()
    (out / "tls-results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    lines = [
        "TLS rows, %s, %d rounds of %.0f s per target (nproc %s)" % (time.strftime("%Y-%m-%d"), args.rounds,
                                                                   args.seconds, os.cpu_count()),
        "",
        "| what | target | zkwarden / direct | direct | zkwarden |",
        "|---|---|---|---|---|",
    ]
    rows = [("p50 latency, getData, one client", "latency", "p50_us", "us", "<= 1.15x"),
            ("p99 latency, getData, one client", "latency", "p99_us", "us", ""),
            ("throughput, 32 getData in flight", "throughput", "ops_per_s", "ops/s", ">= 0.90x")]
    for (d, z), kind in zip(PAIRS, ("TLS", "plaintext, for reference")):
        for what, key, k, unit, target in rows:
            ratios = [r[key][z][k] / r[key][d][k] for r in results]
            lines.append("| %s (%s) | %s | %.2fx (%.2f..%.2f) | %.0f %s | %.0f %s |" % (
                what, kind, target if kind == "TLS" else "", median(ratios), min(ratios), max(ratios),
                median([r[key][d][k] for r in results]), unit, median([r[key][z][k] for r in results]), unit))
    text = "\n".join(lines) + "\n"
    (out / "tls-summary.md").write_text(text)
    print(text + "results in %s" % out)
    if problems:
        print("zkwarden shutdown: %s" % problems)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
