#!/usr/bin/env bash
# Soak: two Flink-like JobManagers, each through its own zkwarden sidecar, and
# kazoo clients through a relay zkwarden, against a 3-server ZooKeeper ensemble
# on 127.0.0.1, with the leader restarted every 30-60 s; RSS, descriptors,
# registry nodes, locks and counters checked at the end (exit 0 = PASS).
#   tests/soak/run.sh                 30 minutes (the long run; docs/reliability.md)
#   tests/soak/run.sh --minutes 2     the short run (tests/run.sh)
#   tests/soak/run.sh --help          every option
# The zkwarden binary is $ZKW_BIN, else build/zkwarden (release).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
if ! "$py" -c 'import kazoo' 2>/dev/null; then
  echo "soak: $py cannot import kazoo (apt-get install python3-kazoo)" >&2
  exit 2
fi
exec "$py" "$here/soak.py" "$@"
