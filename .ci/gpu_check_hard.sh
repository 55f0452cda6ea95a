#!/usr/bin/env bash
# One device call after a CUDA kernel change: the sanitizers in the background (all four
# tools for each of SANITIZE_IMPLS; matrix_recompute racecheck split by size over
# processes when MATRIX_RACECHECK_SIZES is set, other tools in MATRIX_TOOLS), the GPU tests in the foreground
# (GPU_TESTS_K, default every GPU test but the N = 131072 one), then the stage probe alone
# (PROBE_LIMIT=0: none). The device returns at most 8 files, so the logs come back as one
# logs.tgz, and each log's last lines are printed. Exits with the tests' status.
# Usage on the device: NMSBENCH_GIT_COMMIT=<hash> bash .ci/gpu_check_hard.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/nmsbench-gpu}
LOGS="$OUT/logs"
mkdir -p "$LOGS"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v -i warn | tail -2
pids=()
for impl in ${SANITIZE_IMPLS-hard_fused}; do  # set but empty: none
    for tool in memcheck racecheck initcheck synccheck; do
        timeout "${SANITIZE_LIMIT:-240}" compute-sanitizer --tool "$tool" --print-limit 20 \
            python3 .ci/sanitize_run.py "$impl" > "$LOGS/sanitizer-$impl-$tool.log" 2>&1 &
        pids+=($!)
    done
done
for tool in ${MATRIX_TOOLS:-}; do  # matrix_recompute, every size in one process
    timeout "${SANITIZE_LIMIT:-240}" compute-sanitizer --tool "$tool" --print-limit 20 \
        python3 .ci/sanitize_run.py matrix_recompute > "$LOGS/sanitizer-matrix_recompute-$tool.log" 2>&1 &
    pids+=($!)
done
for n in ${MATRIX_RACECHECK_SIZES:-}; do
    SANITIZE_SIZES=$n timeout "${SANITIZE_LIMIT:-240}" compute-sanitizer --tool racecheck --print-limit 20 \
        python3 .ci/sanitize_run.py matrix_recompute > "$LOGS/sanitizer-matrix_recompute-racecheck-n$n.log" 2>&1 &
    pids+=($!)
done
timeout "${GPU_TEST_LIMIT:-300}" python3 -m pytest -q -m gpu -p no:cacheprovider --durations=8 \
    -k "${GPU_TESTS_K:-not 131072}" tests > "$LOGS/pytest-gpu.log" 2>&1
tests=$?
echo "pytest rc $tests"; tail -25 "$LOGS/pytest-gpu.log"
for pid in "${pids[@]}"; do wait "$pid"; echo "sanitizer pid $pid rc $?"; done
for f in "$LOGS"/sanitizer-*.log; do echo "== $f"; tail -2 "$f"; done
if [ "${PROBE_LIMIT:-90}" != 0 ]; then
    timeout "${PROBE_LIMIT:-90}" python3 .ci/stage_probe_ours.py ${PROBE_ARGS:-} > "$LOGS/probe.txt" 2>&1
    echo "probe rc $?"; cat "$LOGS/probe.txt"
fi
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOGS"
exit "$tests"
