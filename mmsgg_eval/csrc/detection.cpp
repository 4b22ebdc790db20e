// COCO's per-image greedy matching of detections to GT boxes (pycocotools COCOeval.evaluateImg) for a padded
// batch, image by image (coco_match_images: functional/detection.py's orderings, box IoU and greedy loop), and
// COCOeval.accumulate's precision table class by class (coco_precision_table).
#include "common.h"

#include <numeric>

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

// One image's detections in COCO's evaluation order and its GT boxes in pycocotools' visiting order, with the
// per-threshold greedy matching (coco_match_images below). Scratch reused across the images of a thread.
struct ImageMatch {
  std::vector<int64_t> det_order, gt_order;
  std::vector<CocoBox> gt;
  std::vector<double> iou;
  std::vector<int64_t> candidates;  // one detection's visiting positions whose IoU reaches the lowest threshold
  std::vector<char> taken, regular;
  std::vector<int64_t> label_count;
};

// COCOeval.evaluateImg for image b of the batch (the arrays below point at its rows): see coco_match_images.
struct MatchInputs {
  const double *det_boxes, *det_scores, *gt_boxes, *thresholds;
  const int64_t *det_labels, *gt_labels;
  const bool *det_valid, *gt_valid, *gt_unmatchable;
  int64_t dets, gts, num_thr, num_classes, max_dets;
  double extra, area_lo, area_hi;
  bool float32_det_sizes;
};

void match_image(const MatchInputs& in, ImageMatch& work, int64_t* order, bool* kept, bool* matched, bool* ignored,
                 int64_t* gt_counts) {
  const int64_t dets = in.dets, gts = in.gts, num_thr = in.num_thr;
  // detections by descending score (padding as -inf), ties in the given order (a stable sort, as torch.sort)
  std::vector<int64_t>& det_order = work.det_order;
  det_order.resize(dets);
  std::iota(det_order.begin(), det_order.end(), int64_t(0));
  const auto score = [&](int64_t d) {
    return in.det_valid[d] ? in.det_scores[d] : -std::numeric_limits<double>::infinity();
  };
  std::stable_sort(det_order.begin(), det_order.end(), [&](int64_t a, int64_t b) { return score(a) > score(b); });
  // kept: valid and among the max_dets first of its class (padding counts as class num_classes, as the torch key)
  work.label_count.assign(in.num_classes + 1, 0);
  for (int64_t p = 0; p < dets; ++p) {
    const int64_t d = det_order[p];
    order[p] = d;
    const int64_t key = in.det_valid[d] ? in.det_labels[d] : in.num_classes;
    int64_t rank = 0;
    if (key >= 0 && key <= in.num_classes) {
      rank = work.label_count[key]++;
    } else {  // a label outside [0, C] (the caller validates labels): counted among the earlier ones of its key
      for (int64_t q = 0; q < p; ++q) {
        rank += in.det_valid[det_order[q]] && in.det_labels[det_order[q]] == key;
      }
    }
    kept[p] = in.det_valid[d] && rank < in.max_dets;
  }
  // GT boxes: the valid regular ones first, then the ignored (area outside the range) and the padding, stably
  std::vector<int64_t>& gt_order = work.gt_order;
  std::vector<char>& regular = work.regular;
  regular.resize(gts);
  work.gt.resize(gts);
  for (int64_t g = 0; g < gts; ++g) {
    const CocoBox box = coco_box(in.gt_boxes + 4 * g, in.extra, false);
    const double area = box.w * box.h;
    const bool outside = area < in.area_lo || area > in.area_hi;
    regular[g] = in.gt_valid[g] && !outside;
    work.gt[g] = box;
  }
  gt_order.clear();
  for (int64_t g = 0; g < gts; ++g) {
    if (regular[g]) {
      gt_order.push_back(g);
    }
  }
  for (int64_t g = 0; g < gts; ++g) {
    if (!regular[g]) {
      gt_order.push_back(g);
    }
  }
  for (int64_t g = 0; g < gts; ++g) {  // the counted GT boxes of each class (labels clamped, as scatter_add's index)
    if (regular[g]) {
      gt_counts[std::min(std::max<int64_t>(in.gt_labels[g], 0), in.num_classes - 1)] += 1;
    }
  }
  work.iou.resize(gts);
  work.taken.assign(num_thr * gts, 0);
  double lowest = std::numeric_limits<double>::infinity();  // a box below every threshold is never used
  for (int64_t t = 0; t < num_thr; ++t) {
    lowest = std::min(lowest, in.thresholds[t]);
  }
  std::vector<int64_t>& candidates = work.candidates;
  for (int64_t p = 0; p < dets; ++p) {
    const int64_t d = det_order[p];
    const CocoBox box = coco_box(in.det_boxes + 4 * d, in.extra, in.float32_det_sizes);
    const double area = box.w * box.h;
    const bool outside = area < in.area_lo || area > in.area_hi;
    double highest = -1.0;  // (NaN never reaches a threshold)
    for (int64_t j = 0; j < gts; ++j) {  // the IoU with the boxes of its class (-1 elsewhere), in visiting order
      const int64_t g = gt_order[j];
      work.iou[j] = kept[p] && in.gt_valid[g] && in.gt_labels[g] == in.det_labels[d] ? coco_iou(box, work.gt[g]) : -1.0;
      highest = std::max(highest, work.iou[j]);
    }
    candidates.clear();  // (the loops below skip the others: they are never used at any threshold)
    for (int64_t j = 0; j < gts; ++j) {
      if (work.iou[j] >= lowest || !(lowest > -1.0)) {
        candidates.push_back(j);
      }
    }
    for (int64_t t = 0; t < num_thr; ++t) {
      const double thr = in.thresholds[t];
      if (!(highest >= thr)) {  // no candidate at this threshold: nothing taken
        matched[p * num_thr + t] = false;
        ignored[p * num_thr + t] = kept[p] && outside;
        continue;
      }
      char* taken = work.taken.data() + t * gts;
      bool any_regular = false;
      for (const int64_t j : candidates) {
        any_regular |= work.iou[j] >= thr && !taken[j] && regular[gt_order[j]];
      }
      bool hit = false;  // a usable box: the candidates of the first kind present
      int64_t best = 0;
      double most = -std::numeric_limits<double>::infinity();
      for (const int64_t j : candidates) {  // the highest IoU of a usable box (-2 elsewhere), the later on ties
        const bool ignored_box = in.gt_valid[gt_order[j]] && !regular[gt_order[j]];
        const bool use = work.iou[j] >= thr && !taken[j] && ignored_box != any_regular;
        const double value = use ? work.iou[j] : -2.0;
        hit |= use;
        if (value >= most) {
          most = value;
          best = j;
        }
      }
      bool took = false, took_ignored = false;
      if (hit) {
        taken[best] = 1;
        const int64_t g = gt_order[best];
        took = !in.gt_unmatchable[g];
        took_ignored = in.gt_valid[g] && !regular[g];
      }
      matched[p * num_thr + t] = kept[p] && took;
      ignored[p * num_thr + t] = kept[p] && (took_ignored || (!took && outside));
    }
  }
}

}  // namespace

// COCO's per-image matching (pycocotools COCOeval.evaluateImg) of a padded batch, image by image, as
// coco_match_detections' torch operations compute it: the detections in evaluation order (descending score,
// padding last, ties in the given order: `order` [B, D], the input position of each), kept when valid and among
// the max_dets first of their class; the GT boxes visited regular ones first (a box is ignored when its area lies
// outside [area_lo, area_hi]); per threshold (> 0: the caller's rule) each kept detection takes the free GT box of
// its class of highest IoU >= the threshold, regular boxes before ignored ones, the later box on ties (IoU, areas and
// sizes in the torch path's float64 operations, detection sizes in float32 first with float32_det_sizes).
// matched [B, D, T]: it took a box that is not unmatchable; ignored [B, D, T]: it took an ignored box, or took
// none and its own area is outside the range; gt_counts [B, C]: the valid regular GT boxes of each class.
std::vector<at::Tensor> coco_match_images(const at::Tensor& det_boxes, const at::Tensor& det_scores,
                                          const at::Tensor& det_labels, const at::Tensor& det_valid,
                                          const at::Tensor& gt_boxes, const at::Tensor& gt_labels,
                                          const at::Tensor& gt_valid, const at::Tensor& gt_unmatchable,
                                          const at::Tensor& thresholds, int64_t num_classes, int64_t max_dets,
                                          bool plus_one, bool float32_det_sizes, double area_lo, double area_hi) {
  check_cpu(det_boxes, at::kDouble, 3, "coco_match_images: det_boxes must be float64 [B, D, 4] on the CPU");
  check_cpu(det_scores, at::kDouble, 2, "coco_match_images: det_scores must be float64 [B, D] on the CPU");
  check_cpu(gt_boxes, at::kDouble, 3, "coco_match_images: gt_boxes must be float64 [B, G, 4] on the CPU");
  check_cpu(det_labels, at::kLong, 2, "coco_match_images: det_labels must be int64 [B, D] on the CPU");
  check_cpu(gt_labels, at::kLong, 2, "coco_match_images: gt_labels must be int64 [B, G] on the CPU");
  check_cpu(det_valid, at::kBool, 2, "coco_match_images: det_valid must be bool [B, D] on the CPU");
  check_cpu(gt_valid, at::kBool, 2, "coco_match_images: gt_valid must be bool [B, G] on the CPU");
  check_cpu(gt_unmatchable, at::kBool, 2, "coco_match_images: gt_unmatchable must be bool [B, G] on the CPU");
  check_cpu(thresholds, at::kDouble, 1, "coco_match_images: thresholds must be float64 [T] on the CPU");
  TORCH_CHECK(num_classes > 0, "coco_match_images needs at least one class");
  const int64_t batch = det_boxes.size(0), dets = det_boxes.size(1), gts = gt_boxes.size(1);
  const int64_t num_thr = thresholds.size(0);
  TORCH_CHECK(det_boxes.size(2) == 4 && gt_boxes.size(2) == 4 && gt_boxes.size(0) == batch &&
                  det_scores.size(0) == batch && det_scores.size(1) == dets && det_labels.sizes() == det_scores.sizes() &&
                  det_valid.sizes() == det_scores.sizes() && gt_labels.size(0) == batch && gt_labels.size(1) == gts &&
                  gt_valid.sizes() == gt_labels.sizes() && gt_unmatchable.sizes() == gt_labels.sizes(),
              "coco_match_images: the batch fields do not have matching shapes");
  const at::Tensor db = det_boxes.contiguous(), ds = det_scores.contiguous(), dl = det_labels.contiguous();
  const at::Tensor dv = det_valid.contiguous(), gb = gt_boxes.contiguous(), gl = gt_labels.contiguous();
  const at::Tensor gv = gt_valid.contiguous(), gu = gt_unmatchable.contiguous(), th = thresholds.contiguous();
  at::Tensor order = at::empty({batch, dets}, at::kLong);
  at::Tensor kept = at::empty({batch, dets}, at::kBool);
  at::Tensor matched = at::empty({batch, dets, num_thr}, at::kBool);
  at::Tensor ignored = at::empty({batch, dets, num_thr}, at::kBool);
  at::Tensor gt_counts = at::zeros({batch, num_classes}, at::kLong);
  MatchInputs in{nullptr, nullptr, nullptr, th.data_ptr<double>(), nullptr, nullptr, nullptr, nullptr, nullptr,
                 dets, gts, num_thr, num_classes, max_dets, plus_one ? 1.0 : 0.0, area_lo, area_hi,
                 float32_det_sizes};
  at::parallel_for(0, batch, 16, [&](int64_t begin, int64_t end) {
    ImageMatch work;
    MatchInputs image = in;
    for (int64_t b = begin; b < end; ++b) {
      image.det_boxes = db.data_ptr<double>() + b * dets * 4;
      image.det_scores = ds.data_ptr<double>() + b * dets;
      image.det_labels = dl.data_ptr<int64_t>() + b * dets;
      image.det_valid = dv.data_ptr<bool>() + b * dets;
      image.gt_boxes = gb.data_ptr<double>() + b * gts * 4;
      image.gt_labels = gl.data_ptr<int64_t>() + b * gts;
      image.gt_valid = gv.data_ptr<bool>() + b * gts;
      image.gt_unmatchable = gu.data_ptr<bool>() + b * gts;
      match_image(image, work, order.data_ptr<int64_t>() + b * dets, kept.data_ptr<bool>() + b * dets,
                  matched.data_ptr<bool>() + b * dets * num_thr, ignored.data_ptr<bool>() + b * dets * num_thr,
                  gt_counts.data_ptr<int64_t>() + b * num_classes);
    }
  });
  return {order, kept, matched, ignored, gt_counts};
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
  const bool ascending = std::is_sorted(rec_ptr, rec_ptr + num_rec);  // (COCO's 0:0.01:1)
  // filled class by class ([C, T, R]: each class' table is contiguous), returned as the [T, R, C] view
  at::Tensor out = at::full({classes, num_thr, num_rec}, -1.0, at::kDouble);
  double* out_ptr = out.data_ptr<double>();
  const double eps = std::numeric_limits<double>::epsilon();  // np.spacing(1)
  at::parallel_for(0, classes, 8, [&](int64_t begin, int64_t end) {
    std::vector<double> recall, precision, tps, fps;
    for (int64_t k = begin; k < end; ++k) {
      if (gc_ptr[k] <= 0) {
        continue;
      }
      const int64_t lo = bd_ptr[k], n = bd_ptr[k + 1] - lo;
      const double gt = static_cast<double>(gc_ptr[k]);
      recall.resize(n);
      precision.resize(n);
      tps.resize(n);
      fps.resize(n);
      for (int64_t t = 0; t < num_thr; ++t) {
        int64_t tp = 0, fp = 0;
        for (int64_t i = 0; i < n; ++i) {  // the running counts first, then the divisions (a loop of vectors)
          const int64_t at = (lo + i) * num_thr + t;
          tp += m_ptr[at] && !ig_ptr[at];
          fp += !m_ptr[at] && !ig_ptr[at];
          tps[i] = static_cast<double>(tp);
          fps[i] = static_cast<double>(fp);
        }
        for (int64_t i = 0; i < n; ++i) {
          recall[i] = tps[i] / gt;
          precision[i] = tps[i] / ((fps[i] + tps[i]) + eps);
        }
        for (int64_t i = n - 2; i >= 0; --i) {
          precision[i] = std::max(precision[i], precision[i + 1]);
        }
        int64_t i = 0;  // the first row whose recall reaches each threshold (std::lower_bound's position)
        for (int64_t r = 0; r < num_rec; ++r) {
          if (ascending) {  // one walk along the rows for all thresholds
            while (i < n && recall[i] < rec_ptr[r]) {
              ++i;
            }
          } else {
            i = std::lower_bound(recall.begin(), recall.end(), rec_ptr[r]) - recall.begin();
          }
          out_ptr[(k * num_thr + t) * num_rec + r] = i < n ? precision[i] : 0.0;
        }
      }
    }
  });
  return out.permute({1, 2, 0});
}
