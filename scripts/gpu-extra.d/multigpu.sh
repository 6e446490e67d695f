#!/usr/bin/env bash
# Data-parallel learner: updates/s and samples/s on every visible GPU count up to 8 (seed model,
# B = 4096 per GPU); on a one-GPU machine, the single-rank NCCL path alone.
set -u
BUILD=${1:-build-gpu}
[ -x "$BUILD/bench/bench_multi_gpu" ] || { echo "no $BUILD/bench/bench_multi_gpu"; exit 1; }
"$BUILD/bench/bench_multi_gpu" 8 4096 200
