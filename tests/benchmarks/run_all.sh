#!/usr/bin/env bash
# Runs the CPU benchmarks (see docs/testing.md and tests/benchmarks/README.md):
#   cpu     bench_cpu_vs_pytorch.py  Towerbench against PyTorch on the same networks, one process
#   towers  bench_towers_vs_ddp.py   1/2/4 CPU towers against PyTorch DistributedDataParallel (gloo)
#   predictor bench_predictor.py     the what-if predictor against held-out measured configurations
#   allreduce tb_bench_allreduce     the all-reduce between 2 processes (mpirun) against bare MPI_Allreduce
#   usage: tests/benchmarks/run_all.sh BUILD_DIR [--which all|cpu|towers|predictor|gui|denormals|allreduce] [extra script arguments]
# --which all (the default) runs cpu, then towers; the extra arguments then go to the first script
# (cpu) only, and towers runs with its defaults. --which cpu / --which towers runs that one script and
# hands it the extra arguments. The exit status is non-zero when any script that ran failed.
# Installs python3-torch and libopenblas0-pthread first when they are missing (idempotent:
# dpkg-query decides; apt-get runs only when something is missing). `make bench` calls this.
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 BUILD_DIR [--which all|cpu|towers|predictor|gui|denormals|allreduce] [benchmark arguments...]" >&2
  exit 2
fi
build=$1
shift
which=all
if [ $# -ge 1 ]; then
  case "$1" in
    --which) [ $# -ge 2 ] || { echo "$0: --which needs all, cpu, towers or gui" >&2; exit 2; }
             which=$2; shift 2 ;;
    --which=*) which=${1#--which=}; shift ;;
  esac
fi
case "$which" in
  all|cpu|towers|predictor|gui|denormals|allreduce) ;;
  *) echo "$0: --which $which: expected all, cpu, towers, predictor, gui, denormals or allreduce" >&2; exit 2 ;;
esac
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
cpu_args=(--binary "$binary")
peak="$build/tests/benchmarks/tb_gemm_peak"
if [ "$which" != towers ]; then
  if [ -x "$peak" ]; then
    cpu_args+=(--gemm-peak-binary "$peak")
  else
    echo "bench: $peak not built; the '% of GEMM peak' column will read n/a" >&2
  fi
fi

# Debian's interpreter: python3-torch installs for it, not for a pyenv/venv python3 on PATH.
py=/usr/bin/python3
# The window's responsiveness: a real X11 window under Xvfb when xvfb-run exists, else offscreen.
gui() {
  local bin="$build/tests/benchmarks/tb_bench_gui"
  [ -x "$bin" ] || { echo "bench: $bin not built (needs Qt)" >&2; return 1; }
  if command -v xvfb-run >/dev/null; then xvfb-run -a -s "-screen 0 1600x1000x24" "$bin" "$@"
  else QT_QPA_PLATFORM=offscreen "$bin" "$@"; fi
}
denormals() { "$build/tests/benchmarks/tb_bench_denormals" "$@"; }
# Open MPI refuses root unless told (set for this run only), shared memory and loopback only.
allreduce() {
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader \
    mpirun -np 2 "$build/tests/benchmarks/tb_bench_allreduce" "$@"
}
case "$which" in
  gui) gui "$@"; exit $? ;;
  denormals) denormals "$@"; exit $? ;;
  allreduce) allreduce "$@"; exit $? ;;
  cpu) exec "$py" "$here/bench_cpu_vs_pytorch.py" "${cpu_args[@]}" "$@" ;;
  towers) exec "$py" "$here/bench_towers_vs_ddp.py" --binary "$binary" "$@" ;;
  predictor) exec "$py" "$here/bench_predictor.py" --binary "$binary" "$@" ;;
esac
status=0
"$py" "$here/bench_cpu_vs_pytorch.py" "${cpu_args[@]}" "$@" || status=$?
echo
"$py" "$here/bench_towers_vs_ddp.py" --binary "$binary" || status=$?
echo
"$py" "$here/bench_predictor.py" --binary "$binary" || status=$?
echo
gui || status=$?
echo
denormals || status=$?
exit "$status"
