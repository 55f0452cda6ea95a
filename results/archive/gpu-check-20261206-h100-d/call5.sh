#!/bin/bash
# s19 call 5: the refactor (write_ranked_keeps): GPU tests + sanitizers in parallel, then one graph A/B line
export PYTHONUNBUFFERED=1
T0=$(date +%s)
L=$OUT/l; mkdir -p $L
pack() { tar -czf $OUT/logs.tgz -C $OUT l; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $L/gpu.txt
python3 -m pip install -q --no-deps --no-build-isolation -e . > $L/install.log 2>&1 || { echo install failed; tail $L/install.log; exit 1; }
( timeout 200 python3 -m pytest -q tests/test_batched_nms_gpu.py > $L/pytest-batched.log 2>&1; echo "batched rc=$?" ) &
( timeout 200 python3 -m pytest -q tests/test_pipeline_gpu.py tests/test_graph_gpu.py > $L/pytest-pipeline-graph.log 2>&1; echo "pipe+graph rc=$?" ) &
for t in memcheck racecheck initcheck synccheck; do
  ( timeout 200 compute-sanitizer --tool $t --error-exitcode 9 python3 benchmarks/batched_op.py --sanitize > $L/sanitizer-$t.log 2>&1; echo "$t rc=$?" ) &
done
wait
echo "tests done $(( $(date +%s)-T0 ))s"
for f in $L/pytest-*.log; do echo "$f: $(tail -1 $f)"; grep -E "^FAILED|Error" $f | head -5 | cut -c1-250; done
for t in memcheck racecheck initcheck synccheck; do echo "$t: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $L/sanitizer-$t.log | tail -1)"; done
pack
echo "done $(( $(date +%s)-T0 ))s"
