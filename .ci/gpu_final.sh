#!/usr/bin/env bash
# One device call that checks and then measures: the sanitizers of SANITIZE_IMPLS (and
# matrix_recompute's racecheck by size) in the background and the GPU tests selected by
# GPU_TESTS_K in the foreground; then, if the tests passed, the committed sweep (every
# implementation, N = 64 ... 32768, both scenarios, wall / device / graph) and the Matrix
# variants at N = 131072, alone on the GPU. Logs come back as logs.tgz, the sweeps as
# CSV and JSON under $OUT.
# Usage on the device: NMSBENCH_GIT_COMMIT=<hash> bash .ci/gpu_final.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/nmsbench-gpu}
LOGS="$OUT/logs"
mkdir -p "$LOGS"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v -i warn | tail -2
pids=()
for impl in ${SANITIZE_IMPLS:-matrix_recompute}; do
    for tool in memcheck initcheck synccheck; do
        timeout "${SANITIZE_LIMIT:-200}" compute-sanitizer --tool "$tool" --print-limit 20 \
            python3 .ci/sanitize_run.py "$impl" > "$LOGS/sanitizer-$impl-$tool.log" 2>&1 &
        pids+=($!)
    done
done
for n in ${MATRIX_RACECHECK_SIZES:-31 100 1000 1025 3000}; do
    SANITIZE_SIZES=$n timeout "${SANITIZE_LIMIT:-200}" compute-sanitizer --tool racecheck --print-limit 20 \
        python3 .ci/sanitize_run.py matrix_recompute > "$LOGS/sanitizer-matrix_recompute-racecheck-n$n.log" 2>&1 &
    pids+=($!)
done
timeout "${GPU_TEST_LIMIT:-240}" python3 -m pytest -q -m gpu -p no:cacheprovider -k "${GPU_TESTS_K:-not 131072}" tests \
    > "$LOGS/pytest-gpu.log" 2>&1
tests=$?
echo "pytest rc $tests"; tail -4 "$LOGS/pytest-gpu.log"
for pid in "${pids[@]}"; do wait "$pid"; done
for f in "$LOGS"/sanitizer-*.log; do echo "== $(basename "$f"): $(tail -1 "$f")"; done
if [ "$tests" -eq 0 ]; then
    nmsbench sweep --n 64,256,512,1024,2048,4096,8192,32768 --impl allpairs,bitmask_classic,bitmask_two_phase,hard_fused,matrix_fused,matrix_naive,matrix_recompute,torchvision \
        --device cuda --dtype float32 --scenario clustered,uniform --iou 0.5 --seed 0 --classes 1 \
        --timer wall,device,graph --min-run-time 0.05 --threads 16 --out "$OUT/sweep-h200-all.csv" > "$LOGS/sweep.log" 2>&1
    echo "sweep rc $?"
    nmsbench sweep --n 131072 --impl matrix_fused,matrix_naive,matrix_recompute --device cuda --dtype float32 \
        --scenario clustered,uniform --iou 0.5 --seed 0 --classes 1 --timer wall,device --min-run-time 0.05 \
        --threads 16 --out "$OUT/sweep-h200-matrix-131072.csv" > "$LOGS/sweep-131072.log" 2>&1
    echo "sweep 131072 rc $?"
fi
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOGS"
