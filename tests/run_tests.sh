#!/usr/bin/env bash
# Runs every test: each C test binary of the normal build; the unit tests again from the
# sanitizer build (if given); the Python package installed into .venv with pip and its pytest
# suite (tests/python); each tests/py/test_*.py in .venv. Exit 77 = skipped.
# Prints "N passed, N failed, N skipped" last and exits non-zero on any failure.
set -u
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SAN=${2:-}
pass=0; fail=0; skip=0; failed=()
run() {  # name, command...
  local name=$1; shift
  local t0=$SECONDS
  "$@" > "$LOGDIR/$name.log" 2>&1
  local rc=$?
  local dt=$((SECONDS - t0))
  if [ $rc -eq 0 ]; then pass=$((pass+1)); echo "PASS  $name (${dt}s)"
  elif [ $rc -eq 77 ]; then skip=$((skip+1)); echo "SKIP  $name: $(tail -n 1 "$LOGDIR/$name.log")"
  else fail=$((fail+1)); failed+=("$name"); echo "FAIL  $name (rc $rc, ${dt}s)"; tail -n 30 "$LOGDIR/$name.log" | sed 's/^/      /'
  fi
}
LOGDIR=$BUILD/test-logs; mkdir -p "$LOGDIR"
if ! scripts/setup-venv.sh; then echo "FAIL  setup-venv"; fail=$((fail+1)); fi
export DQN_PYTHON=$PWD/.venv/bin/python DQN_BUILD=$PWD/$BUILD DQN_CLI=$PWD/$BUILD/dqn
for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  run "$(basename "$t")" "$t"
done
if [ -n "$SAN" ]; then
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  for t in "$SAN"/tests/test_*; do
    [ -x "$t" ] || continue
    case "$(basename "$t")" in test_learn*) continue;; esac   # learning runs: normal build only
    DQN_BUILD=$PWD/$SAN DQN_CLI=$PWD/$SAN/dqn run "san:$(basename "$t")" "$t"
  done
fi
# the Python package as a user installs it (pip install .), then its tests against that install
if [ -f pyproject.toml ] && [ -d tests/python ]; then
  run pip-install .venv/bin/pip install -q --disable-pip-version-check .
  run pytest-python env -u DQN_LIB .venv/bin/python -m pytest -q -p no:cacheprovider tests/python
fi
for t in tests/py/test_*.py tests/test_*.sh; do
  [ -f "$t" ] || continue
  case "$t" in *.py) run "$(basename "$t")" "$DQN_PYTHON" "$t";; *.sh) run "$(basename "$t")" bash "$t";; esac
done
echo
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
