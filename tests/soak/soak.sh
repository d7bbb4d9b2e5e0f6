#!/usr/bin/env bash
# Soak: one long training run of towerbench-run, its resident memory (VmRSS) sampled every
# 10 s; prints the samples and the growth after the first epoch (issue 13: under 1%).
#   tests/soak/soak.sh BINARY SECONDS [OUT_DIR] [-- extra flags]
# Default run: mnist_cnn on Fashion-MNIST, one tower, evaluation every 500 steps and a checkpoint
# every 1000 (so evaluation and checkpointing are soaked too), stopped by SIGTERM at SECONDS.
set -euo pipefail
bin=${1:?usage: soak.sh BINARY SECONDS [OUT_DIR] [-- flags]}
seconds=${2:?seconds}
out=${3:-$(mktemp -d /tmp/tb-soak.XXXXXX)}
shift $(( $# >= 3 ? 3 : 2 ))
[ "${1:-}" = "--" ] && shift
mkdir -p "$out"
"$bin" --model mnist_cnn --data fashion-mnist --epochs 1000 --eval-every 500 --checkpoint-every 1000 \
  --threads 1 --run-dir "$out/run" --metrics "$out/metrics.jsonl" --quiet "$@" > "$out/stdout" 2> "$out/stderr" &
pid=$!
start=$(date +%s)
echo "t_s rss_kib step" > "$out/rss.txt"
while kill -0 $pid 2> /dev/null && [ $(( $(date +%s) - start )) -lt "$seconds" ]; do
  rss=$(awk '/VmRSS/ {print $2}' /proc/$pid/status 2> /dev/null || echo 0)
  step=$(tail -c 4000 "$out/metrics.jsonl" 2> /dev/null | grep -o '"step":[0-9]*' | tail -1 | cut -d: -f2 || true)
  echo "$(( $(date +%s) - start )) $rss ${step:-0}" >> "$out/rss.txt"
  sleep 10
done
kill -TERM $pid 2> /dev/null || true
wait $pid && rc=0 || rc=$?
# Steps per epoch: 55,000 training images (5,000 held out) / batch 128.
python3 - "$out" "$rc" <<'PY'
import sys
out, rc = sys.argv[1], int(sys.argv[2])
rows = [tuple(map(int, l.split())) for l in open(out + "/rss.txt").read().split("\n")[1:] if l.strip()]
per_epoch = 55000 // 128
after = [r for r in rows if r[2] >= per_epoch]
print("samples %d over %d s, exit status %d (143: stopped by SIGTERM as asked)" % (len(rows), rows[-1][0], rc))
print("steps %d (%.1f epochs)" % (rows[-1][2], rows[-1][2] / per_epoch))
print("RSS: start %.1f MiB, max %.1f MiB" % (rows[0][1] / 1024, max(r[1] for r in rows) / 1024))
if after:
    first, last, peak = after[0][1], after[-1][1], max(r[1] for r in after)
    print("after the first epoch (t=%d s): %.1f MiB -> last %.1f MiB, peak %.1f MiB: growth %+.2f%% (peak %+.2f%%)" % (
        after[0][0], first / 1024, last / 1024, peak / 1024, 100 * (last - first) / first, 100 * (peak - first) / first))
PY
