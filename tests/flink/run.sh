#!/usr/bin/env bash
# Real Flink through zkwarden (issue 28): Flink's own JobManager and
# TaskManager, jars from Maven Central, direct to ZooKeeper and through a
# zkwarden sidecar, on any Flink and ZooKeeper line. See tests/flink/README.md.
#   tests/flink/run.sh --quick [--json FILE]        S1-S3 on Flink 1.20, Debian's ZooKeeper 3.8.0
#   tests/flink/run.sh --flink 2.1 --zookeeper 3.9  every scenario on one pair (an adopter's check)
#   tests/flink/run.sh --matrix --json F --docs docs/compatibility.md   every pair (hours)
#   tests/flink/run.sh --help
# Needs Maven (mvn), Java 17, /usr/bin/python3 with kazoo; tests/run.sh installs them
# (deploy/install-deps.sh). The zkwarden binary is $ZKW_BIN, else build/zkwarden.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
for tool in mvn java javac jar; do
  command -v "$tool" >/dev/null || { echo "tests/flink: $tool not found (deploy/install-deps.sh all)" >&2; exit 2; }
done
if ! "$py" -c 'import kazoo' 2>/dev/null; then
  echo "tests/flink: $py cannot import kazoo (deploy/install-deps.sh all)" >&2
  exit 2
fi
exec "$py" "$here/flinktest.py" "$@"
