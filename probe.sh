set -uo pipefail
export PYTHONUNBUFFERED=1 NMSBENCH_GIT_COMMIT=$1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -iv warn | tail -2
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_graph_gpu.py tests/test_gpu.py tests/test_properties.py -k "hard_fused or graph or padded" > $OUT/pytest-hf.log 2>&1; echo "pytest hf exit $?"; grep -E "FAILED|passed|failed" $OUT/pytest-hf.log | tail -12
timeout 40 python3 probe_stages.py 2>&1 | tail -12
timeout 100 nmsbench sweep --impl hard_fused,torchvision,bitmask_two_phase --device cuda --n 64,128,256,512,1024,4096,8192,32768 --scenario clustered,uniform --timer wall,graph --min-run-time 0.05 --out $OUT/sweep.csv 2>&1 | tail -2
for tool in memcheck racecheck initcheck synccheck; do timeout 100 compute-sanitizer --tool $tool --print-limit 10 python3 .ci/sanitize_run.py hard_fused > $OUT/san-$tool.log 2>&1; echo "$tool exit $?"; tail -1 $OUT/san-$tool.log; done
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_matrix_recompute_gpu.py --durations=8 > $OUT/pytest-mr.log 2>&1; echo "pytest mr exit $?"; grep -E "FAILED|passed|failed|^[0-9.]+s" $OUT/pytest-mr.log | tail -20
