#!/usr/bin/env bash
# Market environment: wall clock per walk-forward fold on the GPU (bench_market fold cuda).
set -u
BUILD=${1:-build-gpu}
[ -x "$BUILD/bench/bench_market" ] || { echo "no $BUILD/bench/bench_market"; exit 1; }
"$BUILD/bench/bench_market" fold cuda
