#!/usr/bin/env bash
# The screenshots of the real window in README.md and docs/: the GUI screen suite (tst_ui_screen) run on the xcb
# platform under Xvfb at 1366x768 and 1920x1080, the pictures it saves (a fresh start, an
# asynchronous run with a straggler, an averaging run, a 1f1b pipeline of 2 stages, two runs compared, the predictions after a
# run, the scaling lab's sweeps of towers and of a pipeline and its what-if side, lessons 2, 5, 6 and 7 (5 and 7 their whole runs:
# TB_FULL_LESSONS=1), the model view, plans of 2 processes x 4 towers sync and async) copied to docs/. Installs Xvfb if missing. The whole lessons take
# minutes each, longer than Qt Test's 5-minute watchdog on a busy 2-core machine, hence QTEST_FUNCTION_TIMEOUT.
# Usage: scripts/screenshots.sh [BUILD_DIR]   (default: build, already built)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
TB_SETUP_EXTRA="xvfb xauth" "$root/scripts/setup.sh"
for size in 1366x768 1920x1080; do
  xvfb-run -a -s "-screen 0 ${size}x24" env QT_QPA_PLATFORM=xcb TOWERBENCH_RUNS_DIR="$build/tests/runs" TB_FULL_LESSONS=1 \
    QTEST_FUNCTION_TIMEOUT=1800000 \
    "$build/tests/tst_ui_screen" -o -,txt \
    | grep -E "^(FAIL|Totals)" || true
  for view in fresh async averaging pipeline compare predictions predictions-dropped augment sweep sweep-pipeline what-if lesson-2 lesson-5 lesson-6 lesson-7 model processes processes-async; do
    cp "$build/tests/towerbench-$size-$view.png" "$root/docs/window-$size-$view.png"
  done
done
echo "screenshots: docs/window-{1366x768,1920x1080}-{fresh,async,averaging,pipeline,compare,predictions,predictions-dropped,augment,sweep,sweep-pipeline,what-if,lesson-2,lesson-5,lesson-6,lesson-7,model,processes,processes-async}.png"
