#!/usr/bin/env bash
# Where zkwarden's time goes: syscalls per frame (strace), instructions per
# frame (callgrind) and a perf profile, for fixed request counts. See
# tests/bench/README.md. Builds like run.sh; options: --help.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${ZKW_BENCH_NO_BUILD:-}" ] && [ -z "${ZKW_BIN:-}" ]; then
  cmake -S "$repo" -B "$repo/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$repo/build" -j"$(nproc)" --target zkwarden zkw_bench_load >/dev/null
fi
exec /usr/bin/python3 "$repo/tests/bench/bench_profile.py" "$@"
