#!/usr/bin/env bash
# Runs every GPU test binary of a build ($1, default build): on the GPU machine a skip is a
# failure too, since it means the device was not found. Prints "N passed, N failed" last.
set -u
cd "$(dirname "$0")/.."
BUILD=${1:-build}
LOGDIR=$BUILD/test-logs; mkdir -p "$LOGDIR"
pass=0; fail=0; failed=()
for t in "$BUILD"/tests/test_gpu_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  t0=$SECONDS
  "$t" > "$LOGDIR/$name.log" 2>&1
  rc=$?
  dt=$((SECONDS - t0))
  if [ $rc -eq 0 ]; then pass=$((pass+1)); echo "PASS  $name (${dt}s)"
  else
    fail=$((fail+1)); failed+=("$name")
    if [ $rc -eq 77 ]; then echo "FAIL  $name skipped on the GPU machine: $(tail -n 1 "$LOGDIR/$name.log")"
    else echo "FAIL  $name (rc $rc, ${dt}s)"; tail -n 30 "$LOGDIR/$name.log" | sed 's/^/      /'; fi
  fi
done
[ $((pass + fail)) -eq 0 ] && { echo "FAIL  no test_gpu_* binary under $BUILD/tests"; fail=1; }
echo
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
