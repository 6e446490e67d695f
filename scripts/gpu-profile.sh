#!/usr/bin/env bash
# Per-kernel GPU times of the captured update (Nsight Compute, clocks left alone), for the kernel
# notes in docs/gpu-notes.md: builds for sm_90, then profiles a few kernel launches of
# bench_update after its warm-up for each configuration given (default: the ones below).
# Output: $OUT (or build-gpu/profile) ncu-<config>.csv, one row per kernel node (in
# $OUT/profile.tgz when OUT is set).
#   CONFIGS="cuda,cartpole,guard,256 ..." SKIP=kernels to skip COUNT=kernels to profile
#   KERNEL=regex: only the kernels whose name matches (SKIP then counts only those: a kernel
#   launched once an update needs SKIP of a few tens at most); SECTIONS="LaunchStats Occupancy ...":
#   those ncu sections in full, as text (ncu-<config>.txt), instead of the times
set -u
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
BUILD=build-gpu
LOG=${OUT:-$BUILD/profile}; mkdir -p "$LOG"
CONFIGS=${CONFIGS:-cuda,cartpole,guard,256 cuda,seed,guard,256 cuda:tf32,seed,off,4096 cuda,cartpole,off,32 cuda,seed,off,32}
SKIP=${SKIP:-400}; COUNT=${COUNT:-240}
make -j16 BUILD=$BUILD CUDA=1 CUDA_ARCH=sm_90 > "$LOG/build.log" 2>&1 || { tail -n 40 "$LOG/build.log"; exit 1; }
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
what=(--metrics gpu__time_duration.sum --csv); ext=csv
if [ -n "${SECTIONS:-}" ]; then
  what=(); for sec in $SECTIONS; do what+=(--section "$sec"); done; ext=txt
fi
only=(); [ -n "${KERNEL:-}" ] && only=(--kernel-name "regex:$KERNEL")
for cfg in $CONFIGS; do
  name=${cfg//[,:]/_}
  timeout 150 "$NCU" --clock-control none "${only[@]}" --launch-skip "$SKIP" \
      --launch-count "$COUNT" "${what[@]}" $BUILD/bench/bench_update ${cfg//,/ } \
      > "$LOG/ncu-$name.$ext" 2> "$LOG/ncu-$name.err"
  echo "$cfg: rc $? $(grep -c -E 'gpu__time_duration|Section:' "$LOG/ncu-$name.$ext") kernels or sections"
done
# the device tool brings back few files: one archive when run there on its own
if [ -n "${OUT:-}" ] && [ "$LOG" = "$OUT" ] && tar -czf /tmp/profile.tgz -C "$LOG" .; then
  find "$LOG" -mindepth 1 -delete && mv /tmp/profile.tgz "$LOG/"
fi
