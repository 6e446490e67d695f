#!/usr/bin/env bash
# A/B of the working tree against a git revision, in one device call: both built for sm_90,
# bench_update run for each, interleaved, two passes; a table of ms per update with the change
# and, where a health mode ran, its overhead against the same build's `off`.
#   Here:        bash scripts/gpu-ab.sh prepare REV     (REV's tree into .abbase/, git-ignored)
#   The device:  run tool with carry [".abbase"]:  bash scripts/gpu-ab.sh run
#   AB_RUNS="cuda,cartpole,off cuda,seed,detect ..." (device,model,health), BS="256 4096",
#   PASSES (default 2), TESTS="test_gpu_model test_gpu_health" (run first, on the new build).
# Logs under $OUT when set (else build-gpu/ab-logs); exits non-zero if a build or test failed.
set -u
cd "$(dirname "$0")/.."
BASE=.abbase
case "${1:-}" in
prepare)
    rev=${2:?usage: gpu-ab.sh prepare REV}
    rm -rf "$BASE" && mkdir -p "$BASE" && git archive "$rev" | tar -x -C "$BASE" || exit 1
    git rev-parse --short "$rev" > "$BASE/.rev"
    echo "$BASE: $(cat "$BASE/.rev"); on the device: carry [\"$BASE\"], bash scripts/gpu-ab.sh run"
    exit 0;;
run) ;;
*) sed -n '2,9p' "$0"; exit 2;;
esac
[ -f "$BASE/Makefile" ] || { echo "no $BASE: run 'gpu-ab.sh prepare REV' here and carry it"; exit 2; }
export PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
LOG=${OUT:-build-gpu/ab-logs}; mkdir -p "$LOG"
AB_RUNS=${AB_RUNS:-cuda,cartpole,off cuda,cartpole,detect cuda,cartpole,guard cuda,seed,off cuda,seed,detect cuda,seed,guard}
BS=${BS:-256 1024 4096}; PASSES=${PASSES:-2}; TESTS=${TESTS:-}
bad=0
(cd "$BASE" && make -j8 BUILD=build-gpu CUDA=1 CUDA_ARCH=sm_90 > "$LOG/build-base.log" 2>&1) &
make -j8 BUILD=build-gpu CUDA=1 CUDA_ARCH=sm_90 > "$LOG/build-new.log" 2>&1 || { echo "new build failed"; bad=1; }
wait $! || { echo "base build failed"; bad=1; }
[ $bad = 0 ] || exit 1
for t in $TESTS; do
    s=$SECONDS; build-gpu/tests/$t > "$LOG/$t.log" 2>&1
    rc=$?; echo "$t rc $rc ($((SECONDS - s))s): $(tail -n 1 "$LOG/$t.log")"
    [ $rc = 0 ] || bad=1
done
for pass in $(seq "$PASSES"); do
    for r in $AB_RUNS; do
        IFS=, read -r dev model h <<<"$r"
        for v in base new; do
            b=build-gpu; [ $v = base ] && b=$BASE/build-gpu
            $b/bench/bench_update "$dev" "$model" "$h" $BS 2>&1 | grep '^update' | sed "s/^update/$v/"
        done
    done
done > "$LOG/ab.txt"
echo "base $(cat "$BASE/.rev" 2>/dev/null) against the working tree, $PASSES passes:"
python3 - "$LOG/ab.txt" <<'PY'
import collections, re, sys
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    m = re.match(r'(\w+) (\S+) model=(\w+) .*math=(\w+) health=(\w+) B=(\d+) .* ([\d.]+) ms/update', l)
    if m:
        d[(m[2], m[3], m[4], int(m[6]), m[5], m[1])].append(float(m[7]))
mean = lambda k: sum(d[k]) / len(d[k]) if d.get(k) else float('nan')
print(f"{'device':10s} {'model':8s} {'math':5s} {'B':>5s} {'health':6s} {'base ms':>8s} {'new ms':>8s} {'change':>7s} {'ovh base':>8s} {'ovh new':>8s}")
for key in sorted({k[:5] for k in d}, key=lambda k: (k[0], k[1], k[2], k[3], ['off', 'detect', 'guard'].index(k[4]))):
    b, n = mean(key + ('base',)), mean(key + ('new',))
    ob, on = mean(key[:4] + ('off', 'base')), mean(key[:4] + ('off', 'new'))
    ovh = lambda x, o: f"{100 * (x / o - 1):+7.2f}%" if key[4] != 'off' and o == o else ''
    print(f"{key[0]:10s} {key[1]:8s} {key[2]:5s} {key[3]:5d} {key[4]:6s} {b:8.4f} {n:8.4f} {100 * (n / b - 1):+6.2f}% {ovh(b, ob):>8s} {ovh(n, on):>8s}")
PY
exit $bad
