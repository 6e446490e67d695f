#!/usr/bin/env bash
# The env_step kernel's float64 arithmetic is the sequence of IEEE operations the shared env
# code (src/envs/classic.h, classic_math.h) writes, as the C build computes it: nvcc contracts
# no product of it into an fma. The PTX of src/backends/cuda/cuda_env.cu as the Makefile builds
# it must hold the same fma instructions as with -fmad=false (contraction off), apart from
# Philox's 53-bit double (dqn_philox_double: hi * 2^26 + lo, an exact product, so that its
# contraction changes no bit). Skips (77) without nvcc.
set -u
cd "$(dirname "$0")/.."
NVCC=${NVCC:-nvcc}
command -v "$NVCC" >/dev/null 2>&1 || { echo "SKIP: no nvcc"; exit 77; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
flags=(-O3 -arch=sm_90 -std=c++20 -Iinclude -Isrc -DDQN_HAVE_CUDA=1 --expt-relaxed-constexpr)
"$NVCC" "${flags[@]}" -ptx src/backends/cuda/cuda_env.cu -o "$tmp/on.ptx" || exit 1
"$NVCC" "${flags[@]}" -fmad=false -ptx src/backends/cuda/cuda_env.cu -o "$tmp/off.ptx" || exit 1
two26=0d4190000000000000   # 2^26
on=$(grep -c 'fma\.rn\.f64' "$tmp/on.ptx")
philox=$(grep -c "fma\.rn\.f64.*$two26" "$tmp/on.ptx")
off=$(grep -c 'fma\.rn\.f64' "$tmp/off.ptx")
echo "fma.rn.f64: $on as built ($philox of them Philox's exact hi * 2^26 + lo), $off with -fmad=false"
[ "$off" -gt 0 ] || { echo "no fma at all with -fmad=false: the explicit ones are missing"; exit 1; }
if [ $((on - philox)) -ne "$off" ]; then
  echo "nvcc contracted $((on - philox - off)) products of the env code into fmas:"
  echo "write each product that is added as DQN_MUL(a, b) (src/envs/classic_math.h)"
  exit 1
fi
echo "no contraction in the env kernel"
