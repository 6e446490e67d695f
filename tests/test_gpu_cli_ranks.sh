#!/usr/bin/env bash
# dqn train's data-parallel paths on one GPU (docs/multi-gpu.md): --ranks 1 is the plain run; a
# rank in a world of one (DQN_RANK=0 DQN_WORLD_SIZE=1) trains over NCCL with its id from a file
# (written by rank 0, removed once every rank joined) or from NCCL_COMM_ID, and writes the run
# directory; a stale id file and a missing one are refused. Exits 77 without a GPU.
set -u
cd "$(dirname "$0")/.."
. tests/cli_lib.sh test_gpu_cli_ranks
need_gpus 1
TINY=(--steps 3000 --learning-starts 500 --log-interval 1000 --eval-episodes 3 --device cuda)
run_written() {  # DIR: what a finished run writes
  [ -s "$1/config.txt" ] && [ -s "$1/metrics.csv" ] && [ -s "$1/checkpoint.bin" ] \
    && [ -s "$1/eval.json" ] || fail "$1 lacks files: $(ls "$1")"
}

expect_ok train "${TINY[@]}" --ranks 1 --run-dir r1
run_written r1
grep -qx 'ranks = 1' r1/config.txt || fail "r1/config.txt: ranks"
ok "--ranks 1: $(grep '^eval' out.txt)"

with_env DQN_RANK=0 DQN_WORLD_SIZE=1 DQN_NCCL_ID_FILE=$W/id -- \
  expect_ok train "${TINY[@]}" --ranks 1 --run-dir r2
run_written r2
[ ! -e id ] || fail "rank 0 left the id file behind"
grep -q 'backend cuda' out.txt || fail "no header from rank 0: $(cat out.txt)"
ok "a rank in a world of one, id through DQN_NCCL_ID_FILE: $(grep '^eval' out.txt)"

port=$((20000 + RANDOM % 20000))
with_env DQN_RANK=0 DQN_WORLD_SIZE=1 NCCL_COMM_ID=127.0.0.1:$port -- \
  expect_ok train "${TINY[@]}" --ranks 1 --run-dir r3
run_written r3
ok "a rank in a world of one, id from NCCL_COMM_ID=127.0.0.1:$port"

echo stale >"$W/id"
with_env DQN_RANK=0 DQN_WORLD_SIZE=1 DQN_NCCL_ID_FILE=$W/id -- \
  expect_bad 'exists' train "${TINY[@]}" --ranks 1 --run-dir rbad
rm -f "$W/id"
with_env DQN_RANK=1 DQN_WORLD_SIZE=2 DQN_LOCAL_DEVICE=0 DQN_NCCL_ID_FILE=$W/none \
  DQN_NCCL_TIMEOUT_S=2 -- expect_bad 'did not appear within 2 s' train "${TINY[@]}" --ranks 2 \
  --run-dir rbad

echo "test_gpu_cli_ranks: all $n checks passed"
