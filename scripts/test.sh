#!/usr/bin/env bash
# Quick start, command two: install what is missing, build, run every test (unit and integration).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh -DFP_WERROR=ON
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure --timeout 600 -j"$(nproc)"
