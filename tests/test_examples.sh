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

# examples/cartpole-gpu.conf resolves over the cartpole preset and trains (here on the cpu)
dqn=$BUILD/dqn
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$dqn" train --config examples/cartpole-gpu.conf --device cpu --steps 3000 --run-dir "$tmp/run" \
  > "$tmp/log" 2>&1 || { cat "$tmp/log"; echo "cartpole-gpu.conf: dqn train failed"; exit 1; }
for kv in 'num_envs = 8' 'batch_size = 256' 'updates_per_round = 32' 'lr = 0.004' \
          'tau_target = 0.04' 'n_tau = 8'; do
  grep -qx "$kv" "$tmp/run/config.txt" || { echo "cartpole-gpu.conf: no '$kv' in config.txt"; exit 1; }
done
echo "cartpole-gpu.conf: trained 3000 steps on the cpu"
