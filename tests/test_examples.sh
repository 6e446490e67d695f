#!/usr/bin/env bash
# The C example env (examples/gridwalk.c, public API only) trains: its greedy return after
# training is near the optimum (about 0.7) and far above the untrained policy's.
set -u
cd "$(dirname "$0")/.."
BUILD=${DQN_BUILD:-build}
exe=$BUILD/examples/gridwalk
[ -x "$exe" ] || { echo "missing $exe (make examples)"; exit 1; }
out=$("$exe" 20000 3) || { echo "$out"; echo "gridwalk failed"; exit 1; }
echo "$out"
line=$(echo "$out" | grep 'greedy return over 100 episodes')
before=$(echo "$line" | sed -E 's/.*: (-?[0-9.]+) before.*/\1/')
after=$(echo "$line" | sed -E 's/.* (-?[0-9.]+) after.*/\1/')
awk -v b="$before" -v a="$after" 'BEGIN { exit !(a >= 0.45 && a > b + 2) }' ||
  { echo "gridwalk did not learn: before $before, after $after"; exit 1; }
echo "gridwalk learned: $before -> $after"
