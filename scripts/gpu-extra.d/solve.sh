#!/usr/bin/env bash
# CartPole solved on the GPU: wall clock to a greedy 475 (evaluations every 2,500 env steps) for
# seeds 1-3, the preset through the host loop and the device loop, and examples/cartpole-gpu.conf
# through both, in the same run (bench_solve).
set -u
BUILD=${1:-build-gpu}
[ -x "$BUILD/bench/bench_solve" ] || { echo "no $BUILD/bench/bench_solve"; exit 1; }
rc=0
for conf in "" config=examples/cartpole-gpu.conf; do
  for loop in host device; do
    timeout 240 "$BUILD/bench/bench_solve" 3 cuda $loop every=2500 $conf || rc=1
  done
done
exit $rc
