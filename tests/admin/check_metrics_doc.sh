#!/usr/bin/env bash
# Checks that docs/metrics.md's metrics table is exactly what
# `zkwarden --list-metrics` prints (the table is generated from ZKW_METRICS):
# the lines between <!-- metrics:begin --> and <!-- metrics:end -->.
# To update the page: zkwarden --list-metrics, paste between the markers.
set -euo pipefail
bin=${1:?usage: check_metrics_doc.sh path/to/zkwarden}
repo=$(cd "$(dirname "$0")/../.." && pwd)
page=$repo/docs/metrics.md
grep -q '^<!-- metrics:begin -->$' "$page" || { echo "docs/metrics.md: no <!-- metrics:begin --> marker"; exit 1; }
doc=$(sed -n '/^<!-- metrics:begin -->$/,/^<!-- metrics:end -->$/p' "$page" | sed '1d;$d')
gen=$("$bin" --list-metrics)
if [ "$doc" != "$gen" ]; then
  echo "docs/metrics.md's metrics table differs from zkwarden --list-metrics:"
  diff <(echo "$doc") <(echo "$gen") || true
  exit 1
fi
echo "docs/metrics.md: $(echo "$gen" | grep -c '^| `') metrics, up to date"
