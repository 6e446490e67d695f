# The helpers of the CLI tests (tests/test_*cli*.sh), sourced from the repository root as
#   . tests/cli_lib.sh NAME
# CLI is the dqn program (DQN_CLI, default build/dqn; exit 77 without one); the test runs in a
# fresh directory /tmp/dqn_NAME_XXXXXX, removed at exit.
CLI=${DQN_CLI:-$PWD/build/dqn}
case "$CLI" in /*) ;; *) CLI=$PWD/$CLI ;; esac
if [ ! -x "$CLI" ]; then echo "skip: no dqn program at $CLI"; exit 77; fi
PY=${DQN_PYTHON:-python3}
# a rank's environment (docs/multi-gpu.md) would turn every dqn train into a rank
unset DQN_RANK DQN_WORLD_SIZE DQN_LOCAL_DEVICE DQN_NCCL_ID DQN_NCCL_ID_FILE DQN_NCCL_TIMEOUT_S \
      NCCL_COMM_ID
W=$(mktemp -d "/tmp/dqn_${1:-test}_XXXXXX")
trap 'rm -rf "$W"' EXIT
cd "$W"

n=0
fail() { echo "FAIL: $*"; exit 1; }
ok() { n=$((n + 1)); echo "ok $n - $*"; }
# every path and every file's checksum under $W, but the captured output
snap() {
  find . -mindepth 1 ! -name out.txt ! -name err.txt | sort
  find . -type f ! -name out.txt ! -name err.txt -exec cksum {} + | sort
}

# expect_bad WORD ARGS...: exit 2, one stderr line "dqn: ..." containing WORD, nothing written
expect_bad() {
  local word=$1; shift
  local before; before=$(snap)
  "$CLI" "$@" >out.txt 2>err.txt
  local rc=$?
  [ $rc -eq 2 ] || fail "dqn $*: exit $rc, expected 2; stderr: $(cat err.txt)"
  [ "$(wc -l <err.txt)" -eq 1 ] || fail "dqn $*: stderr is not one line: $(cat err.txt)"
  grep -q '^dqn: ' err.txt || fail "dqn $*: stderr does not start with 'dqn: ': $(cat err.txt)"
  grep -qF -- "$word" err.txt || fail "dqn $*: stderr does not name '$word': $(cat err.txt)"
  [ "$(snap)" = "$before" ] || fail "dqn $*: wrote files: $(diff <(echo "$before") <(snap))"
  [ ! -e runs ] && [ ! -e rbad ] || fail "dqn $*: created a run directory"
  ok "dqn $* -> 2: $(cat err.txt)"
}

# expect_ok ARGS...: exit 0 (stdout in out.txt)
expect_ok() {
  "$CLI" "$@" >out.txt 2>err.txt
  local rc=$?
  [ $rc -eq 0 ] || fail "dqn $*: exit $rc; stderr: $(cat err.txt)"
}

json() {  # json FILE PYTHON-EXPRESSION-ON-e: prints its value
  "$PY" -c 'import json, sys; e = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

# with_env VAR=VALUE... -- COMMAND...: COMMAND (a helper above, or a program) with those
# variables exported, unset again afterwards
with_env() {
  local vars=() v
  while [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  for v in "${vars[@]}"; do export "${v?}"; done
  "$@"
  local rc=$?
  for v in "${vars[@]}"; do unset "${v%%=*}"; done
  return $rc
}

# need_gpus N: exit 77 ("needs N GPUs", which tests/run_gpu_tests.sh reads) when nvidia-smi
# lists fewer
need_gpus() {
  local g; g=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  if [ "$g" -lt "$1" ]; then echo "SKIP: needs $1 GPUs, nvidia-smi lists $g"; exit 77; fi
}
