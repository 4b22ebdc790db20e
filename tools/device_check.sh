#!/usr/bin/env bash
# The GPU checks, as one short prepared run on a machine with a CUDA device (about 4 minutes after setup):
#   1. the CUDA tests (skipped on a CPU-only machine): the scene-graph metrics on GPU tensors equal the loop
#      reference (6 cases);
#   2. CPU vs GPU: every key of SGRecall + SGMeanRecall bit-identical on the variable, sgdet-variable and
#      sgdet-full workloads (mmsgg_eval.benchmarks.device_parity);
#   3. throughput: images/s of sgdet-full and variable on the GPU beside the CPU (tools/benchmark.py), and the
#      evaluation time of a 26,446-image epoch (the VG150 test split) at those rates;
#   4. one pool of 256 sgdet-full images on the GPU: its time between CUDA events, its host syncs counted by
#      mmsgg_eval.testing.host_syncs, and the synchronising calls torch.cuda.set_sync_debug_mode("warn") reports
#      (mmsgg_eval.benchmarks.device_syncs).
# Without a CUDA device it says so and exits 0 (nothing to check there).
# Usage: bash tools/device_check.sh [--setup | --dry-run]   (--setup installs the pinned stack first, see
# setup_env.sh; --dry-run runs step 4 on the CPU with 16 images, to check the script where no GPU is)
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"   # this checkout, installed or not
PY=${PYTHON:-python3}
if [[ "${1:-}" == "--setup" ]]; then
    bash tools/setup_env.sh
elif [[ "${1:-}" == "--dry-run" ]]; then
    echo "== 4. one pool (dry run on the CPU)"
    MMSGG_EVAL_COMPILED=0 "$PY" -m mmsgg_eval.benchmarks.device_syncs --workload sgdet-full --images 16 --device cpu \
        --repeat 1 --sync-free-paths
    exit 0
fi
status=0
"$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)' || status=$?
if [[ $status -eq 3 ]]; then
    echo "no CUDA device visible: the GPU checks are skipped (nothing to check on this machine)"
    exit 0
elif [[ $status -ne 0 ]]; then
    echo "python/torch failed to start (exit status $status)" >&2
    exit "$status"
fi
"$PY" -c 'import torch; print("device:", torch.cuda.get_device_name(0), "| torch", torch.__version__, "| CUDA", torch.version.cuda)'
echo "== 1. CUDA tests"
"$PY" -m pytest -q -rs tests/metrics/scene_graph/test_recall.py -k cuda_equals_reference
echo "== 2. CPU vs GPU bit-equality"
"$PY" -m mmsgg_eval.benchmarks.device_parity --workload variable sgdet-variable sgdet-full --images 128
echo "== 3. throughput (GPU beside CPU)"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for spec in "sgdet-full 1024" "variable 4096"; do
    set -- $spec
    "$PY" tools/benchmark.py --workload "$1" --images "$2" --device cpu cuda --repeat 3 --rounds 1 --no-peers \
        2>/dev/null | tee -a "$out"
done
"$PY" - "$out" <<'PY'
import json, sys
rates = {}
for line in open(sys.argv[1]):
    if line.startswith('{'):
        rates.update(json.loads(line)['images_per_s'])
for key, rate in sorted(rates.items()):
    if rate:
        print(f'{key}: {rate:,.0f} images/s, {26446 / rate:.1f} s of evaluation per 26,446-image epoch')
PY
echo "== 4. one pool of 256 sgdet-full images on the GPU (CUDA events, host syncs)"
"$PY" -m mmsgg_eval.benchmarks.device_syncs --workload sgdet-full --images 256 --device cuda --repeat 3
