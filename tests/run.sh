#!/usr/bin/env bash
# Runs every test of zkwarden on a fresh Debian machine: installs what is
# missing, builds a release and an ASan+UBSan build, then runs the unit and
# differential tests on both, a short fuzz run of both fuzz targets, the
# integration, operability, fault and keeper tests against real ZooKeeper servers
# with the sanitizer build, the consistency test (tests/consistency: histories
# direct and through zkwarden under faults, checked; the test build's
# mutations caught), the performance guard (tests/bench/run.sh
# --quick: loose ratios to direct), the quick incident drill (also through
# TLS), real Flink's quick run (tests/flink: Flink 1.20 on Debian's ZooKeeper
# 3.8.0, S1-S3 and a standby's failover, direct and through zkwarden) and a
# short soak.
#   ZKW_FUZZ_SECONDS (default 30)  length of each fuzz target's run; 0 skips it
# Extra arguments are passed to pytest (e.g. -k kazoo).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

"$repo/deploy/install-deps.sh" all || exit 1

passed=0 failed=0 failures=()
suite() { # name command...
  local name=$1; shift
  echo "=== $name"
  local t0=$SECONDS
  if "$@"; then
    passed=$((passed + 1)); echo "=== $name: ok ($((SECONDS - t0)) s)"
  else
    failed=$((failed + 1)); failures+=("$name"); echo "=== $name: FAILED ($((SECONDS - t0)) s)"
  fi
}
# A suite that waits more than it computes (real servers, timeouts, JVMs:
# the machine is about half idle meanwhile) runs beside the next one; its
# output is printed, and its result counted, when it is waited for.
bg_pids=() bg_names=() bg_logs=()
suite_beside() { # name command...
  local name=$1 log
  log=$(mktemp "${TMPDIR:-/tmp}/zkw-suite.XXXXXX")
  (suite "$@" >"$log" 2>&1; grep -q "^=== $name: ok" "$log") &
  bg_pids+=($!) bg_names+=("$name") bg_logs+=("$log")
}
wait_beside() {
  local i
  for i in "${!bg_pids[@]}"; do
    if wait "${bg_pids[$i]}"; then passed=$((passed + 1)); else failed=$((failed + 1)); failures+=("${bg_names[$i]}"); fi
    cat "${bg_logs[$i]}"
    rm -f "${bg_logs[$i]}"
  done
  bg_pids=() bg_names=() bg_logs=()
}
build() { # dir cmake-args...
  local dir=$1; shift
  cmake -S "$repo" -B "$repo/$dir" "$@" >/dev/null && cmake --build "$repo/$dir" -j"$(nproc)"
}
unit() { (cd "$repo/$1" && ctest --output-on-failure); }

suite "build (release)" build build -DCMAKE_BUILD_TYPE=RelWithDebInfo
suite "no cycle among files, calls one way between layers (nm) and the sidecar's rooms, no file over 800 lines" \
  /usr/bin/python3 "$repo/tests/check_layers.py" "$repo" "$repo/build"
suite "the layer check fails on each break of the floors" /usr/bin/python3 "$repo/tests/check_layers_test.py" "$repo" "$repo/build"
suite "docs/design.md's code tour names every folder and file once" /usr/bin/python3 "$repo/tests/check_tour.py" "$repo"
suite "build (asan+ubsan, fault-injection seam)" build build-asan -DCMAKE_BUILD_TYPE=Debug -DZKW_SANITIZE=ON \
  -DZKW_FAULT_INJECTION=ON
suite "docs/configuration.md is zkwarden --list-config" "$repo/tests/check_docs.sh" "$repo/build/zkwarden"
suite "docs/metrics.md is zkwarden --list-metrics" "$repo/tests/admin/check_metrics_doc.sh" "$repo/build/zkwarden"
suite "every relative link of README.md and docs/ resolves" /usr/bin/python3 "$repo/tests/check_links.py" "$repo"
suite "unit (release)" unit build
suite "unit (asan+ubsan)" unit build-asan
if [ "${ZKW_FUZZ_SECONDS:-30}" != 0 ]; then
  suite "fuzz codec and admin endpoint (${ZKW_FUZZ_SECONDS:-30} s each)" "$repo/tests/fuzz/run.sh" "${ZKW_FUZZ_SECONDS:-30}"
fi
suite_beside "keeper and hand-over, failure points (asan+ubsan)" env ZKW_BIN="$repo/build-asan/zkwarden" \
  "$repo/tests/keeper/run.sh" --durations=10
suite "integration (asan+ubsan)" env ZKW_BIN="$repo/build-asan/zkwarden" ZKW_BUILD_DIR="$repo/build-asan" \
  "$repo/tests/integration/run.sh" --durations=15 "$@"
wait_beside
suite "admin endpoint, config, deploy (asan+ubsan)" env ZKW_BIN="$repo/build-asan/zkwarden" \
  "$repo/tests/admin/run.sh"
suite_beside "consistency: histories direct and through zkwarden under faults checked, every mutation caught (asan+ubsan)" \
  env ZKW_BIN="$repo/build-asan/zkwarden" "$repo/tests/consistency/run.sh" --json "$repo/build-asan/consistency.json"
suite_beside "faults (quick, asan+ubsan): servers, networks, moves, crashes" env ZKW_BIN="$repo/build-asan/zkwarden" \
  "$repo/tests/faults/run.sh" --durations=10 --ignore=tests/faults/test_fault_points.py
suite "faults (quick, asan+ubsan): every failure point" env ZKW_BIN="$repo/build-asan/zkwarden" \
  "$repo/tests/faults/run.sh" --durations=10 -k test_fault_points
wait_beside
suite "performance guard (release, loose ratios to direct)" env ZKW_BIN="$repo/build/zkwarden" \
  ZKW_BENCH_LOAD="$repo/build/tests/bench/zkw_bench_load" "$repo/tests/bench/run.sh" --quick
suite "incident drills (quick, release)" env ZKW_BIN="$repo/build/zkwarden" "$repo/tests/drills/run.sh" --quick
suite "incident drills through TLS (quick, release)" env ZKW_BIN="$repo/build/zkwarden" \
  "$repo/tests/drills/run.sh" --quick --tls
suite "real Flink, quick: Flink 1.20 JobManager crash, retained checkpoints, cancel, standby (release)" \
  env ZKW_BIN="$repo/build/zkwarden" "$repo/tests/flink/run.sh" --quick --json "$repo/build/flink/quick.json"
suite "soak (2 min, release)" env ZKW_BIN="$repo/build/zkwarden" "$repo/tests/soak/run.sh" --minutes 2

echo
for f in "${failures[@]}"; do echo "failed: $f"; done
echo "suites: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
