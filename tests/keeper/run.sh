#!/usr/bin/env bash
# Runs the keeper's tests (issue 37) from the repo root: zkwarden-keeper and
# zkwarden workers as real processes in front of a real ZooKeeper, on
# loopback: the listening socket and the client connections across a worker's
# kill -9, restarts, the descriptors the keeper holds, planned restarts that
# fail, `zkwarden --takeover` and `zkwarden upgrade`, SIGTERM, and every
# failure point of the keeper and the handover (with the sanitizer build).
# Extra arguments go to pytest (e.g. -k takeover, -x).
#   ZKW_BIN          zkwarden binary (default build/zkwarden)
#   ZKW_KEEPER_BIN   zkwarden-keeper (default: next to ZKW_BIN)
set -euo pipefail
cd "$(dirname "$0")/../.."
exec /usr/bin/python3 -m pytest -q tests/keeper "$@"
