#!/usr/bin/env bash
# Runs the operability tests from the repo root: the admin HTTP endpoint
# (with curl, against a real ZooKeeper through zkwarden), configuration
# errors, and the deploy/ files. Extra arguments go to pytest.
#   ZKW_BIN        zkwarden binary (default build/zkwarden)
#   ZKW_TOOLS_DIR  where promtool is cached (see get-promtool.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
exec /usr/bin/python3 -m pytest -q tests/admin "$@"
