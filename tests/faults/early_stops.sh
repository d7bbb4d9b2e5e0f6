#!/usr/bin/env bash
# Early stops: towerbench-run's default experiment sent SIGTERM at a random moment of its first
# seconds, again and again; each must end "stopped by SIGTERM" with exit status 143 (or 0 where
# the signal came before the trainer made anything to stop, which never happens in practice).
# Anything else (a glibc heap check, a crash, a hang) is a failure; its stderr and, where the
# kernel wrote one, its core file are kept in OUT_DIR.
#   tests/faults/early_stops.sh BINARY RUNS [MAX_SECONDS] [OUT_DIR] [-- extra flags]
set -uo pipefail
bin=$(realpath "${1:?usage: early_stops.sh BINARY RUNS [MAX_SECONDS] [OUT_DIR] [-- flags]}")  # each run starts in its own folder
runs=${2:?runs}
max=${3:-2.5}
out=${4:-$(mktemp -d /tmp/tb-early-stops.XXXXXX)}
shift $(( $# >= 4 ? 4 : $# ))
[ "${1:-}" = "--" ] && shift
mkdir -p "$out"
ulimit -c unlimited 2> /dev/null || true
bad=0
for i in $(seq 1 "$runs"); do
  dir="$out/run$i"
  mkdir -p "$dir"
  delay=$(awk -v s="$RANDOM" -v m="$max" 'BEGIN { srand(s); printf "%.2f", 0.05 + rand() * (m - 0.05) }')
  (cd "$dir" && exec "$bin" --run-dir "$dir/folder" --quiet "$@" > stdout 2> stderr) &
  pid=$!
  sleep "$delay"
  kill -TERM $pid 2> /dev/null
  for _ in $(seq 1 300); do kill -0 $pid 2> /dev/null || break; sleep 0.1; done
  if kill -0 $pid 2> /dev/null; then
    kill -KILL $pid; rc=hang
  else
    wait $pid; rc=$?
  fi
  if [ "$rc" = 143 ] && grep -q 'stopped by SIGTERM' "$dir/stderr"; then
    rm -rf "$dir"
    echo "run $i: SIGTERM after ${delay} s: stopped (143)"
  else
    bad=$((bad + 1))
    echo "run $i: SIGTERM after ${delay} s: exit $rc: $(tail -c 300 "$dir/stderr" | tr '\n' ' ')"
  fi
done
echo "$bad of $runs early stops went wrong (kept in $out)"
[ "$bad" = 0 ]
