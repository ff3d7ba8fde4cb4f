#!/usr/bin/env bash
# Builds the codec fuzzer (clang + libFuzzer + ASan/UBSan) in build-fuzz/ and
# runs it for N seconds (default 60) on a copy of tests/fuzz/corpus, so the
# committed corpus never grows. Exits non-zero on a crash; crash inputs are
# saved under tests/fuzz/artifacts/ (gitignored).
#   tests/fuzz/run.sh [seconds]
#   ZKW_FUZZ_JOBS=N  run N fuzzer processes in parallel (default 1)
# The corpus is generated from the unit-test fixtures:
#   build/tests/unit/test_codec --write-corpus tests/fuzz/corpus
set -euo pipefail
secs=${1:-60}
repo=$(cd "$(dirname "$0")/../.." && pwd)
fuzz="$repo/tests/fuzz"
cc=${CC:-}
if [ -z "$cc" ] || ! "$cc" --version 2>/dev/null | grep -q clang; then
  cc=$(command -v clang || command -v clang-14 || true)
fi
[ -n "$cc" ] || { echo "run.sh: clang not found" >&2; exit 2; }

cmake -S "$repo" -B "$repo/build-fuzz" -DCMAKE_C_COMPILER="$cc" -DZKW_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$repo/build-fuzz" --target fuzz_codec -j"$(nproc)" >/dev/null

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$fuzz/corpus" "$work/corpus"
mkdir -p "$fuzz/artifacts"

jobs=${ZKW_FUZZ_JOBS:-1}
parallel=()
[ "$jobs" -gt 1 ] && parallel=(-fork="$jobs" -ignore_crashes=0)
echo "fuzz_codec: ${secs}s, $jobs job(s), corpus $(ls "$fuzz/corpus" | wc -l) files"
set +e
(cd "$work" && "$repo/build-fuzz/tests/fuzz/fuzz_codec" -max_total_time="$secs" -timeout=10 \
  -rss_limit_mb=2048 -max_len=16384 -dict="$fuzz/zk.dict" -artifact_prefix="$fuzz/artifacts/" \
  -print_final_stats=1 "${parallel[@]}" "$work/corpus" >"$work/log" 2>&1)
rc=$?
set -e
tail -n 25 "$work/log"
if [ $rc -ne 0 ]; then
  echo "fuzz_codec: FAILED (exit $rc); inputs in $fuzz/artifacts/" >&2
  exit 1
fi
echo "fuzz_codec: no crash in ${secs}s"
