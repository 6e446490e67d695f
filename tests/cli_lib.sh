#!/usr/bin/env bash
# Shared by the CLI tests (tests/test_cli*.sh), sourced: finds the dqn program (skips, exit 77,
# without one), works in a fresh temporary directory, and defines the checks. Needs DQN_CLI;
# the caller sets -u and runs from the repository root.
CLI=${DQN_CLI:-$PWD/build/dqn}
case "$CLI" in /*) ;; *) CLI=$PWD/$CLI ;; esac
if [ ! -x "$CLI" ]; then echo "skip: no dqn program at $CLI"; exit 77; fi
PY=${DQN_PYTHON:-python3}
W=$(mktemp -d /tmp/dqn_test_cli_XXXXXX)
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

