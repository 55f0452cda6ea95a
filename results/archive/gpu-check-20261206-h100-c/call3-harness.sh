#!/bin/bash
# why the pipeline harness's eager B=1 (47.9 / 26.6) exceeds a plain loop (16-18) on the same host
python3 -m pip install -q --no-deps --no-build-isolation -e . > /dev/null 2>&1
export PYTHONUNBUFFERED=1
C="nmsbench pipeline --batch 1 --device cuda --source synthetic,synthetic_yolov8 --conf 0.25 --iou 0.45 --max-det 300 --max-candidates 4096 --seed 0 --stage total --timer wall --rounds 3 --min-run-time 0.1 --threads 1"
show() { python3 -c "
import csv,sys
for r in csv.DictReader(open(sys.argv[1])):
    if r['status']=='ok': print(sys.argv[2], r['impl'], r['scenario'], round(float(r['median_us']),1), round(float(r['iqr_us']),1), r['noisy'])
" $1 $2; }
timeout 60 python3 .devscripts/gpu_ab.py HEAD 2>&1 | tail -1
timeout 60 $C --pipeline batched_op --out /tmp/a.csv > /tmp/a.log 2>&1; show /tmp/a.csv alone
timeout 60 $C --pipeline batched_op,batched_op_graph --out /tmp/b.csv > /tmp/b.log 2>&1; show /tmp/b.csv with_graph
timeout 60 $C --pipeline batched_op,cupy_seed_kernels --out /tmp/c.csv > /tmp/c.log 2>&1; show /tmp/c.csv with_cupy
timeout 60 $C --pipeline batched_op,ultralytics_loop --out /tmp/d.csv > /tmp/d.log 2>&1; show /tmp/d.csv with_ultra
timeout 60 $C --pipeline batched_op --threads 4 --out /tmp/e.csv > /tmp/e.log 2>&1; show /tmp/e.csv alone_t4
timeout 60 python3 .devscripts/gpu_ab.py HEAD 2>&1 | tail -1
tail -3 /tmp/a.log
