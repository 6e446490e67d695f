#!/usr/bin/env bash
# The one script for the GPU machine: build for sm_90, run the GPU tests, compute-sanitizer
# memcheck and racecheck on test_gpu_ops (its small shapes), any bench_gpu_* benchmarks. Logs go
# to $OUT when set (else build-gpu/check-logs); a short table comes last. Exits non-zero if any
# step failed.
set -u
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/cuda/bin
BUILD=build-gpu
LOG=${OUT:-$BUILD/check-logs}; mkdir -p "$LOG"
SAN=/usr/local/cuda/bin/compute-sanitizer
SAN_TIMEOUT=${SAN_TIMEOUT:-150}   # seconds for each sanitizer run
rows=(); bad=0
row() { rows+=("$(printf '%-28s %-6s %s' "$1" "$2" "$3")"); [ "$2" = ok ] || [ "$2" = skip ] || bad=1; }

{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv 2>&1 || true
  nvcc --version 2>&1 | tail -n 2; } > "$LOG/device.txt"
head -n 2 "$LOG/device.txt"

t0=$SECONDS
# the full build needs the CLI; without it (branches in progress) build the GPU pieces alone
if make -j16 BUILD=$BUILD CUDA=1 CUDA_ARCH=sm_90 > "$LOG/build.log" 2>&1; then
  row build ok "full build, $((SECONDS - t0))s"
  make --no-print-directory test-gpu BUILD=$BUILD CUDA=1 CUDA_ARCH=sm_90 > "$LOG/test-gpu.log" 2>&1
  rc=$?
else
  targets=$(ls tests/test_gpu_*.c bench/bench_gpu_*.c 2>/dev/null | sed -e "s|^tests/\(.*\)\.c|$BUILD/tests/\1|" -e "s|^bench/\(.*\)\.c|$BUILD/bench/\1|")
  if make -j16 BUILD=$BUILD CUDA=1 CUDA_ARCH=sm_90 $BUILD/libdqn.a $targets >> "$LOG/build.log" 2>&1; then
    row build ok "GPU targets only (full build failed: see build.log), $((SECONDS - t0))s"
  else
    row build FAIL "see build.log"; tail -n 40 "$LOG/build.log"
  fi
  bash tests/run_gpu_tests.sh $BUILD > "$LOG/test-gpu.log" 2>&1
  rc=$?
fi
cat "$LOG/test-gpu.log"
cp $BUILD/test-logs/test_gpu_*.log "$LOG/" 2>/dev/null
row test-gpu "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "$(tail -n 1 "$LOG/test-gpu.log")"

if [ -x "$SAN" ] && [ -x $BUILD/tests/test_gpu_ops ]; then
  # memcheck over every shape; racecheck and initcheck (slower per kernel) over the small ones
  for run in memcheck:full racecheck:small initcheck:small; do
    tool=${run%%:*}; shapes=${run##*:}
    t0=$SECONDS
    if [ "$shapes" = small ]; then export DQN_GPU_TEST_SMALL=1; else unset DQN_GPU_TEST_SMALL; fi
    timeout "$SAN_TIMEOUT" "$SAN" --tool $tool --error-exitcode 3 \
        $BUILD/tests/test_gpu_ops > "$LOG/sanitizer-$tool.log" 2>&1
    rc=$?
    unset DQN_GPU_TEST_SMALL
    row "compute-sanitizer $tool" "$([ $rc -eq 0 ] && echo ok || echo FAIL)" \
        "$shapes shapes, rc $rc, $((SECONDS - t0))s: $(grep -m1 'SUMMARY' "$LOG/sanitizer-$tool.log")"
  done
else
  row compute-sanitizer skip "not at $SAN or no test binary"
fi

# benchmarks: ours (bench_update through the model) and, in the same run, the PyTorch peer
BS="32 256 1024 4096"
: > "$LOG/bench.txt"
if [ -x $BUILD/bench/bench_update ]; then
  for math in fp32 tf32; do
    dev=cuda; [ $math = tf32 ] && dev=cuda:tf32
    for model in cartpole seed; do
      $BUILD/bench/bench_update $dev $model $BS >> "$LOG/bench.txt" 2>&1 || row "bench $model $math" FAIL "see bench.txt"
    done
  done
  row bench_update ok "$(grep -c '^update' "$LOG/bench.txt") configs"
fi
if [ -f bench/torch_update.py ] && python3 -c 'import torch' 2>/dev/null; then
  for math in fp32 tf32; do
    for model in cartpole seed; do
      timeout 240 python3 bench/torch_update.py --model $model --batch ${BS// /,} --math $math \
          >> "$LOG/bench.txt" 2>&1 || row "torch $model $math" FAIL "see bench.txt"
    done
  done
  row torch_update ok "$(grep -c '^torch' "$LOG/bench.txt") configs"
fi
[ -x $BUILD/bench/bench_market ] && { $BUILD/bench/bench_market fold cuda >> "$LOG/bench.txt" 2>&1 && row "bench_market fold cuda" ok "$(grep -m1 '^market_fold' "$LOG/bench.txt")" || row "bench_market fold cuda" FAIL "see bench.txt"; }
grep -E '^(update|torch) ' "$LOG/bench.txt" || true

echo
echo "== gpu-check summary (logs: $LOG) =="
printf '%s\n' "${rows[@]}"
exit $bad
