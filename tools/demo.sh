#!/usr/bin/env bash
# The project's main job on the bundled sample: VG150-format sample data -> frequency baseline statistics
# (training split) -> tools/test.py (MMEngine Runner, mmdet pipeline) -> R@K / mR@K report.
# Usage: bash tools/demo.sh [WORK_DIR]   (default work_dirs/demo)
set -euo pipefail
cd "$(dirname "$0")/.."
WORK_DIR=${1:-work_dirs/demo}
CONFIG=configs/demo/freq_predcls_vg150_sample.py
start=$(date +%s)
echo "[demo] 1/3 writing the sample datasets to data/sample"
python3 tools/make_sample_data.py --out data/sample --datasets vg150 >/dev/null
echo "[demo] 2/3 counting frequency-baseline statistics on the training split"
python3 tools/build_freq_baseline.py "$CONFIG" --out "$WORK_DIR/freq_vg150_sample.pth"
echo "[demo] 3/3 evaluating with tools/test.py (PredCls, SGRecall + SGMeanRecall)"
python3 tools/test.py "$CONFIG" "$WORK_DIR/freq_vg150_sample.pth" --work-dir "$WORK_DIR" --out "$WORK_DIR/predictions.pkl"
echo "[demo] done in $(( $(date +%s) - start )) s: metrics in $WORK_DIR/metrics.json, reports in $WORK_DIR/predcls.*"
