#!/usr/bin/env bash
# The dqn program's contract (SPEC section 7): every bad input exits 2 with exactly one line on
# stderr naming the key or file, and writes nothing; a tiny run writes its run directory, which
# --config reproduces, dqn eval reads, and --resume continues after Ctrl-C.
# Needs DQN_CLI (path to build/dqn); prints each check; exits non-zero on the first failure.
set -u
cd "$(dirname "$0")/.."
. tests/cli_lib.sh test_cli

TINY=(--steps 600 --learning-starts 100 --batch-size 32 --log-interval 200 --eval-episodes 3)

# ---- help and version
expect_ok --version
grep -q '^dqn [0-9]' out.txt || fail "--version: $(cat out.txt)"
ok "dqn --version: $(cat out.txt)"
expect_ok --help
for c in train eval bench health; do grep -q "^  $c " out.txt || fail "--help lacks $c"; done
ok "dqn --help lists the commands"
expect_ok train --help
cp out.txt train-help.txt
expect_ok eval --help
expect_ok bench --help
grep -q 'updates/s' out.txt || fail "bench --help does not say what it measures"
ok "dqn eval --help, dqn bench --help"

# ---- bad input before any run exists
printf 'lr = 0.001\nbatch_size 64\n' >bad_line.txt
printf 'nosuch = 1\n' >unknown_key.txt
printf '# comment\nlr = 500\n' >bad_value.txt
printf 'steps = 100\n' >good.txt
mkdir taken && echo 'steps = 1' >taken/config.txt
expect_bad '"--foo"' train --foo 1 --run-dir rbad
expect_bad '"--foo"' train --foo=1 --run-dir rbad
expect_bad '--lr' train --lr 500 --run-dir rbad
expect_bad '--batch-size' train --batch-size 0 --run-dir rbad
expect_bad '--gamma' train --gamma=1.5 --run-dir rbad
expect_bad '--lr' train --lr abc --run-dir rbad
expect_bad '--steps' train --steps 1.5 --run-dir rbad
expect_bad '--save-replay' train --save-replay yes --run-dir rbad
expect_bad '--eval-interval' train --eval-interval -5 --run-dir rbad
expect_bad '--eval-interval-episodes' train --eval-interval-episodes 0 --run-dir rbad
expect_bad '--env' train --env pong --run-dir rbad
expect_bad '--health' train --health on --run-dir rbad
expect_bad '--branches' train --branches 3,5,5 --run-dir rbad
expect_bad '--lr' train --run-dir rbad --lr
expect_bad '--lr' train --lr --steps 10 --run-dir rbad
expect_bad 'stray' train stray --run-dir rbad
expect_bad 'learning_starts' train --batch-size 128 --learning-starts 100 --run-dir rbad
expect_bad 'bad_line.txt:2' train --config bad_line.txt --run-dir rbad
expect_bad 'unknown_key.txt:1: unknown key "nosuch"' train --config unknown_key.txt --run-dir rbad
expect_bad 'bad_value.txt:2: bad value for lr' train --config bad_value.txt --run-dir rbad
expect_bad 'missing.txt' train --config missing.txt --run-dir rbad
expect_bad '--config' train --config good.txt --config good.txt --run-dir rbad
expect_bad 'taken' train --run-dir taken "${TINY[@]}"
expect_bad 'taken' train --config taken/config.txt --run-dir taken
expect_bad 'frobnicate' frobnicate
expect_bad 'command'
expect_bad 'health' health runs/x
expect_bad '--checkpoint' eval
expect_bad '--checkpoint' eval --checkpoint
expect_bad 'nope.bin' eval --checkpoint nope.bin
expect_bad 'nope.bin' train --resume nope.bin
expect_bad '--foo' eval --checkpoint nope.bin --foo 1
expect_bad '--foo' bench --foo 1
expect_bad '--bench-steps' bench --bench-steps 0
[ "$(cat taken/config.txt)" = 'steps = 1' ] || fail "taken/config.txt was changed"

# ---- a tiny run
expect_ok train "${TINY[@]}" --run-dir r1
cp out.txt r1.out
for f in config.txt metrics.csv metrics.jsonl checkpoint.bin eval.json; do
  [ -s r1/$f ] || fail "r1/$f missing or empty"
done
events=$(cd r1 && ls events.out.tfevents.* 2>/dev/null)
[ "$(echo $events | wc -w)" -eq 1 ] && [ -s "r1/$events" ] \
  && echo "$events" | grep -qE '^events\.out\.tfevents\.[0-9]+\.[^/]+$' || fail "r1 event file: $events"
[ -s r1/health_slots.csv ] && [ -s r1/health_isv.csv ] || fail "r1 has no health files: $(ls r1)"
[ "$(ls r1 | wc -l)" -eq 8 ] || fail "r1 holds other files: $(ls r1)"
[ ! -e r1/checkpoint.bin.tmp ] || fail "checkpoint.bin.tmp left behind"
grep -q 'backend' r1.out && grep -q 'cartpole' r1.out || fail "no run header: $(cat r1.out)"
grep -qE "env loop (host|device)$" r1.out || fail "the header names no env loop: $(head -n 1 r1.out)"
ok "tiny run wrote config.txt, metrics.csv, metrics.jsonl, $events, checkpoint.bin, eval.json"
[ "$(wc -l <r1/metrics.jsonl)" -eq 3 ] || fail "metrics.jsonl: $(cat r1/metrics.jsonl)"
[ "$(head -n 1 r1/metrics.csv)" = 'step,wall_s,steps_per_s,mean_return,loss,mean_q,epsilon,grad_norm' ] \
  || fail "metrics.csv header: $(head -n 1 r1/metrics.csv)"
[ "$(tail -n +2 r1/metrics.csv | cut -d, -f1 | tr '\n' ' ')" = '200 400 600 ' ] \
  || fail "metrics.csv steps: $(cat r1/metrics.csv)"
awk -F, 'NR > 1 && NF != 8 { exit 1 }' r1/metrics.csv || fail "metrics.csv rows need 8 fields"
ok "metrics.csv: header and a row per log interval"
grep -qx 'steps = 600' r1/config.txt && grep -qx 'batch_size = 32' r1/config.txt \
  && grep -qx 'run_dir = "r1"' r1/config.txt || fail "config.txt: $(cat r1/config.txt)"
ok "config.txt holds the resolved values"
"$PY" - r1/eval.json <<'EOF' || fail "eval.json: $(cat r1/eval.json)"
import json, sys
e = json.load(open(sys.argv[1]))
missing = {"env", "episodes", "mean_return", "std_return", "returns", "env_steps", "wall_s"} - set(e)
assert not missing, missing
assert e["env"] == "cartpole" and e["episodes"] == 3 and e["env_steps"] == 600, e
assert len(e["returns"]) == 3 and e["wall_s"] > 0, e
m = sum(e["returns"]) / 3
assert abs(m - e["mean_return"]) <= 1e-9 * max(1.0, abs(m)), e
EOF
ok "eval.json has the documented keys and a consistent mean"
keys=$(grep -v '^#' r1/config.txt | sed 's/ = .*//')
[ -n "$keys" ] || fail "config.txt lists no keys"
for k in $keys; do grep -qE "^  $k " train-help.txt || fail "dqn train --help lacks $k"; done
ok "dqn train --help lists all $(echo $keys | wc -w) keys of config.txt"

# ---- bad checkpoints
cp r1/checkpoint.bin flipped.bin
"$PY" -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 0x5a; open(p, "wb").write(b)' flipped.bin
head -c $(($(wc -c <r1/checkpoint.bin) - 7)) r1/checkpoint.bin >truncated.bin
expect_bad 'flipped.bin' eval --checkpoint flipped.bin
expect_bad 'truncated.bin' eval --checkpoint truncated.bin
expect_bad 'r1/config.txt' eval --checkpoint r1/config.txt
expect_bad 'flipped.bin' train --resume flipped.bin
expect_bad '--episodes' eval --checkpoint r1/checkpoint.bin --episodes 0
expect_bad '--seed' eval --checkpoint r1/checkpoint.bin --seed -1
expect_bad 'nothing to resume' train --resume r1/checkpoint.bin
expect_bad '--lr' train --resume r1/checkpoint.bin --lr 0.1
expect_bad '--config' train --resume r1/checkpoint.bin --config good.txt

# ---- the written config reproduces the run
expect_ok train --config r1/config.txt --run-dir r2
diff <(grep -v '^run_dir' r1/config.txt) <(grep -v '^run_dir' r2/config.txt) >/dev/null \
  || fail "config.txt not reproduced: $(diff r1/config.txt r2/config.txt)"
grep -qx 'run_dir = "r2"' r2/config.txt || fail "r2 run_dir"
ok "--config r1/config.txt reproduces the config"
[ "$(cut -d, -f1,4- r1/metrics.csv)" = "$(cut -d, -f1,4- r2/metrics.csv)" ] \
  || fail "same config, different metrics: $(diff <(cut -d, -f1,4- r1/metrics.csv) <(cut -d, -f1,4- r2/metrics.csv))"
[ "$(json r1/eval.json 'e["returns"]')" = "$(json r2/eval.json 'e["returns"]')" ] \
  || fail "same config, different evaluation returns"
ok "... and the run: identical metrics (but timing) and evaluation"

# ---- periodic evaluations: evaluations.csv and best.bin, training unchanged
expect_ok train "${TINY[@]}" --eval-interval 200 --eval-interval-episodes 2 --run-dir r5
cp out.txt r5.out
[ -s r5/best.bin ] && [ -s r5/checkpoint.bin ] || fail "r5 lacks best.bin: $(ls r5)"
[ "$(head -n 1 r5/evaluations.csv)" = 'step,mean,std,best,best_step' ] \
  && [ "$(tail -n +2 r5/evaluations.csv | cut -d, -f1 | tr '\n' ' ')" = '200 400 600 ' ] \
  || fail "evaluations.csv: $(cat r5/evaluations.csv)"
"$PY" - r5/evaluations.csv <<'EOF' || fail "evaluations.csv best column: $(cat r5/evaluations.csv)"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
best, at = None, None
for r in rows:
    if best is None or float(r["mean"]) > best:
        best, at = float(r["mean"]), r["step"]
    assert float(r["best"]) == best and r["best_step"] == at, r
EOF
best_step=$(tail -n 1 r5/evaluations.csv | cut -d, -f5)
grep -q "best periodic evaluation: .* at env step $best_step, saved as r5/best.bin" r5.out \
  || fail "no best line: $(cat r5.out)"
[ "$(cut -d, -f1,4- r1/metrics.csv)" = "$(cut -d, -f1,4- r5/metrics.csv)" ] \
  && [ "$(json r1/eval.json 'e["returns"]')" = "$(json r5/eval.json 'e["returns"]')" ] \
  || fail "periodic evaluations changed training: $(diff r1/metrics.csv r5/metrics.csv)"
ok "--eval-interval: evaluations.csv, best.bin (best at step $best_step), training as without"
expect_ok eval --checkpoint r5/best.bin --episodes 2
grep -q 'mean return' out.txt || fail "dqn eval best.bin: $(cat out.txt)"
ok "dqn eval --checkpoint best.bin"

# ---- dqn eval
expect_ok eval --checkpoint r1/checkpoint.bin
mean=$(sed -n 's/.*mean return \([^,]*\),.*/\1/p' out.txt)
[ -n "$mean" ] || fail "dqn eval prints no mean: $(cat out.txt)"
"$PY" -c 'import json, sys; assert float(sys.argv[2]) == json.load(open(sys.argv[1]))["mean_return"]' \
  r1/eval.json "$mean" || fail "dqn eval mean $mean differs from eval.json's"
ok "dqn eval --checkpoint reproduces eval.json's mean return ($mean)"
expect_ok eval --checkpoint r1/checkpoint.bin --episodes 2 --seed 5
grep -q '2 greedy episodes, seed 5' out.txt || fail "eval --episodes --seed: $(cat out.txt)"
ok "dqn eval --episodes 2 --seed 5"

# ---- the default run directory and presets
expect_ok train "${TINY[@]}"
dirs=$(ls -d runs/cartpole-1-* 2>/dev/null)
[ "$(echo "$dirs" | wc -w)" -eq 1 ] && [ -f "$dirs/config.txt" ] \
  && echo "$dirs" | grep -qE '^runs/cartpole-1-[0-9]{8}-[0-9]{6}$' || fail "default run dir: $dirs"
rm -rf runs
ok "default run dir $dirs"
SMALL=(--steps 300 --learning-starts 100 --batch-size 32 --log-interval 300 --eval-episodes 1)
expect_ok train --env mountaincar "${SMALL[@]}" --run-dir m1
grep -qx 'env = mountaincar' m1/config.txt && grep -qx 'n_step = 3' m1/config.txt \
  && grep -qx 'lr = 0.0005' m1/config.txt || fail "--env mountaincar preset: $(cat m1/config.txt)"
ok "--env mountaincar applies its preset"
printf 'env = mountaincar\nlr = 0.0002\n' >mc.txt
expect_ok train --config mc.txt --n-step 4 "${SMALL[@]}" --run-dir m2
grep -qx 'env = mountaincar' m2/config.txt && grep -qx 'lr = 0.0002' m2/config.txt \
  && grep -qx 'n_step = 4' m2/config.txt && grep -qx 'steps = 300' m2/config.txt \
  || fail "preset < file < flags: $(cat m2/config.txt)"
ok "the config file's env picks the preset; the file beats the preset, flags beat the file"

# ---- Ctrl-C stops cleanly with a checkpoint; --resume continues
"$CLI" train --steps 1000000 --learning-starts 100 --batch-size 32 --log-interval 100 \
  --run-dir r3 >r3.out 2>r3.err &
pid=$!
for _ in $(seq 1200); do
  [ -f r3/metrics.csv ] && [ "$(wc -l <r3/metrics.csv)" -ge 3 ] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.05
done
kill -INT $pid
wait $pid
rc=$?
[ $rc -eq 130 ] || fail "Ctrl-C: exit $rc, expected 130; $(cat r3.err)"
[ -s r3/checkpoint.bin ] && [ ! -e r3/eval.json ] || fail "Ctrl-C: checkpoint.bin missing or eval.json written"
last=$(tail -n 1 r3/metrics.csv | cut -d, -f1)
ok "Ctrl-C at env step $last: exit 130, checkpoint saved"
expect_bad '--steps' train --resume r3/checkpoint.bin --steps 2000000
expect_bad 'r1' train --resume r3/checkpoint.bin --run-dir r1
rows=$(wc -l <r3/metrics.csv)
expect_ok train --resume r3/checkpoint.bin --steps $((last + 200))
grep -q 'resumed' out.txt || fail "no resume header: $(cat out.txt)"
[ "$(tail -n 1 r3/metrics.csv | cut -d, -f1)" = "$((last + 200))" ] \
  && [ "$(wc -l <r3/metrics.csv)" -gt "$rows" ] || fail "resume metrics: $(cat r3/metrics.csv)"
[ "$(wc -l <r3/metrics.jsonl)" -eq "$(($(wc -l <r3/metrics.csv) - 1))" ] \
  && [ "$(ls r3/events.out.tfevents.* | wc -l)" -eq 2 ] || fail "resume: metrics.jsonl rows or a second event file: $(ls r3)"
[ "$(json r3/eval.json 'e["env_steps"]')" = "$((last + 200))" ] || fail "resume eval.json"
grep -qx "steps = $((last + 200))" r3/config.txt || fail "resume config.txt steps"
ok "--resume continued to env step $((last + 200)) in the same run dir"

# ---- bench writes nothing
before=$(snap)
expect_ok bench --learning-starts 100 --batch-size 32 --bench-steps 200
grep -q 'updates/s' out.txt || fail "bench output: $(cat out.txt)"
[ "$(snap)" = "$before" ] && [ ! -e runs ] || fail "bench wrote files"
ok "dqn bench: $(grep '^result' out.txt)"

echo "test_cli: all $n checks passed"
