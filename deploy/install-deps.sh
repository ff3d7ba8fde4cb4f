#!/usr/bin/env bash
# Installs every Debian package zkwarden needs to build, run and test.
# Idempotent: packages already present are left alone, and apt-get runs only
# when something is missing. Both README commands call it.
set -euo pipefail

build_pkgs=(build-essential cmake pkg-config clang libclang-rt-14-dev
            libzookeeper-mt-dev libuv1-dev uuid-dev node-llhttp libssl-dev)
test_pkgs=(zookeeper zookeeper-bin python3 python3-kazoo python3-pytest
           default-jdk-headless libcurator-framework-java libcurator-recipes-java
           curl procps valgrind python3-yaml haproxy gnuplot-nox strace openssl chromium
           python3-pure-sasl python3-kerberos krb5-kdc krb5-admin-server krb5-user)

want=("${build_pkgs[@]}")
case "${1:-all}" in
  build) ;;
  all) want+=("${test_pkgs[@]}") ;;
  *) echo "usage: $0 [build|all]" >&2; exit 2 ;;
esac

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}; run as root (or: sudo $0)" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
