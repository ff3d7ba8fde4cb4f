#!/usr/bin/env bash
# Checks that the README's configuration table names every variable that
# `zkwarden --help` lists (the help text is generated from ZKW_CONFIG_VARS).
set -euo pipefail
bin=${1:?usage: check_docs.sh path/to/zkwarden}
repo=$(cd "$(dirname "$0")/.." && pwd)
vars=$("$bin" --help | grep -o 'ZKWARDEN_[A-Z0-9_]*' | sort -u)
[ -n "$vars" ] || { echo "zkwarden --help lists no variables"; exit 1; }
missing=0
for v in $vars; do
  grep -q "^| \`$v\`" "$repo/README.md" || { echo "README.md: no row for $v"; missing=1; }
done
exit $missing
