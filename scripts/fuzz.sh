#!/usr/bin/env bash
# Runs every libFuzzer target of the fuzz build for SECONDS each (default 20, as CI does) and
# prints one line per target: executions, coverage (edges), corpus size, crashes.
#   scripts/fuzz.sh BUILD_DIR [SECONDS] [TARGET...]
# Each target starts from its seed corpus (tests/fuzz/corpus/<target>, kept in the repository)
# and the crashes found before (tests/fuzz/regressions/<target>); what it adds goes to a working
# corpus in BUILD_DIR/corpus, crashing inputs to BUILD_DIR/crashes. Exit status 1 if any crashed.
# A libFuzzer process uses one core, so FUZZ_JOBS targets (default: the cores) run at once, each
# still for SECONDS: on CI's two cores the smoke runs take half the wall time for the same work.
set -uo pipefail
build=${1:?usage: scripts/fuzz.sh BUILD_DIR [SECONDS] [TARGET...]}
seconds=${2:-20}
shift $(( $# >= 2 ? 2 : 1 ))
src=$(cd "$(dirname "$0")/.." && pwd)
jobs=${FUZZ_JOBS:-$(nproc)}
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=($(cd "$build/tests/fuzz" && ls fuzz_* 2>/dev/null | grep -v '\.' | sort))
[ ${#targets[@]} -eq 0 ] && { echo "fuzz: no targets in $build/tests/fuzz (build them: make fuzz)"; exit 2; }
mkdir -p "$build/crashes" "$build/fuzz-logs"

# Runs target $1; its exit status goes to fuzz-logs/$1.rc (read after every run has ended).
fuzz_one() {
  local t=$1 work="$build/corpus/$1" log="$build/fuzz-logs/$1.log"
  mkdir -p "$work" "$src/tests/fuzz/regressions/$t"
  rm -f "$build/crashes/$t-"*
  # Limits: 10 s per input (a hang), 512 MiB per allocation and 2 GiB resident (inputs are at
  # most a few hundred KiB: anything near these is an allocation sized from a corrupt header).
  "$build/tests/fuzz/$t" "$work" "$src/tests/fuzz/corpus/$t" "$src/tests/fuzz/regressions/$t" \
    -max_total_time="$seconds" -timeout=10 -malloc_limit_mb=512 -rss_limit_mb=2048 \
    -dict="$src/tests/fuzz/tb.dict" -artifact_prefix="$build/crashes/$t-" -print_final_stats=1 \
    -close_fd_mask=3 > "$log" 2>&1
  echo $? > "$build/fuzz-logs/$t.rc"
}

for t in "${targets[@]}"; do
  rm -f "$build/fuzz-logs/$t.rc"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  fuzz_one "$t" &
done
wait

failed=0
printf '%-20s %10s %9s %7s %8s %7s\n' target seconds execs cov corpus crashes
for t in "${targets[@]}"; do
  log="$build/fuzz-logs/$t.log"
  rc=$(cat "$build/fuzz-logs/$t.rc" 2>/dev/null || echo '?')
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
  corpus=$(ls "$build/corpus/$t" | wc -l)
  crashes=$(ls "$build/crashes" | grep -c "^$t-" || true)
  printf '%-20s %10s %9s %7s %8s %7s\n' "$t" "$seconds" "${execs:-?}" "${cov:-?}" "$corpus" "$crashes"
  if [ "$rc" != 0 ] || [ "$crashes" -ne 0 ]; then
    failed=1
    echo "  $t: exit $rc; see $log" && grep -m3 -E 'ERROR|SUMMARY|terminate|what\(\)' "$log" | sed 's/^/  /'
  fi
done
exit $failed
