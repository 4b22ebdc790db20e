// The Open Images relation protocol (mmsgg_eval.functional.oi), image by image, exactly as its torch path
// computes it:
//   * oi_ranked_lists: each image's OI list. Its real pairs' scores subject * object (float32; or as the ranking
//     pass of ranking.cpp wrote them, the same products) and best entries pair score * row maximum; the
//     candidate pairs (candidate_pairs: those whose best entry reaches the length-th largest best entry of the
//     image, or every real pair when the batch has at most `length` pair slots or the image fewer than `length`
//     real pairs); the k' = min(per_pair, P) best predicates of each
//     candidate's row (argmax repeated: ties to the lower column), scored pair score * probability (float32),
//     candidate-major in pair order; the stable descending top `length` of those entries, kept when
//     > min_score (compared in float32). The lists are [B, E] with E = min(length, k' * the most candidates of
//     an image), as the torch path pads them.
//   * oi_match_lists: the recall first hits (an entry hits GT relation g when the predicate and both labels are
//     equal and both box IoUs are >= recall_thr; the first hit's rank, NO_HIT for none or padding) and the AP
//     true positives (greedy_claims: each listed entry, in list order, takes the first GT of highest overlap
//     among those of equal predicate and labels, rel: min of the two IoUs, phr: IoU of the union boxes; it is a
//     true positive when that overlap is > ap_thr and no earlier entry took that GT).
// IoUs are box_iou_f32's float32 operations (the torch path's box_iou).
#include "common.h"

using namespace mmsgg_ext;

namespace {

// The k best columns of row[0, n) into columns (as repeated argmax, each time without the columns taken: ties to
// the lower column); 1 <= k <= n.
inline void top_columns(const float* row, int64_t n, int64_t k, int64_t* columns) {
  if (k == 2) {  // the first maximal column, then the first maximal one on either side of it (the lower on ties)
    const int64_t first = first_max_column(row, n);
    const int64_t before = first > 0 ? first_max_column(row, first) : -1;
    const int64_t after = first + 1 < n ? first + 1 + first_max_column(row + first + 1, n - first - 1) : -1;
    columns[0] = first;
    columns[1] = after < 0 || (before >= 0 && !(row[after] > row[before])) ? before : after;
    return;
  }
  columns[0] = first_max_column(row, n);
  for (int64_t j = 1; j < k; ++j) {
    int64_t best = -1;
    for (int64_t c = 0; c < n; ++c) {
      if (std::find(columns, columns + j, c) != columns + j) {
        continue;
      }
      best = (best < 0 || row[c] > row[best]) ? c : best;
    }
    columns[j] = best;
  }
}

}  // namespace

// One image's candidate pairs and their pair scores (`given`: the image's pair scores as the ranking pass wrote
// them, else computed here from the pairs and object scores); their rows are asked of the caches for
// oi_image_list.
void mmsgg_ext::oi_image_candidates(const float* matrix, int64_t cols, int64_t column, int64_t num_predicates,
                                    const int64_t* pairs, const float* object_scores, int64_t objects,
                                    const float* best, const float* given, int64_t real, bool prune, int64_t length,
                                    OIListScratch& scratch, OIImageList& out) {
  scratch.pair_score.resize(given == nullptr ? real : 0);
  scratch.first.resize(real);
  const float* pair_score = given != nullptr ? given : scratch.pair_score.data();
  float* first = scratch.first.data();
  out.pair.clear();
  out.pair_score.clear();
  out.listed.clear();
  out.bad = -1;
  for (int64_t r = 0; given == nullptr && r < real; ++r) {
    const int64_t s = pairs[2 * r], o = pairs[2 * r + 1];
    if (static_cast<uint64_t>(s) >= static_cast<uint64_t>(objects) ||
        static_cast<uint64_t>(o) >= static_cast<uint64_t>(objects)) {
      out.bad = r;
      return;
    }
    scratch.pair_score[r] = object_scores[s] * object_scores[o];
  }
  for (int64_t r = 0; r < real; ++r) {
    first[r] = pair_score[r] * best[r];
  }
  float threshold = -std::numeric_limits<float>::infinity();
  if (prune && real >= length && length > 0) {  // the length-th largest best entry (the torch path's stable top-k)
    threshold = first[kth_largest(first, real, length, scratch.top)];
  }
  std::vector<int64_t>& rows = scratch.rows;
  if (threshold > -std::numeric_limits<float>::infinity()) {  // the same products, compared 8 at a time
    rows_reaching(pair_score, best, real, threshold, rows);
  } else {
    rows.clear();
    for (int64_t r = 0; r < real; ++r) {
      if (first[r] >= threshold) {
        rows.push_back(r);
      }
    }
  }
  for (const int64_t r : rows) {
    out.pair.push_back(r);
    out.pair_score.push_back(pair_score[r]);
    const float* row = matrix + r * cols + column;
    prefetch_bytes(row, num_predicates * 4);
    __builtin_prefetch(row + num_predicates - 1);
  }
}

// One image's entries (the k' best predicates of each candidate's row) and its list of the `length` best.
void mmsgg_ext::oi_image_list(const float* matrix, int64_t cols, int64_t column, int64_t num_predicates,
                              int64_t length, int64_t k, OIListScratch& scratch, OIImageList& out) {
  out.score.clear();
  out.predicate.clear();
  if (out.bad >= 0) {
    return;
  }
  scratch.columns.resize(k);
  int64_t* columns = scratch.columns.data();
  for (size_t i = 0; i < out.pair.size() && k > 0; ++i) {
    const float* row = matrix + out.pair[i] * cols + column;
    top_columns(row, num_predicates, k, columns);
    for (int64_t j = 0; j < k; ++j) {
      out.score.push_back(out.pair_score[i] * row[columns[j]]);
      out.predicate.push_back(columns[j]);
    }
  }
  stable_top(out.score.data(), static_cast<int64_t>(out.score.size()), length, scratch.top, out.listed);
}

std::vector<at::Tensor> oi_ranked_lists(const std::vector<at::Tensor>& matrices, int64_t column, int64_t num_predicates,
                                        const std::vector<at::Tensor>& rel_pairs, const at::Tensor& object_scores,
                                        const at::Tensor& best, const at::Tensor& count, int64_t length,
                                        int64_t per_pair, double min_score,
                                        const std::optional<at::Tensor>& pair_score) {
  check_matrices(matrices, column, num_predicates);
  TORCH_CHECK(best.device().is_cpu() && best.scalar_type() == at::kFloat && best.dim() == 2,
              "oi_ranked_lists: best must be a float32 [B, W] CPU tensor");
  const int64_t batch = best.size(0), width = best.size(1);
  TORCH_CHECK(static_cast<int64_t>(matrices.size()) == batch, "oi_ranked_lists: ", matrices.size(),
              " score matrices for ", batch, " images");
  const PairRows pairs(rel_pairs, batch, "oi_ranked_lists");
  TORCH_CHECK(object_scores.device().is_cpu() && object_scores.scalar_type() == at::kFloat &&
                  object_scores.dim() == 2 && object_scores.size(0) == batch && object_scores.size(1) > 0,
              "oi_ranked_lists: object_scores must be a float32 [B, N] CPU tensor, N > 0");
  TORCH_CHECK(count.scalar_type() == at::kLong && count.dim() == 1 && count.size(0) == batch,
              "oi_ranked_lists: count must be int64 [B]");
  TORCH_CHECK(length >= 0 && per_pair >= 0, "oi_ranked_lists: length and per_pair must be >= 0");
  TORCH_CHECK(width * std::max<int64_t>(per_pair, 1) < kMaxKeyIndex, "oi_ranked_lists: too many pairs in an image");
  at::Tensor scores_c = object_scores.contiguous(), best_c = best.contiguous(), count_c = count.contiguous();
  const int64_t* count_ptr = count_c.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(count_ptr[b] >= 0 && count_ptr[b] <= width && count_ptr[b] <= pairs.slots(b) &&
                    count_ptr[b] <= matrices[b].size(0),
                "oi_ranked_lists: image ", b, " has count ", count_ptr[b], " outside its pairs and score rows");
  }
  const int64_t objects = scores_c.size(1), k = std::min(per_pair, num_predicates), cols = column + num_predicates;
  const float* object_ptr = scores_c.data_ptr<float>();
  const float* best_ptr = best_c.data_ptr<float>();
  at::Tensor given;  // the ranking pass' pair scores: the pairs are then read for the listed entries only
  if (pair_score.has_value()) {
    check_cpu(*pair_score, at::kFloat, 2, "oi_ranked_lists: pair_score must be a float32 [B, W] CPU tensor");
    TORCH_CHECK(pair_score->sizes() == best.sizes(), "oi_ranked_lists: pair_score and best differ in shape");
    given = pair_score->contiguous();
  }
  const float* given_ptr = given.defined() ? given.data_ptr<float>() : nullptr;
  std::vector<OIImageList> images(batch);
  at::parallel_for(0, batch, 8, [&](int64_t begin, int64_t end) {
    OIListScratch scratch;
    const auto candidates = [&](int64_t b) {
      oi_image_candidates(matrices[b].data_ptr<float>(), cols, column, num_predicates, pairs.pairs(b),
                          object_ptr + b * objects, objects, best_ptr + b * width,
                          given_ptr != nullptr ? given_ptr + b * width : nullptr, count_ptr[b], width > length,
                          length, scratch, images[b]);
    };
    if (begin < end) {
      candidates(begin);
    }
    for (int64_t b = begin; b < end; ++b) {  // the next image's candidates first: their rows load meanwhile
      if (b + 1 < end) {
        candidates(b + 1);
      }
      oi_image_list(matrices[b].data_ptr<float>(), cols, column, num_predicates, length, k, scratch, images[b]);
    }
  });
  return oi_list_tensors(images, pairs, objects, length, k, min_score);
}

std::vector<at::Tensor> mmsgg_ext::oi_list_tensors(const std::vector<OIImageList>& images, const PairRows& pairs,
                                                   int64_t objects, int64_t length, int64_t k, double min_score) {
  const int64_t batch = static_cast<int64_t>(images.size());
  int64_t most = 0;
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(images[b].bad < 0, "oi_ranked_lists: image ", b, " pair ", images[b].bad,
                " has an object index outside [0, ", objects, ")");
    most = std::max(most, static_cast<int64_t>(images[b].pair.size()));
  }
  const int64_t entries = std::min(length, most * k);
  const float floor = static_cast<float>(min_score);
  at::Tensor score = at::zeros({batch, entries}, at::kFloat), valid = at::zeros({batch, entries}, at::kBool);
  at::Tensor predicate = at::zeros({batch, entries}, at::kLong), pair = at::zeros({batch, entries}, at::kLong);
  at::Tensor subject = at::zeros({batch, entries}, at::kLong), object = at::zeros({batch, entries}, at::kLong);
  float* score_ptr = score.data_ptr<float>();
  bool* valid_ptr = valid.data_ptr<bool>();
  int64_t *predicate_ptr = predicate.data_ptr<int64_t>(), *pair_ptr = pair.data_ptr<int64_t>();
  int64_t *subject_ptr = subject.data_ptr<int64_t>(), *object_ptr_out = object.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const OIImageList& image = images[b];
    const int64_t* image_pairs = pairs.pairs(b);
    for (size_t e = 0; e < image.listed.size(); ++e) {
      const int64_t i = key_index(image.listed[e]), at = b * entries + static_cast<int64_t>(e);
      if (!(image.score[i] > floor)) {
        continue;
      }
      const int64_t r = image.pair[i / k];
      score_ptr[at] = image.score[i];
      valid_ptr[at] = true;
      predicate_ptr[at] = image.predicate[i];
      pair_ptr[at] = r;
      subject_ptr[at] = image_pairs[2 * r];
      object_ptr_out[at] = image_pairs[2 * r + 1];
    }
  }
  return {score, predicate, pair, subject, object, valid};
}

namespace {

// The boxes and labels one image's matching reads.
struct MatchInput {
  const float *pred_boxes, *gt_boxes;
  const int64_t *pred_labels, *gt_labels, *gt_pairs, *gt_predicates, *subject, *object, *predicate;
  const bool *gt_valid, *valid;
  int64_t objects, gt_objects, relations, entries;
};

inline void union_box(const float* a, const float* b, float* out) {  // union_boxes' operations
  out[0] = std::min(a[0], b[0]);
  out[1] = std::min(a[1], b[1]);
  out[2] = std::max(a[2], b[2]);
  out[3] = std::max(a[3], b[3]);
}

// One image: first_hit[g] (kNoHit default), tp_rel[e], tp_phr[e]; returns a description of a bad index, or "".
std::string image_oi_match(const MatchInput& in, float extra, float recall_thr, float ap_thr, int64_t* first_hit,
                           bool* tp_rel, bool* tp_phr, std::vector<float>& gt_union, std::vector<uint8_t>& claimed) {
  gt_union.resize(4 * in.relations);
  claimed.assign(2 * in.relations, 0);
  for (int64_t g = 0; g < in.relations; ++g) {
    if (!in.gt_valid[g]) {
      continue;
    }
    const int64_t s = in.gt_pairs[2 * g], o = in.gt_pairs[2 * g + 1];
    if (static_cast<uint64_t>(s) >= static_cast<uint64_t>(in.gt_objects) ||
        static_cast<uint64_t>(o) >= static_cast<uint64_t>(in.gt_objects)) {
      return "GT relation " + std::to_string(g) + " has an object index outside [0, " +
             std::to_string(in.gt_objects) + ")";
    }
    union_box(in.gt_boxes + 4 * s, in.gt_boxes + 4 * o, gt_union.data() + 4 * g);
  }
  for (int64_t e = 0; e < in.entries; ++e) {
    if (!in.valid[e]) {
      continue;
    }
    const int64_t s = in.subject[e], o = in.object[e];
    if (static_cast<uint64_t>(s) >= static_cast<uint64_t>(in.objects) ||
        static_cast<uint64_t>(o) >= static_cast<uint64_t>(in.objects)) {
      return "entry " + std::to_string(e) + " has an object index outside [0, " + std::to_string(in.objects) + ")";
    }
    const float *sub_box = in.pred_boxes + 4 * s, *obj_box = in.pred_boxes + 4 * o;
    float pred_union[4];
    union_box(sub_box, obj_box, pred_union);
    float best_rel = -1.0f, best_phr = -1.0f;
    int64_t target_rel = 0, target_phr = 0;
    for (int64_t g = 0; g < in.relations; ++g) {
      const int64_t gs = in.gt_pairs[2 * g], go = in.gt_pairs[2 * g + 1];
      if (!in.gt_valid[g] || in.predicate[e] != in.gt_predicates[g] || in.pred_labels[s] != in.gt_labels[gs] ||
          in.pred_labels[o] != in.gt_labels[go]) {
        continue;
      }
      const float iou_sub = box_iou_f32(sub_box, in.gt_boxes + 4 * gs, extra);
      const float iou_obj = box_iou_f32(obj_box, in.gt_boxes + 4 * go, extra);
      if (iou_sub >= recall_thr && iou_obj >= recall_thr && first_hit[g] == kNoHit) {
        first_hit[g] = e;
      }
      const float rel = std::min(iou_sub, iou_obj), phr = box_iou_f32(pred_union, gt_union.data() + 4 * g, extra);
      if (rel > best_rel) {  // the first GT of the highest overlap
        best_rel = rel;
        target_rel = g;
      }
      if (phr > best_phr) {
        best_phr = phr;
        target_phr = g;
      }
    }
    if (best_rel > ap_thr) {
      tp_rel[e] = !claimed[target_rel];
      claimed[target_rel] = 1;
    }
    if (best_phr > ap_thr) {
      tp_phr[e] = !claimed[in.relations + target_phr];
      claimed[in.relations + target_phr] = 1;
    }
  }
  return "";
}

}  // namespace

std::vector<at::Tensor> oi_match_lists(const at::Tensor& pred_boxes, const at::Tensor& pred_labels,
                                       const at::Tensor& gt_boxes, const at::Tensor& gt_labels,
                                       const at::Tensor& gt_pairs, const at::Tensor& gt_predicates,
                                       const at::Tensor& gt_valid, const at::Tensor& subject, const at::Tensor& object,
                                       const at::Tensor& predicate, const at::Tensor& valid, bool plus_one,
                                       double recall_thr, double ap_thr) {
  check_cpu(pred_boxes, at::kFloat, 3, "oi_match_lists: pred_boxes must be a float32 [B, N, 4] CPU tensor");
  check_cpu(gt_boxes, at::kFloat, 3, "oi_match_lists: gt_boxes must be a float32 [B, M, 4] CPU tensor");
  check_cpu(pred_labels, at::kLong, 2, "oi_match_lists: pred_labels must be an int64 [B, N] CPU tensor");
  check_cpu(gt_labels, at::kLong, 2, "oi_match_lists: gt_labels must be an int64 [B, M] CPU tensor");
  check_cpu(gt_pairs, at::kLong, 3, "oi_match_lists: gt_pairs must be an int64 [B, G, 2] CPU tensor");
  check_cpu(gt_predicates, at::kLong, 2, "oi_match_lists: gt_predicates must be an int64 [B, G] CPU tensor");
  check_cpu(gt_valid, at::kBool, 2, "oi_match_lists: gt_valid must be a bool [B, G] CPU tensor");
  for (const at::Tensor* t : {&subject, &object, &predicate}) {
    check_cpu(*t, at::kLong, 2, "oi_match_lists: subject, object and predicate must be int64 [B, E] CPU tensors");
  }
  check_cpu(valid, at::kBool, 2, "oi_match_lists: valid must be a bool [B, E] CPU tensor");
  const int64_t batch = gt_valid.size(0), relations = gt_valid.size(1), entries = valid.size(1);
  const int64_t objects = pred_boxes.size(1), gt_objects = gt_boxes.size(1);
  TORCH_CHECK(pred_boxes.size(0) == batch && pred_boxes.size(2) == 4 && gt_boxes.size(0) == batch &&
                  gt_boxes.size(2) == 4 && pred_labels.size(0) == batch && pred_labels.size(1) == objects &&
                  gt_labels.size(0) == batch && gt_labels.size(1) == gt_objects && gt_pairs.size(0) == batch &&
                  gt_pairs.size(1) == relations && gt_pairs.size(2) == 2 && gt_predicates.sizes() == gt_valid.sizes(),
              "oi_match_lists: the object and GT tensors disagree on their shapes");
  for (const at::Tensor* t : {&subject, &object, &predicate}) {
    TORCH_CHECK(t->sizes() == valid.sizes() && valid.size(0) == batch, "oi_match_lists: the list tensors must be [",
                batch, ", E]");
  }
  at::Tensor first_hit = at::full({batch, relations}, static_cast<int64_t>(kNoHit), at::kLong);
  at::Tensor tp_rel = at::zeros({batch, entries}, at::kBool), tp_phr = at::zeros({batch, entries}, at::kBool);
  if (relations == 0 || entries == 0) {
    return {first_hit, tp_rel, tp_phr};
  }
  std::vector<at::Tensor> in{pred_boxes.contiguous(),    gt_boxes.contiguous(), pred_labels.contiguous(),
                             gt_labels.contiguous(),     gt_pairs.contiguous(), gt_predicates.contiguous(),
                             subject.contiguous(),       object.contiguous(),   predicate.contiguous(),
                             gt_valid.contiguous(),      valid.contiguous()};
  const float extra = plus_one ? 1.0f : 0.0f;
  const float recall_f = static_cast<float>(recall_thr), ap_f = static_cast<float>(ap_thr);
  std::vector<std::string> bad(batch);
  at::parallel_for(0, batch, 8, [&](int64_t begin, int64_t end) {
    std::vector<float> gt_union;
    std::vector<uint8_t> claimed;
    for (int64_t b = begin; b < end; ++b) {
      const MatchInput image{in[0].data_ptr<float>() + b * objects * 4, in[1].data_ptr<float>() + b * gt_objects * 4,
                             in[2].data_ptr<int64_t>() + b * objects, in[3].data_ptr<int64_t>() + b * gt_objects,
                             in[4].data_ptr<int64_t>() + b * relations * 2, in[5].data_ptr<int64_t>() + b * relations,
                             in[6].data_ptr<int64_t>() + b * entries, in[7].data_ptr<int64_t>() + b * entries,
                             in[8].data_ptr<int64_t>() + b * entries, in[9].data_ptr<bool>() + b * relations,
                             in[10].data_ptr<bool>() + b * entries, objects, gt_objects, relations, entries};
      bad[b] = image_oi_match(image, extra, recall_f, ap_f, first_hit.data_ptr<int64_t>() + b * relations,
                              tp_rel.data_ptr<bool>() + b * entries, tp_phr.data_ptr<bool>() + b * entries, gt_union,
                              claimed);
    }
  });
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(bad[b].empty(), "oi_match_lists: image ", b, ": ", bad[b]);
  }
  return {first_hit, tp_rel, tp_phr};
}
