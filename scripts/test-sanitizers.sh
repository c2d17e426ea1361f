#!/usr/bin/env bash
# The test suite under sanitizers, as CI runs it:
#   address  ASan+UBSan build in build-asan: the WHOLE suite, unit (ctest) and integration (the
#            integration tests start the sanitized binary, two modules at a time); with
#            FP_ASAN_WITH_FUZZ=1 also the libFuzzer targets (clang)
#   thread   TSan build in build-tsan: the concurrency tests (fence_test and fence_keys_test;
#            state_test, state_compaction_test, state_fault_test and state_keys_test, which drive
#            the StateWriter and compactor threads; raise_wait_test, raise resolutions handed to
#            the workers' threads; zookeeper_client_test, the ZooKeeper client's
#            completion, timer and caller threads; etcd_fence_store_test, the shared fence store's
#            thread against the fences' callers; integration test_order.py)
# Usage: scripts/test-sanitizers.sh [address] [thread]   (default: both, in that order)
#        CTEST_ARGS="-R Fence" scripts/test-sanitizers.sh address   (a subset of the unit tests)
#        INTEGRATION_TESTS="test_order" scripts/test-sanitizers.sh address
#
# Any sanitizer report fails the run. A unit test that gets one aborts and fails in ctest. A proxy
# started by an integration test is often killed without anyone reading its stderr, so the
# integration tests run a wrapper as FP_BINARY that copies the proxy's stderr to a file, and every
# such file is searched for reports at the end. (ctest would set FP_BINARY to the real binary,
# so the integration tests are run here directly, like tests/CMakeLists.txt runs them.)
set -euo pipefail
cd "$(dirname "$0")/.."

modes=("$@")
# Debian's python3 has the lock-service client packages the end-to-end tests import.
python=python3
[ -x /usr/bin/python3 ] && python=/usr/bin/python3
[ ${#modes[@]} -gt 0 ] || modes=(address thread)
jobs=$(nproc)
source_dir=$PWD
build_root=$(cd "${BUILD_ROOT:-.}" && pwd)

report_dir=$(mktemp -d "${TMPDIR:-/tmp}/fp-sanitizer-reports.XXXXXX")
trap 'rm -rf "$report_dir"' EXIT

# The first report is fatal (the build already makes UB fatal with -fno-sanitize-recover=all).
# verify_asan_link_order=0: an integration test may LD_PRELOAD a fault shim, which then comes
# before the ASan runtime in the library list; the shim is itself built with ASan here.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:check_initialization_order=1:strict_init_order=1:verify_asan_link_order=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
# Symbolized stacks in the reports (llvm-symbolizer, from Debian's llvm).
for s in llvm-symbolizer llvm-symbolizer-14; do
  if command -v "$s" >/dev/null; then
    export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-$(command -v "$s")}
    export TSAN_OPTIONS="$TSAN_OPTIONS:external_symbolizer_path=$(command -v "$s")"
    break
  fi
done

# FP_BINARY for the integration tests: execs the real binary (same pid, so the harness's signals
# reach it) with stderr also appended to a file of its own under $report_dir.
make_wrapper() {  # real-binary sanitizer -> prints the wrapper's path
  local wrapper=$report_dir/fencing-proxy
  cat >"$wrapper" <<EOF
#!/usr/bin/env bash
# harness.py's binary_sanitizer() tells a sanitizer build by this name in FP_BINARY: __${2:0:1}san_init
exec "$1" "\$@" 2> >(exec tee -a "$report_dir/proxy-stderr.\$\$" >&2)
EOF
  chmod +x "$wrapper"
  echo "$wrapper"
}

# Runs integration test modules (default: every tests/integration/test_*.py) against the wrapper,
# INTEGRATION_JOBS (default: the number of cores) at a time, as ctest runs them against the plain
# binary; each module's output is printed whole once it ends.
run_integration() {  # build-dir sanitizer module...
  local dir=$1 shim=$1/tests/fault/libfp_drop_unsynced.so wrapper failed=0 module
  wrapper=$(make_wrapper "$dir/proxy/fencing-proxy" "$2")
  shift 2
  [ -f "$shim" ] || shim=""
  local logs=$report_dir/integration-logs
  mkdir -p "$logs"
  local -a running=()
  run_module() {  # module: runs it, its output to its log, its exit status to its .rc
    (cd tests/integration && FP_BINARY="$wrapper" FP_SOURCE_DIR="$source_dir" FP_FAULT_SHIM="$shim" \
      timeout 600 "$python" -m unittest -v "$1" >"$logs/$1.log" 2>&1; echo $? >"$logs/$1.rc")
  }
  report() {  # module: prints its log, says whether it failed
    echo "=== integration.$1"
    cat "$logs/$1.log"
    [ "$(cat "$logs/$1.rc")" = 0 ] && return 0
    failures+=("$mode: integration.$1")
    return 1
  }
  for module in "$@"; do
    run_module "$module" &
    running+=("$module")
    if [ ${#running[@]} -ge "${INTEGRATION_JOBS:-$jobs}" ]; then
      wait -n || true
      local -a still=()
      for m in "${running[@]}"; do
        if [ -f "$logs/$m.rc" ]; then report "$m" || failed=1; else still+=("$m"); fi
      done
      running=("${still[@]}")
    fi
  done
  wait
  for m in "${running[@]}"; do report "$m" || failed=1; done
  return $failed
}

# Fails (printing them) if any proxy stderr holds a sanitizer report.
check_proxy_reports() {
  local pattern='^==[0-9]+==ERROR: (AddressSanitizer|LeakSanitizer|ThreadSanitizer)|^WARNING: ThreadSanitizer:|^[^{ ]*:[0-9]+:[0-9]+: runtime error: '
  local found=0
  for f in "$report_dir"/proxy-stderr.*; do
    [ -e "$f" ] || continue
    if grep -Eq "$pattern" "$f"; then
      failures+=("$mode: a sanitizer report in fencing-proxy's stderr ($(basename "$f"))")
      echo "=== sanitizer report in a fencing-proxy process ($(basename "$f")):" >&2
      grep -Ev '^\{' "$f" >&2  # the report, without the proxy's JSON log lines
      found=1
    fi
    rm -f "$f"
  done
  return $found
}

configure() {  # dir sanitizer [cmake options]
  # RelWithDebInfo at -O1, as the sanitizers' own docs advise: a fifth less compile time than
  # -O2 and reports as precise; line tables (-g1, see CMakeLists.txt) give them line numbers.
  cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g -DNDEBUG" \
    -DFP_SANITIZE="$2" "${@:3}" >/dev/null
}

all_integration=()
for f in tests/integration/test_*.py; do all_integration+=("$(basename "$f" .py)"); done

# What failed, printed again at the very end: CI often shows only the tail of the output.
failures=()
# ctest's list of failed tests from its output in $1, as "name name ...".
ctest_failed() {
  sed -n '/The following tests FAILED/,$p' "$1" | sed -n 's/^[[:space:]]*[0-9]* - \([^ ]*\).*/\1/p' | tr '\n' ' '
}

status=0
for mode in "${modes[@]}"; do
  start=$SECONDS
  case "$mode" in
    address)
      dir=$build_root/build-asan
      # The one build of the unit tests in a full run. FP_ASAN_WITH_FUZZ=1 (scripts/test.sh):
      # built with clang and libFuzzer's coverage too, so this tree also holds the fuzz targets
      # (scripts/fuzz.sh runs them from it: FUZZ_BUILD_DIR) instead of a third build of it all.
      fuzz_args=()
      [ "${FP_ASAN_WITH_FUZZ:-0}" = 1 ] && fuzz_args=(-DCMAKE_CXX_COMPILER="${FUZZ_CXX:-clang++-14}" -DFP_FUZZ=ON)
      configure "$dir" address "${fuzz_args[@]}"
      cmake --build "$dir" -j"$jobs"
      built=$SECONDS
      # shellcheck disable=SC2086  # CTEST_ARGS is a list of words
      if ! ctest --test-dir "$dir" --output-on-failure --timeout 600 -j"$jobs" -E '^(integration|differential)\.' ${CTEST_ARGS:-} \
          2>&1 | tee "$report_dir/ctest.log"; then
        status=1
        failures+=("$mode: unit tests $(ctest_failed "$report_dir/ctest.log")")
      fi
      # shellcheck disable=SC2086
      run_integration "$dir" address ${INTEGRATION_TESTS:-${all_integration[@]}} || status=1
      ;;
    thread)
      dir=$build_root/build-tsan
      configure "$dir" thread
      tsan_tests=(fence_test fence_keys_test state_test state_compaction_test state_fault_test state_keys_test
                  raise_wait_test zookeeper_client_test etcd_fence_store_test)
      cmake --build "$dir" -j"$jobs" --target fencing-proxy "${tsan_tests[@]}"
      built=$SECONDS
      # The gtest binaries run whole (one process each is faster than one per test case).
      for t in "${tsan_tests[@]}"; do
        "$dir/tests/$t" || { status=1; failures+=("$mode: $t"); }
      done
      run_integration "$dir" thread test_order || status=1
      ;;
    *)
      echo "unknown mode '$mode' (address or thread)" >&2
      exit 2
      ;;
  esac
  check_proxy_reports || status=1
  echo "=== $mode: build $((built - start))s, tests $((SECONDS - built))s"
done
for f in "${failures[@]}"; do echo "=== FAILED under a sanitizer: $f" >&2; done
exit $status
