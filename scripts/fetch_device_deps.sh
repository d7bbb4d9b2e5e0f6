#!/usr/bin/env bash
# Fetches the Debian packages a GPU machine lacks for building and running the Qt-free core
# (oneDNN, OpenBLAS and its Fortran runtime, nlohmann-json, zlib headers, SQLite) into .deps/debs, for
# tests/gpu/device_check.sh to unpack there with dpkg -x. Run it here, where apt works; the GPU
# machines have no network. .deps/ is git-ignored and travels as a carried path.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps/debs
cd .deps/debs
packages=(libdnnl2 libdnnl-dev libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0
          nlohmann-json3-dev zlib1g zlib1g-dev libsqlite3-0 libsqlite3-dev)
missing=()
for p in "${packages[@]}"; do
  ls "${p}"_*.deb >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get download "${missing[@]}"
fi
ls -la
