#!/usr/bin/env bash
# The test suite under sanitizers, as CI runs it:
#   address  ASan+UBSan build in build-asan: the WHOLE ctest suite (unit and integration; the
#            integration tests start the sanitized binary)
#   thread   TSan build in build-tsan: the concurrency tests (fence_test, state_test with the
#            StateWriter, integration test_order.py)
# Usage: scripts/test-sanitizers.sh [address] [thread]   (default: both, in that order)
#        CTEST_ARGS="-R integration" scripts/test-sanitizers.sh address   (a subset, by hand)
#
# Any sanitizer report fails the run, including one from a proxy process that an integration
# test started and killed without looking at its stderr: every report is written to a file under
# the report directory (log_path), and the run fails if any file appears there.
set -euo pipefail
cd "$(dirname "$0")/.."

modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(address thread)
jobs=$(nproc)
build_root=${BUILD_ROOT:-.}

report_dir=$(mktemp -d "${TMPDIR:-/tmp}/fp-sanitizer-reports.XXXXXX")
trap 'rm -rf "$report_dir"' EXIT

# Reports are fatal at the first one (the build already makes UB fatal with
# -fno-sanitize-recover=all). log_path sends each process's report to REPORT.PID.
# verify_asan_link_order=0: the integration tests may LD_PRELOAD a fault shim, which then comes
# before the ASan runtime in the library list; it is itself built with ASan in this build.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:check_initialization_order=1:strict_init_order=1:verify_asan_link_order=0:log_path=$report_dir/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$report_dir/ubsan"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:log_path=$report_dir/tsan"
# Symbolized stacks in the reports (llvm-symbolizer, from Debian's llvm).
if [ -z "${ASAN_SYMBOLIZER_PATH:-}" ]; then
  for s in llvm-symbolizer llvm-symbolizer-14; do
    if command -v "$s" >/dev/null; then
      export ASAN_SYMBOLIZER_PATH=$(command -v "$s") TSAN_SYMBOLIZER_PATH=$(command -v "$s")
      break
    fi
  done
fi

# Fails (after printing them) if any sanitizer report was written.
check_reports() {
  local what=$1
  if compgen -G "$report_dir/*" >/dev/null; then
    echo "=== sanitizer reports during $what:" >&2
    for f in "$report_dir"/*; do
      echo "--- $(basename "$f")" >&2
      cat "$f" >&2
    done
    return 1
  fi
}

configure() {  # dir sanitizer
  # RelWithDebInfo: -O2 keeps the suite's timing close to the real build; -g gives line numbers.
  cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFP_SANITIZE="$2" >/dev/null
}

status=0
for mode in "${modes[@]}"; do
  start=$SECONDS
  case "$mode" in
    address)
      dir=$build_root/build-asan
      configure "$dir" address
      cmake --build "$dir" -j"$jobs"
      built=$SECONDS
      # shellcheck disable=SC2086  # CTEST_ARGS is a list of words
      ctest --test-dir "$dir" --output-on-failure --timeout 600 -j"$jobs" ${CTEST_ARGS:-} || status=1
      ;;
    thread)
      dir=$build_root/build-tsan
      configure "$dir" thread
      cmake --build "$dir" -j"$jobs" --target fencing-proxy fence_test state_test
      built=$SECONDS
      # The gtest binaries run whole (one process each is faster than one per test case).
      "$dir/tests/fence_test" || status=1
      "$dir/tests/state_test" || status=1
      # test_order only: ctest would also want every other test's binary built.
      (cd tests/integration && FP_BINARY="$dir/proxy/fencing-proxy" FP_SOURCE_DIR="$PWD/../.." \
        python3 -m unittest -v test_order) || status=1
      ;;
    *)
      echo "unknown mode '$mode' (address or thread)" >&2
      exit 2
      ;;
  esac
  check_reports "$mode" || status=1
  echo "=== $mode: build $((built - start))s, tests $((SECONDS - built))s"
done
exit $status
