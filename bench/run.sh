#!/usr/bin/env bash
# The side-by-side benchmark in one command (bench/README.md):
#   bench/run.sh            full run, ~20 min: table, goals, bench/results/<time>.json
#   bench/run.sh --smoke    one short round of everything, exit 1 on any non-2xx/socket error (CI)
# bench/run.py does the work and stops every process it started, by PID, on any exit (its
# signal handlers and atexit are the trap); exec keeps signals going straight to it.
set -euo pipefail
exec python3 "$(dirname "$0")/run.py" "$@"
