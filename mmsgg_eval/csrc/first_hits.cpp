// Box matching and first hits, image by image, as the torch path of mmsgg_eval.functional.matching computes them:
// GT relation g of an image is hit by a ranked (pair, predicate) entry when the pair's subject matches g's GT
// subject, its object matches g's GT object (same class and box IoU >= thr) and the predicates are equal. The
// matched GT relations are bit sets of 64-bit words (bit g % 64 of word g / 64), as in the torch path.
// Here: box matching into per-object bit sets of GT relations (box_relation_end_bits), the first-hit rank of
// every GT relation in a ranked list (first_hit_ranks), the error analysis' per-GT-relation flags
// (relation_pair_flags, box_overlap_flags; box_match_overlap_flags: the box matching and the overlap flags in one
// pass; stage_first_hit_ranks: the three stage-wise ranks in one pass) and the input diagnostics of a pool
// (image_diagnostics: the box-frame flags and label-offset counts, with the same IoU).
#include "common.h"

using namespace mmsgg_ext;

namespace {

// Box m of a column table (for overlap_row / overlap_mask): its xyxy float32 coordinates and its area
// ((x2 - x1) + extra) * ((y2 - y1) + extra), in the torch path's operation order.
inline void set_box_column(const float* box, float extra, int64_t m, float* x1, float* y1, float* x2, float* y2,
                           float* area) {
  x1[m] = box[0];
  y1[m] = box[1];
  x2[m] = box[2];
  y2[m] = box[3];
  area[m] = ((box[2] - box[0]) + extra) * ((box[3] - box[1]) + extra);
}

// Calls row(n, label, x1, y1, x2, y2, area) for each predicted object n < count whose label is >= 0: its xyxy float32
// box (boxes[4 n, 4 n + 4)) and area ((x2 - x1) + extra) * ((y2 - y1) + extra), in the torch path's operation
// order (the row that overlap_row / overlap_mask compare with a column table of set_box_column).
template <typename Row>
inline void for_each_labelled_box(const int64_t* labels, const float* boxes, int64_t count, float extra, Row&& row) {
  for (int64_t n = 0; n < count; ++n) {
    if (labels[n] < 0) {
      continue;
    }
    const float* a = boxes + n * 4;
    row(n, labels[n], a[0], a[1], a[2], a[3], ((a[2] - a[0]) + extra) * ((a[3] - a[1]) + extra));
  }
}

// The bit sets [M, W] of the valid GT relations of one image whose subject (resp. object) is each GT object, from
// its GT pairs [G, 2] (0-based) and validity [G], into subject_of / object_of; returns the first valid GT relation
// with an object index outside [0, M), -1 when none (the tables are then incomplete).
int64_t relation_end_tables(const int64_t* pairs, const bool* valid, int64_t num_rel, int64_t num_gt_obj,
                            int64_t words, std::vector<uint64_t>& subject_of, std::vector<uint64_t>& object_of) {
  subject_of.assign(num_gt_obj * words, 0);
  object_of.assign(num_gt_obj * words, 0);
  for (int64_t g = 0; g < num_rel; ++g) {
    if (!valid[g]) {
      continue;
    }
    const int64_t s = pairs[2 * g], o = pairs[2 * g + 1];
    if (s < 0 || s >= num_gt_obj || o < 0 || o >= num_gt_obj) {
      return g;
    }
    subject_of[s * words + g / 64] |= uint64_t(1) << (g % 64);
    object_of[o * words + g / 64] |= uint64_t(1) << (g % 64);
  }
  return -1;
}

// The IoU of one box (corners a*, area area_a) with each of n boxes given by coordinate (gx1[i] ...; areas
// garea[i]) into iou[0, n): box_iou_f32's operations in its order (std::min / std::max with its operand order,
// the sides clamped at 0 by `< 0`, NaN kept: two empty boxes give NaN), 8 boxes per AVX2 vector where available.
void overlap_row_scalar(float ax1, float ay1, float ax2, float ay2, float area_a, float extra, const float* gx1,
                        const float* gy1, const float* gx2, const float* gy2, const float* garea, int64_t n,
                        float* iou) {
  for (int64_t i = 0; i < n; ++i) {
    float w = (std::min(ax2, gx2[i]) - std::max(ax1, gx1[i])) + extra;
    float h = (std::min(ay2, gy2[i]) - std::max(ay1, gy1[i])) + extra;
    w = w < 0.0f ? 0.0f : w;
    h = h < 0.0f ? 0.0f : h;
    const float inter = w * h;
    iou[i] = inter / ((area_a + garea[i]) - inter);
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2")))
void overlap_row_avx2(float ax1, float ay1, float ax2, float ay2, float area_a, float extra, const float* gx1,
                      const float* gy1, const float* gx2, const float* gy2, const float* garea, int64_t n,
                      float* iou) {
  const __m256 x1 = _mm256_set1_ps(ax1), y1 = _mm256_set1_ps(ay1), x2 = _mm256_set1_ps(ax2), y2 = _mm256_set1_ps(ay2);
  const __m256 area = _mm256_set1_ps(area_a), plus = _mm256_set1_ps(extra), zero = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    // std::min(a, b) is (b < a ? b : a) = MINPS(b, a); std::max(a, b) is (a < b ? b : a) = MAXPS(b, a)
    __m256 w = _mm256_add_ps(_mm256_sub_ps(_mm256_min_ps(_mm256_loadu_ps(gx2 + i), x2),
                                           _mm256_max_ps(_mm256_loadu_ps(gx1 + i), x1)), plus);
    __m256 h = _mm256_add_ps(_mm256_sub_ps(_mm256_min_ps(_mm256_loadu_ps(gy2 + i), y2),
                                           _mm256_max_ps(_mm256_loadu_ps(gy1 + i), y1)), plus);
    w = _mm256_blendv_ps(w, zero, _mm256_cmp_ps(w, zero, _CMP_LT_OQ));  // w < 0 ? 0 : w (NaN, -0.0 kept)
    h = _mm256_blendv_ps(h, zero, _mm256_cmp_ps(h, zero, _CMP_LT_OQ));
    const __m256 inter = _mm256_mul_ps(w, h);
    _mm256_storeu_ps(iou + i, _mm256_div_ps(inter, _mm256_sub_ps(_mm256_add_ps(area, _mm256_loadu_ps(garea + i)),
                                                                 inter)));
  }
  overlap_row_scalar(ax1, ay1, ax2, ay2, area_a, extra, gx1 + i, gy1 + i, gx2 + i, gy2 + i, garea + i, n - i,
                     iou + i);
}
#endif

void overlap_row(float ax1, float ay1, float ax2, float ay2, float area_a, float extra, const float* gx1,
                 const float* gy1, const float* gx2, const float* gy2, const float* garea, int64_t n, float* iou) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) {
    overlap_row_avx2(ax1, ay1, ax2, ay2, area_a, extra, gx1, gy1, gx2, gy2, garea, n, iou);
    return;
  }
#endif
  overlap_row_scalar(ax1, ay1, ax2, ay2, area_a, extra, gx1, gy1, gx2, gy2, garea, n, iou);
}

// Raises naming the first image whose GT relation (bad[b] >= 0) has an object index outside [0, num_gt_obj).
void check_relation_ends(const std::vector<int64_t>& bad, int64_t num_gt_obj, const char* kernel) {
  for (size_t b = 0; b < bad.size(); ++b) {
    TORCH_CHECK(bad[b] < 0, kernel, ": image ", b, " GT relation ", bad[b], " has an object index outside [0, ",
                num_gt_obj, ")");
  }
}

// The box-matching inputs of one batch (box_relation_end_bits, box_overlap_flags): checked (shapes and types;
// `kernel` names the caller in the errors), made contiguous, with their sizes and data pointers, and the two
// [B, N, W] bit-set outputs (zeros; W = max(ceil(G / 64), 1) words of 64 GT relations).
struct BoxInputs {
  at::Tensor pred_boxes, pred_labels, gt_boxes, gt_labels, gt_pairs, gt_valid;  // contiguous: own the pointers
  int64_t batch, num_pred, num_gt_obj, num_rel, words;
  const float* pb;    // [B, N, 4] predicted boxes (xyxy)
  const int64_t* pl;  // [B, N] predicted labels (< 0: padding)
  const float* gb;    // [B, M, 4] GT boxes (xyxy)
  const int64_t* gl;  // [B, M] GT labels (< 0: padding)
  const int64_t* gp;  // [B, G, 2] GT pairs (0-based object indices)
  const bool* gv;     // [B, G] GT relation validity
  at::Tensor subject_bits, object_bits;  // [B, N, W] int64 outputs
  uint64_t* sub;
  uint64_t* obj;

  BoxInputs(const at::Tensor& pred_boxes_in, const at::Tensor& pred_labels_in, const at::Tensor& gt_boxes_in,
            const at::Tensor& gt_labels_in, const at::Tensor& gt_pairs_in, const at::Tensor& gt_valid_in,
            const std::string& kernel) {
    check_cpu(pred_boxes_in, at::kFloat, 3, (kernel + ": pred_boxes must be float32 [B, N, 4] on the CPU").c_str());
    check_cpu(gt_boxes_in, at::kFloat, 3, (kernel + ": gt_boxes must be float32 [B, M, 4] on the CPU").c_str());
    check_cpu(pred_labels_in, at::kLong, 2, (kernel + ": pred_labels must be int64 [B, N] on the CPU").c_str());
    check_cpu(gt_labels_in, at::kLong, 2, (kernel + ": gt_labels must be int64 [B, M] on the CPU").c_str());
    check_cpu(gt_pairs_in, at::kLong, 3, (kernel + ": gt_pairs must be int64 [B, G, 2] on the CPU").c_str());
    check_cpu(gt_valid_in, at::kBool, 2, (kernel + ": gt_valid must be bool [B, G] on the CPU").c_str());
    batch = pred_boxes_in.size(0);
    num_pred = pred_boxes_in.size(1);
    num_gt_obj = gt_boxes_in.size(1);
    num_rel = gt_pairs_in.size(1);
    TORCH_CHECK(pred_boxes_in.size(2) == 4 && gt_boxes_in.size(2) == 4 && gt_pairs_in.size(2) == 2, kernel,
                ": boxes must be [B, N, 4] / [B, M, 4] and gt_pairs [B, G, 2]");
    TORCH_CHECK(pred_labels_in.size(0) == batch && pred_labels_in.size(1) == num_pred &&
                    gt_boxes_in.size(0) == batch && gt_labels_in.size(0) == batch &&
                    gt_labels_in.size(1) == num_gt_obj && gt_pairs_in.size(0) == batch &&
                    gt_valid_in.size(0) == batch && gt_valid_in.size(1) == num_rel,
                kernel, ": the batch fields do not have matching shapes");
    words = std::max<int64_t>((num_rel + 63) / 64, 1);
    pred_boxes = pred_boxes_in.contiguous();
    pred_labels = pred_labels_in.contiguous();
    gt_boxes = gt_boxes_in.contiguous();
    gt_labels = gt_labels_in.contiguous();
    gt_pairs = gt_pairs_in.contiguous();
    gt_valid = gt_valid_in.contiguous();
    pb = pred_boxes.data_ptr<float>();
    pl = pred_labels.data_ptr<int64_t>();
    gb = gt_boxes.data_ptr<float>();
    gl = gt_labels.data_ptr<int64_t>();
    gp = gt_pairs.data_ptr<int64_t>();
    gv = gt_valid.data_ptr<bool>();
    subject_bits = at::zeros({batch, num_pred, words}, at::kLong);
    object_bits = at::zeros({batch, num_pred, words}, at::kLong);
    sub = reinterpret_cast<uint64_t*>(subject_bits.data_ptr<int64_t>());
    obj = reinterpret_cast<uint64_t*>(object_bits.data_ptr<int64_t>());
  }

  // Calls image_fn(b, subject_of, object_of, scratch) for every image b (in parallel, `Scratch` a per-thread
  // workspace) with b's relation-end tables (relation_end_tables: the [M, W] bit sets of the relations whose
  // subject / object is each GT object); then raises naming the first image that has a GT relation with an
  // object index outside [0, M) (such an image is not passed to image_fn). `kernel` names the caller.
  template <typename Scratch, typename ImageFn>
  void for_each_image(const char* kernel, ImageFn image_fn) const {
    std::vector<int64_t> bad(batch, -1);
    at::parallel_for(0, batch, 8, [&](int64_t begin, int64_t end) {
      std::vector<uint64_t> subject_of, object_of;
      Scratch scratch;
      for (int64_t b = begin; b < end; ++b) {
        bad[b] = relation_end_tables(gp + b * num_rel * 2, gv + b * num_rel, num_rel, num_gt_obj, words, subject_of,
                                     object_of);
        if (bad[b] < 0) {
          image_fn(b, subject_of, object_of, scratch);
        }
      }
    });
    check_relation_ends(bad, num_gt_obj, kernel);
  }
};

// box_relation_end_bits' per-thread workspace: the GT objects of each class as chains (first_of[label] ->
// next_of[m] -> ...), in ascending m.
struct ClassChains {
  std::vector<int64_t> first_of, next_of;
};

// box_overlap_flags' per-thread workspace: the GT boxes by coordinate (the IoU loop vectorises) and one row of IoUs.
struct GtCoordinates {
  std::vector<float> x1, y1, x2, y2, area, iou;
};

// Adds GT object m's relations (its rows of the [M, W] tables subject_of / object_of) to one predicted object's
// subject / object bit sets.
inline void add_relation_ends(uint64_t* sub, uint64_t* obj, const std::vector<uint64_t>& subject_of,
                              const std::vector<uint64_t>& object_of, int64_t m, int64_t words) {
  for (int64_t w = 0; w < words; ++w) {
    sub[w] |= subject_of[m * words + w];
    obj[w] |= object_of[m * words + w];
  }
}

}  // namespace

// For every predicted object n of every image, the bit sets of the GT relations whose subject (resp. object) it
// matches: two int64 [B, N, W] tensors (W = max(ceil(G / 64), 1)). Labels < 0 are padding (never matched);
// invalid GT relations are in no set. Equal to relation_end_bits(box_object_match_list(...)).
std::tuple<at::Tensor, at::Tensor> box_relation_end_bits(const at::Tensor& pred_boxes, const at::Tensor& pred_labels,
                                                         const at::Tensor& gt_boxes, const at::Tensor& gt_labels,
                                                         const at::Tensor& gt_pairs, const at::Tensor& gt_valid,
                                                         double iou_thr, bool plus_one) {
  const BoxInputs in(pred_boxes, pred_labels, gt_boxes, gt_labels, gt_pairs, gt_valid, "box_relation_end_bits");
  const int64_t num_pred = in.num_pred, num_gt_obj = in.num_gt_obj, words = in.words;
  const float thr = static_cast<float>(iou_thr), extra = plus_one ? 1.0f : 0.0f;
  in.for_each_image<ClassChains>("box_relation_end_bits", [&](int64_t b, const std::vector<uint64_t>& subject_of,
                                                                const std::vector<uint64_t>& object_of,
                                                                ClassChains& chains) {
    std::vector<int64_t>& first_of = chains.first_of;
    std::vector<int64_t>& next_of = chains.next_of;
    const int64_t* labels = in.pl + b * num_pred;
    const int64_t* gt_lab = in.gl + b * num_gt_obj;
    int64_t classes = 0;
    for (int64_t m = 0; m < num_gt_obj; ++m) {
      classes = std::max(classes, gt_lab[m] + 1);
    }
    first_of.assign(classes, -1);
    next_of.assign(num_gt_obj, -1);
    for (int64_t m = num_gt_obj - 1; m >= 0; --m) {
      if (gt_lab[m] >= 0) {
        next_of[m] = first_of[gt_lab[m]];
        first_of[gt_lab[m]] = m;
      }
    }
    for (int64_t n = 0; n < num_pred; ++n) {
      const int64_t label = labels[n];
      if (label < 0 || label >= classes) {
        continue;
      }
      const float* box = in.pb + (b * num_pred + n) * 4;
      uint64_t* sub = in.sub + (b * num_pred + n) * words;
      uint64_t* obj = in.obj + (b * num_pred + n) * words;
      for (int64_t m = first_of[label]; m >= 0; m = next_of[m]) {
        if (!(box_iou_f32(box, in.gb + (b * num_gt_obj + m) * 4, extra) >= thr)) {
          continue;
        }
        add_relation_ends(sub, obj, subject_of, object_of, m, words);
      }
    }
  });
  return {in.subject_bits, in.object_bits};
}

// Error analysis (mmsgg_eval.functional.error_causes), every (predicted object, GT object) pair of an image in one
// pass: predicted object n "overlaps" GT object m when both labels are >= 0 (not padding) and their box IoU
// (box_iou_unchecked's operation order; NaN, of two empty boxes, never reaches the threshold) is >= thr, whatever
// the classes; it "matches" m when it also has m's class. Returns (located [B, M] bool: some predicted object
// overlaps GT object m, detected [B, M] bool: some predicted object matches it, located subject bits [B, N, W],
// located object bits [B, N, W]: the GT relations whose subject / object each predicted object overlaps, as
// relation_end_bits of the overlap matrix gives them; W = max(ceil(G / 64), 1)).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> box_overlap_flags(
    const at::Tensor& pred_boxes, const at::Tensor& pred_labels, const at::Tensor& gt_boxes,
    const at::Tensor& gt_labels, const at::Tensor& gt_pairs, const at::Tensor& gt_valid, double iou_thr,
    bool plus_one) {
  const BoxInputs in(pred_boxes, pred_labels, gt_boxes, gt_labels, gt_pairs, gt_valid, "box_overlap_flags");
  const int64_t batch = in.batch, num_pred = in.num_pred, num_gt_obj = in.num_gt_obj, words = in.words;
  at::Tensor located = at::zeros({batch, num_gt_obj}, at::kBool), detected = at::zeros({batch, num_gt_obj}, at::kBool);
  bool* located_ptr = located.data_ptr<bool>();
  bool* detected_ptr = detected.data_ptr<bool>();
  const float thr = static_cast<float>(iou_thr), extra = plus_one ? 1.0f : 0.0f;
  in.for_each_image<GtCoordinates>("box_overlap_flags", [&](int64_t b, const std::vector<uint64_t>& subject_of,
                                                             const std::vector<uint64_t>& object_of,
                                                             GtCoordinates& gt) {
    for (std::vector<float>* v : {&gt.x1, &gt.y1, &gt.x2, &gt.y2, &gt.area, &gt.iou}) {
      v->resize(num_gt_obj);
    }
    // raw pointers: the bool stores below may alias anything, and would make every gt.iou[m] reload its buffer
    float *gt_x1 = gt.x1.data(), *gt_y1 = gt.y1.data(), *gt_x2 = gt.x2.data(), *gt_y2 = gt.y2.data();
    float *gt_area = gt.area.data(), *iou = gt.iou.data();
    const int64_t* labels = in.pl + b * num_pred;
    const int64_t* gt_lab = in.gl + b * num_gt_obj;
    bool* image_located = located_ptr + b * num_gt_obj;
    bool* image_detected = detected_ptr + b * num_gt_obj;
    for (int64_t m = 0; m < num_gt_obj; ++m) {
      const float* g = in.gb + (b * num_gt_obj + m) * 4;
      set_box_column(g, extra, m, gt_x1, gt_y1, gt_x2, gt_y2, gt_area);
    }
    for_each_labelled_box(labels, in.pb + b * num_pred * 4, num_pred, extra,
                          [&](int64_t n, int64_t label, float ax1, float ay1, float ax2, float ay2, float area_a) {
      overlap_row(ax1, ay1, ax2, ay2, area_a, extra, gt_x1, gt_y1, gt_x2, gt_y2, gt_area, num_gt_obj, iou);
      uint64_t* sub = in.sub + (b * num_pred + n) * words;
      uint64_t* obj = in.obj + (b * num_pred + n) * words;
      for (int64_t m = 0; m < num_gt_obj; ++m) {
        if (gt_lab[m] < 0 || !(iou[m] >= thr)) {  // NaN (two empty boxes) never reaches the threshold
          continue;
        }
        image_located[m] = true;
        image_detected[m] = image_detected[m] || gt_lab[m] == label;
        add_relation_ends(sub, obj, subject_of, object_of, m, words);
      }
    });
  });
  return {located, detected, in.subject_bits, in.object_bits};
}

namespace {

// overlap_row's IoUs compared with thr (> 0; NaN never reaches it): bit i % 64 of mask[i / 64] is set when the box
// overlaps GT box i at the threshold, for i in [0, n); mask holds ceil(n / 64) words, written here. The IoUs are
// overlap_row's (the same operations and order, 8 boxes per AVX2 vector where available), not stored.
void overlap_mask_scalar(float ax1, float ay1, float ax2, float ay2, float area_a, float extra, const float* gx1,
                         const float* gy1, const float* gx2, const float* gy2, const float* garea, int64_t begin,
                         int64_t n, float thr, uint64_t* mask) {
  for (int64_t i = begin; i < n; ++i) {
    float iou;
    overlap_row_scalar(ax1, ay1, ax2, ay2, area_a, extra, gx1 + i, gy1 + i, gx2 + i, gy2 + i, garea + i, 1, &iou);
    mask[i / 64] |= uint64_t(iou >= thr) << (i % 64);
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2")))
void overlap_mask_avx2(float ax1, float ay1, float ax2, float ay2, float area_a, float extra, const float* gx1,
                       const float* gy1, const float* gx2, const float* gy2, const float* garea, int64_t n, float thr,
                       uint64_t* mask) {
  const __m256 x1 = _mm256_set1_ps(ax1), y1 = _mm256_set1_ps(ay1), x2 = _mm256_set1_ps(ax2), y2 = _mm256_set1_ps(ay2);
  const __m256 area = _mm256_set1_ps(area_a), plus = _mm256_set1_ps(extra), zero = _mm256_setzero_ps();
  const __m256 limit = _mm256_set1_ps(thr);
  int64_t i = 0;
  uint64_t word = 0;  // the bits of the current 64 GT boxes
  for (; i + 8 <= n; i += 8) {  // overlap_row_avx2's operations; 8 divides 64: a vector never spans two words
    __m256 w = _mm256_add_ps(_mm256_sub_ps(_mm256_min_ps(_mm256_loadu_ps(gx2 + i), x2),
                                           _mm256_max_ps(_mm256_loadu_ps(gx1 + i), x1)), plus);
    __m256 h = _mm256_add_ps(_mm256_sub_ps(_mm256_min_ps(_mm256_loadu_ps(gy2 + i), y2),
                                           _mm256_max_ps(_mm256_loadu_ps(gy1 + i), y1)), plus);
    w = _mm256_blendv_ps(w, zero, _mm256_cmp_ps(w, zero, _CMP_LT_OQ));
    h = _mm256_blendv_ps(h, zero, _mm256_cmp_ps(h, zero, _CMP_LT_OQ));
    const __m256 inter = _mm256_mul_ps(w, h);
    const __m256 iou = _mm256_div_ps(inter, _mm256_sub_ps(_mm256_add_ps(area, _mm256_loadu_ps(garea + i)), inter));
    const uint64_t bits = static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(iou, limit, _CMP_GE_OQ)));
    word |= bits << (i % 64);  // iou >= thr, NaN false (ordered compare); in a register: no chain through memory
    if (i % 64 == 56) {
      mask[i / 64] = word;
      word = 0;
    }
  }
  if (i % 64) {
    mask[i / 64] = word;
  }
  for (; i < n; ++i) {  // the tail here, in VEX code: a call to SSE code with the upper halves dirty is slow
    float w = (std::min(ax2, gx2[i]) - std::max(ax1, gx1[i])) + extra;
    float h = (std::min(ay2, gy2[i]) - std::max(ay1, gy1[i])) + extra;
    w = w < 0.0f ? 0.0f : w;
    h = h < 0.0f ? 0.0f : h;
    const float inter = w * h;
    mask[i / 64] |= uint64_t(inter / ((area_a + garea[i]) - inter) >= thr) << (i % 64);
  }
  _mm256_zeroupper();  // back to the caller's SSE code without the transition penalty
}
#endif

void overlap_mask(float ax1, float ay1, float ax2, float ay2, float area_a, float extra, const float* gx1,
                  const float* gy1, const float* gx2, const float* gy2, const float* garea, int64_t n, float thr,
                  uint64_t* mask) {
  std::fill(mask, mask + (n + 63) / 64, uint64_t(0));
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) {
    overlap_mask_avx2(ax1, ay1, ax2, ay2, area_a, extra, gx1, gy1, gx2, gy2, garea, n, thr, mask);
    return;
  }
#endif
  overlap_mask_scalar(ax1, ay1, ax2, ay2, area_a, extra, gx1, gy1, gx2, gy2, garea, 0, n, thr, mask);
}

// box_match_overlap_flags' per-thread workspace: the GT boxes by coordinate, the valid GT objects and one row of
// overlap bits (words of 64 GT objects), and which GT objects some predicted object overlaps / matches.
struct OverlapScratch {
  std::vector<float> x1, y1, x2, y2, area;
  std::vector<uint64_t> valid, row;
  std::vector<uint8_t> located, detected;
};

}  // namespace

// The metric's box matching and the error analysis' overlaps in one pass over every (predicted, GT) object pair of
// each image (mmsgg_eval.functional.error_causes): with thr > 0, predicted object n "overlaps" GT object m when
// both labels are >= 0 and their box IoU (overlap_row's operations, as box_iou_f32 and box_iou_unchecked order
// them; NaN, of two empty boxes, never reaches thr) is >= thr; it "matches" m when it also has m's class.
// Returns (subject bits, object bits [B, N, W]: the GT relations whose subject / object each predicted object
// matches, = box_relation_end_bits; located subject / object bits [B, N, W]: those whose ends it overlaps (a
// superset: a match overlaps); pre_cause [B, G] int8: each GT relation's code among cause_codes = (subject_loc,
// object_loc, subject_cls, object_cls, pair) by the first that applies (no overlapping predicted object for the
// subject, for the object, no matching one for the subject, for the object, else `pair`; an invalid GT relation
// whose ends are outside [0, M) gets subject_loc); and per image [B] int32 its valid GT objects, those some
// predicted object overlaps, those some predicted object matches). W = max(ceil(G / 64), 1).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
box_match_overlap_flags(const at::Tensor& pred_boxes, const at::Tensor& pred_labels, const at::Tensor& gt_boxes,
                        const at::Tensor& gt_labels, const at::Tensor& gt_pairs, const at::Tensor& gt_valid,
                        double iou_thr, bool plus_one, const std::vector<int64_t>& cause_codes) {
  const BoxInputs in(pred_boxes, pred_labels, gt_boxes, gt_labels, gt_pairs, gt_valid, "box_match_overlap_flags");
  TORCH_CHECK(iou_thr > 0, "box_match_overlap_flags: iou_thr must be > 0, got ", iou_thr);
  TORCH_CHECK(cause_codes.size() == 5, "box_match_overlap_flags: cause_codes must hold 5 codes (subject_loc, "
              "object_loc, subject_cls, object_cls, pair), got ", cause_codes.size());
  for (int64_t c : cause_codes) {
    TORCH_CHECK(c >= -128 && c < 128, "box_match_overlap_flags: a cause code must fit int8, got ", c);
  }
  const int8_t subject_loc = static_cast<int8_t>(cause_codes[0]), object_loc = static_cast<int8_t>(cause_codes[1]),
               subject_cls = static_cast<int8_t>(cause_codes[2]), object_cls = static_cast<int8_t>(cause_codes[3]),
               pair_code = static_cast<int8_t>(cause_codes[4]);
  const int64_t batch = in.batch, num_pred = in.num_pred, num_gt_obj = in.num_gt_obj, num_rel = in.num_rel;
  const int64_t words = in.words, obj_words = (num_gt_obj + 63) / 64;
  at::Tensor loc_subject = at::zeros({batch, num_pred, words}, at::kLong);
  at::Tensor loc_object = at::zeros({batch, num_pred, words}, at::kLong);
  at::Tensor pre_cause = at::empty({batch, num_rel}, at::kChar);
  at::Tensor num_objects = at::empty({batch}, at::kInt), inst_loc = at::empty({batch}, at::kInt),
             inst_det = at::empty({batch}, at::kInt);
  uint64_t* loc_sub_ptr = reinterpret_cast<uint64_t*>(loc_subject.data_ptr<int64_t>());
  uint64_t* loc_obj_ptr = reinterpret_cast<uint64_t*>(loc_object.data_ptr<int64_t>());
  int8_t* cause_ptr = pre_cause.data_ptr<int8_t>();
  int32_t* objects_ptr = num_objects.data_ptr<int32_t>();
  int32_t* loc_count_ptr = inst_loc.data_ptr<int32_t>();
  int32_t* det_count_ptr = inst_det.data_ptr<int32_t>();
  const float thr = static_cast<float>(iou_thr), extra = plus_one ? 1.0f : 0.0f;
  in.for_each_image<OverlapScratch>("box_match_overlap_flags", [&](int64_t b, const std::vector<uint64_t>& subject_of,
                                                                   const std::vector<uint64_t>& object_of,
                                                                   OverlapScratch& gt) {
    for (std::vector<float>* v : {&gt.x1, &gt.y1, &gt.x2, &gt.y2, &gt.area}) {
      v->resize(num_gt_obj);
    }
    gt.valid.assign(std::max<int64_t>(obj_words, 1), 0);
    gt.row.resize(std::max<int64_t>(obj_words, 1));
    gt.located.assign(num_gt_obj, 0);
    gt.detected.assign(num_gt_obj, 0);
    float *gt_x1 = gt.x1.data(), *gt_y1 = gt.y1.data(), *gt_x2 = gt.x2.data(), *gt_y2 = gt.y2.data();
    float* gt_area = gt.area.data();
    uint64_t *valid = gt.valid.data(), *row = gt.row.data();
    uint8_t *located = gt.located.data(), *detected = gt.detected.data();
    const int64_t* labels = in.pl + b * num_pred;
    const int64_t* gt_lab = in.gl + b * num_gt_obj;
    int32_t objects = 0;
    for (int64_t m = 0; m < num_gt_obj; ++m) {
      const float* g = in.gb + (b * num_gt_obj + m) * 4;
      set_box_column(g, extra, m, gt_x1, gt_y1, gt_x2, gt_y2, gt_area);
      if (gt_lab[m] >= 0) {
        valid[m / 64] |= uint64_t(1) << (m % 64);
        ++objects;
      }
    }
    for_each_labelled_box(labels, in.pb + b * num_pred * 4, num_pred, extra,
                          [&](int64_t n, int64_t label, float ax1, float ay1, float ax2, float ay2, float area_a) {
      overlap_mask(ax1, ay1, ax2, ay2, area_a, extra, gt_x1, gt_y1, gt_x2, gt_y2, gt_area, num_gt_obj, thr, row);
      const int64_t at_n = (b * num_pred + n) * words;
      for (int64_t v = 0; v < obj_words; ++v) {
        uint64_t word = row[v] & valid[v];
        while (word) {
          const int64_t m = v * 64 + __builtin_ctzll(word);
          word &= word - 1;
          located[m] = 1;
          add_relation_ends(loc_sub_ptr + at_n, loc_obj_ptr + at_n, subject_of, object_of, m, words);
          if (gt_lab[m] == label) {
            detected[m] = 1;
            add_relation_ends(in.sub + at_n, in.obj + at_n, subject_of, object_of, m, words);
          }
        }
      }
    });
    int32_t found = 0, matched = 0;
    for (int64_t m = 0; m < num_gt_obj; ++m) {
      found += located[m];
      matched += detected[m];
    }
    objects_ptr[b] = objects;
    loc_count_ptr[b] = found;
    det_count_ptr[b] = matched;
    const int64_t* pairs = in.gp + b * num_rel * 2;
    int8_t* cause = cause_ptr + b * num_rel;
    for (int64_t g = 0; g < num_rel; ++g) {
      const int64_t s = pairs[2 * g], o = pairs[2 * g + 1];
      if (s < 0 || s >= num_gt_obj || o < 0 || o >= num_gt_obj) {  // an invalid relation (valid ones are checked)
        cause[g] = subject_loc;
        continue;
      }
      cause[g] = !located[s] ? subject_loc : !located[o] ? object_loc : !detected[s] ? subject_cls :
                 !detected[o] ? object_cls : pair_code;
    }
  });
  return {in.subject_bits, in.object_bits, loc_subject, loc_object, pre_cause, num_objects, inst_loc, inst_det};
}

// The input diagnostics of a batch (mmsgg_eval.functional.diagnostics, image_diagnostics), image by image in
// one pass, as the torch path computes them: flags [B] uint8, box_frame_flags of the predicted boxes (labels < 0
// are padding) given each image's original and resized (width, height) [B, 2] (NaN where unknown), and offsets
// [B, 4] int32, label_offset_counts of the images marked in label_images [B] (zeros elsewhere): the predicted
// objects whose box IoU (box_iou_unchecked's operation order; NaN never reaches the threshold) with some GT box is
// >= label_iou, and among them those overlapping one of class label, label - 1 and label + 1. The constants are
// the Python module's (tolerance = px + rel * extent, rounded to float32 as torch rounds a scalar operand), the flag
// values too (flag_bits: BOX_CHECKED, BOX_OUTSIDE, BOX_FITS_RESIZED, BOX_DOWNSCALED, BOX_UNIT).
std::tuple<at::Tensor, at::Tensor> image_diagnostics(
    const at::Tensor& pred_boxes_in, const at::Tensor& pred_labels_in, const at::Tensor& gt_boxes_in,
    const at::Tensor& gt_labels_in, const at::Tensor& original_in, const at::Tensor& resized_in,
    const at::Tensor& label_images_in, double label_iou, bool plus_one, double tolerance_px, double tolerance_rel,
    double downscale_limit, double unit_min_side, const std::vector<int64_t>& flag_bits) {
  const std::string kernel = "image_diagnostics";
  check_cpu(pred_boxes_in, at::kFloat, 3, "image_diagnostics: pred_boxes must be float32 [B, N, 4] on the CPU");
  check_cpu(gt_boxes_in, at::kFloat, 3, "image_diagnostics: gt_boxes must be float32 [B, M, 4] on the CPU");
  check_cpu(pred_labels_in, at::kLong, 2, "image_diagnostics: pred_labels must be int64 [B, N] on the CPU");
  check_cpu(gt_labels_in, at::kLong, 2, "image_diagnostics: gt_labels must be int64 [B, M] on the CPU");
  check_cpu(original_in, at::kFloat, 2, "image_diagnostics: original must be float32 [B, 2] on the CPU");
  check_cpu(resized_in, at::kFloat, 2, "image_diagnostics: resized must be float32 [B, 2] on the CPU");
  check_cpu(label_images_in, at::kBool, 1, "image_diagnostics: label_images must be bool [B] on the CPU");
  const int64_t batch = pred_boxes_in.size(0), num_pred = pred_boxes_in.size(1), num_gt = gt_boxes_in.size(1);
  TORCH_CHECK(pred_boxes_in.size(2) == 4 && gt_boxes_in.size(2) == 4 && pred_labels_in.size(0) == batch &&
                  pred_labels_in.size(1) == num_pred && gt_boxes_in.size(0) == batch && gt_labels_in.size(0) == batch &&
                  gt_labels_in.size(1) == num_gt && original_in.size(0) == batch && original_in.size(1) == 2 &&
                  resized_in.size(0) == batch && resized_in.size(1) == 2 && label_images_in.size(0) == batch,
              kernel, ": the batch fields do not have matching shapes");
  TORCH_CHECK(flag_bits.size() == 5, kernel, ": flag_bits must be the 5 flag values (checked, outside, fits resized, "
              "downscaled, unit)");
  const uint8_t box_checked = static_cast<uint8_t>(flag_bits[0]), box_outside = static_cast<uint8_t>(flag_bits[1]);
  const uint8_t box_fits_resized = static_cast<uint8_t>(flag_bits[2]);
  const uint8_t box_downscaled = static_cast<uint8_t>(flag_bits[3]), box_unit = static_cast<uint8_t>(flag_bits[4]);
  const at::Tensor pred_boxes = pred_boxes_in.contiguous(), pred_labels = pred_labels_in.contiguous();
  const at::Tensor gt_boxes = gt_boxes_in.contiguous(), gt_labels = gt_labels_in.contiguous();
  const at::Tensor original = original_in.contiguous(), resized = resized_in.contiguous();
  const at::Tensor label_images = label_images_in.contiguous();
  const float* pb = pred_boxes.data_ptr<float>();
  const int64_t* pl = pred_labels.data_ptr<int64_t>();
  const float* gb = gt_boxes.data_ptr<float>();
  const int64_t* gl = gt_labels.data_ptr<int64_t>();
  const float* ori = original.data_ptr<float>();
  const float* res = resized.data_ptr<float>();
  const bool* checked_labels = label_images.data_ptr<bool>();
  at::Tensor flags = at::zeros({batch}, at::kByte), offsets = at::zeros({batch, 4}, at::kInt);
  uint8_t* flags_ptr = flags.data_ptr<uint8_t>();
  int32_t* offsets_ptr = offsets.data_ptr<int32_t>();
  const float thr = static_cast<float>(label_iou), extra = plus_one ? 1.0f : 0.0f;
  const float tol_px = static_cast<float>(tolerance_px), tol_rel = static_cast<float>(tolerance_rel);
  const float limit = static_cast<float>(downscale_limit), min_side = static_cast<float>(unit_min_side);
  at::parallel_for(0, batch, 8, [&](int64_t begin, int64_t end) {
    GtCoordinates gt;
    for (std::vector<float>* v : {&gt.x1, &gt.y1, &gt.x2, &gt.y2, &gt.area, &gt.iou}) {
      v->resize(num_gt);
    }
    float *gt_x1 = gt.x1.data(), *gt_y1 = gt.y1.data(), *gt_x2 = gt.x2.data(), *gt_y2 = gt.y2.data();
    float *gt_area = gt.area.data(), *iou = gt.iou.data();
    for (int64_t b = begin; b < end; ++b) {
      const float* boxes = pb + b * num_pred * 4;
      const int64_t* labels = pl + b * num_pred;
      // box frames: known size, then each real box against the original extent, the resized one and [0, 1]
      const float ow = ori[2 * b], oh = ori[2 * b + 1], rw = res[2 * b], rh = res[2 * b + 1];
      const bool known = std::isfinite(ow) && std::isfinite(oh) && ow > 0.0f && oh > 0.0f;
      const float w = known ? ow : 1.0f, h = known ? oh : 1.0f;
      const float tol_w = tol_px + tol_rel * w, tol_h = tol_px + tol_rel * h;
      const float ratio_w = rw / w, ratio_h = rh / h;
      // amax over (width, height) propagates NaN
      const float ratio = (ratio_w != ratio_w || ratio_h != ratio_h) ? ratio_w + ratio_h : std::max(ratio_w, ratio_h);
      int64_t count = 0, outside = 0;
      bool fits_resized = true, in_unit = true;
      const bool maybe_downscaled = std::isfinite(ratio) && ratio <= limit;
      const float ew = maybe_downscaled ? rw : w, eh = maybe_downscaled ? rh : h;
      const float rtol_w = tol_px + tol_rel * ew, rtol_h = tol_px + tol_rel * eh;
      for (int64_t n = 0; n < num_pred; ++n) {
        if (labels[n] < 0) {
          continue;
        }
        const float* box = boxes + n * 4;
        ++count;
        if (!(box[0] >= -tol_w && box[1] >= -tol_h && box[2] <= w + tol_w && box[3] <= h + tol_h)) {
          ++outside;
        }
        if (!(box[0] >= -rtol_w && box[1] >= -rtol_h && box[2] <= ew + rtol_w && box[3] <= eh + rtol_h)) {
          fits_resized = false;
        }
        for (int c = 0; c < 4; ++c) {
          in_unit = in_unit && box[c] >= 0.0f && box[c] <= 1.0f;
        }
      }
      const bool checked = known && count > 0;
      const bool downscaled = checked && maybe_downscaled;
      uint8_t flag = 0;
      if (checked) {
        flag |= box_checked;
        flag |= 2 * outside > count ? box_outside : 0;
        flag |= downscaled && fits_resized ? box_fits_resized : 0;
        flag |= downscaled ? box_downscaled : 0;
        flag |= w > min_side && h > min_side && in_unit ? box_unit : 0;
      }
      flags_ptr[b] = flag;
      if (!checked_labels[b]) {
        continue;
      }
      // label offsets: each real predicted object against every real GT box
      const int64_t* gt_lab = gl + b * num_gt;
      for (int64_t m = 0; m < num_gt; ++m) {
        const float* g = gb + (b * num_gt + m) * 4;
        set_box_column(g, extra, m, gt_x1, gt_y1, gt_x2, gt_y2, gt_area);
      }
      int32_t* counts = offsets_ptr + b * 4;
      for_each_labelled_box(labels, boxes, num_pred, extra,
                            [&](int64_t n, int64_t label, float ax1, float ay1, float ax2, float ay2, float area_a) {
        overlap_row(ax1, ay1, ax2, ay2, area_a, extra, gt_x1, gt_y1, gt_x2, gt_y2, gt_area, num_gt, iou);
        bool over = false, own = false, below = false, above = false;
        for (int64_t m = 0; m < num_gt; ++m) {
          if (gt_lab[m] < 0 || !(iou[m] >= thr)) {
            continue;
          }
          over = true;
          own = own || gt_lab[m] == label;
          below = below || gt_lab[m] == label - 1;
          above = above || gt_lab[m] == label + 1;
        }
        counts[0] += over;
        counts[1] += own;
        counts[2] += below;
        counts[3] += above;
      });
    }
  });
  return {flags, offsets};
}

// The matching bit sets and GT relations a first-hit kernel reads (types and ranks; shapes are checked by the
// caller with its own other fields). `kernel` names the caller in the errors.
static void check_relation_bits(const at::Tensor& subject_bits, const at::Tensor& object_bits,
                                const at::Tensor& gt_predicates, const at::Tensor& gt_valid, const std::string& kernel) {
  check_cpu(subject_bits, at::kLong, 3, (kernel + ": subject_bits must be int64 [B, N, W] on the CPU").c_str());
  check_cpu(object_bits, at::kLong, 3, (kernel + ": object_bits must be int64 [B, N, W] on the CPU").c_str());
  check_cpu(gt_predicates, at::kLong, 2, (kernel + ": gt_predicates must be int64 [B, G] on the CPU").c_str());
  check_cpu(gt_valid, at::kBool, 2, (kernel + ": gt_valid must be bool [B, G] on the CPU").c_str());
}

// The score rows a kernel reads its predicates from: matrices[b] for image b, or (with `start`) one matrix that
// holds every image's rows from start[b]; predicate columns [column, column + P). `kernel` names the caller.
static void check_score_source(const std::vector<at::Tensor>& matrices, const std::optional<at::Tensor>& start,
                               int64_t batch, int64_t column, int64_t num_predicates, const std::string& kernel) {
  TORCH_CHECK(num_predicates > 0, kernel, ": no predicate columns");
  check_matrices(matrices, column, num_predicates);
  if (start.has_value()) {
    check_cpu(*start, at::kLong, 1, (kernel + ": start must be int64 [B] on the CPU").c_str());
    TORCH_CHECK(matrices.size() == 1 && start->size(0) == batch, kernel,
                ": with start, one matrix holds the rows of every image");
  } else {
    TORCH_CHECK(static_cast<int64_t>(matrices.size()) == batch, kernel, ": one score matrix per image");
  }
}

// The [B, G] int32 first-hit rank of every GT relation in a list of ranked entries [B, J] (pair index into the
// image's pairs rel_pairs [B, R, 2], valid), NO_HIT where no entry hits it. The entries' predicates are given
// (predicate [B, J]; outside [0, P) hits nothing) or, when `predicate` is None, each pair's first maximal
// predicate column (row `index` of image b's matrix, or row start[b] + index of matrices[0] when `start` is
// given; predicate columns [column, column + P)); `ends_only`: no predicate (a hit: both ends match).
// `list_valid` [B, J]: only those entries are list positions (the positions count them alone).
at::Tensor first_hit_ranks(const at::Tensor& subject_bits, const at::Tensor& object_bits,
                           const at::Tensor& gt_predicates, const at::Tensor& gt_valid,
                           const std::vector<at::Tensor>& rel_pairs,
                           const at::Tensor& index, const at::Tensor& valid, const std::optional<at::Tensor>& predicate,
                           const std::optional<at::Tensor>& list_valid, const std::vector<at::Tensor>& matrices,
                           const std::optional<at::Tensor>& start, int64_t column, int64_t num_predicates,
                           bool ends_only) {
  check_relation_bits(subject_bits, object_bits, gt_predicates, gt_valid, "first_hit_ranks");
  check_cpu(index, at::kLong, 2, "first_hit_ranks: index must be int64 [B, J] on the CPU");
  check_cpu(valid, at::kBool, 2, "first_hit_ranks: valid must be bool [B, J] on the CPU");
  const int64_t batch = subject_bits.size(0), num_obj = subject_bits.size(1), words = subject_bits.size(2);
  const int64_t num_rel = gt_predicates.size(1), length = index.size(1);
  const PairRows pairs(rel_pairs, batch, "first_hit_ranks");
  TORCH_CHECK(object_bits.sizes() == subject_bits.sizes() && gt_valid.sizes() == gt_predicates.sizes() &&
                  gt_predicates.size(0) == batch && index.size(0) == batch && valid.sizes() == index.sizes() &&
                  words >= std::max<int64_t>((num_rel + 63) / 64, 1),
              "first_hit_ranks: the batch fields do not have matching shapes");
  const bool given = predicate.has_value();
  if (given) {
    check_cpu(*predicate, at::kLong, 2, "first_hit_ranks: predicate must be int64 [B, J] on the CPU");
    TORCH_CHECK(predicate->sizes() == index.sizes(), "first_hit_ranks: predicate must have the shape of index");
  }
  if (list_valid.has_value()) {
    check_cpu(*list_valid, at::kBool, 2, "first_hit_ranks: list_valid must be bool [B, J] on the CPU");
    TORCH_CHECK(list_valid->sizes() == index.sizes(), "first_hit_ranks: list_valid must have the shape of index");
  }
  const bool from_scores = !given && !ends_only;
  if (from_scores) {
    check_score_source(matrices, start, batch, column, num_predicates, "first_hit_ranks");
  }
  at::Tensor bits_s = subject_bits.contiguous(), bits_o = object_bits.contiguous(), gp = gt_predicates.contiguous(),
             gv = gt_valid.contiguous(), idx = index.contiguous(),
             ok = valid.contiguous();
  at::Tensor pred_c = given ? predicate->contiguous() : at::Tensor();
  at::Tensor list_c = list_valid.has_value() ? list_valid->contiguous() : at::Tensor();
  at::Tensor start_c = (from_scores && start.has_value()) ? start->contiguous() : at::Tensor();
  at::Tensor out = at::full({batch, num_rel}, kNoHit, at::kInt);
  const uint64_t* s_ptr = reinterpret_cast<const uint64_t*>(bits_s.data_ptr<int64_t>());
  const uint64_t* o_ptr = reinterpret_cast<const uint64_t*>(bits_o.data_ptr<int64_t>());
  const int64_t* gp_ptr = gp.data_ptr<int64_t>();
  const bool* gv_ptr = gv.data_ptr<bool>();
  const int64_t* idx_ptr = idx.data_ptr<int64_t>();
  const bool* ok_ptr = ok.data_ptr<bool>();
  const int64_t* pred_ptr = given ? pred_c.data_ptr<int64_t>() : nullptr;
  const bool* list_ptr = list_valid.has_value() ? list_c.data_ptr<bool>() : nullptr;
  const int64_t* start_ptr = start_c.defined() ? start_c.data_ptr<int64_t>() : nullptr;
  int32_t* out_ptr = out.data_ptr<int32_t>();
  const int64_t carried = ends_only ? 1 : num_predicates;  // rows of the predicate table
  const int64_t cols = column + num_predicates;
  std::vector<int64_t> bad(batch, -1);  // an entry whose pair, object or score row is out of range
  at::parallel_for(0, batch, 8, [&](int64_t begin, int64_t end) {
    std::vector<uint64_t> carries, hits(words);  // carries [P, W]: the GT relations carrying each predicate
    for (int64_t b = begin; b < end; ++b) {
      carries.assign(std::max<int64_t>(carried, 1) * words, 0);
      for (int64_t g = 0; g < num_rel; ++g) {
        const int64_t p = ends_only ? 0 : gp_ptr[b * num_rel + g];
        if (gv_ptr[b * num_rel + g] && p >= 0 && p < carried) {
          carries[p * words + g / 64] |= uint64_t(1) << (g % 64);
        }
      }
      const float* rows = nullptr;
      int64_t rows_count = 0;
      if (from_scores) {
        const at::Tensor& m = start_ptr ? matrices[0] : matrices[b];
        rows = m.data_ptr<float>() + (start_ptr ? start_ptr[b] * cols : 0);
        rows_count = start_ptr ? m.size(0) - start_ptr[b] : m.size(0);
      }
      int32_t* rank = out_ptr + b * num_rel;
      int64_t position = -1;
      for (int64_t j = 0; j < length; ++j) {
        const int64_t e = b * length + j;
        if (list_ptr) {
          if (!list_ptr[e]) {
            continue;
          }
          ++position;
        } else {
          position = j;
        }
        if (!ok_ptr[e]) {
          continue;
        }
        const int64_t r = idx_ptr[e];
        if (r < 0 || r >= pairs.slots(b)) {
          bad[b] = j;
          break;
        }
        const int64_t s = pairs.pairs(b)[2 * r], o = pairs.pairs(b)[2 * r + 1];
        if (s < 0 || s >= num_obj || o < 0 || o >= num_obj) {
          bad[b] = j;
          break;
        }
        const uint64_t* sub = s_ptr + (b * num_obj + s) * words;
        const uint64_t* obj = o_ptr + (b * num_obj + o) * words;
        uint64_t any = 0;
        for (int64_t w = 0; w < words; ++w) {
          hits[w] = sub[w] & obj[w];
          any |= hits[w];
        }
        if (!any) {
          continue;
        }
        int64_t p = 0;
        if (given) {
          p = pred_ptr[e];
          if (p < 0 || p >= num_predicates) {
            continue;
          }
        } else if (from_scores) {
          if (r >= rows_count) {
            bad[b] = j;
            break;
          }
          p = first_max_column(rows + r * cols + column, num_predicates);
        }
        for (int64_t w = 0; w < words; ++w) {
          uint64_t word = hits[w] & carries[p * words + w];
          while (word) {
            const int64_t g = w * 64 + __builtin_ctzll(word);
            word &= word - 1;
            if (rank[g] == kNoHit) {
              rank[g] = static_cast<int32_t>(position);
            }
          }
        }
      }
    }
  });
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(bad[b] < 0, "first_hit_ranks: image ", b, " entry ", bad[b],
                " points outside its pairs, objects or score rows");
  }
  return out;
}

constexpr int64_t kPairsAhead = 64;  // relation_pair_flags: pairs requested this far ahead of the scan
constexpr size_t kRowsAhead = 8;     // and the score rows of the matching pairs, this many pairs ahead

// relation_pair_flags' scan of one image's n pairs ((subject, object) = pair_at(r)) for those joining the ends of
// some GT relation (sub_of / obj_of: each object's one word of GT-relation bits): their union into pair_bits, each
// such pair's index and bits into matching[0, found) (room for n + 1 entries: every pair is written, the count
// moves on only past a matching one, so the loop has no branch on the data). Returns the first pair naming an
// object outside [0, num_obj) (-1 when none) and `found`.
template <typename PairAt>
std::pair<int64_t, int64_t> scan_matching_pairs(int64_t n, int64_t num_obj, const uint64_t* sub_of,
                                                const uint64_t* obj_of, uint64_t& pair_bits,
                                                std::pair<int64_t, uint64_t>* matching, PairAt pair_at) {
  uint64_t bits = 0;
  int64_t found = 0;
  for (int64_t r = 0; r < n; ++r) {
    const auto [s, o] = pair_at(r);
    if (static_cast<uint64_t>(s) >= static_cast<uint64_t>(num_obj) ||
        static_cast<uint64_t>(o) >= static_cast<uint64_t>(num_obj)) {  // negative indices included
      pair_bits = bits;
      return {r, found};
    }
    const uint64_t h = sub_of[s] & obj_of[o];
    bits |= h;
    matching[found] = {r, h};
    found += h != 0;
  }
  pair_bits = bits;
  return {-1, found};
}

// Error analysis (mmsgg_eval.functional.error_causes): for every GT relation, whether some predicted pair of its
// image joins a predicted object matching its subject to one matching its object (scored), and whether such a
// pair's graph-constrained predicate (first maximal score column) is its own (listed). One pass over each image's
// first count[b] pairs (no index list) finds the pairs that match both ends of some GT relation: it reads
// `pair_codes` [B, W] int16 when given (each pair's (subject << 8) | object as a uint16 bit pattern, written by
// ranked_relation_lists: 2 bytes per pair), else the int64 pair list (16 bytes per pair, requested kPairsAhead
// pairs ahead); then the score row of such a pair is read (requested kRowsAhead pairs before) only when it may
// list a GT relation not yet listed. Returns (scored [B, G] bool, listed [B, G] bool).
std::tuple<at::Tensor, at::Tensor> relation_pair_flags(const at::Tensor& subject_bits, const at::Tensor& object_bits,
                                                       const at::Tensor& gt_predicates, const at::Tensor& gt_valid,
                                                       const std::vector<at::Tensor>& rel_pairs, const at::Tensor& count,
                                                       const std::vector<at::Tensor>& matrices,
                                                       const std::optional<at::Tensor>& start, int64_t column,
                                                       int64_t num_predicates,
                                                       const std::optional<at::Tensor>& pair_codes) {
  check_relation_bits(subject_bits, object_bits, gt_predicates, gt_valid, "relation_pair_flags");
  check_cpu(count, at::kLong, 1, "relation_pair_flags: count must be int64 [B] on the CPU");
  const int64_t batch = subject_bits.size(0), num_obj = subject_bits.size(1), words = subject_bits.size(2);
  const int64_t num_rel = gt_predicates.size(1);
  const PairRows pairs(rel_pairs, batch, "relation_pair_flags");
  TORCH_CHECK(object_bits.sizes() == subject_bits.sizes() && gt_valid.sizes() == gt_predicates.sizes() &&
                  gt_predicates.size(0) == batch && count.size(0) == batch &&
                  words >= std::max<int64_t>((num_rel + 63) / 64, 1),
              "relation_pair_flags: the batch fields do not have matching shapes");
  check_score_source(matrices, start, batch, column, num_predicates, "relation_pair_flags");
  at::Tensor codes_c;  // each pair's (subject << 8) | object, when the caller has them (no pair list read then)
  if (pair_codes.has_value()) {
    check_cpu(*pair_codes, at::kShort, 2, "relation_pair_flags: pair_codes must be int16 [B, W] on the CPU");
    TORCH_CHECK(pair_codes->size(0) == batch, "relation_pair_flags: pair_codes must have one row per image");
    codes_c = pair_codes->contiguous();
  }
  const uint16_t* codes_ptr = codes_c.defined() ? reinterpret_cast<const uint16_t*>(codes_c.data_ptr<int16_t>())
                                                : nullptr;
  const int64_t codes_width = codes_c.defined() ? codes_c.size(1) : 0;
  at::Tensor bits_s = subject_bits.contiguous(), bits_o = object_bits.contiguous(), gp = gt_predicates.contiguous(),
             gv = gt_valid.contiguous(), count_c = count.contiguous();
  at::Tensor start_c = start.has_value() ? start->contiguous() : at::Tensor();
  at::Tensor scored = at::zeros({batch, num_rel}, at::kBool), listed = at::zeros({batch, num_rel}, at::kBool);
  const uint64_t* s_ptr = reinterpret_cast<const uint64_t*>(bits_s.data_ptr<int64_t>());
  const uint64_t* o_ptr = reinterpret_cast<const uint64_t*>(bits_o.data_ptr<int64_t>());
  const int64_t* gp_ptr = gp.data_ptr<int64_t>();
  const bool* gv_ptr = gv.data_ptr<bool>();
  const int64_t* count_ptr = count_c.data_ptr<int64_t>();
  const int64_t* start_ptr = start_c.defined() ? start_c.data_ptr<int64_t>() : nullptr;
  bool* scored_ptr = scored.data_ptr<bool>();
  bool* listed_ptr = listed.data_ptr<bool>();
  const int64_t cols = column + num_predicates;
  std::vector<int64_t> bad(batch, -1);  // a pair whose objects or score row are out of range
  at::parallel_for(0, batch, 8, [&](int64_t begin, int64_t end) {
    std::vector<uint64_t> carries, any_pair(words), any_listed(words);
    std::vector<std::pair<int64_t, uint64_t>> matching;
    for (int64_t b = begin; b < end; ++b) {
      carries.assign(num_predicates * words, 0);
      std::fill(any_pair.begin(), any_pair.end(), 0);
      std::fill(any_listed.begin(), any_listed.end(), 0);
      for (int64_t g = 0; g < num_rel; ++g) {
        const int64_t p = gp_ptr[b * num_rel + g];
        if (gv_ptr[b * num_rel + g] && p >= 0 && p < num_predicates) {
          carries[p * words + g / 64] |= uint64_t(1) << (g % 64);
        }
      }
      const at::Tensor& m = start_ptr ? matrices[0] : matrices[b];
      const float* rows = m.data_ptr<float>() + (start_ptr ? start_ptr[b] * cols : 0);
      const int64_t rows_count = start_ptr ? m.size(0) - start_ptr[b] : m.size(0);
      const int64_t n = count_ptr[b];
      if (n < 0 || n > pairs.slots(b) || n > rows_count || (codes_ptr && n > codes_width)) {
        bad[b] = n;
        continue;
      }
      auto top_predicate = [&](int64_t r) -> int64_t {  // the pair's graph-constrained predicate
        return first_max_column(rows + r * cols + column, num_predicates);
      };
      const int64_t* pr = pairs.pairs(b);
      const uint16_t* codes = codes_ptr ? codes_ptr + b * codes_width : nullptr;
      if (words == 1) {  // up to 64 GT relations (the common case): a scan of the pairs, then the row reads
        const uint64_t* sub_of = s_ptr + b * num_obj;
        const uint64_t* obj_of = o_ptr + b * num_obj;
        uint64_t pair_bits = 0, listed_bits = 0;
        if (static_cast<int64_t>(matching.size()) <= n) {  // the pairs joining the ends of some GT relation
          matching.resize(n + 1);
        }
        auto [bad_pair, found] = codes ?  // 2 bytes per pair, written by the ranking pass moments before
            scan_matching_pairs(n, num_obj, sub_of, obj_of, pair_bits, matching.data(), [&](int64_t r) {
              return std::pair<int64_t, int64_t>(codes[r] >> 8, codes[r] & 0xff);
            }) :  // else the int64 pair list streams from memory: requested a few lines ahead
            scan_matching_pairs(n, num_obj, sub_of, obj_of, pair_bits, matching.data(), [&](int64_t r) {
              if ((r & 3) == 0 && r + kPairsAhead < n) {
                prefetch_bytes(pr + 2 * (r + kPairsAhead), 64);
              }
              return std::pair<int64_t, int64_t>(pr[2 * r], pr[2 * r + 1]);
            });
        bad[b] = bad_pair;
        // the score rows of the matching pairs are scattered: each is requested a few pairs before it is read
        for (int64_t i = 0; i < found && bad_pair < 0; ++i) {
          if (i + static_cast<int64_t>(kRowsAhead) < found) {
            prefetch_bytes(rows + matching[i + kRowsAhead].first * cols + column,
                           num_predicates * static_cast<int64_t>(sizeof(float)));
          }
          const uint64_t h = matching[i].second;
          if (h & ~listed_bits) {
            listed_bits |= h & carries[top_predicate(matching[i].first)];
          }
        }
        any_pair[0] = pair_bits;
        any_listed[0] = listed_bits;
      } else {
        for (int64_t r = 0; r < n; ++r) {
          const int64_t s = codes ? codes[r] >> 8 : pr[2 * r], o = codes ? codes[r] & 0xff : pr[2 * r + 1];
          if (static_cast<uint64_t>(s) >= static_cast<uint64_t>(num_obj) ||
              static_cast<uint64_t>(o) >= static_cast<uint64_t>(num_obj)) {
            bad[b] = r;
            break;
          }
          const uint64_t* sub = s_ptr + (b * num_obj + s) * words;
          const uint64_t* obj = o_ptr + (b * num_obj + o) * words;
          uint64_t fresh = 0;
          for (int64_t w = 0; w < words; ++w) {
            const uint64_t h = sub[w] & obj[w];
            any_pair[w] |= h;
            fresh |= h & ~any_listed[w];
          }
          if (!fresh) {
            continue;
          }
          const int64_t p = top_predicate(r);
          for (int64_t w = 0; w < words; ++w) {
            any_listed[w] |= sub[w] & obj[w] & carries[p * words + w];
          }
        }
      }
      for (int64_t g = 0; g < num_rel; ++g) {
        scored_ptr[b * num_rel + g] = (any_pair[g / 64] >> (g % 64)) & 1;
        listed_ptr[b * num_rel + g] = (any_listed[g / 64] >> (g % 64)) & 1;
      }
    }
  });
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(bad[b] < 0, "relation_pair_flags: image ", b, " pair ", bad[b],
                " points outside its objects or score rows");
  }
  return {scored, listed};
}

// PySGG's stage-wise first-hit ranks (mmsgg_eval.functional.error_causes.stage_ranks) of every GT relation in one
// pass over a ranked list whose entries [B, J] are given by their own (subject, object) ends [B, J, 2], predicates
// and validity (the position of entry j is j): [3, B, G] int32, NO_HIT where no entry hits, in the order
// rank_pair_loc (both ends in the located bit sets: first_hit_ranks with ends_only), rank_pair_det (both ends in
// the matched bit sets, ends_only) and rank_pred_cls (located ends and the entry's predicate; one outside
// [0, num_predicates) hits nothing) - the three first_hit_ranks calls of the torch-free path in one.
at::Tensor stage_first_hit_ranks(const at::Tensor& subject_bits, const at::Tensor& object_bits,
                                 const at::Tensor& located_subject_bits, const at::Tensor& located_object_bits,
                                 const at::Tensor& gt_predicates, const at::Tensor& gt_valid, const at::Tensor& ends,
                                 const at::Tensor& valid, const at::Tensor& predicate, int64_t num_predicates) {
  check_relation_bits(subject_bits, object_bits, gt_predicates, gt_valid, "stage_first_hit_ranks");
  check_relation_bits(located_subject_bits, located_object_bits, gt_predicates, gt_valid, "stage_first_hit_ranks");
  check_cpu(ends, at::kLong, 3, "stage_first_hit_ranks: ends must be int64 [B, J, 2] on the CPU");
  check_cpu(valid, at::kBool, 2, "stage_first_hit_ranks: valid must be bool [B, J] on the CPU");
  check_cpu(predicate, at::kLong, 2, "stage_first_hit_ranks: predicate must be int64 [B, J] on the CPU");
  const int64_t batch = subject_bits.size(0), num_obj = subject_bits.size(1), words = subject_bits.size(2);
  const int64_t num_rel = gt_predicates.size(1), length = valid.size(1);
  TORCH_CHECK(object_bits.sizes() == subject_bits.sizes() && located_subject_bits.sizes() == subject_bits.sizes() &&
                  located_object_bits.sizes() == subject_bits.sizes() && gt_valid.sizes() == gt_predicates.sizes() &&
                  gt_predicates.size(0) == batch && valid.size(0) == batch && predicate.sizes() == valid.sizes() &&
                  ends.size(0) == batch && ends.size(1) == length && ends.size(2) == 2 &&
                  words >= std::max<int64_t>((num_rel + 63) / 64, 1),
              "stage_first_hit_ranks: the batch fields do not have matching shapes");
  at::Tensor ms_c = subject_bits.contiguous(), mo_c = object_bits.contiguous(),
             ls_c = located_subject_bits.contiguous(), lo_c = located_object_bits.contiguous(), gp = gt_predicates.contiguous(), gv = gt_valid.contiguous(),
             ends_c = ends.contiguous(), ok = valid.contiguous(), pred_c = predicate.contiguous();
  at::Tensor out = at::full({3, batch, num_rel}, kNoHit, at::kInt);
  const uint64_t* ms = reinterpret_cast<const uint64_t*>(ms_c.data_ptr<int64_t>());
  const uint64_t* mo = reinterpret_cast<const uint64_t*>(mo_c.data_ptr<int64_t>());
  const uint64_t* ls = reinterpret_cast<const uint64_t*>(ls_c.data_ptr<int64_t>());
  const uint64_t* lo = reinterpret_cast<const uint64_t*>(lo_c.data_ptr<int64_t>());
  const int64_t* gp_ptr = gp.data_ptr<int64_t>();
  const bool* gv_ptr = gv.data_ptr<bool>();
  const int64_t* ends_ptr = ends_c.data_ptr<int64_t>();
  const bool* ok_ptr = ok.data_ptr<bool>();
  const int64_t* pred_ptr = pred_c.data_ptr<int64_t>();
  int32_t* out_ptr = out.data_ptr<int32_t>();
  std::vector<int64_t> bad(batch, -1);  // an entry whose ends are out of range
  at::parallel_for(0, batch, 8, [&](int64_t begin, int64_t end) {
    // carries [P, W]: the valid GT relations carrying each predicate; open_*: those no entry hit yet, per stage
    std::vector<uint64_t> carries, open_loc(words), open_det(words), open_pred(words);
    for (int64_t b = begin; b < end; ++b) {
      carries.assign(std::max<int64_t>(num_predicates, 1) * words, 0);
      std::fill(open_loc.begin(), open_loc.end(), 0);
      for (int64_t g = 0; g < num_rel; ++g) {
        if (!gv_ptr[b * num_rel + g]) {
          continue;
        }
        open_loc[g / 64] |= uint64_t(1) << (g % 64);
        const int64_t p = gp_ptr[b * num_rel + g];
        if (p >= 0 && p < num_predicates) {
          carries[p * words + g / 64] |= uint64_t(1) << (g % 64);
        }
      }
      open_det = open_loc;
      open_pred = open_loc;
      int32_t* rank_loc = out_ptr + b * num_rel;
      int32_t* rank_det = out_ptr + (batch + b) * num_rel;
      int32_t* rank_pred = out_ptr + (2 * batch + b) * num_rel;
      auto mark = [](uint64_t word, int64_t w, int32_t* rank, int64_t position) {
        while (word) {
          rank[w * 64 + __builtin_ctzll(word)] = static_cast<int32_t>(position);
          word &= word - 1;
        }
      };
      for (int64_t j = 0; j < length; ++j) {
        const int64_t e = b * length + j;
        if (!ok_ptr[e]) {
          continue;
        }
        const int64_t s = ends_ptr[2 * e], o = ends_ptr[2 * e + 1];
        if (s < 0 || s >= num_obj || o < 0 || o >= num_obj) {
          bad[b] = j;
          break;
        }
        const int64_t p = pred_ptr[e];
        const uint64_t* carried = (p >= 0 && p < num_predicates) ? carries.data() + p * words : nullptr;
        const int64_t at_s = (b * num_obj + s) * words, at_o = (b * num_obj + o) * words;
        for (int64_t w = 0; w < words; ++w) {
          const uint64_t loc = ls[at_s + w] & lo[at_o + w];
          const uint64_t new_loc = loc & open_loc[w];
          const uint64_t new_det = ms[at_s + w] & mo[at_o + w] & open_det[w];
          const uint64_t new_pred = carried ? loc & carried[w] & open_pred[w] : 0;
          open_loc[w] &= ~new_loc;
          open_det[w] &= ~new_det;
          open_pred[w] &= ~new_pred;
          mark(new_loc, w, rank_loc, j);
          mark(new_det, w, rank_det, j);
          mark(new_pred, w, rank_pred, j);
        }
      }
    }
  });
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(bad[b] < 0, "stage_first_hit_ranks: image ", b, " entry ", bad[b], " points outside its objects");
  }
  return out;
}
