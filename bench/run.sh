#!/usr/bin/env bash
# The side-by-side benchmark in one command (bench/README.md):
#   bench/run.sh            full run, ~20 min: table, goals, bench/results/<time>.json
#   bench/run.sh --smoke    one short round of everything, exit 1 on any non-2xx/socket error (CI)
# bench/run.py does the work and stops every process it started, by PID, on any exit (its
# signal handlers and atexit are the trap); exec keeps signals going straight to it.
set -euo pipefail
# Debian's python3, whose python3-prometheus-client reads /metrics, even when another python3
# comes first in PATH.
python=python3
[ -x /usr/bin/python3 ] && python=/usr/bin/python3
exec "$python" "$(dirname "$0")/run.py" "$@"
