#!/usr/bin/env bash
# Quick start, command two: install what is missing, build, run every test (unit and integration).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --with-tests
scripts/build.sh -DFP_WERROR=ON
# A missing lock-service package must fail the end-to-end tests, not skip them.
export FP_REQUIRE_LOCK_SERVICES=1
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure --timeout 600 -j"$(nproc)"
# The Kubernetes manifests, alert rules and live /metrics, checked by real tools.
FP_BINARY="$PWD/${BUILD_DIR:-build}/proxy/fencing-proxy" deploy/validate
