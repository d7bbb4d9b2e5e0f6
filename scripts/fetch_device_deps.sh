#!/usr/bin/env bash
# Fetches the Debian packages a GPU machine lacks for building and running the Qt-free core
# (oneDNN, nlohmann-json, zlib headers, SQLite, protobuf and protoc
# so that GPU runs write TensorBoard events) into .deps/debs, and
# Open MPI with what it needs into .deps/mpi-debs, for
# tests/gpu/device_check.sh to unpack there with dpkg -x. Run it here, where apt works; the GPU
# machines have no network. .deps/ is git-ignored and travels as a carried path.
# Also makes .deps/tbrun with this machine's build (build/app/towerbench-run): a run folder, 40
# steps and then resumed to 80, whose TensorBoard events the device check reads with TensorBoard
# (beside a GPU run's own: the two builds' events read alike; the GPU machines have TensorBoard), and
# .deps/tbckpt: an mlp run with a moving average and eval's line, whose checkpoints the device
# check opens with the Python safetensors package and runs in PyTorch.
set -euo pipefail
cd "$(dirname "$0")/.."
# fetch DIR PACKAGE...: the packages not yet in .deps/DIR, with apt-get download.
fetch() {
  local dir=.deps/$1 missing=() p
  shift
  mkdir -p "$dir"
  for p in "$@"; do
    ls "$dir/${p}"_*.deb >/dev/null 2>&1 || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then (cd "$dir" && apt-get download "${missing[@]}"); fi
  du -ch "$dir"/*.deb | tail -1
}
fetch debs libdnnl2 libdnnl-dev nlohmann-json3-dev zlib1g zlib1g-dev libsqlite3-0 libsqlite3-dev \
  libprotobuf32 libprotobuf-lite32 libprotobuf-dev libprotoc32 protobuf-compiler
# Open MPI 4.1 and every shared library it and its plugins need (ldd over all ELF files of the
# unpacked packages), for tests/gpu/device_check.sh --mpi (scripts/device_mpi_env.sh unpacks it).
# Left out: libc6, libgcc-s1, libstdc++6, zlib1g (every image has them), libhwloc-plugins
# (optional; they need X11, OpenCL, ICU).
fetch mpi-debs openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libpmix2 libhwloc15 libevent-core-2.1-7 \
  libevent-pthreads-2.1-7 libfabric1 libucx0 libibverbs1 ibverbs-providers librdmacm1 libpsm2-2 libpsm-infinipath1 \
  libnl-3-200 libnl-route-3-200 libnuma1 libmunge2 libatomic1 libudev1 libuuid1
if [ -x build/app/towerbench-run ]; then
  rm -rf .deps/tbrun
  run=(--model mnist_cnn --data idx:samples/fashion-mnist-slice --towers cpu:0,cpu:1 --batch 32 --eval-every 20 --quiet)
  build/app/towerbench-run "${run[@]}" --steps 40 --run-dir .deps/tbrun > /dev/null
  build/app/towerbench-run --resume .deps/tbrun --steps 80 --eval-every 20 --quiet > /dev/null
  rm -r .deps/tbrun/checkpoints  # 100 MB the check does not read (a call carries 64 MiB at most)
  ls .deps/tbrun
  rm -rf .deps/tbckpt
  build/app/towerbench-run --model mlp --data idx:samples/fashion-mnist-slice --towers cpu:0 --batch 32 \
    --steps 60 --optimizer adam --ema-decay 0.99 --run-dir .deps/tbckpt --quiet > /dev/null
  build/app/towerbench-run eval .deps/tbckpt > .deps/tbckpt/eval.json
  ls .deps/tbckpt/checkpoints
else
  echo "build/app/towerbench-run not built: no run folders for the TensorBoard and safetensors checks" >&2
fi
