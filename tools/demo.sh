#!/usr/bin/env bash
# The project's main job on the bundled sample: VG150-format sample data -> frequency baseline statistics
# (training split) -> tools/test.py (MMEngine Runner, mmdet pipeline) -> R@K / mR@K report; then the SGDet path:
# a small Faster R-CNN trained with tools/train.py (random start, a few dozen CPU iterations) -> FREQ on its
# detections -> R@K / mR@K + detection mAP / AP@50, where its recall is lost (error_analysis=True: the
# "R@K | lost: ..." lines) and the HTML report of it (tools/analysis/browse_results.py).
# Usage: bash tools/demo.sh [WORK_DIR]   (default work_dirs/demo)
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's mmsgg_eval (the configs import it)
# mmengine 0.10.7 loads checkpoints with torch.load's default (weights_only=True since torch 2.6), which refuses
# mmengine's own training checkpoints; the demo loads only the checkpoint it has just written
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
WORK_DIR=${1:-work_dirs/demo}
CONFIG=configs/demo/freq_predcls_vg150_sample.py
DET_CONFIG=configs/demo/faster-rcnn_r18_fpn_vg150_sample.py
SGDET_CONFIG=configs/demo/freq_sgdet_faster-rcnn_r18_fpn_vg150_sample.py
start=$(date +%s)
echo "[demo] 1/5 writing the sample datasets to data/sample"
python3 tools/make_sample_data.py --out data/sample --datasets vg150 >/dev/null
echo "[demo] 2/5 counting frequency-baseline statistics on the training split"
python3 tools/build_freq_baseline.py "$CONFIG" --out "$WORK_DIR/freq_vg150_sample.pth"
echo "[demo] 3/5 evaluating with tools/test.py (PredCls, SGRecall + SGMeanRecall)"
python3 tools/test.py "$CONFIG" "$WORK_DIR/freq_vg150_sample.pth" --work-dir "$WORK_DIR" --out "$WORK_DIR/predictions.pkl"
echo "[demo]     HTML report of its hits and misses (tools/analysis/browse_results.py): $WORK_DIR/report/index.html"
python3 tools/analysis/browse_results.py "$CONFIG" "$WORK_DIR/predictions.pkl" --out-dir "$WORK_DIR/report" \
    --no-progress | tail -n 1
predcls_done=$(date +%s)
echo "[demo] 4/5 training the demo detector with tools/train.py (Faster R-CNN R18-FPN, random start, CPU; log in $WORK_DIR/detector/train.log)"
mkdir -p "$WORK_DIR/detector"
python3 tools/train.py "$DET_CONFIG" --work-dir "$WORK_DIR/detector" > "$WORK_DIR/detector/train.log" 2>&1 \
    || { tail -n 40 "$WORK_DIR/detector/train.log"; exit 1; }
grep -E "Iter\(train\)|bbox/mAP" "$WORK_DIR/detector/train.log" | tail -n 2 | cut -c1-220
echo "[demo] 5/5 SGDet with tools/test.py: FREQ on the detections (SGRecall + SGMeanRecall + DetectionAP)"
mkdir -p "$WORK_DIR/sgdet"
python3 tools/test.py "$SGDET_CONFIG" "$WORK_DIR/detector/iter_10.pth" --work-dir "$WORK_DIR/sgdet" \
    --out "$WORK_DIR/sgdet/predictions.pkl" 2>&1 | tee "$WORK_DIR/sgdet/test.log"
echo "[demo]     where SGDet recall is lost (error_analysis=True; docs/metrics.md):"
grep -E "^(R@[0-9]+ .*\| lost:|instances \(PySGG)" "$WORK_DIR/sgdet/test.log" | sed 's/^/[demo]       /' || true
echo "[demo]     the same breakdown as bars, per predicate and per image (tools/analysis/browse_results.py): $WORK_DIR/sgdet/report/index.html"
python3 tools/analysis/browse_results.py "$SGDET_CONFIG" "$WORK_DIR/sgdet/predictions.pkl" \
    --out-dir "$WORK_DIR/sgdet/report" --no-progress > "$WORK_DIR/sgdet/report.log" 2>&1 \
    || { tail -n 20 "$WORK_DIR/sgdet/report.log"; exit 1; }
tail -n 1 "$WORK_DIR/sgdet/report.log"
echo "[demo]     These SGDet numbers are near 0 on purpose: the detector trained for 10 iterations from a random start, and its"
echo "[demo]     detections almost never match a GT box (AP@50 about 0.1), so almost every miss is a detection miss (subject_loc /"
echo "[demo]     object_loc above); the point of this part is the path (train -> detect -> relate -> score)."
echo "[demo]     With a trained detector the same command gives real numbers. The PredCls report above is the one to read."
end=$(date +%s)
echo "[demo] done in $(( end - start )) s (PredCls $(( predcls_done - start )) s, SGDet $(( end - predcls_done )) s):"
echo "[demo]   PredCls metrics in $WORK_DIR/metrics.json, reports in $WORK_DIR/predcls.*, HTML report in $WORK_DIR/report/index.html"
echo "[demo]   SGDet metrics in $WORK_DIR/sgdet/metrics.json (miss@K_* keys, sgdet/per_predicate_causes), reports in $WORK_DIR/sgdet/sgdet.*,"
echo "[demo]   HTML report (where recall is lost) in $WORK_DIR/sgdet/report/index.html"
echo "[demo] next: open $WORK_DIR/report/index.html (hits and misses per image and predicate) and"
echo "[demo]       $WORK_DIR/sgdet/report/index.html#causes (where SGDet recall is lost), or evaluate your own"
echo "[demo]       predictions offline: python -m mmsgg_eval.eval CONFIG PREDICTIONS (README, docs/formats.md)"
