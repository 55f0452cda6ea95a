#!/usr/bin/env bash
# One device call that checks and then measures: .ci/gpu_check_hard.sh (by default the
# matrix_recompute sanitizers, racecheck split by size, and the GPU tests of GPU_TESTS_K;
# no probe), then, if the tests passed, the committed sweep (every implementation, N = 64
# ... 32768, both scenarios, wall / device / graph) and the Matrix variants at N = 131072,
# alone on the GPU. The logs come back in logs.tgz, the sweeps as CSV, JSON and their
# progress logs under $OUT.
# Usage on the device: NMSBENCH_GIT_COMMIT=<hash> bash .ci/gpu_final.sh
set -uo pipefail
export OUT=${OUT:-/tmp/nmsbench-gpu}
SANITIZE_IMPLS=${SANITIZE_IMPLS-} MATRIX_TOOLS=${MATRIX_TOOLS-memcheck initcheck synccheck} \
    MATRIX_RACECHECK_SIZES=${MATRIX_RACECHECK_SIZES-31 100 1000 1025 3000} SANITIZE_LIMIT=${SANITIZE_LIMIT:-200} \
    GPU_TEST_LIMIT=${GPU_TEST_LIMIT:-240} PROBE_LIMIT=0 bash .ci/gpu_check_hard.sh || exit $?
nmsbench sweep --n 64,256,512,1024,2048,4096,8192,32768 --impl allpairs,bitmask_classic,bitmask_two_phase,hard_fused,matrix_fused,matrix_naive,matrix_recompute,torchvision \
    --device cuda --dtype float32 --scenario clustered,uniform --iou 0.5 --seed 0 --classes 1 \
    --timer wall,device,graph --min-run-time 0.05 --threads 16 --out "$OUT/sweep-h200-all.csv" > "$OUT/sweep.log" 2>&1
echo "sweep rc $?"
nmsbench sweep --n 131072 --impl matrix_fused,matrix_naive,matrix_recompute --device cuda --dtype float32 \
    --scenario clustered,uniform --iou 0.5 --seed 0 --classes 1 --timer wall,device --min-run-time 0.05 \
    --threads 16 --out "$OUT/sweep-h200-matrix-131072.csv" > "$OUT/sweep-131072.log" 2>&1
echo "sweep 131072 rc $?"
