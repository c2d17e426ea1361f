#!/usr/bin/env bash
# Installs what building, running and testing fencing-proxy needs, from Debian bookworm packages.
# Idempotent: packages already present are left alone. Run as root.
set -euo pipefail

# Build and run (the Dockerfile's build stage installs exactly this list; deploy/validate checks).
packages=(
  build-essential cmake git ca-certificates pkg-config
  libboost1.81-dev libboost-json1.81-dev libssl-dev
  libyaml-cpp-dev prometheus-cpp-dev libcli11-dev libgoogle-perftools-dev
  libzookeeper-mt-dev libnghttp2-dev
  googletest libgtest-dev
  python3 curl
)

# Tests only: real lock services and their clients (end-to-end tests), fault injection
# (eatmydata for the crash tests' negative control, libfiu for disk faults), slowloris,
# clang's libFuzzer and sanitizer runtimes (tests/fuzz, scripts/test-sanitizers.sh), and the
# other HTTP/1.1 parsers of the differential oracle (tests/differential: Node's llhttp, Go's
# net/http, nginx, HAProxy), the openssl command line (tests/integration/test_tls*.py make their
# certificates with it), sslscan (tests/integration/test_tls_scan.py scans the TLS listener), and
# a real gRPC backend and clients with an HTTP/2 command-line client (tests/integration/
# test_grpc.py: python3-grpcio, nghttp and h2load from nghttp2-client), and an HTTP/2 library to
# script h2c backends with (tests/integration/test_http1_to_h2.py: python3-h2).
test_packages=(
  etcd-server etcd-client zookeeper python3-etcd3 python3-kazoo openssl sslscan
  python3-grpcio nghttp2-client python3-h2
  eatmydata fiu-utils slowhttptest
  clang-14 libclang-rt-14-dev llvm-14
  nodejs golang-go nginx haproxy
)

# deploy/validate: promtool (in Debian's prometheus), yamllint, PyYAML for the manifest checks,
# and openssl for the certificates of the TLS route file's checks.
deploy_packages=(prometheus yamllint python3-yaml openssl)

# The benchmark (bench/run.sh; it installs its load tools itself): the parser it reads /metrics with.
bench_packages=(python3-prometheus-client)

case "${1:-}" in
  --with-tests) packages+=("${test_packages[@]}" "${deploy_packages[@]}" "${bench_packages[@]}") ;;
  "") ;;
  *) echo "usage: $0 [--with-tests]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
