#!/usr/bin/env bash
# A/B of git revisions (and the working tree) in one device run: each built for sm_90,
# bench_update run for each, interleaved, two passes; a table of ms per update for each against
# the first revision (the base) and, where a health mode ran, its overhead against the same
# build's `off`.
#   Here:        bash scripts/gpu-ab.sh prepare BASE [REV...]   (their trees into .abbase/, ignored)
#   The device:  run tool with carry [".abbase"]:  bash scripts/gpu-ab.sh run
#   The working tree is measured as "tree" beside them (AB_TREE=0: not). AB_RUNS="cuda,cartpole,off
#   cuda,seed,detect ..." (device,model,health), BS="256 4096", PASSES (default 2),
#   TESTS="test_gpu_model test_gpu_health" (run first, on every build but the base's);
#   AB_TARGETS="bench_update test_gpu_model": build only these (bench/ or tests/ names; default all).
#   AB_STAGE=build (builds and TESTS) then, in a second call that does not carry .abbase (so
#   that the builds stay), AB_STAGE=bench: a run too long for one call.
# Logs under $OUT when set (else build-gpu/ab-logs); exits non-zero if a build or test failed.
set -u
cd "$(dirname "$0")/.."
AB=.abbase
case "${1:-}" in
prepare)
    shift
    [ $# -ge 1 ] || { echo "usage: gpu-ab.sh prepare BASE [REV...]"; exit 2; }
    rm -rf "$AB" && mkdir -p "$AB" || exit 1
    i=0
    for rev in "$@"; do
        name=$(git rev-parse --short "$rev") || exit 1
        [ $i = 0 ] && dir=$AB/base || dir=$AB/v$i
        mkdir -p "$dir" && git archive "$rev" | tar -x -C "$dir" || exit 1
        echo "$rev ($name)" > "$dir/.rev"
        echo "$dir: $rev ($name)"
        i=$((i + 1))
    done
    echo "on the device: carry [\"$AB\"], bash scripts/gpu-ab.sh run"
    exit 0;;
run) ;;
*) sed -n '2,14p' "$0"; exit 2;;
esac
[ -f "$AB/base/Makefile" ] || { echo "no $AB/base: run 'gpu-ab.sh prepare BASE [REV...]' here and carry it"; exit 2; }
export PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
LOG=${OUT:-build-gpu/ab-logs}; mkdir -p "$LOG"
AB_RUNS=${AB_RUNS:-cuda,cartpole,off cuda,cartpole,detect cuda,cartpole,guard cuda,seed,off cuda,seed,detect cuda,seed,guard}
BS=${BS:-256 1024 4096}; PASSES=${PASSES:-2}; TESTS=${TESTS:-}; STAGE=${AB_STAGE:-all}
# the builds: name and source folder (the tree's build-gpu is the working tree's own)
names=(); dirs=()
for d in "$AB"/base "$AB"/v*; do
    [ -f "$d/Makefile" ] || continue
    names+=("$(basename "$d")"); dirs+=("$d")
done
[ "${AB_TREE:-1}" = 1 ] && { names+=(tree); dirs+=(.); }
for k in "${!names[@]}"; do echo "${names[$k]}: $(cat "${dirs[$k]}/.rev" 2>/dev/null || echo 'the working tree')"; done
bad=0
if [ "$STAGE" != bench ]; then
    jobs=$(( $(nproc) / ${#names[@]} )); [ "$jobs" -ge 2 ] || jobs=2
    targets=()
    for t in ${AB_TARGETS:-}; do
        case $t in bench_*) targets+=("build-gpu/bench/$t");; *) targets+=("build-gpu/tests/$t");; esac
    done
    pids=()
    for k in "${!names[@]}"; do
        (cd "${dirs[$k]}" && make -j$jobs BUILD=build-gpu CUDA=1 CUDA_ARCH=sm_90 "${targets[@]}") \
            > "$LOG/build-${names[$k]}.log" 2>&1 &
        pids+=($!)
    done
    for k in "${!names[@]}"; do
        wait "${pids[$k]}" || { echo "${names[$k]} build failed"; tail -n 20 "$LOG/build-${names[$k]}.log"; bad=1; }
    done
    [ $bad = 0 ] || exit 1
    for k in "${!names[@]}"; do
        [ "${names[$k]}" = base ] && continue
        for t in $TESTS; do
            s=$SECONDS; "${dirs[$k]}/build-gpu/tests/$t" > "$LOG/$t-${names[$k]}.log" 2>&1
            rc=$?; echo "${names[$k]} $t rc $rc ($((SECONDS - s))s): $(tail -n 1 "$LOG/$t-${names[$k]}.log")"
            [ $rc = 0 ] || bad=1
        done
    done
fi
[ "$STAGE" = build ] && exit $bad
for pass in $(seq "$PASSES"); do
    for r in $AB_RUNS; do
        IFS=, read -r dev model h <<<"$r"
        for k in "${!names[@]}"; do
            "${dirs[$k]}/build-gpu/bench/bench_update" "$dev" "$model" "$h" $BS 2>&1 |
                grep '^update' | sed "s/^update/${names[$k]}/"
        done
    done
done > "$LOG/ab.txt"
echo "$PASSES passes, each build against base:"
python3 - "$LOG/ab.txt" "${names[@]}" <<'PY'
import collections, re, sys
names = sys.argv[2:]
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    m = re.match(r'(\w+) (\S+) model=(\w+) .*math=(\w+) health=(\w+) B=(\d+) .* ([\d.]+) ms/update', l)
    if m:
        d[(m[2], m[3], m[4], int(m[6]), m[5], m[1])].append(float(m[7]))
mean = lambda k: sum(d[k]) / len(d[k]) if d.get(k) else float('nan')
head = f"{'device':8s} {'model':8s} {'math':5s} {'B':>5s} {'health':6s}"
for n in names:
    head += f" {n + ' ms':>9s}" + ("" if n == 'base' else f" {'vs base':>8s}") + f" {'ovh':>7s}"
print(head)
for key in sorted({k[:5] for k in d}, key=lambda k: (k[0], k[1], k[2], k[3], ['off', 'detect', 'guard'].index(k[4]))):
    b = mean(key + ('base',))
    row = f"{key[0]:8s} {key[1]:8s} {key[2]:5s} {key[3]:5d} {key[4]:6s}"
    for n in names:
        v, off = mean(key + (n,)), mean(key[:4] + ('off', n))
        row += f" {v:9.4f}" + ("" if n == 'base' else f" {100 * (v / b - 1):+7.2f}%")
        row += f" {100 * (v / off - 1):+6.2f}%" if key[4] != 'off' and off == off else f" {'':7s}"
    print(row)
PY
exit $bad
