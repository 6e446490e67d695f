#!/usr/bin/env bash
# dqn train --ranks 2 on one host (docs/multi-gpu.md): the launcher starts one rank per GPU and
# rank 0 alone writes the run directory; its checkpoint evaluates anywhere and is refused by
# --resume; Ctrl-C stops every rank at the same step with a checkpoint (exit 130); a rank that
# dies stops the others (no hang), and so does a killed launcher. Exits 77 ("needs 2 GPUs") when
# nvidia-smi lists fewer.
set -u
cd "$(dirname "$0")/.."
. tests/cli_lib.sh test_gpu_multi_launch
need_gpus 2
RUN=(train --device cuda --ranks 2 --learning-starts 500 --log-interval 500 --eval-episodes 3)
pids_of() { sed -n 's/.*(pids \([0-9]*\)\.\.\([0-9]*\)).*/\1 \2/p' "$1"; }
wait_for() {  # SECONDS COMMAND...: poll until COMMAND succeeds
  local end=$((SECONDS + $1)); shift
  until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.2; done
}
gone() { ! kill -0 "$1" 2>/dev/null; }
rows_in() { [ -s "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ]; }

# ---- a whole run
expect_ok "${RUN[@]}" --steps 4000 --checkpoint-interval 2000 --run-dir r1
grep -q 'launched 2 ranks' out.txt && grep -q 'backend cuda' out.txt || fail "output: $(cat out.txt)"
[ "$(ls r1 | grep -v '^events.out' | tr '\n' ' ')" = "checkpoint.bin config.txt eval.json metrics.csv metrics.jsonl " ] \
  || fail "r1 holds: $(ls r1)"
grep -qx 'ranks = 2' r1/config.txt || fail "r1/config.txt: ranks"
[ "$(tail -n 1 r1/metrics.csv | cut -d, -f1)" = 4000 ] || fail "metrics: $(tail -n 2 r1/metrics.csv)"
ok "--ranks 2: $(grep '^eval' out.txt)"
expect_ok eval --checkpoint r1/checkpoint.bin --episodes 3 --device cpu
ok "the checkpoint evaluates on the cpu: $(grep '^eval' out.txt)"
expect_bad 'data-parallel run (ranks = 2)' train --resume r1/checkpoint.bin

# ---- Ctrl-C: the ranks agree on the step, rank 0 saves
"$CLI" "${RUN[@]}" --steps 10000000 --run-dir r2 >out2.txt 2>err2.txt &
pid=$!
wait_for 180 rows_in r2/metrics.csv 3 || fail "no metrics from r2: $(cat err2.txt)"
kill -INT $pid
wait_for 120 gone $pid || fail "Ctrl-C: the launcher still runs after 120 s"
wait $pid
rc=$?
[ $rc -eq 130 ] || fail "Ctrl-C: exit $rc, expected 130; $(cat err2.txt)"
[ -s r2/checkpoint.bin ] && [ ! -e r2/eval.json ] || fail "Ctrl-C: checkpoint.bin missing or eval.json written"
for p in $(pids_of out2.txt); do gone "$p" || fail "rank pid $p still runs"; done
ok "Ctrl-C: exit 130 at env step $(tail -n 1 r2/metrics.csv | cut -d, -f1), checkpoint saved"

# ---- a rank dies: the launcher stops the other and fails
"$CLI" "${RUN[@]}" --steps 10000000 --run-dir r3 >out3.txt 2>err3.txt &
pid=$!
wait_for 180 rows_in r3/metrics.csv 2 || fail "no metrics from r3: $(cat err3.txt)"
set -- $(pids_of out3.txt)
kill -KILL "$2"
wait_for 60 gone $pid || fail "rank 1 killed: the launcher still runs after 60 s"
wait $pid
rc=$?
[ $rc -ne 0 ] && grep -q 'rank 1 .* died of signal 9' err3.txt || fail "rank 1 killed: exit $rc; $(cat err3.txt)"
gone "$1" || fail "rank 0 (pid $1) still runs"
ok "rank 1 killed: the launcher stopped rank 0 and exits $rc"

# ---- the launcher is killed: no rank outlives it
"$CLI" "${RUN[@]}" --steps 10000000 --run-dir r4 >out4.txt 2>err4.txt &
pid=$!
wait_for 180 rows_in r4/metrics.csv 2 || fail "no metrics from r4: $(cat err4.txt)"
set -- $(pids_of out4.txt)
kill -KILL $pid
wait $pid 2>/dev/null
wait_for 30 gone "$1" && wait_for 30 gone "$2" || fail "ranks $1 $2 outlived the launcher"
ok "launcher killed: both ranks gone"

echo "test_gpu_multi_launch: all $n checks passed"
