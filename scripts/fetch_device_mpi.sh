#!/usr/bin/env bash
# Fetches Debian 12's Open MPI 4.1 and every shared library it and its plugins need (ldd over all ELF
# files of the unpacked packages) into .deps/mpi-debs, for GPU machines without MPI, apt or network;
# scripts/device_mpi_env.sh unpacks them there. Run it here, where apt works. Left out: libc6, libgcc-s1,
# libstdc++6, zlib1g (every image has them), libhwloc-plugins (optional; they need X11, OpenCL, ICU).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps/mpi-debs
cd .deps/mpi-debs
packages=(openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev
          libpmix2 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libucx0
          libibverbs1 ibverbs-providers librdmacm1 libpsm2-2 libpsm-infinipath1 libnl-3-200
          libnl-route-3-200 libnuma1 libmunge2 libatomic1 libudev1 libuuid1)
missing=()
for p in "${packages[@]}"; do
  ls "${p}"_*.deb >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get download "${missing[@]}"
fi
ls -la
du -ch ./*.deb | tail -1
