#!/usr/bin/env bash
# One device call after a hard_fused kernel change: the sanitizers (hard_fused: all four
# tools; matrix_recompute: racecheck, split by size over processes) in the background,
# the GPU tests that cover hard_fused in the foreground, then the stage probe alone.
# Usage on the device: NMSBENCH_GIT_COMMIT=<hash> bash .ci/gpu_check_hard.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/nmsbench-gpu}
mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v -i warn | tail -2
pids=()
for tool in memcheck racecheck initcheck synccheck; do
    timeout "${SANITIZE_LIMIT:-240}" compute-sanitizer --tool "$tool" --print-limit 20 python3 .ci/sanitize_run.py hard_fused \
        > "$OUT/sanitizer-hard_fused-$tool.log" 2>&1 &
    pids+=($!)
done
for n in 31 64 100 1000 1025; do
    SANITIZE_SIZES=$n timeout "${SANITIZE_LIMIT:-240}" compute-sanitizer --tool racecheck --print-limit 20 \
        python3 .ci/sanitize_run.py matrix_recompute > "$OUT/sanitizer-matrix_recompute-racecheck-n$n.log" 2>&1 &
    pids+=($!)
done
timeout "${GPU_TEST_LIMIT:-240}" python3 -m pytest -q -m gpu -p no:cacheprovider --durations=8 \
    tests/test_gpu.py tests/test_graph_gpu.py tests/test_reliability_gpu.py tests/test_properties.py \
    > "$OUT/pytest-gpu-hard.log" 2>&1
echo "pytest rc $?"; tail -12 "$OUT/pytest-gpu-hard.log"
for pid in "${pids[@]}"; do wait "$pid"; echo "sanitizer pid $pid rc $?"; done
for f in "$OUT"/sanitizer-*.log; do echo "== $f"; tail -2 "$f"; done
timeout "${PROBE_LIMIT:-90}" python3 .ci/stage_probe_ours.py ${PROBE_ARGS:-} > "$OUT/probe.txt" 2>&1; echo "probe rc $?"
cat "$OUT/probe.txt"
