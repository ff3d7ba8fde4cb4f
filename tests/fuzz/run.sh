#!/usr/bin/env bash
# Builds the libFuzzer targets (clang + libFuzzer + ASan/UBSan) in build-fuzz/
# and runs them. Two targets:
#   codec  fuzz_codec.c: the ZooKeeper wire codec (protocol/), corpus tests/fuzz/corpus
#   admin  fuzz_admin.c: the admin endpoint's HTTP handling (proxy/ops/zkw_admin.c),
#          corpus tests/fuzz/corpus-admin
# Usage:
#   tests/fuzz/run.sh [--target codec|admin|all] [seconds]
#       short run (the test command): each target in turn for `seconds`
#       (default 60) on a copy of its committed corpus, so that never grows.
#   tests/fuzz/run.sh --long [--target ...] [seconds]
#       long run: every target at once for `seconds` (default 3600), each on a
#       persistent corpus under build-fuzz/long/<target>/corpus (seeded from the
#       committed one, kept between runs, gitignored), log in
#       build-fuzz/long/<target>/log, and a summary (executions, coverage,
#       corpus size) at the end. Run it under `nice -n 15` on a shared machine.
#   tests/fuzz/run.sh --merge [--target ...]
#       adds to the committed corpus the inputs of the long run's corpus
#       that reach new coverage features (libFuzzer -merge=1): review before committing.
# Exits non-zero when a target crashes; crash inputs are saved as
# tests/fuzz/artifacts/<target>-crash-* (gitignored). Once the bug is fixed,
# copy the input into the target's committed corpus so it stays a seed.
#   ZKW_FUZZ_JOBS=N  N fuzzer processes per target (libFuzzer -fork; default 1)
# The codec corpus is generated from the unit-test fixtures
# (build/tests/unit/test_codec --write-corpus tests/fuzz/corpus), the admin
# corpus by tests/fuzz/admin_seeds.py.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
fuzz="$repo/tests/fuzz"

mode=short
target=all
secs=
while [ $# -gt 0 ]; do
  case "$1" in
  --long) mode=long ;;
  --merge) mode=merge ;;
  --target) target=${2:?--target needs codec, admin or all}; shift ;;
  --target=*) target=${1#--target=} ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *[!0-9]*) echo "run.sh: unknown argument: $1" >&2; exit 2 ;;
  *) secs=$1 ;;
  esac
  shift
done
case "$target" in
all) targets=(codec admin) ;;
codec | admin) targets=("$target") ;;
*) echo "run.sh: --target must be codec, admin or all" >&2; exit 2 ;;
esac
[ -n "$secs" ] || { [ "$mode" = long ] && secs=3600 || secs=60; }

cc=${CC:-}
if [ -z "$cc" ] || ! "$cc" --version 2>/dev/null | grep -q clang; then
  cc=$(command -v clang || command -v clang-14 || true)
fi
[ -n "$cc" ] || { echo "run.sh: clang not found" >&2; exit 2; }

cmake -S "$repo" -B "$repo/build-fuzz" -DCMAKE_C_COMPILER="$cc" -DZKW_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
for t in "${targets[@]}"; do
  cmake --build "$repo/build-fuzz" --target "fuzz_$t" -j"$(nproc)" >/dev/null
done
mkdir -p "$fuzz/artifacts"

corpus_of() { [ "$1" = codec ] && echo "$fuzz/corpus" || echo "$fuzz/corpus-admin"; }
dict_of() { [ "$1" = codec ] && echo "$fuzz/zk.dict" || echo "$fuzz/admin.dict"; }
bin_of() { echo "$repo/build-fuzz/tests/fuzz/fuzz_$1"; }

if [ "$mode" = merge ]; then
  for t in "${targets[@]}"; do
    grown="$repo/build-fuzz/long/$t/corpus"
    [ -d "$grown" ] || { echo "run.sh: no long-run corpus for $t ($grown)" >&2; continue; }
    before=$(ls "$(corpus_of "$t")" | wc -l)
    (cd "$repo/build-fuzz" && "$(bin_of "$t")" -merge=1 -max_len=16384 "$(corpus_of "$t")" "$grown" \
      >"$repo/build-fuzz/long/$t/merge.log" 2>&1)
    echo "fuzz_$t: committed corpus $before -> $(ls "$(corpus_of "$t")" | wc -l) files"
  done
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
jobs=${ZKW_FUZZ_JOBS:-1}
parallel=()
[ "$jobs" -gt 1 ] && parallel=(-fork="$jobs" -ignore_crashes=0)

# run_target <target> <corpus dir> <log>: runs one fuzzer; returns its status.
run_target() {
  local t=$1 corpus=$2 log=$3
  (cd "$work" && "$(bin_of "$t")" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
    -dict="$(dict_of "$t")" -artifact_prefix="$fuzz/artifacts/$t-" -print_final_stats=1 \
    "${parallel[@]}" "$corpus" >"$log" 2>&1)
}

# summary <target> <log> <corpus dir>: the figures of a finished run.
summary() {
  local t=$1 log=$2 corpus=$3
  local last execs cov ft
  last=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
  execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{s+=$2} END {print s+0}')
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  echo "fuzz_$t: ${secs}s, executions ${execs}, coverage ${cov:-?} edges (${ft:-?} features)," \
    "corpus $(ls "$corpus" | wc -l) files ($(du -s --apparent-size -k "$corpus" | cut -f1) KiB)"
}

failed=()
if [ "$mode" = short ]; then
  for t in "${targets[@]}"; do
    cp -r "$(corpus_of "$t")" "$work/corpus-$t"
    echo "fuzz_$t: ${secs}s, $jobs job(s), corpus $(ls "$(corpus_of "$t")" | wc -l) files"
    set +e
    run_target "$t" "$work/corpus-$t" "$work/log-$t"
    rc=$?
    set -e
    tail -n 12 "$work/log-$t"
    summary "$t" "$work/log-$t" "$work/corpus-$t"
    if [ $rc -ne 0 ]; then
      echo "fuzz_$t: FAILED (exit $rc); inputs in $fuzz/artifacts/" >&2
      failed+=("$t")
    else
      echo "fuzz_$t: no crash in ${secs}s"
    fi
  done
else
  declare -A pid
  for t in "${targets[@]}"; do
    dir="$repo/build-fuzz/long/$t"
    mkdir -p "$dir/corpus"
    cp -n "$(corpus_of "$t")"/* "$dir/corpus/"
    echo "fuzz_$t: long run, ${secs}s, $jobs job(s), corpus $(ls "$dir/corpus" | wc -l) files, log $dir/log"
    run_target "$t" "$dir/corpus" "$dir/log" &
    pid[$t]=$!
  done
  for t in "${targets[@]}"; do
    dir="$repo/build-fuzz/long/$t"
    set +e
    wait "${pid[$t]}"
    rc=$?
    set -e
    summary "$t" "$dir/log" "$dir/corpus" | tee "$dir/summary"
    if [ $rc -ne 0 ]; then
      tail -n 40 "$dir/log"
      echo "fuzz_$t: FAILED (exit $rc); inputs in $fuzz/artifacts/" >&2
      failed+=("$t")
    else
      echo "fuzz_$t: no crash in ${secs}s"
    fi
  done
fi
[ ${#failed[@]} -eq 0 ] || exit 1
