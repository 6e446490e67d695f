#!/usr/bin/env bash
# dqn health and the health side of dqn train (SPEC 4, docs/health.md): the slot table; bad --fault
# and --health input; a detect run with an injected NaN prints one line naming the slot and the
# update, writes health_event.json / .bin, and --replay reproduces it; guard mode keeps training;
# the report of a run directory and its ISV plot.
set -u
cd "$(dirname "$0")/.."
. tests/cli_lib.sh test_cli_health

# (an update every other step: the CartPole preset's 128 every 256 steps would leave a tiny run
# a few rounds)
TINY=(--steps 800 --learning-starts 100 --batch-size 32 --log-interval 200 --eval-episodes 3
      --train-freq 2 --updates-per-round 1)

# ---- the slot table
expect_ok health --slots
grep -q '^0 *obs *sample' out.txt && grep -q 'd_value_logits *backward .* yes *q_scale' out.txt \
  && grep -q 'grn0.d_in *backward .* yes *ln_rms.grn0' out.txt && grep -q 'params *optimizer' out.txt \
  || fail "health --slots: $(cat out.txt)"
! grep -q 'concat' out.txt || fail "cartpole has no bottleneck: $(cat out.txt)"
expect_ok health --slots --bottleneck 16 --grn-blocks 2
grep -q 'd_concat *backward .* yes *rms.d_concat' out.txt && grep -q 'grn1.out' out.txt \
  || fail "health --slots with a bottleneck: $(cat out.txt)"
ok "dqn health --slots lists the slots in execution order, with the guard points"
expect_ok health --help
grep -q -- '--replay' out.txt || fail "health --help: $(cat out.txt)"

# ---- bad input
expect_bad 'fault' train --fault phi:x:nan --run-dir rbad
expect_bad 'fault' train --fault phi:3 --run-dir rbad
expect_bad '"nope" is not a slot' train --health detect --fault nope:3:nan --run-dir rbad
expect_bad 'concat' train --fault concat:3:nan --run-dir rbad
expect_bad '--fault needs' train --health off --fault phi:3:nan --run-dir rbad
expect_bad 'bottleneck' health --slots --bottleneck -1
expect_bad 'health_slots.csv' health nowhere
expect_bad 'health_event.bin' health --replay nowhere
expect_bad 'unexpected' health r1 r2

# ---- detect: the first event is named, saved and replayed
expect_ok train "${TINY[@]}" --health detect --fault phi:120:nan --fault loss:200:inf --run-dir rd
cp out.txt rd.out
[ "$(grep -c '^health: ' rd.out)" -eq 1 ] || fail "not one health line: $(cat rd.out)"
grep -q '^health: first bad value at update 120, slot "phi" (forward): nan, 1 non-finite element' rd.out \
  || fail "health line: $(grep health rd.out)"
[ -s rd/health_event.bin ] || fail "no health_event.bin"
[ "$(json rd/health_event.json 'e["update"], e["slot"], e["kind"], e["count"]')" = "(120, 'phi', 'nan', 1)" ] \
  || fail "health_event.json: $(cat rd/health_event.json)"
ok "detect run: one line naming phi at update 120, health_event.json and .bin"
expect_ok health --replay rd --device cpu
grep -q '^reproduced' out.txt && grep -q 'phi *forward *1 *1' out.txt || fail "replay: $(cat out.txt)"
ok "dqn health --replay reproduces the slot: $(grep '^replay:' out.txt)"
"$PY" - rd/health_slots.csv rd/health_isv.csv <<'PY' || fail "health CSVs"
import csv, math, sys
rows = list(csv.DictReader(open(sys.argv[1])))
last = [r for r in rows if r["env_step"] == rows[-1]["env_step"]]
by = {r["slot"]: r for r in last}
assert by["phi"]["first_event_update"] == "120" and int(by["phi"]["events_total"]) >= 1, by["phi"]
assert by["loss"]["first_event_update"] == "200", by["loss"]
assert by["obs"]["events_total"] == "0" and by["obs"]["first_event_update"] == "-1", by["obs"]
isv = list(csv.DictReader(open(sys.argv[2])))
assert len(isv) >= 3 and float(isv[-1]["q_scale"]) > 0 and "scale.phi" in isv[-1], isv[-1]
assert int(isv[-1]["updates"]) > 300, isv[-1]
PY
ok "health_slots.csv and health_isv.csv: per-slot totals and first events, the ISV"
expect_ok health rd
grep -q 'first event' out.txt && grep -q '^2 *phi *forward' out.txt && grep -q 'q_scale' out.txt \
  || fail "health report: $(cat out.txt)"
"$PY" -c 'import sys, xml.etree.ElementTree as T; r = T.parse(sys.argv[1]).getroot(); assert r.tag.endswith("svg") and len(r.findall(".//{http://www.w3.org/2000/svg}polyline")) >= 5' rd/isv.svg \
  || fail "isv.svg: $(head -c 300 rd/isv.svg)"
ok "dqn health RUN_DIR prints the slot table and the ISV history and writes isv.svg"

# ---- guard: the same faults, the weights stay finite and the run ends normally
expect_ok train "${TINY[@]}" --fault phi:120:nan --fault params:300:huge --fault d_trunk:400:inf --run-dir rg
grep -q '^health: first bad value at update 120, slot "phi"' out.txt && grep -q 'guarded' out.txt \
  || fail "guard line: $(cat out.txt)"
[ "$(json rg/eval.json 'e["episodes"]')" = 3 ] || fail "guard run did not evaluate"
"$PY" - rg/health_isv.csv <<'PY' || fail "guard counters"
import csv, sys
last = list(csv.DictReader(open(sys.argv[1])))[-1]
assert int(last["skipped"]) >= 2 and int(last["rolled_back"]) == 1 and int(last["guarded_updates"]) >= 1, last
PY
ok "guard run: skipped, rolled back and guarded, then evaluated"
expect_ok health --replay rg
grep -q '^reproduced' out.txt || fail "guard replay: $(cat out.txt)"

# ---- health off: no health files, and dqn health says so
expect_ok train "${TINY[@]}" --health off --run-dir ro
[ ! -e ro/health_slots.csv ] || fail "health off wrote health files"
expect_bad 'health' health ro
echo "test_cli_health: all $n checks passed"
