#!/usr/bin/env bash
# Runs every GPU test of a build ($1, default build): the test_gpu_* binaries, the op registry
# (test_backend_ops, its CUDA part required) and the tests/test_gpu_*.sh scripts (given
# DQN_CLI). On the GPU machine a skip is a failure too, since it means the device was not found;
# except that a test_gpu_multi_* test may skip when
# `nvidia-smi -L` lists fewer GPUs than its skip line says it needs ("needs N GPUs").
# Each test gets GPU_TEST_TIMEOUT seconds (default 300): a hung kernel fails its test, not the run.
# Prints "N passed, N failed, N skipped" last.
set -u
cd "$(dirname "$0")/.."
BUILD=${1:-build}
LOGDIR=$BUILD/test-logs; mkdir -p "$LOGDIR"
export DQN_CLI=$PWD/$BUILD/dqn
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
pass=0; fail=0; skip=0; failed=()
run() {  # name, command...
  local name=$1; shift
  local t0=$SECONDS
  timeout "${GPU_TEST_TIMEOUT:-300}" "$@" > "$LOGDIR/$name.log" 2>&1
  local rc=$?
  local dt=$((SECONDS - t0)) last; last=$(tail -n 1 "$LOGDIR/$name.log")
  if [ $rc -eq 0 ]; then pass=$((pass+1)); echo "PASS  $name (${dt}s)"; return; fi
  if [ $rc -eq 77 ]; then
    local need; need=$(sed -n 's/.*needs \([0-9][0-9]*\) GPUs.*/\1/p' <<<"$last")
    case "$name" in test_gpu_multi_*)
      if [ -n "$need" ] && [ "$GPUS" -lt "$need" ]; then
        skip=$((skip+1)); echo "SKIP  $name: $last"; return
      fi;;
    esac
    fail=$((fail+1)); failed+=("$name"); echo "FAIL  $name skipped on the GPU machine: $last"
  else
    fail=$((fail+1)); failed+=("$name"); echo "FAIL  $name (rc $rc, ${dt}s)"
    tail -n 30 "$LOGDIR/$name.log" | sed 's/^/      /'
  fi
}
for t in "$BUILD"/tests/test_gpu_*; do
  [ -x "$t" ] || continue
  run "$(basename "$t")" "$t"
done
# the op registry: every op on every CUDA variant against the CPU (make test runs it too, where
# it skips the CUDA part without a device; here that skip is a failure)
if [ -x "$BUILD/tests/test_backend_ops" ]; then
  run test_backend_ops env DQN_TEST_NEED_GPU=1 "$BUILD/tests/test_backend_ops"
else
  fail=$((fail+1)); failed+=(test_backend_ops); echo "FAIL  no $BUILD/tests/test_backend_ops"
fi
for t in tests/test_gpu_*.sh; do
  [ -f "$t" ] || continue
  run "$(basename "$t")" bash "$t"
done
[ $((pass + fail + skip)) -eq 0 ] && { echo "FAIL  no test_gpu_* binary under $BUILD/tests"; fail=1; }
echo
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
