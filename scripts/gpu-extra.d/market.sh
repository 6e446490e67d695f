#!/usr/bin/env bash
# Market environment: wall clock per walk-forward fold on the GPU (bench_market fold cuda), the
# env stepped by the host loop and by the device loop, in the same run.
set -u
BUILD=${1:-build-gpu}
[ -x "$BUILD/bench/bench_market" ] || { echo "no $BUILD/bench/bench_market"; exit 1; }
rc=0
for loop in host device; do "$BUILD/bench/bench_market" fold cuda $loop || rc=1; done
exit $rc
