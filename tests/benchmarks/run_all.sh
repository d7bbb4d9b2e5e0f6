#!/usr/bin/env bash
# Runs the CPU speed benchmark: Towerbench against PyTorch on the same networks (see README.md).
#   usage: tests/benchmarks/run_all.sh BUILD_DIR [extra bench_cpu_vs_pytorch.py arguments]
# Installs python3-torch and libopenblas0-pthread first when they are missing (idempotent:
# dpkg-query decides; apt-get runs only when something is missing). `make bench` calls this.
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 BUILD_DIR [benchmark arguments...]" >&2
  exit 2
fi
build=$1
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

packages=(python3-torch libopenblas0-pthread)
missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bench: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi

binary="$build/app/towerbench-run"
if [ ! -x "$binary" ]; then
  echo "bench: $binary not found; build first (make build)" >&2
  exit 1
fi
args=(--binary "$binary")
peak="$build/tests/benchmarks/tb_gemm_peak"
if [ -x "$peak" ]; then
  args+=(--gemm-peak-binary "$peak")
else
  echo "bench: $peak not built; the '% of GEMM peak' column will read n/a" >&2
fi

# Debian's interpreter: python3-torch installs for it, not for a pyenv/venv python3 on PATH.
exec /usr/bin/python3 "$here/bench_cpu_vs_pytorch.py" "${args[@]}" "$@"
