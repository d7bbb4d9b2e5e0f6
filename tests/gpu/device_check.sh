#!/usr/bin/env bash
# The device check: everything GPU-side in one call on a lent GPU machine (no Qt, no apt, no
# network; CUDA with nvcc, CMake, ninja, PyTorch; cuDNN and NCCL as Python wheels).
#   tests/gpu/device_check.sh [--prebuilt DIR] [--no-bench] [--quick] [--mpi [--processes-only]] [--only LIST] OUT_DIR
# --only LIST: after the build, only the checks whose functions LIST names (comma-separated, e.g.
# kernels,bench), for a call with little device time left. --only window needs no build: the
# window and its CUDA module come built from this machine's twin in .deps/window
# (scripts/fetch_window_deps.sh), with the Debian packages they load.
# --mpi: builds with the Open MPI that scripts/fetch_device_deps.sh fetched (.deps/mpi-debs, unpacked
# by scripts/device_mpi_env.sh) and runs the processes' GPU cases (tests/mpi/test_processes.py
# --gpu) and their speed; --processes-only: after the build, selftest and tests, only those.
# 1. unpacks the Debian packages of .deps/debs (scripts/fetch_device_deps.sh fetches them where
#    apt works) into .deps/root and finds cuDNN, NCCL and cuBLAS in the toolkit or the wheels;
# 2. builds the Qt-free core with the CUDA module (or, with --prebuilt DIR, takes towerbench-run,
#    libtb_backend_cuda.so and the tst_* programs built elsewhere from DIR, to save device time);
# 3. runs `towerbench-run selftest`, the Qt-free tests (those labelled gpu must run, not skip),
#    compute-sanitizer's memcheck, racecheck and synccheck on a short GPU run, the input-staging benchmark, TensorBoard's
#    reader and the safetensors package on run folders made here, and the GPU benchmark against
#    PyTorch;
# 4. writes logs and summary.txt (one table, also printed last) into OUT_DIR.
# Exit status: 0 when every step passed; the summary says which did not.
set -uo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)

prebuilt="" bench=1 quick=0 mpi=0 only_processes=0 only=""
while [ $# -gt 1 ]; do
  case "$1" in
    --mpi) mpi=1; shift ;;
    --processes-only) only_processes=1; shift ;;
    --prebuilt) prebuilt=$(cd "$2" 2> /dev/null && pwd) || { echo "device_check: --prebuilt $2 is not a folder" >&2; exit 2; }
                shift 2 ;;
    --no-bench) bench=0; shift ;;
    --quick) quick=1; shift ;;
    --only) only=$2; shift 2 ;;
    *) echo "device_check: unknown option $1" >&2; exit 2 ;;
  esac
done
# Every part --only can name (each a function run by `step`, which refuses one not listed here).
parts=selftest,tests,memcheck,racecheck,synccheck,staging,gpu_events,tensorboard_reads,safetensors_reads,placements
parts+=,stages,conv_api,layouts,gpu_sweep,predictor_gpu,predictor_gpu_shared,precision_batches,cudnn_algorithms
parts+=,kernels,denormals,report_lag,kept_algorithms,determinism,window,pytorch_baseline,bench,processes
parts+=,processes_speed,gpu_memory_refusal
for part in ${only//,/ }; do
  [[ ",$parts," == *",$part,"* ]] || { echo "device_check: --only names '$part', which is no part; the parts: $parts" >&2; exit 2; }
done
usage="usage: tests/gpu/device_check.sh [--prebuilt DIR] [--no-bench] [--quick] [--mpi [--processes-only]] [--only LIST] OUT_DIR"
out=${1:?$usage}
mkdir -p "$out"
out=$(cd "$out" && pwd)
log="$out/device_check.log"
: > "$log"
summary=()
failed=0
started=$(date +%s)
# Every run of the check keeps its cuDNN algorithm choices in one file (backend/algorithm_store.hpp),
# copied into the output at the end: later runs of a shape take the first run's choices, so the
# benchmark, the profiles and the determinism pairs all run the same algorithms.
export TOWERBENCH_ALGORITHM_CACHE=/tmp/tb-device-check/cudnn-algorithms.json
rm -rf /tmp/tb-device-check

# step NAME COMMAND...: runs it with its output appended to the log, records status and seconds.
# A command may set step_note to report something other than passed/failed (and not fail).
# With --only, a command LIST does not name is left out (the unpacking and the build never are).
step() {
  local name=$1; shift
  case "$1" in
    unpack|build) ;;
    *) [[ ",$parts," == *",$1,"* ]] || { note "$name" "FAILED: $1 is missing from the script's parts"; failed=1; return 1; }
       wanted "$1" || return 0 ;;
  esac
  local t0=$(date +%s.%N)
  echo "=== $name: $*" >> "$log"
  local first=$(( $(wc -l < "$log") + 1 ))
  step_note=""
  "$@" >> "$log" 2>&1
  local rc=$?
  local secs=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}")
  local status=passed
  if [ -n "$step_note" ]; then status=$step_note; rc=0
  elif [ $rc -ne 0 ]; then status="FAILED (exit $rc)"; failed=1; fi
  summary+=("$(printf '%-34s %-18s %7ss' "$name" "$status" "$secs")")
  # A failing step's last lines under its row: the summary alone comes back when the packed
  # output does not (too large, or the call cut short).
  [ $rc -ne 0 ] && while IFS= read -r line; do summary+=("    | ${line:0:400}"); done < <(tail -n +"$first" "$log" | tail -8)
  echo "=== $name: $status in ${secs}s" | tee -a "$log"
  write_summary > /dev/null
  return $rc
}
# Whether --only (or its absence) takes part $1.
wanted() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
note() { summary+=("$(printf '%-34s %s' "$1" "$2")"); echo "=== $1: $2" | tee -a "$log"; write_summary > /dev/null; }
# summary.txt as it stands, after every step: a call killed before the check's end (its `timeout
# -k` past the TERM) still brings back what ran.
write_summary() {
  {
    echo
    echo "device check summary ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $(( $(date +%s) - started )) s)"
    printf '%s\n' "${summary[@]}"
    # The GEMMs whose cuBLASLt epilogue was not to be had (lt_gemm.cpp names each kind once): the
    # op check passes on the fallbacks too, so only this shows whether the fusions ran.
    local unfused
    unfused=$(grep -ho "cuBLASLt offers no [^;]*\|cuBLASLt refused the fused GEMM[^;]*" "$log" | sort -u | head -12)
    [ -n "$unfused" ] && { echo; echo "cuBLASLt epilogues not to be had (from the log; the layers did without):"; sed 's/^/  /' <<< "$unfused"; }
    # Towers whose step could not be recorded as a CUDA graph (tower_set.cpp says each once): they
    # ran unrecorded, so their runs pass and their speeds are eager ones.
    local unrecorded
    unrecorded=$(grep -ho "[^ ]*: tower [0-9]*'s step could not be recorded as a graph.*" "$log" | sort | uniq -c | sort -rn | head -8)
    [ -n "$unrecorded" ] && { echo; echo "steps that could not be recorded (from the log; those towers ran unrecorded):"; sed 's/^/  /' <<< "$unrecorded"; }
    [ -f "$out/bench_gpu.txt" ] && { echo; grep -A30 -E "^model +\|" "$out/bench_gpu.txt" | head -60; }
  } | tee "$out/summary.txt"
}

# The summary (and the algorithm choices) into OUT_DIR: at the end, or when the call's `timeout`
# cuts the check short (TERM: bash runs this once the step's current command returns).
finish() {
  [ -f "$TOWERBENCH_ALGORITHM_CACHE" ] && cp "$TOWERBENCH_ALGORITHM_CACHE" "$out/"
  write_summary
}
trap 'note "cut short" "by a signal after $(( $(date +%s) - started )) s; the steps after the last one listed did not run"; finish; exit 124' TERM INT

echo "device check in $repo, output in $out"
{
  date -u; uname -a; nproc; free -g | head -2
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv || true
  nvcc --version | tail -2 || true; cmake --version | head -1; (g++ --version | head -1) || true
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' || true
} >> "$log" 2>&1

# --- 1. dependencies ---------------------------------------------------------------------------
deps="$repo/.deps/root"
unpack() {
  mkdir -p "$deps"
  if ! compgen -G "$repo/.deps/debs/*.deb" > /dev/null; then
    echo "no Debian packages in .deps/debs: run scripts/fetch_device_deps.sh on the development machine and carry .deps/debs with the call"
    return 1
  fi
  for d in "$repo"/.deps/debs/*.deb; do dpkg -x "$d" "$deps" || return 1; done
}
window_only=0 baseline_only=0
[ "$only" = window ] && window_only=1
[ "$only" = pytorch_baseline ] && baseline_only=1  # PyTorch alone: nothing of ours to build
[ $window_only -eq 1 ] || [ $baseline_only -eq 1 ] || step "unpack Debian packages" unpack || { finish; exit 1; }
site=$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)
# The directory holding a library (first match under the toolkit, then the Python wheels).
libdir_of() {
  local f
  f=$(find /usr/local/cuda/lib64/ /usr/local/cuda/lib/ /usr/local/cuda/targets/ "$site/nvidia" -name "$1" 2>/dev/null | head -1)
  [ -n "$f" ] && dirname "$f"
}
incdir_of() {
  local f
  f=$(find /usr/local/cuda/include/ /usr/local/cuda/targets/ "$site/nvidia" -name "$1" 2>/dev/null | head -1)
  [ -n "$f" ] && dirname "$f"
}
cudnn_lib=$(libdir_of 'libcudnn.so.9'); nccl_lib=$(libdir_of 'libnccl.so.2'); cublas_lib=$(libdir_of 'libcublas.so.1[0-9]')
cudart_lib=$(libdir_of 'libcudart.so.1[0-9]')
echo "cudnn $cudnn_lib, nccl $nccl_lib, cublas $cublas_lib, cudart $cudart_lib" >> "$log"
arch_lib="$deps/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$arch_lib:$cudnn_lib:$nccl_lib:$cublas_lib:$cudart_lib:${LD_LIBRARY_PATH:-}"

# --- 2. build or take the prebuilt programs --------------------------------------------------------
mpi_args=(-DTB_WITH_MPI=OFF)
if [ $mpi -eq 1 ]; then
  # shellcheck source=scripts/device_mpi_env.sh
  source "$repo/scripts/device_mpi_env.sh" /tmp/tb-mpi-root >> "$log" 2>&1 || { note "unpack Open MPI" "FAILED: no .deps/mpi-debs to unpack"; finish; exit 1; }
  read -r -a mpi_args <<< "-DTB_WITH_MPI=ON $TB_MPI_CMAKE_ARGS"
fi
bin="$repo/build-device"
build() {
  cmake -S "$repo" -B "$bin" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTB_WITH_GUI=OFF "${mpi_args[@]}" \
    -DTB_WITH_CUDA=ON -DTB_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$deps/usr" \
    -DTB_DNNL_LIB="$arch_lib/libdnnl.so.2" -DTB_DNNL_INCLUDE="$deps/usr/include" \
    -DZLIB_LIBRARY="$(find "$deps" -name 'libz.so.1.*' -type f | head -1)" -DZLIB_INCLUDE_DIR="$deps/usr/include" \
    -DSQLite3_LIBRARY="$(find "$deps" -name 'libsqlite3.so.0.*' -type f | head -1)" -DSQLite3_INCLUDE_DIR="$deps/usr/include" \
    -DTB_WITH_PROTOBUF=ON -DProtobuf_PROTOC_EXECUTABLE="$deps/usr/bin/protoc" \
    -DProtobuf_INCLUDE_DIR="$deps/usr/include" -DProtobuf_LIBRARY="$arch_lib/libprotobuf.so" \
    -DCUDNN_ROOT="$(dirname "$cudnn_lib")" -DNCCL_ROOT="$(dirname "$nccl_lib")" \
    -DCUBLAS_ROOT="$(dirname "$cublas_lib")" &&
  timeout --foreground -k 10 420 cmake --build "$bin" -j "$(nproc)"
}
if [ $baseline_only -eq 1 ]; then
  note "build" "none: PyTorch's side alone"
  run_bin="$repo/build-device/app"  # (not run)
elif [ $window_only -eq 1 ]; then
  note "build" "none: the window and its CUDA module from .deps/window/bin"
  run_bin="$repo/.deps/window/bin"
elif [ -n "$prebuilt" ]; then
  note "build" "prebuilt programs from $prebuilt (built on the development machine)"
  run_bin="$prebuilt"
  tests_bin="$prebuilt"
  bench_bin="$prebuilt"
else
  step "configure and build (CUDA, no Qt)" build || { finish; exit 1; }
  run_bin="$bin/app"
  tests_bin="$bin/tests/gpu"
  bench_bin="$bin/tests/benchmarks"
fi
tbrun="$run_bin/towerbench-run"
export TB_CUDA_MODULE="$run_bin/libtb_backend_cuda.so"

# --- 3. checks ---------------------------------------------------------------------------------
selftest() { timeout --foreground -k 10 120 "$tbrun" selftest | tee "$out/selftest.txt"; return "${PIPESTATUS[0]}"; }
step "towerbench-run selftest" selftest

# The Qt-free tests: exit 77 means skipped; a GPU test that skips here is a failure.
tests() {
  local status=0 name args rc gpu_ran=0 failing=()
  for t in "tst_backend_ops cpu" "tst_tower_transfers" "tst_device_monitor" "tst_compute_threads" "tst_observer_hub" \
           "tst_reference cpu" "tst_gpu_stages standin" "tst_gpu_sync_bn standin" "tst_backend_ops gpu" "tst_gpu_towers" \
           "tst_reference gpu" "tst_gpu_stages gpu" "tst_gpu_sync_bn gpu"; do
    name=${t%% *}; args=${t#"$name"}
    echo "--- $t"
    (cd "$repo" && OMP_NUM_THREADS=4 timeout --foreground -k 10 300 "$tests_bin/$name" $args)
    rc=$?
    case "$t" in *" gpu"|tst_gpu_towers) [ $rc -eq 0 ] && gpu_ran=$((gpu_ran + 1)) ;; esac
    echo "--- $t: exit $rc"
    [ $rc -ne 0 ] && status=1 && failing+=("$t ($rc)")
  done
  echo "GPU tests that ran and passed: $gpu_ran of 5"
  [ $gpu_ran -eq 5 ] || status=1
  # fp32 convolutions in each layout for every plan (TB_CONV_LAYOUT), whichever the timing picks:
  # the op check and the towers through NCHW's transpositions and through NHWC's.
  for layout in nchw nhwc; do
    for t in "tst_backend_ops gpu" "tst_gpu_towers"; do
      name=${t%% *}; args=${t#"$name"}
      echo "--- TB_CONV_LAYOUT=$layout $t"
      (cd "$repo" && TB_CONV_LAYOUT=$layout OMP_NUM_THREADS=4 timeout --foreground -k 10 300 "$tests_bin/$name" $args)
      rc=$?
      echo "--- TB_CONV_LAYOUT=$layout $t: exit $rc"
      [ $rc -ne 0 ] && status=1 && failing+=("TB_CONV_LAYOUT=$layout $t ($rc)")
    done
  done
  # Every convolution direction on a cuDNN graph-API engine wherever one obeys the rule
  # (TB_CONV_API=graph), timed or not: the op check holds their fp32 results and fused bias to the
  # double reference, the towers to the CPU's losses.
  for t in "tst_backend_ops gpu" "tst_gpu_towers"; do
    name=${t%% *}; args=${t#"$name"}
    echo "--- TB_CONV_API=graph $t"
    (cd "$repo" && TB_CONV_API=graph OMP_NUM_THREADS=4 timeout --foreground -k 10 300 "$tests_bin/$name" $args)
    rc=$?
    echo "--- TB_CONV_API=graph $t: exit $rc"
    [ $rc -ne 0 ] && status=1 && failing+=("TB_CONV_API=graph $t ($rc)")
  done
  # Last, so that the summary's lines under a failed step name them.
  [ ${#failing[@]} -gt 0 ] && printf 'failed (exit status): %s\n' "$(IFS=';'; echo "${failing[*]}")"
  return $status
}
step "tests (Qt-free, GPU ones must run)" tests

# Issue 15: GPU towers in processes of one run (mpirun): the equivalences and refusals, then the
# speed of one GPU tower alone, in a process group of one whose NCCL spans processes, and in two
# processes sharing the GPU through the host (mnist_cnn, global batch 128, 300 steps).
processes() { PYTHONUNBUFFERED=1 timeout 300 python3 "$repo/tests/mpi/test_processes.py" "$tbrun" --gpu; }
processes_speed() {
  local common=(--model mnist_cnn --data "idx:$repo/samples/fashion-mnist-slice" --towers gpu:0 --batch 128
                --steps 300 --validation 0 --eval-every 0 --quiet)
  local replicas=(--variables replicated --reduce allreduce) np2=(mpirun --bind-to none -np 2 "$tbrun")
  speed "1 process, NCCL (ncclCommInitAll)" "$tbrun" "${common[@]}" "${replicas[@]}" --transfers nccl &&
  speed "mpirun -np 1, NCCL across processes" mpirun --bind-to none -np 1 "$tbrun" "${common[@]}" "${replicas[@]}" &&
  speed "mpirun -np 2 on gpu:0, host + MPI" "${np2[@]}" "${common[@]}" "${replicas[@]}" &&
  speed "1 process, variables on the host" "$tbrun" "${common[@]}" &&
  speed "mpirun -np 2 on gpu:0, variables on the host" "${np2[@]}" "${common[@]}"
}
# speed LABEL COMMAND...: the run's steady examples/sec and its reduce + apply share, from its summary.
speed() {
  printf '%-46s ' "$1"; shift
  timeout --foreground -k 10 120 "$@" --run-dir "$(mktemp -d -u /tmp/tb-speed-XXXX)" | tail -1 | python3 -c 'import json, sys
s = json.loads(sys.stdin.read())
print("%10.0f ex/s  reduce+apply %.3f" % (s["steady_examples_per_sec"], s["reduce_apply_fraction"]))'
}
if [ $mpi -eq 1 ]; then
  step "processes on the GPU (mpirun)" processes
  step "processes' speed on the GPU" processes_speed
fi
if [ $only_processes -eq 1 ]; then
  finish
  exit $failed
fi

# Issue 13: a model too large for the GPU (two dense layers of 2^20 units: 4.4 TB of variables on
# gpu:0) is refused from the estimate against the backend's free memory, in one line, before
# anything is allocated.
gpu_memory_refusal() {
  local m="$out/too_big_for_gpu.json" o="$out/too_big_for_gpu.txt"
  echo '{"name": "too_big", "input": [1, 28, 28], "layers": [{"type": "flatten"},
    {"type": "dense", "units": 1048576}, {"type": "dense", "units": 1048576}, {"type": "dense", "units": 10}]}' > "$m"
  timeout --foreground -k 10 60 "$tbrun" --model "$m" --data "idx:$repo/samples/fashion-mnist-slice" --towers gpu:0 --variables gpu:0 \
    --steps 1 --quiet > "$o" 2>&1
  local rc=$?
  cat "$o"
  [ $rc -eq 2 ] && [ "$(wc -l < "$o")" -eq 1 ] && grep -q "of gpu:0's memory" "$o" && grep -q "more is available" "$o"
}
step "GPU memory estimate refuses" gpu_memory_refusal

# compute-sanitizer on a short two-tower GPU run: memcheck in fp32, then in bf16 (its own copies,
# stage and conversion kernels); racecheck (shared-memory hazards in our reductions) and synccheck
# (barriers) in fp32, slower, on fewer steps. Some sandboxes refuse it ("not supported").
# sanitize TOOL STEPS PRECISION...
sanitize() {
  local tool=$1 steps=$2 o="$out/$1.txt" precision rc=0
  shift 2
  : > "$o"
  for precision in "$@"; do
    echo "--- --precision $precision" >> "$o"
    timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 9 --print-limit 20 \
      "$tbrun" --model mnist_cnn --data "idx:$repo/samples/fashion-mnist-slice" --towers "gpu:0*2" --variables gpu:0 \
      --batch 32 --steps "$steps" --validation 0 --quiet --precision $precision >> "$o" 2>&1
    rc=$?
    [ $rc -ne 0 ] && break
  done
  tail -5 "$o"
  [ $rc -eq 124 ] && step_note="timed out after 150 s (not a finding)"
  if [ $rc -ne 0 ] && [ $rc -ne 9 ] && grep -qiE "not supported|Unable to|failed to (start|initialize)" "$o"; then
    step_note="not supported here"
  fi
  return $rc
}
memcheck() { sanitize memcheck 4 fp32 bf16; }
racecheck() { sanitize racecheck 2 fp32; }
synccheck() { sanitize synccheck 2 fp32; }
if command -v compute-sanitizer >/dev/null; then
  step "compute-sanitizer memcheck" memcheck
  step "compute-sanitizer racecheck" racecheck
  step "compute-sanitizer synccheck" synccheck
else
  { wanted memcheck || wanted racecheck || wanted synccheck; } && note "compute-sanitizer" "not installed here"
fi

# Placements on the GPU (mnist_cnn, batch 128, 200 steps each): the seeds' default with the
# variables in host memory against variables on the GPU, two towers sharing it, replicas, copies.
placements() {
  local data="idx:$repo/samples/fashion-mnist-slice" p
  printf '%-58s %12s %10s %14s %12s\n' "plan" "ex/s" "reduce+apply" "bytes/step" "peak MiB"
  for p in "--towers gpu:0 --variables gpu:0" "--towers gpu:0 --variables cpu" \
           "--towers gpu:0*2 --variables gpu:0" "--towers gpu:0*2 --variables cpu" \
           "--towers gpu:0*2 --variables replicated --reduce allreduce" \
           "--towers gpu:0 --variables replicated --reduce allreduce --transfers nccl" \
           "--towers gpu:0*2 --variables gpu:0 --transfers copies" \
           "--towers gpu:0 --variables cpu --comm-precision bf16" "--towers gpu:0*2 --variables cpu --comm-precision bf16" \
           "--towers gpu:0 --variables gpu:0 --precision bf16" "--towers gpu:0*2 --variables gpu:0 --precision bf16"; do
    # shellcheck disable=SC2086 # the plan's flags, split on purpose
    "$tbrun" --model mnist_cnn --data "$data" --batch 128 --steps 200 --validation 0 --quiet $p \
        --metrics "$out/placement.jsonl" > "$out/placement.json" || return 1
    python3 - "$p" "$out/placement.json" "$out/placement.jsonl" <<'PY'
import json, sys
s = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
steps = [json.loads(l) for l in open(sys.argv[3]) if '"type":"step"' in l]
b = steps[-1]["bytes_moved"] if steps else 0
print(f"{sys.argv[1]:<58} {s['steady_examples_per_sec']:12,.0f} {s['reduce_apply_fraction']:10.1%} "
      f"{b:14,d} {s.get('peak_device_bytes', 0) / 2**20:12.1f}")
if sys.argv[1].endswith("gpu:0 --variables gpu:0"):
    print("  memory:", json.dumps(s["memory"]), "devices:", json.dumps(s.get("device_memory")))
PY
    [ $? -eq 0 ] || return 1
  done
  rm -f "$out/placement.json" "$out/placement.jsonl"
}
step "placements on the GPU" placements

# Pipeline stages on the GPU (issue 32): two stages sharing gpu:0 (each on a stream of its own,
# one micro-batch's forward beside another's backward), by each schedule, against one tower on
# gpu:0; and on gpu:0,gpu:1 over NCCL where there are two GPUs. 150 steps each; the equivalence
# is tst_gpu_stages' (the tests above).
stages() {
  local data="idx:$repo/samples/fashion-mnist-slice" model batch p gpus
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  printf '%-10s %6s %-58s %10s %8s %12s %10s\n' "model" "batch" "plan" "ex/s" "bubble" "bytes/step" "peak MiB"
  for model in deep_mlp mnist_cnn; do
    for batch in 128 1024; do
      local plans=("--towers gpu:0" "--stages gpu:0*2" "--stages gpu:0*2 --pipeline gpipe --micro-batches 4"
                   "--stages gpu:0*2 --pipeline gpipe --micro-batches 8" "--stages gpu:0*2 --pipeline 1f1b --micro-batches 4")
      [ "$gpus" -ge 2 ] && plans+=("--stages gpu:0,gpu:1 --pipeline 1f1b --micro-batches 4")
      for p in "${plans[@]}"; do
        # shellcheck disable=SC2086 # the plan's flags, split on purpose
        "$tbrun" --model $model --data "$data" --batch $batch --steps 150 --validation 0 --quiet $p \
            --metrics "$out/stages.jsonl" > "$out/stages.json" || return 1
        python3 - "$model" "$batch" "$p" "$out/stages.json" "$out/stages.jsonl" <<'PY'
import json, sys
s = json.loads(open(sys.argv[4]).read().strip().splitlines()[-1])
steps = [json.loads(l) for l in open(sys.argv[5]) if '"type":"step"' in l]
b = steps[-1].get("bytes_moved", 0) if steps else 0
bubble = s.get("bubble_fraction")
print(f"{sys.argv[1]:<10} {sys.argv[2]:>6} {sys.argv[3]:<58} {s['steady_examples_per_sec']:10,.0f} "
      f"{'' if bubble is None else f'{bubble:.1%}':>8} {b:12,d} {s.get('peak_device_bytes', 0) / 2**20:10.1f}")
PY
        [ $? -eq 0 ] || return 1
      done
    done
  done
  rm -f "$out/stages.json" "$out/stages.jsonl"
}
step "pipeline stages on the GPU" stages

# Staging the next step's input while a step computes (the trainer's way) against staging it on
# the step's path: alternating rounds in one process, per model and placement.
staging() {
  local p
  for p in "--model mnist_cnn --towers gpu:0 --batch 128" "--model cifar10_cnn --towers gpu:0 --batch 128" \
           "--model mnist_cnn --towers gpu:0*2 --batch 64" "--model mnist_cnn --towers gpu:0 --variables cpu --batch 128"; do
    # shellcheck disable=SC2086 # the flags, split on purpose
    "$bench_bin/tb_bench_input_staging" $p --steps 300 --rounds 5 --threads 4 || return 1
  done 2>&1 | tee "$out/staging.txt"
}
step "input staged ahead vs on the path" staging

# TensorBoard's own reader on a GPU run's folder (40 steps on gpu:0, then resumed to 80: two event
# files), and on the one scripts/fetch_device_deps.sh made on the development machine's CPU.
gpu_events() {
  local d="$out/tb-gpu-run"
  rm -rf "$d"
  timeout --foreground -k 10 120 "$tbrun" --model mnist_cnn --data "idx:$repo/samples/fashion-mnist-slice" --towers gpu:0 \
    --variables gpu:0 --batch 128 --eval-every 20 --steps 40 --quiet --run-dir "$d" > /dev/null &&
  timeout --foreground -k 10 120 "$tbrun" --resume "$d" --steps 80 --eval-every 20 --quiet > /dev/null &&
  python3 "$repo/tests/gpu/read_events_with_tensorboard.py" "$d"
  local rc=$?
  rm -rf "$d/checkpoints"  # the events and metrics come back in $OUT, not the weights (whatever failed)
  return $rc
}
step "TensorBoard reads a GPU run's events" gpu_events
tensorboard_reads() { python3 "$repo/tests/gpu/read_events_with_tensorboard.py" "$repo/.deps/tbrun"; }
if [ -d "$repo/.deps/tbrun" ]; then
  step "TensorBoard reads a CPU run's events" tensorboard_reads
else
  wanted tensorboard_reads && note "TensorBoard reads a CPU run's events" "no .deps/tbrun (run scripts/fetch_device_deps.sh here)"
fi

# The Python safetensors package on checkpoints made here, and PyTorch on their weights.
safetensors_reads() {
  python3 "$repo/tests/gpu/read_checkpoint_with_safetensors.py" "$repo/.deps/tbckpt" "$repo/samples/fashion-mnist-slice"
}
if [ -d "$repo/.deps/tbckpt" ]; then
  step "safetensors reads checkpoints" safetensors_reads
else
  wanted safetensors_reads && note "safetensors reads checkpoints" "no .deps/tbckpt (run scripts/fetch_device_deps.sh here)"
fi

# The host's price of denormal floats (these machines have Intel processors, which pay most).
denormals() { "$bench_bin/tb_bench_denormals" --threads 4 | tee "$out/denormals.txt"; }
step "denormal benchmark (host CPU)" denormals

# Issue 14 on the GPU: a scaling sweep of towers sharing gpu:0 (the holder on the host, replicas
# with the on-device all-reduce, averaging every 4), and the predictor's GPU side: calibrated
# from a CPU run on this host, its predictions for one H100 tower (saved before any GPU run)
# against gpu:0 measured, variables on the host and on the GPU, batch 32/128/512.
gpu_sweep() {
  timeout --foreground -k 10 240 "$tbrun" scale --model mnist_cnn --data "idx:$repo/samples/fashion-mnist-slice" --towers "gpu:0*2"     --batch 128 --validation 0 --sweep-towers 1,2,4 --sweep-strategies mean,allreduce,average:4     --sweep-warmup 20 --sweep-steps 100 --run-dir "$out/gpu_sweep" > "$out/gpu_sweep.json" || return 1
  python3 - "$out/gpu_sweep.json" <<'PY'
import json, sys
s = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(f"{'point':<26} {'ex/s':>10} {'speedup':>8} {'effic.':>7}  compute/wait/reduce/apply/data ms")
for p in s["points"]:
    m = p["measured"]
    ph = " / ".join(f"{m[k]:.3f}" for k in ("compute_ms", "wait_ms", "reduce_ms", "apply_ms", "data_wait_ms"))
    print(f"{p['label']:<26} {m['examples_per_sec']:10,.0f} {p['speedup']:8.2f} {p['efficiency']:7.2f}  {ph}")
PY
}
step "scaling sweep on gpu:0 (1, 2, 4 towers)" gpu_sweep
predictor_gpu() {
  timeout 300 python3 "$repo/tests/benchmarks/bench_predictor.py" --binary "$tbrun" \
    --data "idx:$repo/samples/fashion-mnist-slice" --gpu h100:pcie5 --repeats 3 --out "$out/predictor_gpu" \
    | tee "$out/predictor_gpu.txt"
}
step "predictor: CPU calibration -> gpu:0" predictor_gpu
# ... and calibrated from a sweep on the GPU itself (1 and 4 towers sharing gpu:0): predictions
# for 2 and 3 towers, other batch sizes, averaging and async there, saved before they are measured.
predictor_gpu_shared() {
  timeout 300 python3 "$repo/tests/benchmarks/bench_predictor.py" --binary "$tbrun" \
    --data "idx:$repo/samples/fashion-mnist-slice" --gpu-shared --batch 128 --warmup 20 --steps 100 --repeats 3 \
    --out "$out/predictor_gpu_shared" | tee "$out/predictor_gpu_shared.txt"
}
step "predictor: GPU calibration -> gpu:0" predictor_gpu_shared
rm -rf "$out/gpu_sweep" "$out/predictor_gpu" "$out/predictor_gpu_shared"  # folders more than 2 levels deep do not come back

# bf16 against fp32 on one GPU tower as the batch grows (small batches leave the GPU waiting on
# launches, where bf16's rounding kernels cost more than its tensor cores save).
# CIFAR-10 files of random images in /tmp/tb-cifar (the benchmarks' own), made once.
cifar=/tmp/tb-cifar
make_cifar() {
  # Made whole into a temporary folder, then renamed: a set cut short is made again, not taken.
  [ -d $cifar ] && return 0
  rm -rf $cifar.part && mkdir -p $cifar.part && python3 -c "import sys; sys.path.insert(0, '$repo/tests/benchmarks')
from bench_common import make_cifar_dir; make_cifar_dir('$cifar.part')" && mv $cifar.part $cifar
}
# fp32, TF32 (fp32 variables, --tf32 true: tensor-core TF32 math in cuDNN and cuBLAS) and bf16.
precision_batches() {
  local model data b p r
  make_cifar || return 1
  for model in mnist_cnn cifar10_cnn; do
    data="idx:$repo/samples/fashion-mnist-slice"; [ $model = cifar10_cnn ] && data="cifar10:$cifar"
    for b in 128 512; do
      for r in 1 2 3; do  # alternating rounds: cuDNN's algorithm search may pick differently each run
        for p in fp32 tf32 bf16; do
          local math=(--precision $p); [ $p = tf32 ] && math=(--precision fp32 --tf32 true)
          speed "$model batch $b $p round $r" "$tbrun" --model $model --data "$data" --towers gpu:0 --variables gpu:0 \
            --batch $b --steps 200 --validation 0 --quiet "${math[@]}" || return 1
        done
      done
    done
  done 2>&1 | tee "$out/precision_batches.txt"
}
step "fp32, TF32 and bf16 by batch on gpu:0" precision_batches

# The algorithm, data type and math each convolution call ran with (cuDNN's own API log of a
# 12-step run), per stream: the search's trials run on the backend's set-up stream, training and
# evaluation on the tower's (whose steps after the second replay a CUDA graph, without API calls).
cudnn_algorithms() {
  local model data p log=/tmp/tb-cudnn.log
  make_cifar || return 1
  for model in mnist_cnn cifar10_cnn; do
    data="idx:$repo/samples/fashion-mnist-slice"; [ $model = cifar10_cnn ] && data="cifar10:$cifar"
    for p in fp32 bf16; do
      rm -f $log
      CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG=$log "$tbrun" --model $model --data "$data" --towers gpu:0 --variables gpu:0 \
        --batch 128 --steps 12 --validation 0 --quiet --precision $p --run-dir "$(mktemp -d -u /tmp/tb-algo-XXXX)" > /dev/null || return 1
      echo "--- $model $p (calls: stream, function, input type, first dims, math, algorithm)"
      awk '/function cudnnConvolution(Forward|BackwardData|BackwardFilter)\(\) called/ {
             fn = $0; sub(/.*function /, "", fn); sub(/\(\).*/, "", fn); st = ""; dt = ""; dims = ""; math = ""; next }
           fn != "" && /streamId=/ && st == "" { st = $0; sub(/.*streamId=/, "", st); sub(/;.*/, "", st) }
           fn != "" && /dataType:/ && dt == "" { dt = $0; sub(/.*val=/, "", dt); sub(/ .*/, "", dt) }
           fn != "" && /dimA:/ && dims == "" { dims = $0; sub(/.*val=/, "", dims); sub(/;.*/, "", dims) }
           fn != "" && /mathType:/ && math == "" { math = $0; sub(/.*val=/, "", math); sub(/ .*/, "", math) }
           fn != "" && /algo:/ { a = $0; sub(/.*val=/, "", a); sub(/ .*/, "", a); print st, fn, dt, dims, math, a; fn = "" }' \
        $log | sort | uniq -c
      [ -s $log ] || echo "(cuDNN wrote no log)"
    done
  done 2>&1 | tee "$out/cudnn_algorithms.txt"
  local rc=${PIPESTATUS[0]}
  # (An example call, where the legacy API ran one: graph-API engines log cudnnBackendExecute.)
  grep -m1 -A40 "function cudnnConvolutionForward()" $log > "$out/cudnn_call_example.txt" || true
  return "$rc"
}
step "cuDNN's algorithms per convolution" cudnn_algorithms

# Where a GPU step's time goes, kernel by kernel, in fp32 and in bf16 (Nsight Compute's kernel
# durations, two runs differenced so that set-up and the final evaluation cancel).
kernels() {
  local ncu
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  if [ -z "$ncu" ]; then step_note="no ncu here"; return 0; fi
  timeout "${TB_KERNEL_TIMEOUT:-420}" python3 "$repo/tests/benchmarks/gpu_kernel_profile.py" --binary "$tbrun" --ncu "$ncu" \
    --models "${TB_KERNEL_MODELS:-cifar10_cnn}" --cifar-dir $cifar --out-json "$out/kernels.json" \
    | tee "$out/kernels.txt"
}
step "kernels per step (ncu)" kernels

# Issue 33, layout by measurement: fp32 at batch 128 with every convolution held to NHWC, held to
# NCHW (transpositions included), and as each plan's timing chose; three alternating rounds of
# 300 steps, one process each (the choices of "measured" are in cudnn-algorithms.json).
layouts() {
  make_cifar || return 1
  local model data mode r
  for model in mnist_cnn cifar10_cnn; do
    data="idx:$repo/samples/fashion-mnist-slice"; [ $model = cifar10_cnn ] && data="cifar10:$cifar"
    for r in 1 2 3; do
      for mode in nhwc nchw measured; do
        printf '%-12s round %s %-9s' $model $r $mode
        TB_CONV_LAYOUT=$mode timeout --foreground -k 10 120 "$tbrun" --model $model --data "$data" --towers gpu:0 --variables gpu:0 \
          --batch 128 --steps 320 --validation 0 --eval-every 0 --quiet --precision fp32 \
          --run-dir "$(mktemp -d -u /tmp/tb-layout-XXXX)" | tail -1 |
          python3 -c 'import json, sys; print("%10.0f ex/s" % json.loads(sys.stdin.read())["steady_examples_per_sec"])' || return 1
      done
    done
  done 2>&1 | tee "$out/layouts.txt"
  return "${PIPESTATUS[0]}"
}
step "fp32 convolutions: NHWC, NCHW, measured" layouts

# Issue 33, cuDNN's graph API: one tower at batch 128 with every convolution on the legacy calls,
# on graph-API engines wherever the rule leaves one, and as each plan's timing chose per direction
# (the default); fp32 and bf16, two alternating rounds of 320 steps; then which directions the
# measured runs put on graph engines (cudnn-algorithms.json).
# Each timed decision (graph engine against legacy algorithm, and what cuDNN listed) goes to
# conv_api-decisions.txt; a run that fails is said and the others still run.
conv_api() {
  make_cifar || return 1
  local model data p r api status=0
  for model in mnist_cnn cifar10_cnn; do
    data="idx:$repo/samples/fashion-mnist-slice"; [ $model = cifar10_cnn ] && data="cifar10:$cifar"
    for p in fp32 bf16; do
      for r in 1 2; do
        for api in legacy graph measured; do
          printf '%-12s %s round %s %-9s' $model $p $r $api
          echo "--- $model $p round $r TB_CONV_API=$api" >> "$out/conv_api-decisions.txt"
          TB_CONV_API=$api timeout --foreground -k 10 90 "$tbrun" --model $model --data "$data" --towers gpu:0 --variables gpu:0 \
            --batch 128 --steps 320 --validation 0 --eval-every 0 --quiet --precision $p \
            --run-dir "$(mktemp -d -u /tmp/tb-api-XXXX)" 2>> "$out/conv_api-decisions.txt" | tail -1 |
            python3 -c 'import json, sys; print("%10.0f ex/s" % json.loads(sys.stdin.read())["steady_examples_per_sec"])' 2> /dev/null ||
            echo "    failed (conv_api-decisions.txt)"
        done
      done
    done
  done | tee "$out/conv_api.txt"
  grep -q "    failed (" "$out/conv_api.txt" && status=1
  python3 - "$TOWERBENCH_ALGORITHM_CACHE" <<'PY' | tee -a "$out/conv_api.txt"
import json, sys
choices = json.load(open(sys.argv[1]))["choices"]
for key, c in sorted(choices.items()):
    if "failure" in c or " conv n128 " not in key: continue
    runs = []
    for d in ("forward", "backward_data", "backward_filter"):
        g = c[d].get("graph")
        runs.append("%s %s" % (d, "not tried" if g is None else g if isinstance(g, str) else "engine %d" % g["engine"]))
    print(key.split(" | ", 1)[1] + ": " + ", ".join(runs))
PY
  return $status
}
step "convolutions: legacy, graph API, measured" conv_api

# Issue 33, no host round-trips: one tower at batch 128, each step's results read at once (the host
# waits for the stream every step: --report-lag 0) against read 2 steps late (automatic: the host
# waits for no stream within a step); fp32 and bf16, three alternating rounds of 320 steps.
report_lag() {
  make_cifar || return 1
  local model data p r lag
  for model in mnist_cnn cifar10_cnn; do
    data="idx:$repo/samples/fashion-mnist-slice"; [ $model = cifar10_cnn ] && data="cifar10:$cifar"
    for p in fp32 bf16; do
      for r in 1 2 3; do
        for lag in 0 -1; do
          printf '%-12s %s round %s --report-lag %-3s' $model $p $r $lag
          timeout --foreground -k 10 120 "$tbrun" --model $model --data "$data" --towers gpu:0 --variables gpu:0 --batch 128 \
            --steps 320 --validation 0 --eval-every 0 --quiet --precision $p --report-lag $lag \
            --run-dir "$(mktemp -d -u /tmp/tb-lag-XXXX)" | tail -1 |
            python3 -c 'import json, sys; s = json.loads(sys.stdin.read())
print("%10.0f ex/s  (lag %d)" % (s["steady_examples_per_sec"], s["plan"]["report_lag"]))' || return 1
        done
      done
    done
  done 2>&1 | tee "$out/report_lag.txt"
  return "${PIPESTATUS[0]}"
}
step "results read late vs every step" report_lag

# Issue 33, choices kept across runs: from a fresh file, two runs of each precision; the first
# searches (cuDNN's API log shows its Find calls) and keeps its choices, the second finds them and
# calls no Find; the seconds to the end of a 5-step run show what the search costs.
kept_algorithms() {
  make_cifar || return 1
  (
    file=/tmp/tb-kept.json log=/tmp/tb-kept.log status=0
    rm -f $file $file.lock
    for p in fp32 bf16; do
      for n in 1 2; do
        rm -f $log
        t0=$(date +%s.%N)
        TOWERBENCH_ALGORITHM_CACHE=$file CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG=$log timeout --foreground -k 10 120 "$tbrun" --model cifar10_cnn \
          --data "cifar10:$cifar" --towers gpu:0 --variables gpu:0 --batch 128 --steps 5 --validation 0 --quiet \
          --precision $p --run-dir "$(mktemp -d -u /tmp/tb-kept-XXXX)" > /dev/null || exit 1
        secs=$(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $t0}")
        finds=$(cat $log 2>/dev/null | grep -c "function cudnnFindConvolution")
        echo "cifar10_cnn $p, run $n: $finds Find calls, ${secs} s"
        if [ $n = 1 ] && [ "$finds" -eq 0 ]; then echo "  FAILED: the first run searched nothing"; status=1; fi
        if [ $n = 2 ] && [ "$finds" -ne 0 ]; then echo "  FAILED: the second run searched again"; status=1; fi
      done
    done
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(len(d['choices']), 'shapes kept:'); [print(' ', k, v) for k, v in d['choices'].items()]" $file
    exit $status
  ) 2>&1 | tee "$out/kept_algorithms.txt"
  return "${PIPESTATUS[0]}"
}
step "cuDNN choices kept across runs" kept_algorithms

# Issue 33, determinism: two runs of one configuration give bit-equal losses by default (cuDNN's
# deterministic algorithms only, conv_choice.hpp); with --deterministic false (the fastest,
# atomics included) the same pair is measured: whether it differs, and how much faster it is.
determinism() {
  make_cifar || return 1
  (
    status=0
    for model in mnist_cnn cifar10_cnn; do
      data="idx:$repo/samples/fashion-mnist-slice"; [ $model = cifar10_cnn ] && data="cifar10:$cifar"
      for p in fp32 bf16; do
        for mode in true false; do
          extra=(); [ $mode = false ] && extra=(--differ-ok)
          a=$(mktemp -d -u /tmp/tb-det-XXXX); b=$(mktemp -d -u /tmp/tb-det-XXXX)
          for d in "$a" "$b"; do
            "$tbrun" --model $model --data "$data" --towers gpu:0 --variables gpu:0 --batch 128 --steps 300 --validation 0 \
              --quiet --precision $p --deterministic $mode --checkpoint-every 0 --run-dir "$d" > /dev/null || exit 1
          done
          echo -n "$model $p --deterministic $mode: "
          python3 "$repo/tests/gpu/same_losses.py" "$a" "$b" "${extra[@]}" || status=1
        done
      done
    done
    exit $status
  ) 2>&1 | tee "$out/determinism.txt"
  return "${PIPESTATUS[0]}"
}
step "bit-equal losses, two runs" determinism

# Issue 33, the whole product on a GPU: the window built on the development machine, with Qt's
# runtime from Debian's packages (scripts/fetch_window_deps.sh carried both in .deps/window), on
# real GPU runs of 25 s each, charts live: one tower, then two towers sharing gpu:0. Beside each,
# nvidia-smi samples the GPU (the window's NVML readings against it: compare_nvml.py); the window
# is saved at 1366x768 and 1920x1080 while it trains; then TensorBoard's own reader checks the
# events the run wrote against its metrics file.
window() {
  local soak="$repo/.deps/window/bin"
  [ -x "$soak/tb_window_soak" ] || { step_note="not run: no .deps/window/bin (scripts/fetch_window_deps.sh, carried)"; return 0; }
  (
    # The window and the CUDA module built beside it on the development machine, whatever this
    # call built (the device build has no Qt).
    export TB_CUDA_MODULE="$soak/libtb_backend_cuda.so"
    # shellcheck source=scripts/device_window_env.sh
    . "$repo/scripts/device_window_env.sh" || exit 1
    status=0
    # A call brings back 8 files of $out: the pictures go there, the run folders stay behind.
    for towers in gpu:0 'gpu:0*2'; do
      name=${towers//[:]/}; name=${name//\*/x}
      dir=/tmp/tb-window/$name
      rm -rf "$dir" && mkdir -p "$dir/shots"
      printf '{"model": "mnist_cnn", "data": "idx:%s/samples/fashion-mnist-slice", "towers": "%s", "variables": "gpu:0",
  "batch": 128, "epochs": 100000, "validation": 200, "optimizer": "adam", "lr": 0.001, "eval_every": 2000,
  "checkpoint_every": 10000}\n' "$repo" "$towers" > "$dir/config.json"
      nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits -lms 250 > "$dir/nvidia-smi.csv" &
      smi=$!
      echo "--- the window on $towers"
      (cd "$repo" && TOWERBENCH_RUNS_DIR="$dir/runs" OMP_NUM_THREADS=4 timeout --foreground -k 10 150 "$soak/tb_window_soak" "$dir/config.json" 25 \
        "$dir/soak.json" "$dir/shots") || status=1
      kill $smi 2> /dev/null
      for shot in "$dir"/shots/window-*.png; do [ -f "$shot" ] && cp "$shot" "$out/$name-$(basename "$shot")"; done
      run=$(ls -d "$dir"/runs/*/ 2> /dev/null | head -1)
      [ -n "$run" ] || { echo "$towers: no run folder"; status=1; continue; }
      python3 "$repo/tests/gpu/read_events_with_tensorboard.py" "$run" || status=1
      python3 "$repo/tests/gpu/compare_nvml.py" "$run/metrics.jsonl" "$dir/nvidia-smi.csv" || status=1
      tail -3 "$run/log.txt"
      python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); print("summary:", {k: s.get(k) for k in
        ("steps", "examples_per_sec", "steady_examples_per_sec", "test_accuracy", "dropped_reports", "backend")})' "$run/summary.json"
    done
    exit $status
  ) 2>&1 | tee "$out/window.txt"
  return "${PIPESTATUS[0]}"
}
step "the window on the GPU" window

# Issue 33: PyTorch's strongest configurations, measured once per GPU kind, driver and PyTorch and kept
# in docs/gpu-runs/pytorch-baseline/ (tests/benchmarks/pytorch_gpu_baseline.py). This machine's file
# is copied to the output, filled as far as TB_BASELINE_BUDGET seconds allow (default 300), and comes
# back to be committed; the next call goes on where it stopped. Only when --only names it.
baseline_dir="$repo/docs/gpu-runs/pytorch-baseline"
baseline_name() { (cd "$repo/tests/benchmarks" && python3 pytorch_gpu_baseline.py --print-file "$baseline_dir" 2>/dev/null); }
pytorch_baseline() {
  local kept
  kept=$(baseline_name) || { echo "no CUDA PyTorch here"; return 1; }
  [ -f "$kept" ] && cp "$kept" "$out/"
  (cd "$repo/tests/benchmarks" && python3 pytorch_gpu_baseline.py --file "$out/$(basename "$kept")" \
     --budget "${TB_BASELINE_BUDGET:-300}") 2>&1 | tee "$out/pytorch_baseline.txt"
  return "${PIPESTATUS[0]}"
}
[[ ",$only," == *",pytorch_baseline,"* ]] && step "PyTorch's strongest configurations (kept)" pytorch_baseline

if [ $bench -eq 1 ] && wanted bench; then
  bench_args=(--binary "$tbrun" --out-json "$out/bench_gpu.json")
  # PyTorch's side from its kept file where this machine has one (this call's, else the repository's):
  # the device time goes to Towerbench's side, and the goals table compares with PyTorch's best.
  kept=$(baseline_name) && for f in "$out/$(basename "$kept")" "$kept"; do
    [ -f "$f" ] && { bench_args+=(--pytorch-baseline "$f"); break; }
  done
  [ $quick -eq 1 ] && bench_args+=(--steps 40 --repeats 2 --no-compile --nvml-seconds 5)
  # shellcheck disable=SC2206 # extra benchmark options, split on spaces on purpose
  [ -n "${TB_BENCH_ARGS:-}" ] && bench_args+=($TB_BENCH_ARGS)
  bench() {
    timeout --foreground -k 10 "${TB_BENCH_TIMEOUT:-480}" python3 "$repo/tests/benchmarks/bench_gpu_vs_pytorch.py" "${bench_args[@]}" 2>&1 |
      tee "$out/bench_gpu.txt"
    return "${PIPESTATUS[0]}"
  }
  step "GPU benchmark vs PyTorch" bench
fi

finish
exit $failed
