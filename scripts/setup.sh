#!/usr/bin/env bash
# Installs the Debian packages Towerbench needs to build, test and run; does nothing when all are present.
# Idempotent: `dpkg-query` decides what is missing, and only that is passed to apt-get.
set -euo pipefail

packages=(
  build-essential cmake ninja-build lld pkg-config zlib1g-dev  # lld: CMakeLists.txt
  libdnnl-dev nlohmann-json3-dev
  qt6-base-dev libqcustomplot-dev
  libprotobuf-dev protobuf-compiler libsqlite3-dev
  libpng-dev libjpeg62-turbo-dev  # image folders (PNG, JPEG)
  python3-onnx python3-opencv  # tests/onnx: ONNX's checker and an independent runtime for the export
  dataset-fashion-mnist python3
  openmpi-bin libopenmpi-dev  # runs of several processes (mpirun)
  clang-14 libclang-rt-14-dev libomp-14-dev  # make fuzz: libFuzzer, and OpenMP for clang
)
[ "${TB_SETUP_EXTRA:-}" != "" ] && packages+=(${TB_SETUP_EXTRA})

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
