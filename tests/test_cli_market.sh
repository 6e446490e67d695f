#!/usr/bin/env bash
# dqn train --env market (docs/market.md): bad data and impossible splits exit 2 with one line
# naming the file, line and column or the keys, and write nothing; a small walk-forward run writes
# F0, F1 (each a run directory plus oos.csv and fold.json), summary.csv, equity.svg and data.csv,
# and training on that data.csv gives the same results as on the synthetic data it holds.
set -u
cd "$(dirname "$0")/.."
. tests/cli_lib.sh test_cli_market

FEATURES=signal0,signal1,signal2,signal3,noise0,noise1
SMALL=(--env market --device cpu --synth-rows 600 --folds 2 --train-blocks 1 --epochs 3
       --learning-starts 200 --window 4 --episode-len 32 --log-interval 250 --eval-episodes 2)

# ---- bad data and splits: nothing written
printf 'timestamp,a,b\n2020-01-02,1,2\n2020-01-03,1,\n2020-01-06,1,2\n' >gap.csv
printf 'timestamp,a,b\n2020-01-02,1,2\n2020-01-01,1,2\n' >back.csv
printf 'date,a\n1,2\n2,3\n' >nots.csv
expect_bad 'gap.csv:3: column b: missing value' train --env market --data gap.csv --run-dir rbad
expect_bad 'back.csv:3: column timestamp: 2020-01-01 is not after' train --env market \
  --data back.csv --run-dir rbad
expect_bad 'nots.csv:1: no timestamp column "timestamp"' train --env market --data nots.csv \
  --run-dir rbad
expect_bad 'nope.csv' train --env market --data nope.csv --run-dir rbad
expect_bad 'episode_len' train "${SMALL[@]}" --episode-len 500 --run-dir rbad
expect_bad 'learning_starts' train "${SMALL[@]}" --epochs 1 --learning-starts 5000 --run-dir rbad
expect_bad 'position_levels (4) must be odd' train "${SMALL[@]}" --position-levels 4 --run-dir rbad
expect_bad '--fold-mode' train "${SMALL[@]}" --fold-mode anchored --run-dir rbad
expect_bad '--price-columns' train "${SMALL[@]}" --price-columns a,,b --run-dir rbad

# ---- a small walk-forward run on the synthetic data
expect_ok train "${SMALL[@]}" --run-dir m1
cp out.txt m1.out
for f in config.txt data.csv summary.csv equity.svg; do [ -s m1/$f ] || fail "m1/$f missing"; done
for k in 0 1; do
  for f in config.txt metrics.csv metrics.jsonl checkpoint.bin eval.json oos.csv fold.json; do
    [ -s m1/F$k/$f ] || fail "m1/F$k/$f missing"
  done
  grep -qx "fold = $k" m1/F$k/config.txt && grep -qx 'run_dir = "m1/F'$k'"' m1/F$k/config.txt \
    || fail "F$k/config.txt: $(grep -E '^(fold|run_dir|steps) ' m1/F$k/config.txt)"
done
ok "walk-forward run wrote config.txt, data.csv, summary.csv, equity.svg and F0, F1"
[ "$(wc -l <m1/data.csv)" -eq 601 ] && head -n 1 m1/data.csv | grep -q "^timestamp,asset0," \
  || fail "data.csv: $(head -n 2 m1/data.csv)"
"$PY" - m1 <<'PYEOF' || fail "fold files or summary inconsistent"
import csv, json, math, sys, xml.etree.ElementTree as ET
d = sys.argv[1]
rows = list(csv.DictReader(open(f"{d}/summary.csv")))
assert [r["fold"] for r in rows] == ["0", "1", "all"], rows
for k in range(2):
    f = json.load(open(f"{d}/F{k}/fold.json"))
    oos = list(csv.DictReader(open(f"{d}/F{k}/oos.csv")))
    # 600 rows, 3 blocks of 200: fold k trains on block k and tests on block k + 1
    assert f["train"]["first_row"] == 200 * k and f["test"]["first_row"] == 200 * (k + 1), f
    # epochs x decisions env steps, rounded up to a step of all 4 envs
    assert f["periods"] == len(oos) == 200 and 585 <= f["env_steps"] < 585 + 4, f
    assert f["flat"]["total_return"] == 0 and f["flat"]["hit_rate"] is None, f
    eq = 1.0
    for o in oos:
        eq *= 1 + float(o["agent_return"])
        assert float(o["flat_equity"]) == 1
    assert abs(eq - float(oos[-1]["agent_equity"])) < 1e-8 * eq, (eq, oos[-1])
    assert abs(f["agent"]["total_return"] - (eq - 1)) < 1e-8, f
    assert abs(float(rows[k]["agent_total_return"]) - f["agent"]["total_return"]) < 1e-12
    assert rows[k]["test_start"] == f["test"]["start"] and oos[-1]["timestamp"] == f["test"]["end"]
    assert {o["position_asset0"] for o in oos} <= {"-1", "0", "1"}
chained = (1 + float(rows[0]["agent_total_return"])) * (1 + float(rows[1]["agent_total_return"]))
assert abs(float(rows[2]["agent_total_return"]) - (chained - 1)) < 1e-9, rows[2]
svg = ET.parse(f"{d}/equity.svg").getroot()
lines = [e for e in svg.iter() if e.tag.endswith("polyline")]
assert len(lines) == 3 and all(len(l.get("points").split()) == 401 for l in lines), len(lines)
PYEOF
ok "fold.json, oos.csv and summary.csv agree; equity.svg holds 3 curves of 401 points"
grep -q '^all ' m1.out && grep -q 'beat flat on [0-2] of 2 folds' m1.out \
  && grep -q '^F1 out of sample (200 periods)' m1.out || fail "summary table: $(tail m1.out)"
ok "the summary table is printed: $(grep 'beat flat' m1.out)"

# ---- the same data from the file it was saved to gives the same results
expect_ok train "${SMALL[@]}" --data m1/data.csv --feature-columns $FEATURES --run-dir m2
[ ! -e m2/data.csv ] || fail "data.csv written for a --data run"
cmp -s m1/summary.csv m2/summary.csv && cmp -s m1/F1/oos.csv m2/F1/oos.csv \
  || fail "synthetic and its data.csv differ: $(diff m1/summary.csv m2/summary.csv)"
ok "--data m1/data.csv reproduces summary.csv and oos.csv bit for bit"

# ---- a fold's checkpoint: dqn eval reads it (in-sample episodes of its training window)
expect_ok eval --checkpoint m1/F1/checkpoint.bin --episodes 2
grep -q 'env market' out.txt && grep -q '2 greedy episodes' out.txt || fail "eval: $(cat out.txt)"
ok "dqn eval --checkpoint m1/F1/checkpoint.bin"

echo "test_cli_market: all $n checks passed"
