#!/usr/bin/env bash
# Checks docs/configuration.md against the one list of variables
# (ZKW_CONFIG_VARS in proxy/base/zkw_config.h):
# - the reference table between <!-- config:begin --> and <!-- config:end -->
#   is exactly what `zkwarden --list-config` prints (generated from the list);
# - the "in more detail" table has a row for every variable `zkwarden --help`
#   lists (the help text is generated from the same list).
# To update the page: zkwarden --list-config, paste between the markers.
set -euo pipefail
bin=${1:?usage: check_docs.sh path/to/zkwarden}
repo=$(cd "$(dirname "$0")/.." && pwd)
page=$repo/docs/configuration.md
grep -q '^<!-- config:begin -->$' "$page" || { echo "docs/configuration.md: no <!-- config:begin --> marker"; exit 1; }
doc=$(sed -n '/^<!-- config:begin -->$/,/^<!-- config:end -->$/p' "$page" | sed '1d;$d')
gen=$("$bin" --list-config)
status=0
if [ "$doc" != "$gen" ]; then
  echo "docs/configuration.md's reference table differs from zkwarden --list-config:"
  diff <(echo "$doc") <(echo "$gen") || true
  status=1
fi
details=$(sed -n '/^<!-- config:end -->$/,$p' "$page")
vars=$("$bin" --help | grep -o 'ZKWARDEN_[A-Z0-9_]*' | sort -u)
[ -n "$vars" ] || { echo "zkwarden --help lists no variables"; exit 1; }
for v in $vars; do
  grep -q "^| \`$v\`" <<<"$details" || { echo "docs/configuration.md: no row for $v in the detail table"; status=1; }
done
[ "$status" -eq 0 ] && echo "docs/configuration.md: $(echo "$gen" | grep -c '^| `') variables, up to date"
exit $status
