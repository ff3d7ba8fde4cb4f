#!/usr/bin/env bash
# Installs the Debian packages zkwarden needs:
#   build  to build it;
#   run    to build it and run the local quick start (deploy/local/run.sh:
#          a ZooKeeper server and zkCli beside zkwarden);
#   all    (the default) to run every test too (tests/run.sh), Maven included
#          (tests/flink resolves Flink's and ZooKeeper's jars from Maven Central).
# Idempotent: packages already present are left alone, and apt-get runs only
# when something is missing. Both README commands call it.
#   install-deps.sh MODE --list   prints MODE's packages, one a line, and installs nothing
set -euo pipefail

build_pkgs=(build-essential cmake pkg-config clang libclang-rt-14-dev
            libzookeeper-mt-dev libuv1-dev uuid-dev node-llhttp libssl-dev)
run_pkgs=(zookeeper default-jre-headless)
test_pkgs=(zookeeper-bin python3 python3-kazoo python3-pytest
           default-jdk-headless libcurator-framework-java libcurator-recipes-java
           curl procps valgrind python3-yaml haproxy gnuplot-nox strace openssl chromium
           python3-pure-sasl python3-kerberos krb5-kdc krb5-admin-server krb5-user maven)

want=("${build_pkgs[@]}")
case "${1:-all}" in
  build) ;;
  run) want+=("${run_pkgs[@]}") ;;
  all) want+=("${run_pkgs[@]}" "${test_pkgs[@]}") ;;
  *) echo "usage: $0 [build|run|all]" >&2; exit 2 ;;
esac

if [ "${2:-}" = --list ]; then
  printf '%s\n' "${want[@]}"
  exit 0
fi

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
