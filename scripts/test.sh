#!/usr/bin/env bash
# Quick start, command two: install what is missing, build, run every test: the integration
# tests against the product binary, the deployment checks, the benchmark smoke, the unit and
# integration tests under ASan+UBSan, the concurrency tests under TSan, and each fuzz target for
# a short time. FP_QUICK=1: one plain build, unit and integration tests, deployment checks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --with-tests
# FP_LINE_TABLES_ONLY=1 (.ci/run sets it): -g1 instead of -g, a third less compile time.
line_tables=-DFP_LINE_TABLES_ONLY="$([ "${FP_LINE_TABLES_ONLY:-0}" = 1 ] && echo ON || echo OFF)"
# A missing lock-service package must fail the end-to-end tests, not skip them.
export FP_REQUIRE_LOCK_SERVICES=1
if [ "${FP_QUICK:-0}" = 1 ]; then
  scripts/build.sh -DFP_WERROR=ON "$line_tables"
  ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure --timeout 600 -j"$(nproc)"
else
  # The full run builds and runs the unit tests once, under ASan+UBSan below: on 2 cores a
  # second build of them costs minutes and finds nothing the sanitized one misses (warnings in
  # test code are errors in FP_QUICK=1 runs and in the -DFP_WERROR=ON development build). This
  # build is the product binary the integration tests, the deployment checks and the benchmark
  # smoke run against. The differential oracle's short run reads what this binary forwards and
  # answers with independent HTTP/1.1 parsers (tests/differential).
  FP_BUILD_TARGETS="fencing-proxy fp_drop_unsynced" scripts/build.sh -DFP_WERROR=ON "$line_tables"
  ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure --timeout 600 -j"$(nproc)" -R '^(integration|differential)\.' \
    -E '^integration\.test_shared(_faults)?$'
  # The shared-fence modules run alone: they time raises across three proxies.
  ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure --timeout 600 -R '^integration\.test_shared$'
  # The nemesis short run (tests/nemesis): alone too, it times refusals after each fault.
  ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure --timeout 600 -L '^nemesis$'
  # test_shared_faults (freezes, a stalled watch, a cut link) runs alone too: its timings are the
  # faults themselves.
  ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure --timeout 600 -R '^integration\.test_shared_faults$'
fi
# The Kubernetes manifests, alert rules and live /metrics, checked by real tools.
FP_BINARY="$PWD/${BUILD_DIR:-build}/proxy/fencing-proxy" deploy/validate
[ "${FP_QUICK:-0}" = 1 ] && exit 0

# Benchmark smoke: one short round of every workload against nginx and HAProxy (it installs
# them); fails on any non-2xx or socket error, never on speed.
bench/run.sh --smoke --binary "$PWD/${BUILD_DIR:-build}/proxy/fencing-proxy"

# Sanitizers: the whole suite under ASan+UBSan (a clang build that also holds the fuzz targets),
# the concurrency tests under TSan.
FP_ASAN_WITH_FUZZ=1 scripts/test-sanitizers.sh address thread
# Fuzzing smoke: each libFuzzer target for a few seconds from its checked-in corpus.
FUZZ_BUILD_DIR="${BUILD_ROOT:-.}/build-asan" scripts/fuzz.sh "${FP_FUZZ_SECONDS:-10}"
