#!/usr/bin/env bash
# The window's soak (issue 36): tb_window_soak on one long run of two towers, charts live, in a
# real X server (Xvfb at 1366x768) where xvfb-run exists, else Qt's offscreen platform.
#   tests/soak/window_soak.sh BUILD_DIR SECONDS [CONFIG.json] [OUT_DIR]
# Default run: tests/soak/window_soak.json (mnist_cnn, cpu:0,cpu:1, batch 64, an evaluation every
# 2,000 steps and a checkpoint every 4,000). Writes OUT_DIR/soak.json (samples every 10 s, each
# minute's GUI lateness) and prints the figures; the exit status is tb_window_soak's.
set -euo pipefail
build=${1:?usage: window_soak.sh BUILD_DIR SECONDS [CONFIG.json] [OUT_DIR]}
seconds=${2:?seconds}
config=${3:-$(dirname "$0")/window_soak.json}
out=${4:-$(mktemp -d /tmp/tb-window-soak.XXXXXX)}
mkdir -p "$out/runs"
export TOWERBENCH_RUNS_DIR="$out/runs" OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
run=()
if command -v xvfb-run > /dev/null; then
  run=(xvfb-run -a -s "-screen 0 1366x768x24")
else
  export QT_QPA_PLATFORM=offscreen
fi
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(getconf _NPROCESSORS_ONLN) cores; soak of ${seconds} s into $out"
"${run[@]}" "$build/tests/tb_window_soak" "$config" "$seconds" "$out/soak.json"
