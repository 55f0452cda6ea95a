#!/usr/bin/env bash
# A/B of a kernel change in one device call: the stage probe on the working tree as it
# is (A), then with PATCH applied (B), then the patch taken back. The device has no git
# history, so make the patch here first, inside the tree (it travels with it), e.g.
#   git diff main next/quick-rejection-branchless -- implementations > .ci/ab.patch
# Usage on the device: bash .ci/ab_probe.sh .ci/ab.patch [probe args, default "hard matrix"]
# Both probes print one line per (op, scenario, N); compare them side by side in $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1
PATCH=${1:?usage: ab_probe.sh PATCH [probe args]}
shift
[ $# -gt 0 ] || set -- hard matrix
OUT=${OUT:-/tmp/nmsbench-ab}
mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v -i warn | tail -2
timeout "${PROBE_LIMIT:-200}" python3 .ci/stage_probe_ours.py "$@" > "$OUT/probe-A.txt" 2>&1
echo "A rc $?"
patch -p1 --forward < "$PATCH" || { echo "the patch does not apply"; exit 1; }
timeout "${PROBE_LIMIT:-200}" python3 .ci/stage_probe_ours.py "$@" > "$OUT/probe-B.txt" 2>&1
echo "B rc $?"
patch -p1 -R < "$PATCH" > /dev/null
paste -d '\n' "$OUT/probe-A.txt" "$OUT/probe-B.txt" | sed 'n;s/^/  B: /'
