#!/usr/bin/env bash
# The differential oracle's long run (tests/differential/README.md): every fixed case (fuzz
# corpora, test_hostile's cases, smuggling payloads, hostile responses, pinned streams), then the
# seeded mutator until MESSAGES requests (default 1,000,000) were forwarded by the proxy and read
# by every parser: Python's http.server, Node's llhttp, Go's net/http, nginx and HAProxy (and
# the strict view), the proxy's answers by Python's http.client, llhttp and Go's ReadResponse.
# Prints the counts per parser and every disagreement (the first 200 with their bytes); exit 1
# on any disagreement, 2 when the run could not be made.
#
# Usage: scripts/differential.sh [MESSAGES] [differential.py options: --seed N, --workers N,
#        --save DIR (every disagreeing client stream as a file), --response-rate N, ...]
# FP_BINARY: the proxy binary (default build/proxy/fencing-proxy). Needs node, go, nginx and
# haproxy: scripts/install-deps.sh --with-tests installs them.
set -euo pipefail
cd "$(dirname "$0")/.."
messages=${1:-1000000}
[ $# -eq 0 ] || shift
build=${BUILD_DIR:-build}
export FP_BINARY=${FP_BINARY:-$PWD/$build/proxy/fencing-proxy}
export FP_DIFF_GOCACHE=${FP_DIFF_GOCACHE:-$PWD/$build/differential-gocache}
exec python3 tests/differential/differential.py --messages "$messages" --show 200 "$@"
