// COCO's per-image greedy matching of detections to GT boxes (pycocotools COCOeval.evaluateImg) for a padded
// batch, image by image: coco_greedy_match, the compiled form of functional/detection.py's box IoU and greedy loop.
#include "common.h"

using namespace mmsgg_ext;

namespace {

// torch.minimum / torch.maximum of two doubles: NaN when either is NaN.
inline double nan_min(double a, double b) { return (a != a || b != b) ? a + b : std::min(a, b); }
inline double nan_max(double a, double b) { return (a != a || b != b) ? a + b : std::max(a, b); }

// A box as COCO xywh, its sizes as coco_xywh computes them: in float64, or in float32 (then widened, with its
// corner) when `float32_sizes`.
struct CocoBox {
  double x, y, w, h;
};

inline CocoBox coco_box(const double* xyxy, double extra, bool float32_sizes) {
  if (float32_sizes) {
    const float x1 = static_cast<float>(xyxy[0]), y1 = static_cast<float>(xyxy[1]);
    const float w = static_cast<float>(xyxy[2]) - x1 + static_cast<float>(extra);
    const float h = static_cast<float>(xyxy[3]) - y1 + static_cast<float>(extra);
    return {x1, y1, w, h};
  }
  return {xyxy[0], xyxy[1], xyxy[2] - xyxy[0] + extra, xyxy[3] - xyxy[1] + extra};
}

// coco_box_iou of one pair, operation by operation (pycocotools' bbIou on xywh boxes).
inline double coco_iou(const CocoBox& d, const CocoBox& g) {
  const double w = nan_min(d.w + d.x, g.w + g.x) - nan_max(d.x, g.x);
  const double h = nan_min(d.h + d.y, g.h + g.y) - nan_max(d.y, g.y);
  const double inter = w * h;
  const double uni = d.w * d.h + g.w * g.h - inter;
  return (w <= 0 || h <= 0) ? 0.0 : inter / uni;
}

}  // namespace

// For every kept detection d of image b (in the given order) and threshold t, as _greedy_match on the IoU matrix
// that coco_match_detections builds (the IoU where the classes agree, d is kept and the GT box is valid, else -1):
// the free GT boxes of IoU >= thresholds[t] are its candidates, regular boxes before ignored ones; it takes the one
// of highest IoU (the later box on ties), which is then taken at t. matched[b, d, t]: it took a box that is not
// unmatchable; ignored[b, d, t]: it took an ignored box. The thresholds must be > 0 (the caller's rule): then an
// IoU of -1 is never a candidate, so detections that are not kept take nothing and are skipped.
std::tuple<at::Tensor, at::Tensor> coco_greedy_match(const at::Tensor& det_boxes, const at::Tensor& det_labels,
                                                     const at::Tensor& kept, const at::Tensor& gt_boxes,
                                                     const at::Tensor& gt_labels, const at::Tensor& gt_valid,
                                                     const at::Tensor& gt_ignored, const at::Tensor& gt_unmatchable,
                                                     const at::Tensor& thresholds, bool plus_one,
                                                     bool float32_det_sizes) {
  check_cpu(det_boxes, at::kDouble, 3, "coco_greedy_match: det_boxes must be float64 [B, D, 4] on the CPU");
  check_cpu(gt_boxes, at::kDouble, 3, "coco_greedy_match: gt_boxes must be float64 [B, G, 4] on the CPU");
  check_cpu(det_labels, at::kLong, 2, "coco_greedy_match: det_labels must be int64 [B, D] on the CPU");
  check_cpu(gt_labels, at::kLong, 2, "coco_greedy_match: gt_labels must be int64 [B, G] on the CPU");
  check_cpu(kept, at::kBool, 2, "coco_greedy_match: kept must be bool [B, D] on the CPU");
  for (const at::Tensor* flags : {&gt_valid, &gt_ignored, &gt_unmatchable}) {
    check_cpu(*flags, at::kBool, 2, "coco_greedy_match: the GT flags must be bool [B, G] on the CPU");
  }
  check_cpu(thresholds, at::kDouble, 1, "coco_greedy_match: thresholds must be float64 [T] on the CPU");
  const int64_t batch = det_boxes.size(0), dets = det_boxes.size(1), gts = gt_boxes.size(1);
  const int64_t num_thr = thresholds.size(0);
  TORCH_CHECK(det_boxes.size(2) == 4 && gt_boxes.size(2) == 4 && gt_boxes.size(0) == batch &&
                  det_labels.sizes() == kept.sizes() && det_labels.size(0) == batch && det_labels.size(1) == dets &&
                  gt_labels.size(0) == batch && gt_labels.size(1) == gts && gt_valid.sizes() == gt_labels.sizes() &&
                  gt_ignored.sizes() == gt_labels.sizes() && gt_unmatchable.sizes() == gt_labels.sizes(),
              "coco_greedy_match: the batch fields do not have matching shapes");
  const at::Tensor db = det_boxes.contiguous(), dl = det_labels.contiguous(), kp = kept.contiguous();
  const at::Tensor gb = gt_boxes.contiguous(), gl = gt_labels.contiguous(), gv = gt_valid.contiguous();
  const at::Tensor gi = gt_ignored.contiguous(), gu = gt_unmatchable.contiguous(), th = thresholds.contiguous();
  at::Tensor matched = at::zeros({batch, dets, num_thr}, at::kBool);
  at::Tensor ignored = at::zeros({batch, dets, num_thr}, at::kBool);
  const double* db_ptr = db.data_ptr<double>();
  const double* gb_ptr = gb.data_ptr<double>();
  const int64_t* dl_ptr = dl.data_ptr<int64_t>();
  const int64_t* gl_ptr = gl.data_ptr<int64_t>();
  const bool* kp_ptr = kp.data_ptr<bool>();
  const bool* gv_ptr = gv.data_ptr<bool>();
  const bool* gi_ptr = gi.data_ptr<bool>();
  const bool* gu_ptr = gu.data_ptr<bool>();
  const double* th_ptr = th.data_ptr<double>();
  bool* matched_ptr = matched.data_ptr<bool>();
  bool* ignored_ptr = ignored.data_ptr<bool>();
  const double extra = plus_one ? 1.0 : 0.0;
  if (gts == 0) {
    return {matched, ignored};
  }
  at::parallel_for(0, batch, 16, [&](int64_t begin, int64_t end) {
    std::vector<CocoBox> gt(gts);
    std::vector<double> iou(gts);
    std::vector<char> taken(num_thr * gts);
    for (int64_t b = begin; b < end; ++b) {
      const int64_t* g_label = gl_ptr + b * gts;
      const bool* g_valid = gv_ptr + b * gts;
      const bool* g_ignored = gi_ptr + b * gts;
      const bool* g_unmatchable = gu_ptr + b * gts;
      for (int64_t g = 0; g < gts; ++g) {
        gt[g] = coco_box(gb_ptr + (b * gts + g) * 4, extra, false);
      }
      std::fill(taken.begin(), taken.end(), 0);
      for (int64_t d = 0; d < dets; ++d) {
        const int64_t slot = b * dets + d;
        if (!kp_ptr[slot]) {
          continue;  // an IoU row of -1: no candidate at a positive threshold
        }
        const CocoBox box = coco_box(db_ptr + slot * 4, extra, float32_det_sizes);
        for (int64_t g = 0; g < gts; ++g) {
          iou[g] = g_valid[g] && g_label[g] == dl_ptr[slot] ? coco_iou(box, gt[g]) : -1.0;
        }
        for (int64_t t = 0; t < num_thr; ++t) {
          const double thr = th_ptr[t];
          char* free_gt = taken.data() + t * gts;
          bool any_regular = false;
          for (int64_t g = 0; g < gts; ++g) {
            any_regular |= iou[g] >= thr && !free_gt[g] && !g_ignored[g];
          }
          bool hit = false;  // a usable box: the candidates of the first kind present
          int64_t best = 0;
          double most = -std::numeric_limits<double>::infinity();
          for (int64_t g = 0; g < gts; ++g) {  // the highest IoU of a usable box (-2 elsewhere), the later on ties
            const bool use = iou[g] >= thr && !free_gt[g] && g_ignored[g] != any_regular;
            const double value = use ? iou[g] : -2.0;
            hit |= use;
            if (value >= most) {
              most = value;
              best = g;
            }
          }
          if (hit) {
            free_gt[best] = 1;
            matched_ptr[slot * num_thr + t] = !g_unmatchable[best];
            ignored_ptr[slot * num_thr + t] = g_ignored[best];
          }
        }
      }
    }
  });
  return {matched, ignored};
}

// COCOeval.accumulate's interpolated precision [T, R, C] (float64; -1 for classes without GT) from the kept
// detections in class order (rows bounds[k]..bounds[k + 1] - 1 of class k, each class by descending score):
// per class and threshold the cumulative true / false positives of the rows not ignored, recall tp / gt and
// precision tp / ((fp + tp) + eps), the precision's monotone envelope from the end, and at each recall threshold
// the precision of the first row whose recall reaches it (0 past the last row), as functional/detection.py's torch
// loop computes them.
at::Tensor coco_precision_table(const at::Tensor& matched, const at::Tensor& ignored, const at::Tensor& bounds,
                                const at::Tensor& gt_counts, const at::Tensor& recall_thresholds) {
  check_cpu(matched, at::kBool, 2, "coco_precision_table: matched must be bool [N, T] on the CPU");
  check_cpu(ignored, at::kBool, 2, "coco_precision_table: ignored must be bool [N, T] on the CPU");
  check_cpu(bounds, at::kLong, 1, "coco_precision_table: bounds must be int64 [C + 1] on the CPU");
  check_cpu(gt_counts, at::kLong, 1, "coco_precision_table: gt_counts must be int64 [C] on the CPU");
  check_cpu(recall_thresholds, at::kDouble, 1, "coco_precision_table: recall_thresholds must be float64 [R]");
  const int64_t rows = matched.size(0), num_thr = matched.size(1), classes = gt_counts.size(0);
  const int64_t num_rec = recall_thresholds.size(0);
  TORCH_CHECK(ignored.sizes() == matched.sizes() && bounds.size(0) == classes + 1,
              "coco_precision_table: the shapes do not match");
  const at::Tensor m = matched.contiguous(), ig = ignored.contiguous(), bd = bounds.contiguous();
  const at::Tensor gc = gt_counts.contiguous(), rec = recall_thresholds.contiguous();
  const bool* m_ptr = m.data_ptr<bool>();
  const bool* ig_ptr = ig.data_ptr<bool>();
  const int64_t* bd_ptr = bd.data_ptr<int64_t>();
  const int64_t* gc_ptr = gc.data_ptr<int64_t>();
  const double* rec_ptr = rec.data_ptr<double>();
  for (int64_t k = 0; k <= classes; ++k) {
    TORCH_CHECK(bd_ptr[k] >= 0 && bd_ptr[k] <= rows && (k == 0 || bd_ptr[k] >= bd_ptr[k - 1]),
                "coco_precision_table: bounds must be non-decreasing row positions");
  }
  at::Tensor out = at::full({num_thr, num_rec, classes}, -1.0, at::kDouble);
  double* out_ptr = out.data_ptr<double>();
  const double eps = std::numeric_limits<double>::epsilon();  // np.spacing(1)
  at::parallel_for(0, classes, 8, [&](int64_t begin, int64_t end) {
    std::vector<double> recall, precision;
    for (int64_t k = begin; k < end; ++k) {
      if (gc_ptr[k] <= 0) {
        continue;
      }
      const int64_t lo = bd_ptr[k], n = bd_ptr[k + 1] - lo;
      const double gt = static_cast<double>(gc_ptr[k]);
      recall.resize(n);
      precision.resize(n);
      for (int64_t t = 0; t < num_thr; ++t) {
        int64_t tp = 0, fp = 0;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t at = (lo + i) * num_thr + t;
          tp += m_ptr[at] && !ig_ptr[at];
          fp += !m_ptr[at] && !ig_ptr[at];
          recall[i] = static_cast<double>(tp) / gt;
          precision[i] = static_cast<double>(tp) / ((static_cast<double>(fp) + static_cast<double>(tp)) + eps);
        }
        for (int64_t i = n - 2; i >= 0; --i) {
          precision[i] = std::max(precision[i], precision[i + 1]);
        }
        for (int64_t r = 0; r < num_rec; ++r) {
          const int64_t i = std::lower_bound(recall.begin(), recall.end(), rec_ptr[r]) - recall.begin();
          out_ptr[(t * num_rec + r) * classes + k] = i < n ? precision[i] : 0.0;
        }
      }
    }
  });
  return out;
}
