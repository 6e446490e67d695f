#!/usr/bin/env bash
# Regenerates the seed corpora of tests/fuzz/<target>/ from tiny runs of the dqn program (the
# binary files' format follows the code: rerun this when the checkpoint or event format changes).
#   bash tests/fuzz/make_seeds.sh [path/to/dqn]     (default build/dqn)
# The hand-written seeds (config/*.cfg, csv/*) and the crash regressions in
# tests/fuzz/<target>/crashes/ are kept as they are.
set -eu
cd "$(dirname "$0")"
CLI=$(realpath "${1:-../../build/dqn}")
W=$(mktemp -d /tmp/dqn_seeds_XXXXXX)
trap 'rm -rf "$W"' EXIT
TINY=(--steps 48 --learning-starts 8 --batch-size 4 --buffer-size 16 --d 4 --head-hidden 4
      --n-cos 2 --n-tau 2 --n-tau-target 2 --k-tau 2 --grn-blocks 1 --log-interval 24
      --eval-episodes 1 --device cpu)
(cd "$W" && "$CLI" train "${TINY[@]}" --run-dir cp >/dev/null)
(cd "$W" && "$CLI" train "${TINY[@]}" --health off --save-replay true --bottleneck 3 \
   --run-dir off >/dev/null)
(cd "$W" && "$CLI" train "${TINY[@]}" --health detect --fault phi:3:nan --run-dir ev >/dev/null)
(cd "$W" && "$CLI" train "${TINY[@]}" --env acrobot --health guard --fault grad_norm:2:inf \
   --num-envs 2 --run-dir ev2 >/dev/null)
(cd "$W" && "$CLI" train "${TINY[@]}" --env market --synth-rows 64 --synth-assets 2 \
   --synth-noise-features 0 --window 2 --episode-len 8 --folds 1 --train-blocks 1 --epochs 1 \
   --eval-episodes 1 --run-dir mk >/dev/null)

mkdir -p config csv ckpt health_event health_report
cp "$W/cp/config.txt" config/run_config.txt
cp "$W/mk/F0/config.txt" config/market_config.txt
cp "$W/cp/checkpoint.bin" ckpt/cartpole_guard.bin
cp "$W/off/checkpoint.bin" ckpt/cartpole_off_replay.bin
cp "$W/mk/F0/checkpoint.bin" ckpt/market.bin
cp "$W/ev/health_event.bin" health_event/phi_nan.bin
cp "$W/ev2/health_event.bin" health_event/acrobot_grad_norm.bin
for r in cp ev; do
  { cat "$W/$r/health_slots.csv"; printf '=====\n'; cat "$W/$r/health_isv.csv"
    if [ -f "$W/$r/health_event.json" ]; then printf '=====\n'; cat "$W/$r/health_event.json"; fi
  } >"health_report/$r.txt"
done
echo "seeds regenerated from $CLI"
