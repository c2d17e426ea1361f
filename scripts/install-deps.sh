#!/usr/bin/env bash
# Installs what building, running and testing fencing-proxy needs, from Debian bookworm packages.
# Idempotent: packages already present are left alone. Run as root.
set -euo pipefail

packages=(
  build-essential cmake git ca-certificates pkg-config
  libboost1.81-dev libboost-json1.81-dev
  libyaml-cpp-dev prometheus-cpp-dev libcli11-dev
  googletest libgtest-dev
  python3 curl
)

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
