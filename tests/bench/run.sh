#!/usr/bin/env bash
# zkwarden's benchmark, one command: ZooKeeper direct, HAProxy in TCP mode and
# zkwarden, interleaved, on 127.0.0.1. See tests/bench/README.md.
#   tests/bench/run.sh            full run (5 rounds, idle sessions up to 10,000), about 10 minutes
#   tests/bench/run.sh --quick    the regression guard (loose ratio bounds), under a minute
#   tests/bench/run.sh --help     every option
#   ZKW_BIN / ZKW_BENCH_LOAD      binaries to use (default: build/, built here with cmake)
#   ZKW_BENCH_NO_BUILD=1          do not run cmake
# Needs the Debian packages of deploy/install-deps.sh (haproxy, gnuplot-nox, zookeeper).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${ZKW_BENCH_NO_BUILD:-}" ] && [ -z "${ZKW_BIN:-}" ]; then
  cmake -S "$repo" -B "$repo/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$repo/build" -j"$(nproc)" --target zkwarden zkw_bench_load >/dev/null
fi
# The driver stops every process it started (by pid), also on SIGINT/SIGTERM.
exec /usr/bin/python3 "$repo/tests/bench/bench.py" "$@"
