#!/usr/bin/env bash
# Runs the fault tests (issue 7) from the repo root against real ZooKeeper
# servers, each with a client workload and a check that nothing was lost.
#   tests/faults/run.sh            the quick versions (tests/run.sh runs these)
#   tests/faults/run.sh --long     the long versions (100 crash cycles, partition loops, ...)
# Other arguments go to pytest (e.g. -k partition, -x).
#   ZKW_BIN   zkwarden binary (default build/zkwarden)
set -euo pipefail
cd "$(dirname "$0")/../.."
args=()
for a in "$@"; do
  if [ "$a" = --long ]; then export ZKW_FAULTS_LONG=1; else args+=("$a"); fi
done
exec /usr/bin/python3 -m pytest -q tests/faults "${args[@]}"
