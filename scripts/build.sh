#!/usr/bin/env bash
# Configures and builds fencing-proxy and its tests into ./build (or $BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
# Debian's python3, whose packages (kazoo, etcd3) the end-to-end tests use, even when another
# python3 comes first in PATH.
python=()
[ -x /usr/bin/python3 ] && python=(-DPython3_EXECUTABLE=/usr/bin/python3)
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" "${python[@]}" "$@" >/dev/null
# FP_BUILD_TARGETS: build only these (default: everything).
# shellcheck disable=SC2086  # a list of target names
cmake --build "$build_dir" -j"$(nproc)" ${FP_BUILD_TARGETS:+--target $FP_BUILD_TARGETS}
