#!/usr/bin/env bash
# The benchmark's TLS rows (tls_bench.py): a client speaking TLS straight to
# ZooKeeper against the same client through zkwarden with TLS upstream.
#   tests/bench/tls.sh [--rounds N] [--seconds S] [--out DIR]
#   ZKW_BIN / ZKW_BENCH_LOAD      binaries to use (default: build/, built here with cmake)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${ZKW_BIN:-}" ]; then
  cmake -S "$repo" -B "$repo/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$repo/build" -j"$(nproc)" --target zkwarden zkw_bench_load >/dev/null
fi
exec /usr/bin/python3 "$repo/tests/bench/tls_bench.py" "$@"
