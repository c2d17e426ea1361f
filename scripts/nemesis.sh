#!/usr/bin/env bash
# A long nemesis run (tests/nemesis/README.md): the negative control for half a minute, then
# MINUTES of faults against shared fences on a real 3-member etcd cluster.
#
#   scripts/nemesis.sh MINUTES [nemesis.py options]     e.g. scripts/nemesis.sh 15
#
# FP_BINARY (default build/proxy/fencing-proxy), FP_NEMESIS_SEED (default: the time) and
# FP_NEMESIS_OUT (default: a new /tmp/fp-nemesis-long-* directory) change what it runs and where
# the logs and results go. Exit status: 0 when the control found violations and the real run none.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes="${1:?usage: scripts/nemesis.sh MINUTES [nemesis.py options]}"
shift
binary="${FP_BINARY:-$PWD/${BUILD_DIR:-build}/proxy/fencing-proxy}"
seed="${FP_NEMESIS_SEED:-$(date +%s)}"
out="${FP_NEMESIS_OUT:-$(mktemp -d /tmp/fp-nemesis-long-XXXXXX)}"
exec python3 tests/nemesis/nemesis.py --with-control --minutes "$minutes" --seed "$seed" \
  --binary "$binary" --out "$out" --results "$out/results.md" "$@"
