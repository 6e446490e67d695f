#!/usr/bin/env bash
# Crash safety of checkpoints (docs/reliability.md). A run that dies at any step of a checkpoint
# write (DQN_CKPT_FAULT=k: SIGKILL right after the writer's k-th open/write/fsync/close/rename/
# directory sync, src/core/ckpt_file.c), or is killed with SIGKILL at a random moment, leaves a
# checkpoint.bin that loads and is the previous complete checkpoint or the new one (never torn,
# never older), and `dqn train --resume` from it ends bit for bit like the uninterrupted run: the
# same final checkpoint.bin, byte for byte, and the same evaluation returns. The writer's trace
# (DQN_CKPT_TRACE) must show, for every checkpoint, the data fsynced before the rename and the
# directory fsynced after it.
# Trials: 20 by default (a spread of fault steps, and random kills); DQN_CRASH_FULL=1 (make
# test-crash) kills at every step of every checkpoint write of the run, and 60 times at random.
# DQN_CRASH_SEED seeds the random kill delays (default 1).
set -u
cd "$(dirname "$0")/.."
. tests/cli_lib.sh test_crash
FULL=${DQN_CRASH_FULL:-0}
RANDOM=${DQN_CRASH_SEED:-1}
unset DQN_CKPT_FAULT DQN_CKPT_TRACE

# a tiny model that checkpoints every 100 env steps (replay included, so resume is exact) on the
# CartPole preset's schedule (128 updates every 256 steps), so most kills resume between rounds
TINY=(--learning-starts 64 --batch-size 16 --log-interval 100 --eval-episodes 2
      --checkpoint-interval 100 --save-replay true --buffer-size 1000 --d 16 --head-hidden 16
      --n-cos 8 --device cpu)
INTERVAL=100
trials=0 torn=0 lost=0 exact=0 none=0

# ---- the uninterrupted runs: 400 steps (traced) for the fault steps, 3000 for random kills
mkdir ref refl
(cd ref && DQN_CKPT_TRACE=$W/ref.trace "$CLI" train "${TINY[@]}" --steps 400 --run-dir r \
   >out.txt 2>err.txt) || fail "reference run: $(cat ref/err.txt)"
t0=$(date +%s%N)
(cd refl && "$CLI" train "${TINY[@]}" --steps 3000 --run-dir r >out.txt 2>err.txt) \
  || fail "long reference run: $(cat refl/err.txt)"
span_ms=$((($(date +%s%N) - t0) / 1000000 + 20))
[ -s ref/r/checkpoint.bin ] && [ -s ref.trace ] || fail "reference run: no checkpoint or trace"

# ---- the writer's steps: every write the same ones, data synced before the rename, the
# directory after it
K=$(wc -l <ref.trace)
awk '{print $2}' ref.trace >steps.txt
N=$(grep -n -m1 '^close-dir$' steps.txt | cut -d: -f1)
[ -n "$N" ] && [ $((K % N)) -eq 0 ] || fail "trace: $K steps, not a whole number of writes of $N"
WRITES=$((K / N))
[ "$WRITES" -eq 4 ] || fail "trace: $WRITES checkpoint writes, expected 4 (steps 100..400)"
order=$(head -n "$N" steps.txt | uniq | tr '\n' ' ')
[ "$order" = 'open write fsync close rename open-dir fsync-dir close-dir ' ] \
  || fail "checkpoint write steps are '$order': the data must be fsynced before the rename" \
          "and the directory after it"
for w in $(seq 2 "$WRITES"); do
  cmp -s <(head -n "$N" steps.txt) <(sed -n "$(((w - 1) * N + 1)),$((w * N))p" steps.txt) \
    || fail "checkpoint write $w has other steps than the first"
done
RENAMED=$(head -n "$N" steps.txt | grep -n -m1 '^rename$' | cut -d: -f1)
ok "reference run: $WRITES checkpoint writes of $N steps each: $order"

# checkpoint_step DIR: the env step of DIR/checkpoint.bin (dqn eval), "torn" if it does not
# load, "none" if there is none
checkpoint_step() {
  if [ ! -e "$1/checkpoint.bin" ]; then echo none
  elif "$CLI" eval --checkpoint "$1/checkpoint.bin" --episodes 1 --device cpu >ev.txt 2>ev.err
  then sed -n 's/^checkpoint .*: env [a-z]*, \([0-9]*\) env steps.*/\1/p' ev.txt
  else echo torn
  fi
}

# finish DIR STEP REF TOTAL WHAT: from DIR's checkpoint at env step STEP, complete the run and
# compare it with the uninterrupted run REF of TOTAL steps (the final checkpoint byte for byte,
# the evaluation returns)
finish() {
  local d=$1 step=$2 ref=$3 total=$4 what=$5
  local returns; returns=$(grep '"returns"' "$ref/r/eval.json")
  local mean; mean=$(sed -n 's/.*"mean_return": \([^,]*\),.*/\1/p' "$ref/r/eval.json")
  if [ "$step" -lt "$total" ]; then
    "$CLI" train --resume "$d/r/checkpoint.bin" --device cpu >"$d/resume.out" 2>"$d/resume.err" \
      || fail "$what: --resume from env step $step failed: $(cat "$d/resume.err")"
    [ "$(grep '"returns"' "$d/r/eval.json")" = "$returns" ] \
      || fail "$what: resumed evaluation $(grep '"returns"' "$d/r/eval.json"), expected $returns"
  else   # the final checkpoint was written: its evaluation is dqn eval's
    "$CLI" eval --checkpoint "$d/r/checkpoint.bin" --device cpu >"$d/ev.txt" 2>&1 \
      || fail "$what: dqn eval of the final checkpoint failed: $(cat "$d/ev.txt")"
    grep -q "mean return $mean," "$d/ev.txt" \
      || fail "$what: the final checkpoint evaluates to $(cat "$d/ev.txt"), eval.json: $mean"
  fi
  cmp -s "$d/r/checkpoint.bin" "$ref/r/checkpoint.bin" \
    || fail "$what: final checkpoint differs from the uninterrupted run's (from env step $step)"
  # the metrics rows logged after the checkpoint and again by the resumed run appear once
  cmp -s <(cut -d, -f1 "$d/r/metrics.csv") <(cut -d, -f1 "$ref/r/metrics.csv") \
    || fail "$what: metrics.csv's steps differ from the uninterrupted run's (from env step $step)"
  cmp -s <(sed 's/, "wall_s".*//' "$d/r/metrics.jsonl") <(sed 's/, "wall_s".*//' "$ref/r/metrics.jsonl") \
    || fail "$what: metrics.jsonl's steps differ from the uninterrupted run's (from env step $step)"
  [ ! -e "$d/r/checkpoint.bin.tmp" ] || fail "$what: checkpoint.bin.tmp left after the resume"
  exact=$((exact + 1))
}

# ---- a kill at a chosen step of the writer: up to the close the old file is the checkpoint,
# from the rename on the new one
fault_trial() {
  local k=$1 d=f$1
  local w=$(((k - 1) / N + 1)) i=$(((k - 1) % N + 1))
  local step; step=$(sed -n "${k}p" steps.txt)
  local what="DQN_CKPT_FAULT=$k ($step of write $w)"
  mkdir "$d"
  { (cd "$d" && DQN_CKPT_FAULT=$k "$CLI" train "${TINY[@]}" --steps 400 --run-dir r \
       >out.txt 2>err.txt); } 2>/dev/null
  local rc=$?
  trials=$((trials + 1))
  [ $rc -eq 137 ] || fail "$what: exit $rc, expected 137 (SIGKILL)"
  grep -q "^DQN_CKPT_FAULT $k: $step " "$d/err.txt" || fail "$what: $(cat "$d/err.txt")"
  local want=$(((w - 1) * INTERVAL))
  [ "$i" -ge "$RENAMED" ] && want=$((w * INTERVAL))
  local got; got=$(checkpoint_step "$d/r")
  case $got in
    torn) torn=$((torn + 1)); fail "$what: checkpoint.bin does not load: $(cat ev.err)";;
    none) if [ "$want" -gt 0 ]; then
            lost=$((lost + 1)); fail "$what: no checkpoint.bin, expected env step $want"
          fi
          none=$((none + 1)); return;;
  esac
  [ "$got" -lt "$want" ] && lost=$((lost + 1))
  [ "$got" -eq "$want" ] || fail "$what: checkpoint at env step $got, expected $want"
  finish "$d" "$got" ref 400 "$what"
}

if [ "$FULL" = 1 ]; then
  ks=$(seq 1 "$K")
else
  # the first write's rename; every kind of step of the second write (the first, a middle and
  # the last write); the last write's rename and directory sync
  ks="$((N - 5)) $((N + 1)) $((N + 2)) $((N + N / 2)) $((2 * N - 7)) $((2 * N - 6))
      $((2 * N - 5)) $((2 * N - 4)) $((2 * N - 3)) $((2 * N - 2)) $((2 * N - 1)) $((2 * N))
      $((K - 4)) $((K - 1))"
fi
for k in $ks; do fault_trial "$k"; done
ok "$trials kills at a step of a checkpoint write: none torn, none lost, $exact resumed" \
   "bit-exactly, $none before the first checkpoint"

# ---- SIGKILL at random moments of the 3000-step run
random_trial() {
  local t=$1 d=k$1
  local delay=$(((RANDOM * 32768 + RANDOM) % span_ms))
  local what="kill $t after $delay ms"
  mkdir "$d"
  (cd "$d" && exec "$CLI" train "${TINY[@]}" --steps 3000 --run-dir r >out.txt 2>err.txt) &
  local pid=$!
  sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
  kill -KILL $pid 2>/dev/null
  wait $pid 2>/dev/null
  local rc=$?
  trials=$((trials + 1))
  [ $rc -eq 137 ] || [ $rc -eq 0 ] || fail "$what: exit $rc"
  # the metrics row at step s is written before the checkpoint at s: the checkpoint at
  # s - 100 is complete once the row at s exists
  local last=0
  [ -f "$d/r/metrics.csv" ] && last=$(tail -n +2 "$d/r/metrics.csv" | tail -n 1 | cut -d, -f1)
  last=${last:-0}
  local got; got=$(checkpoint_step "$d/r")
  outcomes+=("${delay}ms:$got")
  case $got in
    torn) torn=$((torn + 1)); fail "$what: checkpoint.bin does not load: $(cat ev.err)";;
    none) if [ "$last" -gt "$INTERVAL" ]; then
            lost=$((lost + 1)); fail "$what: no checkpoint, but metrics reached env step $last"
          fi
          none=$((none + 1)); return;;
  esac
  if [ "$got" -lt $((last - INTERVAL)) ]; then
    lost=$((lost + 1)); fail "$what: checkpoint at env step $got, but metrics reached $last"
  fi
  finish "$d" "$got" refl 3000 "$what"
  rm -rf "$d"
}

before=$trials
outcomes=()
n_random=6
[ "$FULL" = 1 ] && n_random=60
for t in $(seq 1 $n_random); do random_trial "$t"; done
ok "$((trials - before)) random kills within $span_ms ms: none torn, none lost" \
   "(delay:checkpoint step ${outcomes[*]})"

echo "test_crash: $trials trials, $torn torn, $lost lost, $exact resumed or completed" \
     "bit-exactly, $none killed before the first checkpoint"
echo "test_crash: all $n checks passed"
