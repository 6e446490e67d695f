#!/usr/bin/env bash
# Bad input everywhere (docs/reliability.md has the table): every subcommand (train, eval, bench,
# health), bad values of each kind of config key, bad config files, bad market CSV files, and
# checkpoints and health event files that are truncated, bit-flipped, of another magic or version,
# not a checkpoint at all, or of another model. Each must exit with status 2 and one line on
# stderr naming the file or key and what is wrong, and write nothing: expect_bad (cli_lib.sh)
# compares every path and checksum under the test directory, run directories included, before
# and after.
set -u
cd "$(dirname "$0")/.."
. tests/cli_lib.sh test_bad_input

TINY=(--steps 200 --learning-starts 32 --batch-size 16 --log-interval 100 --eval-episodes 1
      --d 8 --head-hidden 8 --n-cos 4 --device cpu --train-freq 2 --updates-per-round 1)

# ---- the runs the bad inputs are aimed at
expect_ok train "${TINY[@]}" --run-dir rc
# ra: an acrobot run killed right after its first checkpoint (at env step 100 of 200)
(DQN_CKPT_TRACE=$W/ra.trace "$CLI" train "${TINY[@]}" --env acrobot --checkpoint-interval 100 \
  --run-dir ra0 >/dev/null 2>&1) || fail "acrobot run: exit $?"
k=$(grep -m1 ' close-dir ' ra.trace | cut -d' ' -f1)
rm -rf ra0 ra.trace
{ DQN_CKPT_FAULT=$k "$CLI" train "${TINY[@]}" --env acrobot --checkpoint-interval 100 \
  --run-dir ra >/dev/null 2>&1; } 2>/dev/null
[ $? -eq 137 ] || fail "acrobot run with DQN_CKPT_FAULT=$k was not killed"
expect_ok train "${TINY[@]}" --health detect --fault phi:3:nan --run-dir rh
expect_ok train "${TINY[@]}" --health off --run-dir ro
[ -s rc/checkpoint.bin ] && [ -s ra/checkpoint.bin ] && [ -s rh/health_event.bin ] \
  && [ ! -e ro/health_slots.csv ] || fail "set-up runs: $(ls rc ra rh ro)"
ok "set-up runs rc (cartpole), ra (acrobot), rh (a health event), ro (health off)"

# ---- files: corrupt checkpoints (with the runs' directories, they must stay untouched)
mkdir bad
"$PY" - rc/checkpoint.bin ra/checkpoint.bin rh/health_event.bin <<'PY' || fail "making the bad files"
import struct, sys, zlib
ck = open(sys.argv[1], "rb").read()
acro = open(sys.argv[2], "rb").read()
ev = open(sys.argv[3], "rb").read()
def w(name, b): open("bad/" + name, "wb").write(b)
def seal(b): return b[:-4] + struct.pack("<I", zlib.crc32(b[:-4]) & 0xffffffff)
def sections(b):
    n = struct.unpack_from("<I", b, 12)[0]; pos = 16; out = []
    for _ in range(n):
        name = b[pos:pos + 32].rstrip(b"\0").decode(); size = struct.unpack_from("<Q", b, pos + 32)[0]
        out.append((name, b[pos + 40:pos + 40 + size])); pos += 40 + size
    return out
def build(secs):
    b = b"DQNCKPT\0" + struct.pack("<II", 2, len(secs))
    for name, data in secs: b += name.encode().ljust(32, b"\0") + struct.pack("<Q", len(data)) + data
    return b + struct.pack("<I", zlib.crc32(b) & 0xffffffff)
w("empty.bin", b"")
w("truncated_header.bin", ck[:12])
w("truncated_half.bin", ck[:len(ck) // 2])
w("truncated_crc.bin", ck[:-2])
f = bytearray(ck); f[len(f) // 3] ^= 0x10; w("flipped.bin", bytes(f))
f = bytearray(ck); f[-1] ^= 0x01; w("flipped_crc.bin", bytes(f))
w("magic.bin", b"XQNCKPT\0" + ck[8:])
w("version.bin", seal(ck[:8] + struct.pack("<I", 1) + ck[12:]))
w("trailing.bin", ck + b"junk")
w("text.bin", b"env = cartpole\n")
# the acrobot run's config over the cartpole run's sections: another model's shape
s = dict(sections(ck)); a = dict(sections(acro))
w("shape.bin", build([(n, a["config"] if n == "config" else d) for n, d in sections(ck)]))
# a section missing, and the counters of another number of envs
w("no_params.bin", build([(n, d) for n, d in sections(ck) if n != "params"]))
w("short_params.bin", build([(n, d[:-4] if n == "params" else d) for n, d in sections(ck)]))
cfg = s["config"].replace(b"num_envs = 1\n", b"num_envs = 2\n")
w("envs.bin", build([(n, cfg if n == "config" else d) for n, d in sections(ck)]))
# a config section that does not parse
w("bad_config.bin", build([(n, b"lr = 500\n" if n == "config" else d) for n, d in sections(ck)]))
# health events: corrupt, a checkpoint in its place, and another model's event
f = bytearray(ev); f[len(f) // 2] ^= 0x01; w("event_flipped.bin", bytes(f))
e = dict(sections(ev))
w("event_shape.bin", build([(n, a["config"] if n == "config" else d) for n, d in sections(ev)]))
w("event_no_snapshot.bin", build([(n, d) for n, d in sections(ev) if n != "snapshot"]))
PY
cp rc/checkpoint.bin bad/good.bin

for f in empty truncated_header truncated_half truncated_crc flipped flipped_crc magic version \
         trailing text shape no_params short_params envs bad_config; do
  case $f in
    empty|truncated*) word=truncated;; flipped*) word='CRC mismatch';; magic|text) word='not a dqn checkpoint';;
    version) word='version 1 not supported';; trailing) word='4 unexpected bytes after the last section';;
    shape|short_params) word='section "params" has';; no_params) word='no section "params"';;
    envs) word='counters for 1 envs, config has 2';; bad_config) word=':1: bad value for lr';;
  esac
    case $f in bad_config) at=bad/$f.bin;; *) at="bad/$f.bin: ";; esac
  expect_bad "$at$word" eval --checkpoint bad/$f.bin
  expect_bad "$at$word" train --resume bad/$f.bin
done
# a corrupt checkpoint inside a run directory: the directory stays as it was
cp bad/flipped.bin rc/flipped.bin
expect_bad 'rc/flipped.bin: CRC mismatch' train --resume rc/flipped.bin
rm rc/flipped.bin
expect_bad 'bad: cannot open: not a regular file' eval --checkpoint bad
expect_bad 'bad/nope.bin: cannot open: No such file' train --resume bad/nope.bin
expect_bad 'rh/health_event.bin: no section "counters"' eval --checkpoint rh/health_event.bin
expect_bad 'rc/config.txt: not a dqn checkpoint' train --resume rc/config.txt
# another env's checkpoint continued into an existing run directory
expect_bad 'run directory rc already holds a run' train --resume ra/checkpoint.bin --run-dir rc
# a checkpoint whose directory's path is longer than run_dir holds (255 characters): refused,
# not continued into a directory named by a cut path
L=$(printf 'd%.0s' $(seq 100)); long=$L/$L/$L
mkdir -p "$long" && cp -r ra "$long/r"
expect_bad 'bad value for run_dir' train --resume "$long/r/checkpoint.bin"
rm -rf "$L"
ok "corrupt, foreign and misplaced checkpoints: dqn eval and dqn train --resume exit 2"

# ---- dqn train: flags and values of every kind of key
expect_bad 'unknown key "--nosuch"' train --nosuch 1 --run-dir rbad
expect_bad 'missing value for --lr' train --run-dir rbad --lr
expect_bad 'unexpected argument "-lr"' train -lr 1 --run-dir rbad
expect_bad 'unexpected argument "--"' train -- --run-dir rbad
expect_bad 'unexpected argument "--=5"' train --=5 --run-dir rbad
expect_bad 'bad value for --batch-size: "abc"' train --batch-size abc --run-dir rbad
expect_bad 'bad value for --batch-size: "1e3"' train --batch-size 1e3 --run-dir rbad
expect_bad 'bad value for --batch-size: " 32"' train --batch-size ' 32' --run-dir rbad
expect_bad 'bad value for --batch-size: "99999999999999999999"' train --batch-size 99999999999999999999 --run-dir rbad
expect_bad 'bad value for --steps: "0"' train --steps 0 --run-dir rbad
expect_bad 'bad value for --seed: "-1"' train --seed -1 --run-dir rbad
expect_bad 'bad value for --seed: "18446744073709551616"' train --seed 18446744073709551616 --run-dir rbad
expect_bad 'bad value for --lr: "nan"' train --lr nan --run-dir rbad
expect_bad 'bad value for --lr: "inf"' train --lr inf --run-dir rbad
expect_bad 'bad value for --gamma: "1e400"' train --gamma 1e400 --run-dir rbad
expect_bad 'bad value for --gamma: "0.5x"' train --gamma 0.5x --run-dir rbad
expect_bad 'bad value for --lr: ""' train --lr= --run-dir rbad
expect_bad 'bad value for --device: "CPU"' train --device CPU --run-dir rbad
expect_bad 'bad value for --save-replay: "yes"' train --save-replay yes --run-dir rbad
expect_bad 'bad value for --run-dir: "a\x09b"' train --run-dir "$(printf 'a\tb')"
expect_bad 'bad value for --run-dir: "a\"b"' train --run-dir 'a"b'
expect_bad 'bad value for --run-dir' train --run-dir "$(printf 'r%.0s' $(seq 300))"
expect_bad 'bad value for --branches: "3,,5"' train --branches 3,,5 --run-dir rbad
expect_bad 'bad value for --branches: "1"' train --branches 1 --run-dir rbad
expect_bad 'bad value for --fault: "phi:x:nan"' train --fault phi:x:nan --run-dir rbad
expect_bad 'bad value for --fault: "phi:1:zero"' train --fault phi:1:zero --run-dir rbad
expect_bad 'nosuchslot' train "${TINY[@]}" --fault nosuchslot:1:nan --run-dir rbad
expect_bad 'd_concat' train "${TINY[@]}" --fault d_concat:1:nan --run-dir rbad
expect_bad 'bad value for --price-columns: "a,a"' train --price-columns a,a --run-dir rbad
expect_bad 'batch_size (64) must be <= buffer_size (10)' train --batch-size 64 --buffer-size 10 --run-dir rbad
expect_bad 'eps_end (0.5) must be <= eps_start (0.1)' train --eps-start 0.1 --eps-end 0.5 --run-dir rbad
expect_bad 'ranks (2) > 1 needs device cuda' train --ranks 2 --device cpu --run-dir rbad
expect_bad 'fold (3) must be < folds (2)' train --env market --folds 2 --fold 3 --run-dir rbad
expect_bad 'column "timestamp" is the timestamp column' train --env market --price-columns timestamp --run-dir rbad
expect_bad 'branches' train "${TINY[@]}" --branches 3,3 --run-dir rbad
mkdir taken && echo 'steps = 1' >taken/config.txt
expect_bad 'run directory taken already holds a run' train "${TINY[@]}" --run-dir taken
echo x >afile
expect_bad 'run directory afile exists and is not a directory' train "${TINY[@]}" --run-dir afile
ok "dqn train: bad flags, values and combinations exit 2"

# ---- config files
printf 'lr = 0.001\nbatch_size 64\n' >c_line.txt
printf 'nosuch = 1\n' >c_key.txt
printf '# comment\n\nlr = 500\n' >c_value.txt
printf 'run_dir = "open\n' >c_quote.txt
printf 'lr = 0.001\nsteps = 1\0\n' >c_nul.txt
printf '\x7fELF\x02\x01\x01\x00\x00\x00\n' >c_binary.txt
printf 'batch_size = 64\nbuffer_size = 10\n' >c_cross.txt
printf '= 5\n' >c_nokey.txt
expect_bad 'c_line.txt:2: expected "key = value"' train --config c_line.txt --run-dir rbad
expect_bad 'c_key.txt:1: unknown key "nosuch"' train --config c_key.txt --run-dir rbad
expect_bad 'c_value.txt:3: bad value for lr' train --config c_value.txt --run-dir rbad
expect_bad 'c_quote.txt:1: unterminated quote' train --config c_quote.txt --run-dir rbad
expect_bad 'c_nul.txt:2: NUL byte' train --config c_nul.txt --run-dir rbad
expect_bad 'c_binary.txt:1' train --config c_binary.txt --run-dir rbad
expect_bad 'c_nokey.txt:1: expected "key = value"' train --config c_nokey.txt --run-dir rbad
expect_bad 'batch_size (64) must be <= buffer_size (10)' train --config c_cross.txt --run-dir rbad
expect_bad 'c_missing.txt: cannot open config file' train --config c_missing.txt --run-dir rbad
expect_bad 'bad' train --config bad --run-dir rbad
expect_bad '--config given more than once' train --config c_key.txt --config c_key.txt --run-dir rbad
expect_bad 'c_value.txt:3' bench --config c_value.txt
expect_bad 'c_value.txt:3' health --slots --config c_value.txt
ok "bad config files exit 2 naming the file and line"

# ---- market CSV files
SMALL=(--env market --synth-rows 64 --folds 1 --train-blocks 1 --window 2 --episode-len 8
       --epochs 1 --device cpu --run-dir rbad)
printf 'timestamp,a,b\n1,2,3\n2,2,3\n3,2,3\n' >m_ok_shape.csv
printf '' >m_empty.csv
printf 'timestamp,a\n' >m_header.csv
printf 'timestamp,a,a\n1,2,3\n2,2,3\n' >m_dup.csv
printf 'timestamp,,b\n1,2,3\n2,2,3\n' >m_noname.csv
printf 'timestamp,a,b\n1,2,3\n\n2,2,3\n' >m_blank.csv
printf 'timestamp,a,b\n1,2,3\n2,2\n' >m_fields.csv
printf 'timestamp,a\n1,2\n1,3\n' >m_order.csv
printf 'timestamp,a\n2020-01-01,2\n2020-01-02T10:00,3\n' >m_kinds.csv
printf 'timestamp,a\n2020-13-01,2\n2020-12-02,3\n' >m_date.csv
printf 'timestamp,a\n1,two\n2,3\n' >m_number.csv
printf 'timestamp,a\n1,-2\n2,3\n' >m_negative.csv
printf 'timestamp,a\n1,\n2,3\n' >m_missing.csv
printf 'timestamp,a\n1,2\n2,inf\n' >m_inf.csv
printf 'timestamp,a\n1,2\0\n2,3\n' >m_nul.csv
printf 'timestamp,a\n1,2\n' >m_onerow.csv
printf 'time,a\n1,2\n2,3\n' >m_nots.csv
expect_bad 'm_empty.csv: empty file' train "${SMALL[@]}" --data m_empty.csv
expect_bad 'm_header.csv: 0 data row(s)' train "${SMALL[@]}" --data m_header.csv
expect_bad 'm_dup.csv:1: column "a" appears twice' train "${SMALL[@]}" --data m_dup.csv
expect_bad 'm_noname.csv:1: column 2 of the header has no name' train "${SMALL[@]}" --data m_noname.csv
expect_bad 'm_blank.csv:3: empty line' train "${SMALL[@]}" --data m_blank.csv
expect_bad 'm_fields.csv:3: 2 fields, expected 3' train "${SMALL[@]}" --data m_fields.csv
expect_bad 'm_order.csv:3: column timestamp: 1 is not after' train "${SMALL[@]}" --data m_order.csv
expect_bad 'm_kinds.csv:3: column timestamp' train "${SMALL[@]}" --data m_kinds.csv
expect_bad 'm_date.csv:2: column timestamp: "2020-13-01"' train "${SMALL[@]}" --data m_date.csv
expect_bad 'm_number.csv:2: column a: "two" is not a number' train "${SMALL[@]}" --data m_number.csv
expect_bad 'm_negative.csv:2: column a: price -2 is not positive' train "${SMALL[@]}" --data m_negative.csv
expect_bad 'm_missing.csv:2: column a: missing value' train "${SMALL[@]}" --data m_missing.csv
expect_bad 'm_missing.csv:2: column a: missing value "" in the first row' train "${SMALL[@]}" --data m_missing.csv --fill ffill
expect_bad 'm_inf.csv:3: column a: non-finite value' train "${SMALL[@]}" --data m_inf.csv
expect_bad 'm_nul.csv:2: NUL byte' train "${SMALL[@]}" --data m_nul.csv
expect_bad 'm_onerow.csv: 1 data row(s)' train "${SMALL[@]}" --data m_onerow.csv
expect_bad 'm_nots.csv:1: no timestamp column "timestamp"' train "${SMALL[@]}" --data m_nots.csv
expect_bad 'm_ok_shape.csv:1: no price column "x"' train "${SMALL[@]}" --data m_ok_shape.csv --price-columns x
expect_bad 'm_ok_shape.csv:1: no feature column "f"' train "${SMALL[@]}" --data m_ok_shape.csv --feature-columns f
# more named columns than the header has (a heap overflow in the loader before the fix)
expect_bad 'm_ok_shape.csv:1: no feature column "f"' train "${SMALL[@]}" --data m_ok_shape.csv --price-columns a,b,c,d,e --feature-columns f
expect_bad 'm_ok_shape.csv: 3 rows cannot be cut into folds' train "${SMALL[@]}" --data m_ok_shape.csv
expect_bad 'm_gone.csv: cannot open the data file' train "${SMALL[@]}" --data m_gone.csv
expect_bad 'bad: read failed: Is a directory' train "${SMALL[@]}" --data bad
ok "bad market CSV files exit 2 naming the file, line and column"

# ---- dqn eval
expect_bad 'missing --checkpoint FILE' eval
expect_bad 'missing value for --checkpoint' eval --checkpoint
expect_bad 'unknown flag --lr for dqn eval' eval --checkpoint rc/checkpoint.bin --lr 1
expect_bad 'bad value for --episodes: "0"' eval --checkpoint rc/checkpoint.bin --episodes 0
expect_bad 'bad value for --episodes: "many"' eval --checkpoint rc/checkpoint.bin --episodes many
expect_bad 'bad value for --seed: "-1"' eval --checkpoint rc/checkpoint.bin --seed -1
expect_bad 'bad value for --device: "gpu"' eval --checkpoint rc/checkpoint.bin --device gpu
expect_bad '--checkpoint given more than once' eval --checkpoint rc/checkpoint.bin --checkpoint rc/checkpoint.bin
expect_bad 'unexpected argument "rc/checkpoint.bin"' eval rc/checkpoint.bin
ok "dqn eval: bad flags exit 2"

# ---- dqn bench
expect_bad 'unknown key "--nosuch"' bench --nosuch 1
expect_bad 'bad value for --bench-steps: "0"' bench --bench-steps 0
expect_bad 'bad value for --bench-steps: "x"' bench --bench-steps x
expect_bad '--bench-steps given more than once' bench --bench-steps 5 --bench-steps 6
expect_bad 'bad value for --batch-size' bench --batch-size 0
expect_bad 'bad value for --env' bench --env pong
ok "dqn bench: bad flags exit 2"

# ---- dqn health
expect_bad 'expected RUN_DIR, --slots or --replay' health
expect_bad 'nodir has no health record' health nodir
expect_bad 'afile has no health record' health afile
expect_bad 'ro has no health record' health ro
expect_bad 'unexpected argument "extra"' health rc extra
expect_bad 'unknown flag --foo for dqn health --replay' health --replay rh --foo 1
expect_bad 'bad value for --device: "gpu"' health --replay rh --device gpu
expect_bad 'rc/health_event.bin: cannot open' health --replay rc
expect_bad 'missing value for --replay' health --replay
expect_bad 'bad value for --d: "0"' health --slots --d 0
expect_bad 'unknown key "--foo"' health --slots --foo 1
for f in event_flipped event_shape event_no_snapshot flipped; do
  case $f in event_flipped|flipped) word='hr/health_event.bin: CRC mismatch';;
    event_shape) word="parameters do not fit the config's model";;
    event_no_snapshot) word='hr/health_event.bin: no section "snapshot"';; esac
  rm -rf hr && cp -r rh hr && cp bad/$f.bin hr/health_event.bin
  expect_bad "$word" health --replay hr
  grep -q 'hr/health_event.bin' err.txt || fail "health --replay hr ($f): $(cat err.txt)"
done
rm -rf hr
# health files cut short or without their columns
for case in empty_slots no_column no_isv one_field; do
  rm -rf hr && cp -r rh hr && rm -f hr/isv.svg
  case $case in
    empty_slots) : >hr/health_slots.csv; word='hr/health_slots.csv is empty';;
    no_column) sed -i '1s/max_abs_total/other/' hr/health_slots.csv; word='lacks the column max_abs_total';;
    no_isv) rm hr/health_isv.csv; word='cannot read hr/health_isv.csv';;
    one_field) echo 'x' >>hr/health_isv.csv; word='hr/health_isv.csv:';;
  esac
  expect_bad "$word" health hr
done
rm -rf hr
ok "dqn health: bad flags, run directories and event files exit 2"

echo "test_bad_input: all $n checks passed"
