#!/usr/bin/env bash
# Prints the path of a promtool binary, fetching it if needed: promtool on
# PATH, else one extracted earlier into the cache, else Debian's `prometheus`
# package is downloaded with `apt-get download` and only usr/bin/promtool is
# extracted from it (nothing is installed: no service, no dependencies).
# Exits 1, printing why on stderr, when none can be had (the tests then rely
# on their own strict checker, promcheck.py, alone).
#   ZKW_TOOLS_DIR  cache directory (default /var/cache/zkwarden-tests)
set -euo pipefail
if command -v promtool >/dev/null 2>&1; then command -v promtool; exit 0; fi
cache=${ZKW_TOOLS_DIR:-/var/cache/zkwarden-tests}
bin=$cache/promtool
if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then echo "$bin"; exit 0; fi
command -v apt-get >/dev/null 2>&1 || { echo "get-promtool: no apt-get" >&2; exit 1; }
mkdir -p "$cache" 2>/dev/null || { echo "get-promtool: cannot create $cache" >&2; exit 1; }
tmp=$(mktemp -d "$cache/dl.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if ! (cd "$tmp" && apt-get download -q prometheus >/dev/null 2>&1); then
  # The package lists may be missing on a fresh machine: refresh them once (as root).
  if [ "$(id -u)" -eq 0 ]; then apt-get update -qq >/dev/null 2>&1 || true; fi
  (cd "$tmp" && apt-get download -q prometheus >/dev/null 2>&1) || {
    echo "get-promtool: apt-get download prometheus failed" >&2; exit 1; }
fi
deb=$(ls "$tmp"/prometheus_*.deb)
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp" ./usr/bin/promtool
mv "$tmp/usr/bin/promtool" "$bin"
"$bin" --version >/dev/null
echo "$bin"
