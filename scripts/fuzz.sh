#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang in their own build dir and runs each for
# SECONDS (default 30) starting from its checked-in corpus, under ASan+UBSan. Fails on any crash,
# oracle failure, sanitizer report, leak, per-input timeout or out-of-memory; the input that did
# it is kept in the artifacts dir and printed in base64 by libFuzzer.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]        (default: every target)
# Long runs: scripts/fuzz.sh 600 fuzz_request_head     (a corpus grows in a scratch dir only;
# copy inputs worth keeping into tests/fuzz/corpus/TARGET by hand)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-30}
[ $# -eq 0 ] || shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_token fuzz_path_route fuzz_config fuzz_state_log fuzz_request_head fuzz_head_parser fuzz_exchange fuzz_fence_key fuzz_h2_server)
build_dir=${FUZZ_BUILD_DIR:-build-fuzz}
artifacts=${FUZZ_ARTIFACTS:-$build_dir/fuzz-artifacts}

# libFuzzer is clang's: the whole tree is built with it there (the Debian libraries built with
# gcc link fine, both use libstdc++). Tests are not needed in this dir. A dir already configured
# with FP_FUZZ=ON (scripts/test.sh points FUZZ_BUILD_DIR at its ASan build) is only built.
if ! grep -qs '^FP_FUZZ:BOOL=ON$' "$build_dir/CMakeCache.txt"; then
  cmake -S . -B "$build_dir" -DCMAKE_CXX_COMPILER="${FUZZ_CXX:-clang++-14}" -DFP_FUZZ=ON \
    -DFP_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build_dir" -j"$(nproc)" --target fuzz_all

scratch=$(mktemp -d "${TMPDIR:-/tmp}/fp-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for s in llvm-symbolizer-14 llvm-symbolizer; do
  if command -v "$s" >/dev/null; then export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-$(command -v "$s")}; break; fi
done

status=0
for t in "${targets[@]}"; do
  seeds=tests/fuzz/corpus/$t
  [ -d "$seeds" ] || { echo "no corpus for $t at $seeds" >&2; exit 2; }
  mkdir -p "$scratch/$t"
  log=$scratch/$t.log
  # New inputs go to the first (scratch) dir; the checked-in seeds are only read. The outer
  # timeout is a backstop: libFuzzer checks -max_total_time only between inputs.
  rc=0
  timeout -s KILL $((seconds + 120)) "$build_dir/tests/fuzz/$t" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$artifacts/$t-" "$scratch/$t" "$seeds" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)  # none if it failed on a seed
  if [ "$rc" -ne 0 ]; then
    status=1
    echo "=== $t FAILED (exit $rc) after ${execs:-?} executions; the end of its log:" >&2
    tail -n 80 "$log" >&2
  else
    echo "=== $t: ${execs:-?} executions in ${seconds}s, $cov, clean"
  fi
done
exit $status
