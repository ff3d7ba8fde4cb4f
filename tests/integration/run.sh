#!/usr/bin/env bash
# Runs the integration suite (a real ZooKeeper 3.8, real clients, zkwarden)
# from the repo root. Extra arguments go to pytest (e.g. -k kazoo, -x); if
# any of them names a test file or node id, only those run.
#   ZKW_BIN          zkwarden binary            (default build/zkwarden)
#   ZKW_BUILD_DIR    build dir with the C client (default build)
#   ZKW_DIRECT_ONLY  1: only the direct halves, no zkwarden needed
# pytest and kazoo are Debian's, installed for /usr/bin/python3.
set -euo pipefail
cd "$(dirname "$0")/../.."
where=(tests/integration)
for a in "$@"; do
  if [[ $a != -* && ( -e ${a%%::*} ) ]]; then where=(); break; fi
done
exec /usr/bin/python3 -m pytest -q "${where[@]}" "$@"
