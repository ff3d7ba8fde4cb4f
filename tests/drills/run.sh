#!/usr/bin/env bash
# Incident drills: Flink-like JobManagers (tests/flinklike) against a 3-server
# ZooKeeper ensemble on 127.0.0.1, through zkwarden and direct (the baseline).
#   tests/drills/run.sh --quick          both layouts, 3 cycles; exit 0 only when zkwarden shows no
#                                        leak, no stale lock, no leftover job graph and leadership
#                                        within 1 s, AND the baseline shows the leak and the wait
#   tests/drills/run.sh                  the full drill (50 cycles per scenario; hours)
#   tests/drills/run.sh --direct-only    only the baseline (no zkwarden binary needed)
#   tests/drills/run.sh --help           every option
# The zkwarden binary is $ZKW_BIN, else build/zkwarden.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
if ! "$py" -c 'import kazoo' 2>/dev/null; then
  echo "drills: $py cannot import kazoo (apt-get install python3-kazoo)" >&2
  exit 2
fi
exec "$py" "$here/drill.py" "$@"
