#!/usr/bin/env bash
# Quick start: installs what is missing to build and run (Debian packages, as
# root; not the test packages: deploy/install-deps.sh run), builds
# zkwarden, starts a local ZooKeeper and zkwarden in front of it, and stops
# both on Ctrl-C.
#   ZK_PORT (default 2182)        where the local ZooKeeper listens
#   ZKWARDEN_LISTEN (default 127.0.0.1:2181)  where clients connect
# Any other ZKWARDEN_* variable is passed to zkwarden as it is.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
zk_port=${ZK_PORT:-2182}
export ZKWARDEN_LISTEN=${ZKWARDEN_LISTEN:-127.0.0.1:2181}
export ZKWARDEN_UPSTREAM=${ZKWARDEN_UPSTREAM:-127.0.0.1:$zk_port}

"$repo/deploy/install-deps.sh" run
cmake -S "$repo" -B "$repo/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$repo/build" -j"$(nproc)" --target zkwarden >/dev/null

work=$(mktemp -d -t zkwarden-local.XXXXXX)
zk_pid= zkw_pid=
cleanup() {
  trap - EXIT INT TERM
  [ -n "$zkw_pid" ] && kill -TERM "$zkw_pid" 2>/dev/null && wait "$zkw_pid" 2>/dev/null || true
  [ -n "$zk_pid" ] && kill -TERM "$zk_pid" 2>/dev/null && wait "$zk_pid" 2>/dev/null || true
  rm -rf "$work"
  echo "stopped zkwarden and ZooKeeper"
}
trap cleanup EXIT INT TERM

cat >"$work/zoo.cfg" <<CFG
tickTime=2000
dataDir=$work/data
clientPort=$zk_port
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok,stat,mntr
CFG
java -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar \
  org.apache.zookeeper.server.quorum.QuorumPeerMain "$work/zoo.cfg" >"$work/zookeeper.log" 2>&1 &
zk_pid=$!
for _ in $(seq 1 100); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$zk_port" && printf ruok >&3 && grep -q imok <&3) 2>/dev/null; then break; fi
  kill -0 "$zk_pid" 2>/dev/null || { cat "$work/zookeeper.log"; exit 1; }
  sleep 0.1
done
echo "ZooKeeper 127.0.0.1:$zk_port (log: $work/zookeeper.log)"

"$repo/build/zkwarden" &
zkw_pid=$!
cat <<MSG
zkwarden on $ZKWARDEN_LISTEN in front of it. Connect with:
  /usr/share/zookeeper/bin/zkCli.sh -server $ZKWARDEN_LISTEN
Admin endpoint: curl http://${ZKWARDEN_ADMIN_LISTEN:-127.0.0.1:9181}/metrics (also /healthz /readyz /v1/sessions /v1/reclaims)
Ctrl-C stops both.
MSG
wait "$zkw_pid"
