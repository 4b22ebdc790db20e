// Ranking: the stable descending top-k of a row prefix (stable_topk_prefix), the graph-constrained list of a batch
// (graph_constrained_pairs), both ranked lists of a pool in one pass per image (ranked_relation_lists: the row
// maxima of scores.cpp, the graph-constrained pass, the no-graph-constraint list of ngc.cpp) and the
// graph-constrained sub-list of the pairs that are GT pairs (gt_pair_list).
#include "common.h"

#include <pthread.h>

#include <condition_variable>
#include <deque>
#include <functional>

using namespace mmsgg_ext;

namespace {

// The order-preserving code of a value: the high half of its rank_key.
inline uint32_t value_code(float value) { return static_cast<uint32_t>(rank_key(value, 0) >> 32); }

// value_code of values[0, n) into codes and the largest code of each of `blocks` disjoint blocks of entries into
// maxima; returns the number of blocks (0 when n is too short for `wanted` blocks). The scalar path's blocks are
// runs of n / wanted consecutive entries; the vector path's block (g, j) is lane j of the `depth` consecutive
// 8-entry vectors of group g (entries 8 (g depth + t) + j, t < depth), so that a block maximum is one vertical
// max per vector. Entries after the last block belong to none (blocks need not cover the row).
int64_t value_codes_scalar(const float* values, int64_t n, uint32_t* codes, int64_t wanted, uint32_t* maxima) {
  for (int64_t i = 0; i < n; ++i) {
    codes[i] = value_code(values[i]);
  }
  if (wanted <= 0 || n < wanted) {
    return 0;
  }
  const int64_t size = n / wanted;
  for (int64_t j = 0; j < wanted; ++j) {
    uint32_t most = 0;
    for (int64_t i = j * size; i < (j + 1) * size; ++i) {
      most = codes[i] > most ? codes[i] : most;
    }
    maxima[j] = most;
  }
  return wanted;
}

inline Key code_key(uint32_t code, int64_t index) {
  return (static_cast<Key>(code) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(index));
}

// The keys of the entries begin..n-1 whose code reaches `bar`, in index order, into out; returns how many.
int64_t keys_reaching_scalar(const uint32_t* codes, int64_t begin, int64_t n, uint32_t bar, Key* out) {
  int64_t count = 0;
  for (int64_t i = begin; i < n; ++i) {  // branch-free: each key written, kept when it reaches the bar
    out[count] = code_key(codes[i], i);
    count += codes[i] >= bar;
  }
  return count;
}

#if defined(__x86_64__)
__attribute__((target("avx2")))
int64_t value_codes_avx2(const float* values, int64_t n, uint32_t* codes, int64_t wanted, uint32_t* maxima) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256i top = _mm256_set1_epi32(static_cast<int32_t>(0x80000000u));
  const __m256i nan_code = _mm256_set1_epi32(static_cast<int32_t>(value_code(-std::numeric_limits<float>::infinity())));
  const int64_t vectors = n / 8, groups = (wanted + 7) / 8;
  const int64_t depth = groups > 0 ? vectors / groups : 0;  // vectors per group
  const int64_t blocked = depth > 0 ? groups * depth : 0;   // vectors inside blocks
  __m256i most = _mm256_setzero_si256();
  for (int64_t v = 0; v < vectors; ++v) {
    const __m256 x = _mm256_loadu_ps(values + 8 * v);
    const __m256i bits = _mm256_castps_si256(_mm256_add_ps(x, zero));  // -0.0 + 0.0 = +0.0
    __m256i code = _mm256_xor_si256(bits, _mm256_or_si256(_mm256_srai_epi32(bits, 31), top));
    code = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(code), _mm256_castsi256_ps(nan_code),
                                                _mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + 8 * v), code);
    if (v < blocked) {
      most = _mm256_max_epu32(most, code);
      if ((v + 1) % depth == 0) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(maxima + 8 * (v / depth)), most);
        most = _mm256_setzero_si256();
      }
    }
  }
  for (int64_t i = 8 * vectors; i < n; ++i) {
    codes[i] = value_code(values[i]);
  }
  return depth > 0 ? 8 * groups : 0;
}

// Branch-free: each 8 codes' keys are written whole, the ones reaching the bar moved to the front (front_lanes),
// and the count advances by how many reach it; out needs no room beyond n (count <= i before each block); the
// indices are taken in 32-bit lanes (n < kMaxKeyIndex).
__attribute__((target("avx2,bmi,popcnt")))
int64_t keys_reaching_avx2(const uint32_t* codes, int64_t n, uint32_t bar, Key* out) {
  const __m256i flip = _mm256_set1_epi32(static_cast<int32_t>(0x80000000u));  // unsigned order as signed
  const __m256i bar_v = _mm256_set1_epi32(static_cast<int32_t>(bar ^ 0x80000000u));
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), ones = _mm256_set1_epi32(-1);
  int64_t count = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i code = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + i));
    // code >= bar  <=>  not (bar > code)
    const unsigned mask = ~static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(
                              _mm256_cmpgt_epi32(bar_v, _mm256_xor_si256(code, flip))))) & 0xFFu;
    const __m256i order = front_lanes(mask);
    const __m256i low = _mm256_xor_si256(_mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(i)), lanes), ones);
    // keys = code << 32 | ~index: the 64-bit halves reordered (0, 2, 1, 3) so that unpacking interleaves in order
    const __m256i high_half = _mm256_permute4x64_epi64(_mm256_permutevar8x32_epi32(code, order), 0xD8);
    const __m256i low_half = _mm256_permute4x64_epi64(_mm256_permutevar8x32_epi32(low, order), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + count), _mm256_unpacklo_epi32(low_half, high_half));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + count + 4), _mm256_unpackhi_epi32(low_half, high_half));
    count += __builtin_popcount(mask);
  }
  return count + keys_reaching_scalar(codes, i, n, bar, out + count);
}
#endif

int64_t value_codes(const float* values, int64_t n, uint32_t* codes, int64_t wanted, uint32_t* maxima) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) {
    return value_codes_avx2(values, n, codes, wanted, maxima);
  }
#endif
  return value_codes_scalar(values, n, codes, wanted, maxima);
}

int64_t keys_reaching(const uint32_t* codes, int64_t n, uint32_t bar, Key* out) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi") &&
                           __builtin_cpu_supports("popcnt");
  if (avx2 && n < kMaxKeyIndex) {
    return keys_reaching_avx2(codes, n, bar, out);
  }
#endif
  return keys_reaching_scalar(codes, 0, n, bar, out);
}

void write_list(const std::vector<Key>& listed, int64_t* index, bool* valid) {
  for (size_t i = 0; i < listed.size(); ++i) {
    index[i] = key_index(listed[i]);
    valid[i] = true;
  }
}

}  // namespace

constexpr int64_t kBlocksPerListed = 2;

namespace {

// A lower bound of the k-th largest of values[0, n) (1 <= k <= n) at most one bin below it, without a selection's
// mispredicted branches (nth_element of 200 block maxima of scores: ~1.2 us): the values are counted into 256
// bins by a non-decreasing function of the value, and the bound is the smallest value of the bin that holds the
// k-th largest (the bins above hold fewer than k values, so it is at most the k-th largest).
uint32_t kth_largest_bound(const uint32_t* values, int64_t n, int64_t k) {
  uint32_t least = std::numeric_limits<uint32_t>::max(), most = 0;
  for (int64_t i = 0; i < n; ++i) {
    least = std::min(least, values[i]);
    most = std::max(most, values[i]);
  }
  const double scale = 256.0 / (static_cast<double>(most - least) + 1.0);
  const auto bin = [least, scale](uint32_t value) {  // (exact difference, monotone roundings)
    return std::min<int64_t>(static_cast<int64_t>(static_cast<double>(value - least) * scale), 255);
  };
  int64_t count[256] = {};
  for (int64_t i = 0; i < n; ++i) {
    count[bin(values[i])] += 1;
  }
  int64_t held = 255, above = 0;
  while (held > 0 && above + count[held] < k) {
    above += count[held--];
  }
  uint32_t bound = most;
  for (int64_t i = 0; i < n; ++i) {
    bound = bin(values[i]) == held ? std::min(bound, values[i]) : bound;
  }
  return bound;
}

// The keys of the entries of values[0, n) that can be among its k largest (every entry reaching a lower bound of
// the k-th largest block maximum, see stable_top), into scratch.kept; returns how many. k >= 1, n >= 1.
int64_t keys_of_top_candidates(const float* values, int64_t n, int64_t k, TopScratch& scratch) {
  const bool long_row = n >= 4 * kBlocksPerListed * k;  // blocks of at least 4 entries
  scratch.codes.resize(n);
  scratch.maxima.resize(long_row ? kBlocksPerListed * k + 8 : 0);
  const int64_t blocks = value_codes(values, n, scratch.codes.data(), long_row ? kBlocksPerListed * k : 0,
                                     scratch.maxima.data());
  uint32_t bar = 0;  // every code reaches 0
  if (blocks >= k) {
    bar = kth_largest_bound(scratch.maxima.data(), blocks, k);
  }
  scratch.kept.resize(n);
  return keys_reaching(scratch.codes.data(), n, bar, scratch.kept.data());
}

}  // namespace

void mmsgg_ext::stable_top(const float* values, int64_t n, int64_t k, TopScratch& scratch, std::vector<Key>& listed) {
  listed.clear();
  if (k <= 0 || n <= 0) {
    return;
  }
  const int64_t size = keys_of_top_candidates(values, n, k, scratch);
  Key* kept = scratch.kept.data();
  select_best(kept, kept + size, k);
  listed.assign(kept, kept + std::min(size, k));
}

int64_t mmsgg_ext::kth_largest(const float* values, int64_t n, int64_t k, TopScratch& scratch) {
  TORCH_CHECK(k >= 1 && k <= n, "kth_largest: k must be in [1, n]");
  const int64_t size = keys_of_top_candidates(values, n, k, scratch);
  Key* kept = scratch.kept.data();
  std::nth_element(kept, kept + (k - 1), kept + size, std::greater<Key>());
  return key_index(kept[k - 1]);
}

std::tuple<at::Tensor, at::Tensor> stable_topk_prefix(const at::Tensor& values, const at::Tensor& count, int64_t k) {
  TORCH_CHECK(values.device().is_cpu() && values.scalar_type() == at::kFloat && values.dim() == 2,
              "stable_topk_prefix: values must be a float32 [B, L] CPU tensor");
  TORCH_CHECK(count.scalar_type() == at::kLong && count.dim() == 1 && count.size(0) == values.size(0),
              "stable_topk_prefix: count must be int64 [B]");
  TORCH_CHECK(k >= 0, "stable_topk_prefix: k must be >= 0");
  TORCH_CHECK(values.size(1) < kMaxKeyIndex, "stable_topk_prefix: rows longer than 2^32");
  at::Tensor values_c = values.contiguous(), count_c = count.contiguous();
  const int64_t batch = values_c.size(0), length = values_c.size(1);
  const int64_t width = std::min(k, length);
  const int64_t* count_ptr = count_c.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(count_ptr[b] >= 0 && count_ptr[b] <= length, "stable_topk_prefix: row ", b, " has count ",
                count_ptr[b], " outside [0, ", length, "]");
  }
  at::Tensor index = at::zeros({batch, width}, at::kLong);
  at::Tensor valid = at::zeros({batch, width}, at::kBool);
  const float* values_ptr = values_c.data_ptr<float>();
  int64_t* index_ptr = index.data_ptr<int64_t>();
  bool* valid_ptr = valid.data_ptr<bool>();
  if (width == 0) {
    return {index, valid};
  }
  at::parallel_for(0, batch, 16, [&](int64_t begin, int64_t end) {
    TopScratch scratch;
    std::vector<Key> listed;
    for (int64_t b = begin; b < end; ++b) {
      stable_top(values_ptr + b * length, count_ptr[b], width, scratch, listed);
      write_list(listed, index_ptr + b * width, valid_ptr + b * width);
    }
  });
  return {index, valid};
}

namespace {

// The end of one image's graph-constrained pass (graph_constrained_pairs), once `step` went over its `real` pairs
// (GraphPairStep: pair and triplet scores, codes, index range): entries real..width-1 of pair_score / triplet set
// to 0, `range` (when given) set to the (min, max) of all the image's pair indices (0, -1 without pairs), for the
// caller's index check, and the stable top-k of the triplet scores into `listed`. Returns the first pair with an
// object index outside [0, objects), -1 when none (`listed` empty then).
int64_t finish_gc_pairs(const GraphPairStep& step, int64_t real, int64_t width, int64_t k, TopScratch& scratch,
                        std::vector<Key>& listed, int64_t* range = nullptr) {
  std::fill(step.pair_score + real, step.pair_score + width, 0.0f);
  std::fill(step.triplet + real, step.triplet + width, 0.0f);
  if (range != nullptr) {
    range[0] = real > 0 ? step.least : 0;
    range[1] = real > 0 ? step.most : -1;
  }
  if (step.bad >= 0) {
    listed.clear();
    return step.bad;
  }
  stable_top(step.triplet, real, k, scratch, listed);
  return -1;
}

}  // namespace

// The graph-constrained list of a padded batch in one pass per image: each pair's subject and object scores
// (the object scores at its indices), its pair score subject * object and its triplet score
// (best * subject) * object, float32 in that order (as the torch path), for its first count[b] pairs (the
// padding entries after them hold 0), then the stable top-k of those triplet scores.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> graph_constrained_pairs(
    const std::vector<at::Tensor>& rel_pairs, const at::Tensor& object_scores, const at::Tensor& best,
    const at::Tensor& count, int64_t k) {
  TORCH_CHECK(best.scalar_type() == at::kFloat && best.dim() == 2, "graph_constrained_pairs: best must be float32 [B, W]");
  const int64_t batch = best.size(0), width = best.size(1);
  const PairRows pairs(rel_pairs, batch, "graph_constrained_pairs");
  TORCH_CHECK(object_scores.scalar_type() == at::kFloat && object_scores.dim() == 2 &&
                  object_scores.size(0) == batch && object_scores.size(1) > 0,
              "graph_constrained_pairs: object_scores must be float32 [B, N], N > 0");
  TORCH_CHECK(count.scalar_type() == at::kLong && count.dim() == 1 && count.size(0) == batch,
              "graph_constrained_pairs: count must be int64 [B]");
  TORCH_CHECK(k >= 0, "graph_constrained_pairs: k must be >= 0");
  TORCH_CHECK(width < kMaxKeyIndex, "graph_constrained_pairs: more than 2^32 pairs in an image");
  at::Tensor scores_c = object_scores.contiguous(), best_c = best.contiguous(), count_c = count.contiguous();
  const int64_t objects = scores_c.size(1), listed_width = std::min(k, width);
  const int64_t* count_ptr = count_c.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(count_ptr[b] >= 0 && count_ptr[b] <= width && count_ptr[b] <= pairs.slots(b),
                "graph_constrained_pairs: image ", b, " has count ", count_ptr[b], " outside [0, ",
                std::min(width, pairs.slots(b)), "]");
  }
  at::Tensor triplet = at::empty({batch, width}, at::kFloat), pair_score = at::empty({batch, width}, at::kFloat);
  at::Tensor index = at::zeros({batch, listed_width}, at::kLong), valid = at::zeros({batch, listed_width}, at::kBool);
  const float* object_ptr = scores_c.data_ptr<float>();
  const float* best_ptr = best_c.data_ptr<float>();
  float* triplet_ptr = triplet.data_ptr<float>();
  float* pair_score_ptr = pair_score.data_ptr<float>();
  int64_t* index_ptr = index.data_ptr<int64_t>();
  bool* valid_ptr = valid.data_ptr<bool>();
  std::vector<int64_t> bad(batch, -1);  // the first pair of an image whose index is outside [0, N)
  at::parallel_for(0, batch, 8, [&](int64_t begin, int64_t end) {
    TopScratch scratch;
    std::vector<Key> listed;
    for (int64_t b = begin; b < end; ++b) {
      GraphPairStep step{pairs.pairs(b), object_ptr + b * objects, objects, triplet_ptr + b * width,
                         pair_score_ptr + b * width, nullptr};
      const float* image_best = best_ptr + b * width;
      for (int64_t r = 0; r < count_ptr[b]; ++r) {
        step(r, image_best[r]);
      }
      bad[b] = finish_gc_pairs(step, count_ptr[b], width, listed_width, scratch, listed);
      write_list(listed, index_ptr + b * listed_width, valid_ptr + b * listed_width);
    }
  });
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(bad[b] < 0, "graph_constrained_pairs: image ", b, " pair ", bad[b], " has an object index outside [0, ",
                objects, ")");
  }
  return {index, valid, triplet, pair_score};
}

// Both ranked lists of a pool in one pass per image, while the image's score matrix is in cache: the row maxima
// and value check of row_maxima_checked, the graph-constrained pass of graph_constrained_pairs (its top-k list,
// triplet and pair scores) and the no-graph-constraint list of no_graph_constraint_list bounded by that top-k
// (the graph-constrained list of `k` and the `ng_topk` entries of the two torch-path calls, exactly). Image b's
// pairs are its first count[b] = R_b pairs (PairRows) and the rows of its matrix; W = max R_b. Nothing is refused
// on values: an image with a pair index outside [0, N) gets bad[b] = that pair and empty lists, an image whose
// scores fail the check passed[b] = false (the caller validates before using either list). Returns (best [B, W],
// passed [B], gc index [B, k'], gc valid [B, k'], triplet [B, W], pair score [B, W], ngc pair [B, L],
// ngc predicate [B, L], ngc valid [B, L], bad [B], pair index range [B, 2] (min, max; 0, -1 without pairs),
// gc predicate [B, k']: each listed pair's first maximal predicate column, 0 on empty slots, gc ends [B, k', 2] and
// ngc ends [B, L, 2]: the (subject, object) indices of each list's entries, 0 on empty slots, pair predicate
// codes [B, W] int16: with pair_codes and at most kCodedObjects objects, every pair's (subject << 8) | object as a
// uint16 bit pattern, 0 on padding, written while the pair list streams by (the error analysis' pair scan then
// reads 2 bytes per pair instead of 16), else [0, W]);
// best, triplet and pair scores are written into `out` ([3, B, W], e.g. a buffer the caller reuses across pools)
// when it is given. With oi_length >= 0, also each image's Open Images list (oi_ranked_lists of length oi_length,
// oi_per_pair predicates per pair, entries above oi_min_score, from these row maxima and pair scores) while its
// matrix is in cache: (score, predicate, pair, subject, object, valid), each [B, E] (an image with a bad pair gets
// an empty list); else six [B, 0] tensors.
std::vector<at::Tensor> ranked_relation_lists(const std::vector<at::Tensor>& matrices, int64_t column,
                                              int64_t num_predicates, const std::vector<at::Tensor>& rel_pairs,
                                              const at::Tensor& object_scores, const at::Tensor& count, int64_t k,
                                              int64_t ng_topk, const std::optional<at::Tensor>& out,
                                              bool pair_codes, int64_t oi_length, int64_t oi_per_pair,
                                              double oi_min_score) {
  RankedPass pass(matrices, column, num_predicates, rel_pairs, object_scores, count, k, ng_topk, out, pair_codes,
                  oi_length, oi_per_pair, oi_min_score);
  at::parallel_for(0, static_cast<int64_t>(matrices.size()), 8, [&](int64_t, int64_t) { pass.work(); });
  return pass.finish();
}

RankedPass::RankedPass(const std::vector<at::Tensor>& matrices, int64_t column, int64_t num_predicates,
                       const std::vector<at::Tensor>& rel_pairs, const at::Tensor& object_scores,
                       const at::Tensor& count, int64_t k, int64_t ng_topk, const std::optional<at::Tensor>& out,
                       bool pair_codes, int64_t oi_length, int64_t oi_per_pair, double oi_min_score)
    : matrices_(matrices), rel_pairs_(rel_pairs), column_(column), num_predicates_(num_predicates),
      ng_topk_(ng_topk), oi_length_(oi_length), oi_min_score_(oi_min_score),
      batch_(static_cast<int64_t>(matrices.size())) {
  TORCH_CHECK(num_predicates > 0 && k >= 0 && ng_topk >= 0,
              "ranked_relation_lists needs predicates, k >= 0 and ng_topk >= 0");
  TORCH_CHECK(oi_length < 0 || oi_per_pair >= 0, "ranked_relation_lists: oi_per_pair must be >= 0");
  check_matrices(matrices, column, num_predicates);
  check_cpu(object_scores, at::kFloat, 2, "ranked_relation_lists: object_scores must be float32 [B, N] on the CPU");
  check_cpu(count, at::kLong, 1, "ranked_relation_lists: count must be int64 [B] on the CPU");
  const int64_t batch = batch_;
  objects_ = object_scores.size(1);
  pairs_.emplace(rel_pairs_, batch, "ranked_relation_lists");
  TORCH_CHECK(object_scores.size(0) == batch && objects_ > 0 && count.size(0) == batch,
              "ranked_relation_lists: the batch fields do not have matching shapes");
  scores_ = object_scores.contiguous();
  at::Tensor count_c = count.contiguous();
  const int64_t* count_ptr = count_c.data_ptr<int64_t>();
  int64_t width = 0;  // the batch's pair width: its longest image
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(count_ptr[b] == matrices[b].size(0) && count_ptr[b] <= pairs_->slots(b),
                "ranked_relation_lists: image ", b, " has ", matrices[b].size(0), " score rows and ",
                pairs_->slots(b), " pair slots for ", count_ptr[b], " pairs");
    TORCH_CHECK(matrices[b].size(0) * num_predicates < kMaxKeyIndex, "image ", b, " has ", matrices[b].size(0),
                " x ", num_predicates, " entries, more than the kernels rank (2^32)");
    width = std::max(width, count_ptr[b]);
  }
  width_ = width;
  listed_width_ = std::min(k, width);
  if (out.has_value()) {  // best, triplet and pair scores, [3, B, W]: the caller's reused buffer or a new one
    TORCH_CHECK(out->device().is_cpu() && out->scalar_type() == at::kFloat && out->is_contiguous() &&
                    out->dim() == 3 && out->size(0) == 3 && out->size(1) == batch && out->size(2) == width,
                "ranked_relation_lists: out must be a contiguous float32 [3, ", batch, ", ", width, "] CPU tensor");
    rows_out_ = *out;
  } else {
    rows_out_ = at::empty({3, batch, width}, at::kFloat);
  }
  passed_ = at::empty({batch}, at::kBool);
  bad_ = at::empty({batch}, at::kLong);
  pair_range_ = at::empty({batch, 2}, at::kLong);  // (min, max) of each image's pair indices
  index_ = at::zeros({batch, listed_width_}, at::kLong);
  valid_ = at::zeros({batch, listed_width_}, at::kBool);
  gc_predicate_ = at::zeros({batch, listed_width_}, at::kLong);  // the listed pairs' arg-max predicates
  gc_ends_ = at::zeros({batch, listed_width_, 2}, at::kLong);   // the listed pairs' (subject, object)
  // with pair_codes: every pair's (subject << 8) | object ([B, W] uint16 bit patterns), when the objects fit a byte
  coded_ = pair_codes && objects_ <= kCodedObjects;
  codes_ = at::zeros({coded_ ? batch : 0, width}, at::kShort);
  ngc_ends_.resize(batch);  // the no-graph-constraint entries' (subject, object)
  lists_.resize(batch);
  oi_k_ = std::min(oi_per_pair, num_predicates);
  TORCH_CHECK(oi_length < 0 || width * std::max<int64_t>(oi_k_, 1) < kMaxKeyIndex,
              "ranked_relation_lists: too many pairs in an image for the Open Images list");
  oi_images_.resize(oi_length >= 0 ? batch : 0);
}

// The images are handed to the threads one at a time, not in fixed halves: a thread that shares its core (with the
// caller's Python thread, or another process) takes fewer images instead of keeping the others waiting at the end.
// Each image's outputs are its own. An exception stops no other thread: the first is kept for finish().
void RankedPass::work() {
  RankedPassScratch scratch;
  for (int64_t b = next_image_++; b < batch_; b = next_image_++) {
    try {
      image(b, scratch);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_lock_);
      if (!error_) {
        error_ = std::current_exception();
      }
    }
    done_.fetch_add(1, std::memory_order_release);
  }
}

namespace {
// The threads that run passes beside their callers: one queue, tasks in the order given, at most `limit` running
// (the latest submission's count). A pass' tasks wait while the previous pass' run: a thread takes the next task
// when the pass it reads has no image left to take. Threads are made on demand and live as long as the process.
class BesideThreads {
 public:
  static BesideThreads& instance() {
    static std::once_flag registered;
    std::call_once(registered, [] { pthread_atfork(nullptr, nullptr, [] { current() = new BesideThreads(); }); });
    return *current();  // (a forked child has none of its parent's threads: it starts anew)
  }
  void submit(const std::function<void()>& task, int64_t count) {
    std::lock_guard<std::mutex> lock(mutex_);
    limit_ = count;
    while (static_cast<int64_t>(threads_made_) < count) {
      std::thread([this] { loop(); }).detach();
      ++threads_made_;
    }
    for (int64_t i = 0; i < count; ++i) {
      queue_.push_back(task);
    }
    ready_.notify_all();
  }
  void wait_idle() {  // no task queued or running (each task's references released)
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait(lock, [this] { return queue_.empty() && running_ == 0; });
  }

 private:
  static BesideThreads*& current() {
    static BesideThreads* threads = new BesideThreads();  // never destroyed: its threads outlive static destructors
    return threads;
  }
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      ready_.wait(lock, [this] { return !queue_.empty() && running_ < limit_; });
      std::function<void()> task = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
      lock.unlock();
      task();
      task = nullptr;  // (the pass it held is released outside the lock)
      lock.lock();
      --running_;
      ready_.notify_all();
    }
  }
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> queue_;
  int64_t limit_ = 0, running_ = 0;
  size_t threads_made_ = 0;
};
}  // namespace

void wait_beside_idle() { BesideThreads::instance().wait_idle(); }

void RankedPass::start(int64_t tasks) {  // each task keeps the pass alive until it returns
  static std::mutex order;
  static std::weak_ptr<RankedPass> latest;  // the pass started last (finish() waits for it: see there)
  {
    std::lock_guard<std::mutex> lock(order);
    previous_ = latest.lock();
    latest = shared_from_this();
  }
  BesideThreads::instance().submit([pass = shared_from_this()]() { pass->work(); }, std::max<int64_t>(tasks, 1));
}

void RankedPass::image(int64_t b, RankedPassScratch& s) {
  const at::Tensor& m = matrices_[b];
  const float* data = m.data_ptr<float>();
  const int64_t rows = m.size(0), cols = m.size(1), width = width_, listed_width = listed_width_;
  float* image_best = rows_out_.data_ptr<float>() + b * width;
  float* triplet = image_best + batch_ * width;
  float* pair_score = triplet + batch_ * width;
  const float* object_ptr = scores_.data_ptr<float>() + b * objects_;
  // the row maxima with each row's graph-constrained pair step: the pairs stream by beside the matrix
  uint16_t* codes = coded_ ? reinterpret_cast<uint16_t*>(codes_.data_ptr<int16_t>()) + b * width : nullptr;
  GraphPairStep step{pairs_->pairs(b), object_ptr, objects_, triplet, pair_score, codes};
  passed_.data_ptr<bool>()[b] = image_row_maxima(reinterpret_cast<const int32_t*>(data), rows, cols, column_,
                                                 reinterpret_cast<int32_t*>(image_best), &step);
  std::fill(image_best + rows, image_best + width, 0.0f);
  int64_t* bad = bad_.data_ptr<int64_t>() + b;
  *bad = finish_gc_pairs(step, rows, width, listed_width, s.top_scratch, s.listed,
                         pair_range_.data_ptr<int64_t>() + 2 * b);
  write_list(s.listed, index_.data_ptr<int64_t>() + b * listed_width, valid_.data_ptr<bool>() + b * listed_width);
  const int64_t* image_pairs = pairs_->pairs(b);
  int64_t* gc_predicate = gc_predicate_.data_ptr<int64_t>() + b * listed_width;
  int64_t* gc_ends = gc_ends_.data_ptr<int64_t>() + 2 * b * listed_width;
  constexpr size_t kAhead = 4;  // the listed rows are scattered over the matrix read: the next ones prefetched
  const int64_t row_bytes = cols * static_cast<int64_t>(sizeof(float));
  for (size_t i = 0; i < s.listed.size(); ++i) {
    if (i + kAhead < s.listed.size()) {
      prefetch_bytes(data + key_index(s.listed[i + kAhead]) * cols, row_bytes);
    }
    const int64_t r = key_index(s.listed[i]);
    gc_predicate[i] = first_max_column(data + r * cols + column_, num_predicates_);
    gc_ends[2 * i] = image_pairs[2 * r];
    gc_ends[2 * i + 1] = image_pairs[2 * r + 1];
  }
  if (oi_length_ >= 0 && *bad < 0) {  // the candidates' rows are read from the caches, not from memory
    oi_image_candidates(data, cols, column_, num_predicates_, image_pairs, object_ptr, objects_, image_best,
                        pair_score, rows, width > oi_length_, oi_length_, s.oi_scratch, oi_images_[b]);
    oi_image_list(data, cols, column_, num_predicates_, oi_length_, oi_k_, s.oi_scratch, oi_images_[b]);
  }
  if (*bad >= 0 || ng_topk_ == 0 || rows == 0) {
    return;
  }
  s.top.resize(s.listed.size());  // the graph-constrained pairs bound the entry threshold
  for (size_t i = 0; i < s.listed.size(); ++i) {
    s.top[i] = key_index(s.listed[i]);
  }
  image_ngc(data, rows, cols, column_, image_best, pair_score, s.top.data(), static_cast<int64_t>(s.top.size()),
            ng_topk_, s.workspace, lists_[b]);
  ngc_ends_[b].resize(2 * lists_[b].size());
  for (size_t i = 0; i < lists_[b].size(); ++i) {
    const int64_t r = key_index(lists_[b][i]) / num_predicates_;
    ngc_ends_[b][2 * i] = image_pairs[2 * r];
    ngc_ends_[b][2 * i + 1] = image_pairs[2 * r + 1];
  }
}

std::vector<at::Tensor> RankedPass::finish() {
  while (done_.load(std::memory_order_acquire) < batch_) {  // images still being read by another thread
    std::this_thread::yield();
  }
  // The pass started before this one has ended too (as with one background thread taking passes in order): one
  // whose caller never asked for it (an error in between) writes nothing into a buffer handed out again later.
  while (previous_ && !previous_->finished()) {
    std::this_thread::yield();
  }
  previous_.reset();
  if (error_) {
    std::rethrow_exception(error_);
  }
  const int64_t batch = batch_;
  auto [ngc_pair, ngc_predicate, ngc_valid] = entry_tensors(lists_, num_predicates_);
  const int64_t ngc_width = ngc_pair.size(1);
  at::Tensor ngc_ends_t = at::zeros({batch, ngc_width, 2}, at::kLong);
  int64_t* ngc_ends_ptr = ngc_ends_t.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    std::copy(ngc_ends_[b].begin(), ngc_ends_[b].end(), ngc_ends_ptr + b * ngc_width * 2);
  }
  std::vector<at::Tensor> result{rows_out_[0], passed_, index_, valid_, rows_out_[1], rows_out_[2], ngc_pair,
                                 ngc_predicate, ngc_valid, bad_, pair_range_, gc_predicate_, gc_ends_, ngc_ends_t,
                                 codes_};
  if (oi_length_ >= 0) {
    for (at::Tensor& t : oi_list_tensors(oi_images_, *pairs_, objects_, oi_length_, oi_k_, oi_min_score_)) {
      result.push_back(t);
    }
  } else {
    for (int i = 0; i < 6; ++i) {
      result.push_back(at::zeros({batch, 0}, i == 0 ? at::kFloat : i == 5 ? at::kBool : at::kLong));
    }
  }
  return result;
}

// The graph-constrained sub-list of the pairs that are GT pairs: for every image, the stable descending top-k of
// values[b, r] over its first count[b] pairs r whose (subject, object) indices equal those of one of its valid GT
// pairs (index equality; ties in ascending r). Returns (index [B, k'], valid [B, k']), k' = min(k, W), as
// stable_topk(values, pairs_in_reference(...), k) gives them (invalid slots hold index 0).
std::tuple<at::Tensor, at::Tensor> gt_pair_list(const std::vector<at::Tensor>& rel_pairs, const at::Tensor& count,
                                                const at::Tensor& gt_pairs, const at::Tensor& gt_valid,
                                                const at::Tensor& values, int64_t k) {
  check_cpu(count, at::kLong, 1, "gt_pair_list: count must be int64 [B] on the CPU");
  check_cpu(gt_pairs, at::kLong, 3, "gt_pair_list: gt_pairs must be int64 [B, G, 2] on the CPU");
  check_cpu(gt_valid, at::kBool, 2, "gt_pair_list: gt_valid must be bool [B, G] on the CPU");
  check_cpu(values, at::kFloat, 2, "gt_pair_list: values must be float32 [B, W] on the CPU");
  const int64_t batch = values.size(0), width = values.size(1), num_rel = gt_pairs.size(1);
  const PairRows pairs(rel_pairs, batch, "gt_pair_list");
  TORCH_CHECK(gt_pairs.size(2) == 2 && count.size(0) == batch && gt_pairs.size(0) == batch &&
                  gt_valid.size(0) == batch && gt_valid.size(1) == num_rel && values.size(0) == batch &&
                  values.size(1) == width,
              "gt_pair_list: the batch fields do not have matching shapes");
  TORCH_CHECK(k >= 0 && width < kMaxKeyIndex, "gt_pair_list: k must be >= 0 and images below 2^32 pairs");
  at::Tensor count_c = count.contiguous(), gt_c = gt_pairs.contiguous(),
             gv_c = gt_valid.contiguous(), values_c = values.contiguous();
  const int64_t* count_ptr = count_c.data_ptr<int64_t>();
  const int64_t* gt_ptr = gt_c.data_ptr<int64_t>();
  const bool* gv_ptr = gv_c.data_ptr<bool>();
  const float* values_ptr = values_c.data_ptr<float>();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t most = std::min(width, pairs.slots(b));
    TORCH_CHECK(count_ptr[b] >= 0 && count_ptr[b] <= most, "gt_pair_list: image ", b, " has count ", count_ptr[b],
                " outside [0, ", most, "]");
  }
  const int64_t listed_width = std::min(k, width);
  at::Tensor index = at::zeros({batch, listed_width}, at::kLong), valid = at::zeros({batch, listed_width}, at::kBool);
  int64_t* index_ptr = index.data_ptr<int64_t>();
  bool* valid_ptr = valid.data_ptr<bool>();
  if (listed_width == 0) {
    return {index, valid};
  }
  at::parallel_for(0, batch, 8, [&](int64_t begin, int64_t end) {
    std::vector<uint64_t> table;  // bit s * S + o: (s, o) is a valid GT pair (S: the largest GT index + 1)
    std::vector<Key> keys;
    for (int64_t b = begin; b < end; ++b) {
      const int64_t* gt = gt_ptr + b * num_rel * 2;
      int64_t size = 0;
      for (int64_t g = 0; g < num_rel; ++g) {
        if (gv_ptr[b * num_rel + g]) {
          TORCH_CHECK(gt[2 * g] >= 0 && gt[2 * g + 1] >= 0, "gt_pair_list: image ", b, " has a negative GT index");
          size = std::max(size, std::max(gt[2 * g], gt[2 * g + 1]) + 1);
        }
      }
      if (size == 0) {
        continue;
      }
      table.assign((size * size + 63) / 64, 0);
      for (int64_t g = 0; g < num_rel; ++g) {
        if (gv_ptr[b * num_rel + g]) {
          const int64_t code = gt[2 * g] * size + gt[2 * g + 1];
          table[code / 64] |= uint64_t(1) << (code % 64);
        }
      }
      keys.clear();
      const int64_t* image_pairs = pairs.pairs(b);
      for (int64_t r = 0; r < count_ptr[b]; ++r) {
        const uint64_t s = static_cast<uint64_t>(image_pairs[2 * r]), o = static_cast<uint64_t>(image_pairs[2 * r + 1]);
        if (s < static_cast<uint64_t>(size) && o < static_cast<uint64_t>(size)) {  // (negative: never a GT pair)
          const uint64_t code = s * size + o;
          if ((table[code / 64] >> (code % 64)) & 1) {
            keys.push_back(rank_key(values_ptr[b * width + r], r));
          }
        }
      }
      select_best(keys.data(), keys.data() + keys.size(), listed_width);
      const int64_t listed = std::min<int64_t>(keys.size(), listed_width);
      for (int64_t i = 0; i < listed; ++i) {
        index_ptr[b * listed_width + i] = key_index(keys[i]);
        valid_ptr[b * listed_width + i] = true;
      }
    }
  });
  return {index, valid};
}
