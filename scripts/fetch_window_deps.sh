#!/usr/bin/env bash
# The window for a GPU machine (issue 33: the whole product on a GPU). The GPU machines have no Qt,
# no apt and no network, so the window is built here and carried there with the Debian packages
# it needs, which tests/gpu/device_check.sh (--only window) unpacks with dpkg -x
# (scripts/device_window_env.sh). Makes .deps/window/:
#   bin/   towerbench, tb_window_soak and libtb_backend_cuda.so from BUILD_DIR (default build-gpuwin:
#          Release, without MPI, whose Open MPI the GPU machine lacks; the CUDA module is built here
#          with nvcc and finds cuDNN, cuBLAS and NCCL there), stripped
#   debs/  every package whose shared libraries those programs and Qt's offscreen platform (in
#          libqt6gui6 on Debian 12) load,
#          found by ldd and dpkg -S, less what every Linux image has (glibc, libstdc++, libgcc,
#          zlib), plus the fonts and fontconfig's configuration (offscreen draws no text without
#          them) and protobuf (so the window's GPU runs write TensorBoard events)
# and says the total, which must leave room in a call's 64 MiB (the tracked tree is about 12 MB).
#   scripts/fetch_window_deps.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpuwin}
# Always built (up to date in seconds when nothing changed): the window and its module must come
# from the same sources, or the module's ABI check refuses it there.
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTB_WITH_MPI=OFF > /dev/null
cmake --build "$build" -j "$(nproc)" --target towerbench tb_window_soak
cmake --build "$build" -j "$(nproc)" --target tb_backend_cuda ||
  echo "no CUDA module built here: the window part needs one in .deps/window/bin (its ABI checked against the window's)" >&2
out=.deps/window
rm -rf "$out/bin"
mkdir -p "$out/bin" "$out/debs"
for f in "$build/app/towerbench" "$build/tests/tb_window_soak" "$build/app/libtb_backend_cuda.so"; do
  [ -f "$f" ] && strip -o "$out/bin/$(basename "$f")" "$f"
done
plugin=$(dpkg -L libqt6gui6 | grep -m1 '/qt6/plugins/platforms/libqoffscreen.so$')  # Debian 12 ships it with QtGui
# Every library the programs and the plugin load, by the package that ships it.
packages=$(
  for f in "$out/bin/towerbench" "$out/bin/tb_window_soak" "$plugin"; do ldd "$f"; done |
    awk '$3 ~ /^\// {print $3}' | sort -u |
    while read -r lib; do dpkg -S "$(readlink -f "$lib")" 2> /dev/null | head -1 | cut -d: -f1; done | sort -u |
    grep -vxE 'libc6|libstdc\+\+6|libgcc-s1|zlib1g'
)
packages=$(echo $packages fontconfig-config fonts-dejavu-core libprotobuf32)
# A package the programs no longer load (a library the build dropped, as OpenBLAS) leaves the carry.
for d in "$out/debs"/*.deb; do
  [ -e "$d" ] || continue
  p=$(basename "$d")
  [[ " $packages " == *" ${p%%_*} "* ]] || rm -f "$d"
done
missing=()
for p in $packages; do ls "$out/debs/${p}"_*.deb > /dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then (cd "$out/debs" && apt-get download "${missing[@]}" > /dev/null); fi
echo "$(echo $packages | wc -w) packages: $packages"
du -ch "$out/debs"/*.deb | tail -1
du -ch "$out/bin"/* | tail -1
du -sh "$out/debs" "$out/bin"
echo "carry .deps/window/debs and .deps/window/bin (scripts/device_window_env.sh unpacks outside the checkout)"
