#!/usr/bin/env bash
# The GPU checks, as one short run on a machine with a CUDA device (about 6 minutes after setup):
#   1. CUDA parity: the scene-graph metrics on GPU tensors equal the loop reference;
#   2. GPU throughput of the scene-graph metrics (issue 8 target: sgdet-full >= 20,000 images/s on an H200)
#      on the fixed-size and the variable-size workloads (both score layouts, SGDet with 20-80 detections),
#      and RelCLIPScore relations/s.
# Usage: bash tools/device_check.sh [--setup]   (--setup installs the pinned stack first, see setup_env.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"   # this checkout, installed or not
if [[ "${1:-}" == "--setup" ]]; then
    bash tools/setup_env.sh
fi
python - <<'PY'
import torch
assert torch.cuda.is_available(), 'no CUDA device visible'
print('device:', torch.cuda.get_device_name(0), '| torch', torch.__version__)
PY
python -m pytest -q tests/test_scene_graph_metrics.py -k cuda
python tools/benchmark.py --workload sgdet-full triplets variable variable-nobg variable-256 sgdet-variable --device cuda \
    --images 4096 --batch-size 64 --repeat 3 --rounds 1 --no-peers
python tools/benchmark.py --workload none --relclip --device cuda --rounds 1
