#!/usr/bin/env bash
# The one script for the GPU machine: build for sm_90, run the GPU tests, compute-sanitizer on the
# GPU op tests (small shapes), the benchmarks (ours and the PyTorch peer in the same run, the
# health subsystem's overhead). Logs go to $OUT when set (else build-gpu/check-logs); a short table
# comes last. Exits non-zero if any step failed.
#   PARTS="tests san bench torch extra prof ab timeline dot" (default: tests san bench torch extra)
#   picks the parts; SAN_TIMEOUT (s) per sanitizer run; BS the batch sizes of the update
#   benchmark, MATHS its precisions (fp32 tf32); prof runs scripts/gpu-profile.sh (per-kernel times under Nsight Compute) into the
#   logs; ab compares environment settings (AB_VARS, AB_RUNS, below); timeline prints each kernel's
#   start and end inside a replay (bench_timeline, TL_VARS, TL_RUNS, below).
set -u
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
BUILD=build-gpu
LOG=${OUT:-$BUILD/check-logs}; mkdir -p "$LOG"
SAN=/usr/local/cuda/bin/compute-sanitizer
SAN_TIMEOUT=${SAN_TIMEOUT:-150}
PARTS=${PARTS:-tests san bench torch extra}
BS=${BS:-32 256 1024 4096}
MATHS=${MATHS:-fp32 tf32}
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
rows=(); bad=0
row() { rows+=("$(printf '%-28s %-6s %s' "$1" "$2" "$3")"); [ "$2" = ok ] || [ "$2" = skip ] || bad=1; }

{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv 2>&1 || true
  nvcc --version 2>&1 | tail -n 2; } > "$LOG/device.txt"
head -n 2 "$LOG/device.txt"

t0=$SECONDS
if make -j16 BUILD=$BUILD CUDA=1 CUDA_ARCH=sm_90 > "$LOG/build.log" 2>&1; then
  row build ok "full build, $((SECONDS - t0))s"
else
  row build FAIL "see build.log"; tail -n 40 "$LOG/build.log"
fi

if has tests; then
  bash tests/run_gpu_tests.sh $BUILD > "$LOG/test-gpu.log" 2>&1
  rc=$?
  cat "$LOG/test-gpu.log"
  cp $BUILD/test-logs/test_gpu_*.log "$LOG/" 2>/dev/null
  row test-gpu "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "$(tail -n 1 "$LOG/test-gpu.log")"
fi

if has san && [ -x "$SAN" ]; then
  # memcheck and racecheck over the op registry's small shapes and the health ops; initcheck
  # over the registry
  for run in memcheck:test_backend_ops memcheck:test_gpu_health memcheck:test_gpu_per \
             racecheck:test_backend_ops racecheck:test_gpu_health racecheck:test_gpu_per \
             initcheck:test_backend_ops; do
    tool=${run%%:*}; bin=${run##*:}
    [ -x $BUILD/tests/$bin ] || continue
    t0=$SECONDS
    DQN_GPU_TEST_SMALL=1 DQN_GPU_HEALTH_OPS_ONLY=1 timeout "$SAN_TIMEOUT" "$SAN" --tool $tool --error-exitcode 3 \
        $BUILD/tests/$bin > "$LOG/sanitizer-$tool-$bin.log" 2>&1
    rc=$?
    row "sanitizer $tool $bin" "$([ $rc -eq 0 ] && echo ok || echo FAIL)" \
        "rc $rc, $((SECONDS - t0))s: $(grep -m1 'SUMMARY' "$LOG/sanitizer-$tool-$bin.log")"
  done
fi

: > "$LOG/bench.txt"
if has bench && [ -x $BUILD/bench/bench_update ]; then
  for math in $MATHS; do
    dev=cuda; [ $math = tf32 ] && dev=cuda:tf32
    for model in cartpole seed; do
      $BUILD/bench/bench_update $dev $model off $BS >> "$LOG/bench.txt" 2>&1 || row "bench $model $math" FAIL "see bench.txt"
    done
  done
  # the health subsystem's overhead: off, detect, guard, interleaved twice (fp32)
  for rep in 1 2; do
    for model in cartpole seed; do
      for h in off detect guard; do
        $BUILD/bench/bench_update cuda $model $h 256 4096 >> "$LOG/bench-health.txt" 2>&1 || row "bench health $model $h" FAIL "see bench-health.txt"
      done
    done
  done
  row bench_update ok "$(grep -c '^update' "$LOG/bench.txt") configs, $(grep -c '^update' "$LOG/bench-health.txt") health"
fi
# an environment setting as env's arguments: VAR=value, several joined by '+', or plain (none)
setting() { [ "$1" = plain ] || echo "${1//+/ }"; }
# A/B of environment settings, interleaved twice in the same run: AB_VARS (each a setting; the
# CUDA backend has no switches of its own, so there is no default: two builds are
# scripts/gpu-ab.sh's A/B) over AB_RUNS (device,model,health), at the batch sizes BS; rows tagged
# with the setting
if has ab && [ -z "${AB_VARS:-}" ]; then
  row bench-ab skip "no AB_VARS"
elif has ab && [ -x $BUILD/bench/bench_update ]; then
  AB_RUNS=${AB_RUNS:-cuda,cartpole,off cuda,seed,off cuda,cartpole,guard cuda,seed,guard}
  for rep in 1 2; do
    for r in $AB_RUNS; do
      IFS=, read -r dev model h <<<"$r"
      for v in $AB_VARS; do
        env $(setting "$v") $BUILD/bench/bench_update "$dev" "$model" "$h" $BS 2>&1 | sed "s/^update/update [$v]/"
      done
    done
  done > "$LOG/bench-ab.txt"
  row bench-ab ok "$(grep -c '^update' "$LOG/bench-ab.txt") rows"
fi
# where a replay's time goes: each kernel's start and end as the graph runs them (CUPTI), for
# TL_RUNS (device,model,health,B), under each of TL_VARS (as AB_VARS); the summary lines last
if has timeline && [ -x $BUILD/bench/bench_timeline ]; then
  TL_VARS=${TL_VARS:-plain}
  TL_RUNS=${TL_RUNS:-cuda,cartpole,off,256 cuda,cartpole,off,1024 cuda,seed,off,32}
  for r in $TL_RUNS; do
    IFS=, read -r dev model h b <<<"$r"
    for v in $TL_VARS; do
      echo "== [$v] $dev $model $h $b"
      env $(setting "$v") $BUILD/bench/bench_timeline "$dev" "$model" "$h" "$b" 2>&1 | sed "s/^timeline/timeline [$v]/"
    done
  done > "$LOG/timeline.txt"
  row timeline "$(grep -q 'span' "$LOG/timeline.txt" && echo ok || echo FAIL)" \
      "$(grep -c ' span ' "$LOG/timeline.txt") runs"
fi
# the composed update graphs as DOT (nodes, kernels, edge types), cartpole and seed, health off
if has dot && [ -x $BUILD/bench/bench_update ]; then
  for model in cartpole seed; do
    for b in 32 4096; do
      DQN_GRAPH_DOT="$LOG/graph-$model-$b.dot" $BUILD/bench/bench_update cuda $model off $b > /dev/null 2>&1
    done
  done
  row graph-dot ok "$(ls "$LOG"/graph-*.dot 2>/dev/null | wc -l) graphs"
fi
if has torch && [ -f bench/torch_update.py ] && python3 -c 'import torch' 2>/dev/null; then
  for math in $MATHS; do
    for model in cartpole seed; do
      timeout 240 python3 bench/torch_update.py --model $model --batch ${BS// /,} --math $math \
          >> "$LOG/bench.txt" 2>&1 || row "torch $model $math" FAIL "see bench.txt"
    done
  done
  row torch_update ok "$(grep -c '^torch' "$LOG/bench.txt") configs"
fi
if has prof; then
  OUT=$LOG/profile bash scripts/gpu-profile.sh > "$LOG/profile.txt" 2>&1
  row profile "$([ $? -eq 0 ] && echo ok || echo FAIL)" "$(grep -c kernels "$LOG/profile.txt") configs"
fi
# further benchmarks of other parts (market env, multi-GPU): scripts/gpu-extra.d/*.sh
if has extra; then
  for x in scripts/gpu-extra.d/*.sh; do
    [ -f "$x" ] || continue
    name=$(basename "$x" .sh)
    bash "$x" $BUILD > "$LOG/extra-$name.txt" 2>&1
    rc=$?
    row "extra $name" "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "$(tail -n 1 "$LOG/extra-$name.txt")"
  done
fi
grep -hE '^(update|torch|multigpu|market|solve)' "$LOG/bench.txt" "$LOG/bench-health.txt" \
    "$LOG/bench-ab.txt" "$LOG"/extra-*.txt 2>/dev/null || true
grep -h ' span ' "$LOG/timeline.txt" 2>/dev/null || true

# on the device machine every log goes back as one archive (the tool brings back 8 files)
cp $BUILD/test-logs/*.log "$LOG/" 2>/dev/null
if [ -n "${OUT:-}" ] && tar -czf /tmp/gpu-logs.tgz -C "$LOG" .; then
  find "$LOG" -mindepth 1 -delete && mv /tmp/gpu-logs.tgz "$LOG/"
fi
echo
echo "== gpu-check summary (logs: $LOG) =="
printf '%s\n' "${rows[@]}"
exit $bad
