#!/usr/bin/env bash
# The consistency test (issue 36): concurrent kazoo clients direct to a
# 3-server ZooKeeper ensemble and through zkwarden, under server kills,
# pauses, session moves, client pauses and JobManager restarts; every
# history checked for linearizability (Porcupine) and ZooKeeper's session
# guarantees; then each mutation of the test build must be caught.
#   tests/consistency/run.sh                 the default run (about 2.5 min; tests/run.sh runs it)
#   tests/consistency/run.sh --duration 1800 the long run
#   --seed N  --json FILE  --direct-only  --zkwarden-only  --mutations all|none|a,b  --workdir DIR
#   --zookeeper LINE  the ensemble's release: debian (Debian's 3.8.0, the default) or a line of
#             tests/flink/maven/zookeeper/pom.xml (3.5 to 3.9), resolved by Maven
#   ZKW_BIN   zkwarden binary (default build-asan/zkwarden, else build/zkwarden): the
#             mutations need a -DZKW_FAULT_INJECTION=ON build
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/usr/local/go/bin"
case " $* " in
  *" --recheck "*) ;;
  *) /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/consistency/test_checkers.py ;;  # the checkers on made-up histories
esac
exec /usr/bin/python3 tests/consistency/consistency.py "$@"
