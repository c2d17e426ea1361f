#!/usr/bin/env bash
# Quick start, command one: install what is missing, build the proxy, start the demo backend and
# fencing-proxy in front of it, and show a stale write being refused.
# Leaves both running until Ctrl-C when run from a terminal; exits after the demo otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# Only what the demo runs: the proxy binary (the demo backend is Python). The unit tests are
# built by scripts/test.sh; building them here would keep the first request waiting for minutes.
FP_BUILD_TARGETS=fencing-proxy scripts/build.sh

work=$(mktemp -d)
mkdir -p "$work/demo-state"
python3 scripts/demo_backend.py --listen 127.0.0.1:8081 --log "$work/backend.log" >"$work/backend.out" 2>&1 &
backend=$!
(cd "$work" && exec "$OLDPWD/build/proxy/fencing-proxy" --config "$OLDPWD/config/examples/demo.yaml") \
  2>"$work/proxy.log" &
proxy=$!
trap 'kill $proxy $backend 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

# Both must answer before the story starts: the backend's request log, the proxy's /readyz.
for _ in $(seq 100); do
  curl -fs http://127.0.0.1:8081/_log >/dev/null 2>&1 && curl -fs http://127.0.0.1:9901/readyz >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fs http://127.0.0.1:8081/_log >/dev/null || { cat "$work/backend.out"; exit 1; }
curl -fs http://127.0.0.1:9901/readyz >/dev/null || { cat "$work/proxy.log"; exit 1; }

show() { echo; printf '$'; printf ' %q' "$@"; echo; "$@"; echo; }
echo "== fencing-proxy on 127.0.0.1:8080 in front of the demo backend on 127.0.0.1:8081"
echo "== holder A got the lock with token 33 and writes:"
show curl -s -i -X PUT -H 'X-Fencing-Token: 33' --data 'written by A' http://127.0.0.1:8080/orders/1
echo "== A pauses; its lease expires; holder B gets the lock with token 34 and writes:"
show curl -s -i -X PUT -H 'X-Fencing-Token: 34' --data 'written by B' http://127.0.0.1:8080/orders/1
echo "== A wakes up and writes with its old token 33: refused, the backend never sees it:"
show curl -s -i -X PUT -H 'X-Fencing-Token: 33' --data 'late write by A' http://127.0.0.1:8080/orders/1
echo "== the backend still holds B's data:"
show curl -s http://127.0.0.1:8080/orders/1
echo "== the fence, from the admin listener:"
show curl -s http://127.0.0.1:9901/fences

if [ -t 0 ]; then
  echo "Both are still running: try curl against 127.0.0.1:8080, metrics at 127.0.0.1:9901/metrics."
  echo "Ctrl-C stops them."
  wait $proxy
fi
