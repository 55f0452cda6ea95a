#!/bin/bash
# s20 call 1: select_nms ranks by several threads, masks only of the words read: GPU tests + sanitizers (parallel),
# A/B against 3697548, phases, then the pipeline reference run (README's command) and the CPU contenders
export PYTHONUNBUFFERED=1
T0=$(date +%s)
L=$OUT/l; mkdir -p $L
pack() { tar -czf $OUT/logs.tgz -C $OUT l; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $L/gpu.txt
lscpu | grep "Model name" | tee -a $L/gpu.txt
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
AB=results/archive/gpu-check-20261206-h100-d/graph_ab.py
for t in <3697548 tree> HEAD <3697548 tree> HEAD; do timeout 60 python3 $AB $t 2>&1 | tail -1 | tee -a $L/ab.log; done; pack
echo "ab $(( $(date +%s)-T0 ))s"
timeout 40 python3 benchmarks/batched_phases.py --batches 8 --block 3 --calls 200 --twice 2>&1 | grep -v -i warn | tee -a $L/phases.log
timeout 40 python3 benchmarks/batched_phases.py --batches 1 --calls 200 --twice 2>&1 | grep -v -i warn | tee -a $L/phases.log
timeout 40 python3 benchmarks/batched_phases.py --batches 64 --block 0 --calls 200 2>&1 | grep -v -i warn | tee -a $L/phases.log
pack; echo "phases $(( $(date +%s)-T0 ))s"
OUTCSV=$OUT/pipeline.csv
timeout 200 nmsbench pipeline --batch 1,8,32,64 --device cuda --source synthetic,synthetic_yolov8,real --pipeline ultralytics_loop,torchvision_batched_nms,cupy_seed_kernels,batched_op,batched_op_graph --conf 0.25 --iou 0.45 --max-det 300 --max-candidates 4096 --seed 0 --stage decode,nms,total --timer wall,device --rounds 3 --min-run-time 0.1 --threads 1 --repeat-noisy 1 --out $OUTCSV > $L/pipeline-cuda.log 2>&1; echo "cuda rc=$? $(( $(date +%s)-T0 ))s"
tail -3 $L/pipeline-cuda.log; pack
timeout 120 nmsbench pipeline --device cpu --source synthetic,synthetic_yolov8,real --batch 1,8,32,64 --conf 0.25 --iou 0.45 --max-det 300 --timer wall,device --rounds 3 --min-run-time 0.1 --threads 1 --repeat-noisy 1 --pipeline numpy,onnxruntime_nms,batched_op --resume $OUTCSV > $L/pipeline-cpu.log 2>&1; echo "cpu rc=$? $(( $(date +%s)-T0 ))s"
tail -3 $L/pipeline-cpu.log; pack; echo "done $(( $(date +%s)-T0 ))s"
