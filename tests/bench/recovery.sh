#!/usr/bin/env bash
# The recovery benchmark (issue 30): a session cluster's JobManager of 1000 jobs
# x 10 checkpoints recovers direct (clean) and through a sidecar after a crash,
# with 0, 100,000 and 1,000,000 nodes of other clusters under the same root;
# median of 3, the new incarnation's sweep and a periodic pass counted by the
# server (mntr) beside it. See tests/bench/README.md. Opt-in: about an hour.
#   tests/bench/recovery.sh [--jobs N] [--retained N] [--foreign 0,100000,...] [--runs N]
#   ZKW_BIN   the zkwarden binary (default: build/zkwarden, built here)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${ZKW_BIN:-}" ]; then
  cmake -S "$repo" -B "$repo/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$repo/build" -j"$(nproc)" --target zkwarden >/dev/null
fi
# The driver stops every process it started (by pid), also on SIGINT/SIGTERM.
exec /usr/bin/python3 "$repo/tests/bench/recovery.py" "$@"
