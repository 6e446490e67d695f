#!/usr/bin/env bash
# CartPole solved on the GPU: wall clock to a greedy 475 for seeds 1-3, host loop against the
# device loop (the env step in backend memory), in the same run (bench_solve).
set -u
BUILD=${1:-build-gpu}
[ -x "$BUILD/bench/bench_solve" ] || { echo "no $BUILD/bench/bench_solve"; exit 1; }
rc=0
for loop in host device; do
  timeout 240 "$BUILD/bench/bench_solve" 3 cuda $loop || rc=1
done
exit $rc
