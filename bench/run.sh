#!/usr/bin/env bash
# CPU benchmarks of issue 2, in one run: update throughput (OpenBLAS and built-in GEMM), env
# steps/s against Gymnasium, wall clock to solve CartPole; of issue 5: market env steps/s against
# its numpy peer (checked step by step first), wall clock per walk-forward fold. A table last.
# usage: bench/run.sh [build-dir]   (figures go into docs/BENCHMARKS.md by hand, with the date)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
scripts/setup-venv.sh
make -s BUILD="$B" all >/dev/null
make -s BLAS=builtin BUILD="$B-builtin" "$B-builtin/bench/bench_update" >/dev/null
log=$(mktemp)
{
  "$B/bench/bench_update" cpu cartpole 32 256
  "$B-builtin/bench/bench_update" cpu cartpole 32 256
  ours=$("$B/bench/bench_env" 1 | tee /dev/stderr | sed -n 's/^cartpole_env_steps_per_s=//p')
  .venv/bin/python bench/bench_env_gym.py --ours "$ours"
  "$B/bench/bench_solve" 3
  mdir=$(mktemp -d)
  mours=$("$B/bench/bench_market" env | tee /dev/stderr | sed -n 's/^market_env_steps_per_s=//p')
  "$B/bench/bench_market" dump "$mdir" >/dev/null
  .venv/bin/python bench/bench_market_py.py "$mdir" --ours "$mours"
  rm -rf "$mdir"
  "$B/bench/bench_market" fold cpu
} 2>&1 | tee "$log"
echo
echo "== summary ($(date -u +%F), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
grep -E '^update |ratio|x Gym|solve cartpole|^market_|^check:' "$log" || true
