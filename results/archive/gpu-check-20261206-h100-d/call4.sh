#!/bin/bash
# s19 call 4: select_nms with masked runs: GPU tests + sanitizers (parallel), then A/B against 1b701b0, a CUDA pipeline run, phases
export PYTHONUNBUFFERED=1
T0=$(date +%s)
L=$OUT/l; mkdir -p $L
pack() { tar -czf $OUT/logs.tgz -C $OUT l; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $L/gpu.txt
python3 -m pip install -q --no-deps --no-build-isolation -e . > $L/install.log 2>&1 || { echo install failed; tail $L/install.log; exit 1; }
( timeout 230 python3 -m pytest -q tests/test_batched_nms_gpu.py > $L/pytest-batched.log 2>&1; echo "batched rc=$?" ) &
( timeout 230 python3 -m pytest -q tests/test_pipeline_gpu.py tests/test_graph_gpu.py > $L/pytest-pipeline-graph.log 2>&1; echo "pipe+graph rc=$?" ) &
for t in memcheck racecheck initcheck synccheck; do
  ( timeout 230 compute-sanitizer --tool $t --error-exitcode 9 python3 benchmarks/batched_op.py --sanitize > $L/sanitizer-$t.log 2>&1; echo "$t rc=$?" ) &
done
wait
echo "tests done $(( $(date +%s)-T0 ))s"
for f in $L/pytest-*.log; do echo "$f: $(tail -1 $f)"; grep -E "^FAILED|Error" $f | head -5 | cut -c1-250; done
for t in memcheck racecheck initcheck synccheck; do echo "$t: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $L/sanitizer-$t.log | tail -1) | $(tail -1 $L/sanitizer-$t.log | cut -c1-150)"; done
pack
# .devscripts/s19ab.py is graph_ab.py here; .devscripts/old1b7 a copy of 1b701b0 (git archive)
for t in .devscripts/old1b7 HEAD .devscripts/old1b7 HEAD; do timeout 60 python3 .devscripts/s19ab.py $t 2>&1 | tail -1 | tee -a $L/ab.log; done; pack
echo "ab $(( $(date +%s)-T0 ))s"
timeout 60 nmsbench pipeline --batch 1,8,32,64 --device cuda --source synthetic --pipeline cupy_seed_kernels,batched_op,batched_op_graph --conf 0.25 --iou 0.45 --max-det 300 --max-candidates 4096 --seed 0 --stage total --timer wall,device --rounds 3 --min-run-time 0.1 --threads 1 --out $L/pipeline-cuda.csv > $L/pipeline-cuda.log 2>&1; echo "pipeline rc=$? $(( $(date +%s)-T0 ))s"
grep -A7 "device timer\|wall timer" $L/pipeline-cuda.log | cut -c1-120; pack
timeout 40 python3 benchmarks/batched_phases.py --batches 8 --block 3 --calls 200 2>&1 | grep -v -i warn | tee -a $L/phases.log
timeout 40 python3 benchmarks/batched_phases.py --batches 1 --calls 200 2>&1 | grep -v -i warn | tee -a $L/phases.log
pack; echo "done $(( $(date +%s)-T0 ))s"
