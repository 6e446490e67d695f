#!/usr/bin/env bash
# dqn train --ranks and the rank environment (docs/multi-gpu.md), without a GPU: every bad value,
# bad combination or missing piece exits 2 with one line naming it and writes nothing (no run
# directory, no id file). The multi-GPU runs themselves: tests/test_gpu_*ranks*.sh.
set -u
cd "$(dirname "$0")/.."
. tests/cli_lib.sh test_ranks_cli

expect_ok train --help
grep -q '^  ranks ' out.txt || fail "train --help lacks the ranks key"
ok "train --help lists ranks"

# ---- the launcher's config
expect_bad '--ranks' train --ranks 0 --run-dir rbad
expect_bad '--ranks' train --ranks 1025 --run-dir rbad
expect_bad '--ranks' train --ranks two --run-dir rbad
expect_bad 'ranks (2) > 1 needs device cuda' train --ranks 2 --device cpu --run-dir rbad
printf 'device = cpu\nranks = 4\n' >cpu4.txt
expect_bad 'ranks (4) > 1 needs device cuda' train --config cpu4.txt --run-dir rbad
# more ranks than any host here has GPUs (the bound is 1024)
expect_bad '--ranks 1024: only' train --ranks 1024 --device cuda --run-dir rbad
expect_bad '--ranks 1024: only' train --ranks 1024 --run-dir rbad
expect_bad 'each rank is its own process' bench --ranks 2

# ---- a rank's environment
R=(train --run-dir rbad)
E=with_env
$E DQN_RANK=0 -- expect_bad 'DQN_WORLD_SIZE is not' "${R[@]}"
$E DQN_RANK=0 DQN_WORLD_SIZE=0 -- expect_bad 'DQN_WORLD_SIZE' "${R[@]}"
$E DQN_RANK=0 DQN_WORLD_SIZE=3 -- \
  expect_bad 'DQN_WORLD_SIZE (3) differs from ranks (2)' "${R[@]}" --ranks 2
$E DQN_RANK=x DQN_WORLD_SIZE=2 -- expect_bad 'DQN_RANK: "x"' "${R[@]}" --ranks 2
$E DQN_RANK=2 DQN_WORLD_SIZE=2 -- expect_bad 'DQN_RANK: "2"' "${R[@]}" --ranks 2
$E DQN_RANK=0 DQN_WORLD_SIZE=1 -- expect_bad 'device is cpu' "${R[@]}" --device cpu
$E DQN_RANK=0 DQN_WORLD_SIZE=1 DQN_LOCAL_DEVICE=gpu0 -- \
  expect_bad 'DQN_LOCAL_DEVICE: "gpu0"' "${R[@]}"
$E DQN_RANK=0 DQN_WORLD_SIZE=1 DQN_NCCL_TIMEOUT_S=-1 DQN_NCCL_ID_FILE=idf -- \
  expect_bad 'DQN_NCCL_TIMEOUT_S' "${R[@]}"
$E DQN_RANK=0 DQN_WORLD_SIZE=1 DQN_NCCL_ID=abc -- expect_bad 'DQN_NCCL_ID: 3 characters' "${R[@]}"
$E DQN_RANK=1 DQN_WORLD_SIZE=2 -- expect_bad 'DQN_NCCL_ID_FILE' "${R[@]}" --ranks 2
$E DQN_RANK=0 DQN_WORLD_SIZE=1 DQN_LOCAL_DEVICE=1023 DQN_NCCL_ID_FILE=idf -- \
  expect_bad 'not a visible CUDA device' "${R[@]}"
[ ! -e idf ] || fail "an id file was written"
ok "no id file written"

echo "test_ranks_cli: all $n checks passed"
