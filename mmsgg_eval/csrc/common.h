// Compiled CPU kernels over a batch of per-image predicate score matrices, read in place (no copy).
//
// Every image b has a contiguous float32 matrix [R_b, C] whose predicate columns are [column, C) (column 1 when
// column 0 is the background). The kernels give exactly what the torch paths of mmsgg_eval.functional give:
//   * row_maxima_checked: each row's maximum over its predicate columns, taken on the float32 bit patterns read
//     as int32 (they order finite non-negative floats as their values), and per image whether every entry of the
//     whole matrix (background included) has bits in [0, 0x7F800000), i.e. is finite and >= 0 (-0.0 fails this
//     integer check: callers look again at the values of the images that fail);
//   * gather_rows: the predicate columns of selected rows;
//   * no_graph_constraint_list: the stable descending top-k of every (pair, predicate) entry
//     pair_score[r] * prob[r, p] of each image (ties in row-major (pair, predicate) order);
//   * stable_topk_prefix: the stable descending top-k of the first count[b] entries of each row of a matrix
//     (the graph-constrained list: each image's real pairs come first).
// Values are compared as floats (-0.0 ties with +0.0, as in a stable sort); a NaN, which validated inputs never
// hold, is never listed by the no-graph-constraint list and ranks last in stable_topk_prefix.
// Images are processed in parallel (ATen's intra-op threads); each image's work is independent.
//
// This header is shared by every file of the kernels (one file per stage):
//   * scores.cpp         row maxima and the value check, gather_rows, matrices_suit;
//   * ranking.cpp        the stable top-k, the graph-constrained list, the fused ranked_relation_lists pass and
//                        the GT-pair sub-list;
//   * ngc.cpp            the no-graph-constraint list;
//   * first_hits.cpp     box matching into GT-relation bit sets, first-hit ranks, relation_pair_flags,
//                        box_overlap_flags, image_diagnostics (the input diagnostics' box flags and label offsets);
//   * oi.cpp             the Open Images protocol's lists and their matching;
//   * padding.cpp        pad_zero_rows, pad_int64_rows, pad_float_rows_checked, matrix_shapes, lengths_mask;
//   * recall.cpp         recall counts from first-hit ranks (hit_counts, predicate_quotient_sums);
//   * bindings.cpp       the Python module.
// It holds the includes, the shared constants (kNoHit, kMaxKeyIndex), the input checks, the ranked-entry key and
// the per-entry helpers several stages call in their inner loops (static inline, so every file inlines them as
// one file did), the stage functions one stage borrows from another, and the Python-facing kernels' declarations.
#pragma once

#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mmsgg_ext {

static inline void check_cpu(const at::Tensor& t, at::ScalarType dtype, int64_t dim, const char* what) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == dtype && t.dim() == dim, what);
}

// The predicted pairs of a batch as the kernels read them: B contiguous int64 CPU tensors [R_b, 2] (the inputs,
// read in place; an empty one may have any shape) or one int64 [B, W, 2] tensor (padded: every image has W pair
// slots). Image b's pair r is (pairs(b)[2 r], pairs(b)[2 r + 1]) for r < slots(b).
class PairRows {
 public:
  PairRows(const std::vector<at::Tensor>& tensors, int64_t batch, const char* kernel) {
    if (tensors.size() == 1 && tensors[0].dim() == 3) {
      const at::Tensor& padded = tensors[0];
      TORCH_CHECK(padded.device().is_cpu() && padded.scalar_type() == at::kLong && padded.size(0) == batch &&
                      padded.size(2) == 2,
                  kernel, ": padded pairs must be an int64 [B, W, 2] CPU tensor with B = ", batch);
      keep_.push_back(padded.contiguous());
      const int64_t width = padded.size(1);
      for (int64_t b = 0; b < batch; ++b) {
        data_.push_back(keep_[0].data_ptr<int64_t>() + b * width * 2);
        slots_.push_back(width);
      }
      return;
    }
    TORCH_CHECK(static_cast<int64_t>(tensors.size()) == batch, kernel, ": ", tensors.size(),
                " pair tensors for ", batch, " images");
    for (int64_t b = 0; b < batch; ++b) {
      const at::Tensor& t = tensors[b];
      TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kLong &&
                      (t.numel() == 0 || (t.dim() == 2 && t.size(1) == 2)),
                  kernel, ": image ", b, "'s pairs must be an int64 [R, 2] CPU tensor, got ", t.sizes());
      if (!t.is_contiguous()) {
        keep_.push_back(t.contiguous());
      }
      data_.push_back(t.numel() == 0 ? nullptr : (t.is_contiguous() ? t : keep_.back()).data_ptr<int64_t>());
      slots_.push_back(t.numel() == 0 ? 0 : t.size(0));
    }
  }
  const int64_t* pairs(int64_t b) const { return data_[b]; }
  int64_t slots(int64_t b) const { return slots_[b]; }

 private:
  std::vector<at::Tensor> keep_;
  std::vector<const int64_t*> data_;
  std::vector<int64_t> slots_;
};

static inline void check_matrices(const std::vector<at::Tensor>& matrices, int64_t column, int64_t num_predicates) {
  for (size_t b = 0; b < matrices.size(); ++b) {
    const at::Tensor& m = matrices[b];
    TORCH_CHECK(m.device().is_cpu(), "image ", b, ": the score matrix is not on the CPU");
    TORCH_CHECK(m.scalar_type() == at::kFloat, "image ", b, ": the score matrix is not float32");
    TORCH_CHECK(m.dim() == 2 && m.size(1) == column + num_predicates, "image ", b,
                ": the score matrix must have shape [R, ", column + num_predicates, "], got ", m.sizes());
    TORCH_CHECK(m.is_contiguous(), "image ", b, ": the score matrix is not contiguous");
  }
}

// A ranked entry as one unsigned integer: the order-preserving image of its float32 value (NaN as -inf, -0.0 as
// +0.0) in the high 32 bits and the complement of its index in the low 32, so that a larger key ranks first:
// value descending, ties in ascending index (a stable sort's order). Indices must be below 2^32.
using Key = uint64_t;

static inline Key rank_key(float value, int64_t index) {
  value = value == value ? value + 0.0f : -std::numeric_limits<float>::infinity();
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  bits = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<Key>(bits) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(index));
}

constexpr int64_t kMaxKeyIndex = int64_t(1) << 32;
// The most objects an image may have for its pairs to be coded as (subject << 8) | object in 16 bits (the ranking
// pass' pair codes, read by the error analysis' pair scan).
constexpr int64_t kCodedObjects = 256;

static inline int64_t key_index(Key key) { return static_cast<uint32_t>(~static_cast<uint32_t>(key)); }

// The most keys select_best ranks by counting (beyond: selection and sort). Counting costs m^2 / 8 vector
// comparisons; a sort of a list the size of the lists (100) costs ~2 us beside a pass whose stream of scores evicts
// what the sort's branches and data had in cache (measured: counting 0.5-0.6 us for 100-155 keys, nth_element and
// std::sort 2.2-2.6 us, after reading 1.3 MB).
constexpr int64_t kCountedKeys = 256;

#if defined(__x86_64__)
// The k largest keys of [first, last) (m <= kCountedKeys of them), sorted descending, from each key's rank: the
// number of keys of larger value code (the high half), compared 8 at a time. Keys of equal code share a rank; the
// rank's slot keeps the largest of them, which is right where the tie is the last listed slot (codes equal, the
// larger key first) and leaves an empty slot below k otherwise: then false is returned, the keys untouched, and
// the caller sorts them.
__attribute__((target("avx2")))
static inline bool counted_best(Key* first, Key* last, int64_t k) {
  const int64_t m = last - first, listed = std::min(m, k);
  alignas(32) int32_t codes[kCountedKeys + 8];
  Key out[kCountedKeys];
  bool filled[kCountedKeys] = {};
  const int64_t padded = (m + 7) & ~int64_t(7);
  for (int64_t i = 0; i < m; ++i) {  // unsigned order as signed
    codes[i] = static_cast<int32_t>(static_cast<uint32_t>(first[i] >> 32) ^ 0x80000000u);
  }
  for (int64_t i = m; i < padded; ++i) {
    codes[i] = std::numeric_limits<int32_t>::min();  // larger than none
  }
  int64_t placed = 0;
  for (int64_t i = 0; i < m; i += 4) {  // four keys' ranks at a time, each vector of codes loaded once
    __m256i rank[4], mine[4];
    for (int t = 0; t < 4; ++t) {
      rank[t] = _mm256_setzero_si256();
      mine[t] = _mm256_set1_epi32(codes[std::min(i + t, m - 1)]);
    }
    for (int64_t j = 0; j < padded; j += 8) {
      const __m256i other = _mm256_load_si256(reinterpret_cast<const __m256i*>(codes + j));
      for (int t = 0; t < 4; ++t) {
        rank[t] = _mm256_sub_epi32(rank[t], _mm256_cmpgt_epi32(other, mine[t]));  // (true is -1)
      }
    }
    for (int t = 0; t < 4 && i + t < m; ++t) {
      __m128i sum = _mm_add_epi32(_mm256_castsi256_si128(rank[t]), _mm256_extracti128_si256(rank[t], 1));
      sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0x4E));
      sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0xB1));
      const int64_t r = _mm_cvtsi128_si32(sum);
      if (r < listed) {
        const Key key = first[i + t];
        out[r] = filled[r] && out[r] > key ? out[r] : key;
        placed += !filled[r];
        filled[r] = true;
      }
    }
  }
  if (placed != listed) {
    return false;
  }
  std::copy(out, out + listed, first);
  return true;
}
#endif

#if defined(__x86_64__)
// The lanes of the set bits of each 8-bit mask, lowest first, 4 bits each (kLaneLists.at[mask]).
struct LaneLists {
  uint32_t at[256];
  constexpr LaneLists() : at() {
    for (int mask = 0; mask < 256; ++mask) {
      int listed = 0;
      for (int lane = 0; lane < 8; ++lane) {
        if ((mask >> lane) & 1) {
          at[mask] |= static_cast<uint32_t>(lane) << (4 * listed++);
        }
      }
    }
  }
};
inline constexpr LaneLists kLaneLists{};

// The permutation (for _mm256_permutevar8x32_epi32) that moves the 32-bit lanes whose bit is set in `mask` to
// the front, in lane order: with it a selection writes all 8 lanes and advances by the popcount, no branch per
// lane (a branch per selected lane mispredicts on scores: ~1.7 us for the ~150 of 6,320 codes a top-100 keeps).
__attribute__((target("avx2")))
static inline __m256i front_lanes(unsigned mask) {
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int32_t>(kLaneLists.at[mask])), shifts),
                          _mm256_set1_epi32(7));
}
#endif

// The k >= 1 largest keys of [first, last) into its first min(k, m) places, sorted descending (what the other
// places then hold is unspecified).
static inline void select_best(Key* first, Key* last, int64_t k) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2 && k >= 1 && last - first <= kCountedKeys && last > first && counted_best(first, last, k)) {
    return;
  }
#endif
  if (last - first > k) {
    std::nth_element(first, first + (k - 1), last, std::greater<Key>());
    last = first + k;
  }
  std::sort(first, last, std::greater<Key>());
}

// The first maximal entry's column of row[0, n) (as argmax: equal values, -0.0 and +0.0 among them, keep the
// first); n >= 1.
static inline int64_t first_max_column_scalar(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t c = 1; c < n; ++c) {
    best = row[c] > row[best] ? c : best;
  }
  return best;
}

#if defined(__x86_64__)
__attribute__((target("avx2,bmi")))
static inline int64_t first_max_column_avx2(const float* row, int64_t n) {  // n >= 8
  __m256 most = _mm256_loadu_ps(row);
  int64_t c = 8;
  for (; c + 8 <= n; c += 8) {
    most = _mm256_max_ps(most, _mm256_loadu_ps(row + c));
  }
  if (c < n) {
    most = _mm256_max_ps(most, _mm256_loadu_ps(row + n - 8));
  }
  __m128 half = _mm_max_ps(_mm256_castps256_ps128(most), _mm256_extractf128_ps(most, 1));
  half = _mm_max_ps(half, _mm_shuffle_ps(half, half, _MM_SHUFFLE(1, 0, 3, 2)));
  half = _mm_max_ps(half, _mm_shuffle_ps(half, half, _MM_SHUFFLE(2, 3, 0, 1)));
  const float top = _mm_cvtss_f32(half);
  if (top != top) {  // NaN (refused by the value check): the scalar rule
    return first_max_column_scalar(row, n);
  }
  const __m256 wanted = _mm256_set1_ps(top);
  for (c = 0; c + 8 <= n; c += 8) {
    const unsigned mask = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(row + c), wanted,
                                                                                 _CMP_EQ_OQ)));
    if (mask != 0) {
      return c + __builtin_ctz(mask);
    }
  }
  for (; c < n; ++c) {
    if (row[c] == top) {
      return c;
    }
  }
  return first_max_column_scalar(row, n);
}
#endif

static inline int64_t first_max_column(const float* row, int64_t n) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi");
  if (avx2 && n >= 8) {
    return first_max_column_avx2(row, n);
  }
#endif
  return first_max_column_scalar(row, n);
}

// IoU of two xyxy float32 boxes in the torch path's operation order (paired_box_iou): intersection sides
// (min - max) + extra clamped at 0, areas (x2 - x1 + extra) * (y2 - y1 + extra), inter / ((area_a + area_b) -
// inter), NaN (two empty boxes) read as 0. Every operation rounds to float32 (the build disables contraction).
static inline float box_iou_f32(const float* a, const float* b, float extra) {
  float w = (std::min(a[2], b[2]) - std::max(a[0], b[0])) + extra;
  float h = (std::min(a[3], b[3]) - std::max(a[1], b[1])) + extra;
  w = w < 0.0f ? 0.0f : w;
  h = h < 0.0f ? 0.0f : h;
  const float inter = w * h;
  const float area_a = ((a[2] - a[0]) + extra) * ((a[3] - a[1]) + extra);
  const float area_b = ((b[2] - b[0]) + extra) * ((b[3] - b[1]) + extra);
  const float iou = inter / ((area_a + area_b) - inter);
  return iou != iou ? 0.0f : iou;
}

// A loop over the images of a batch, body(begin, end), split over the intra-op threads (at::parallel_for with
// `grain`) only when it touches at least kSerialEntries entries (`entries`, read or written): below that, waking a
// second thread and joining it costs more than the loop (the padding of a 128-image pool's boxes: ~12 us on one
// thread, ~21 us on two), and the calling thread runs it alone.
constexpr int64_t kSerialEntries = int64_t(1) << 18;

template <typename Body>
inline void for_images(int64_t batch, int64_t grain, int64_t entries, const Body& body) {
  if (entries < kSerialEntries) {
    if (batch > 0) {
      body(int64_t(0), batch);
    }
    return;
  }
  at::parallel_for(0, batch, grain, body);
}

// Ask the caches for bytes [p, p + bytes) ahead of their use (one request per 64-byte line; never faults).
static inline void prefetch_bytes(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t offset = 0; offset < bytes; offset += 64) {
    __builtin_prefetch(c + offset);
  }
}

constexpr int32_t kNoHit = 1 << 30;  // the rank of a GT relation no entry hits; exported as NO_HIT, which
                                     // functional/compiled.py checks against limits.NO_HIT at load

// ------------------------------------------------------------------ stage functions shared across files
// One image's graph-constrained pair step (ranking.cpp), pair by pair: pair r = (pairs[2 r], pairs[2 r + 1]) gets
// its pair score subject * object and its triplet score (best * subject) * object (float32, in that order, the
// torch path's), and, with `codes`, its (subject << 8) | object (at most kCodedObjects objects). A pair with an
// index outside [0, objects) writes nothing and the first such r is kept in `bad`; `least` / `most` run over every
// index of the pairs stepped, for the caller's index check. Called for each row while the row maxima stream by
// (image_row_maxima), so the pairs are read beside the score matrix, not in a second pass.
struct GraphPairStep {
  const int64_t* pairs;
  const float* object_scores;
  int64_t objects;
  float* triplet;
  float* pair_score;
  uint16_t* codes;  // nullptr: no pair codes
  int64_t least = std::numeric_limits<int64_t>::max(), most = std::numeric_limits<int64_t>::min(), bad = -1;

  inline void operator()(int64_t r, float best) {
    const int64_t s = pairs[2 * r], o = pairs[2 * r + 1];
    least = std::min(least, std::min(s, o));
    most = std::max(most, std::max(s, o));
    if (static_cast<uint64_t>(s) >= static_cast<uint64_t>(objects) ||
        static_cast<uint64_t>(o) >= static_cast<uint64_t>(objects)) {
      bad = bad < 0 ? r : bad;
      return;
    }
    const float subject = object_scores[s], object = object_scores[o];
    pair_score[r] = subject * object;
    triplet[r] = (best * subject) * object;
    if (codes != nullptr) {
      codes[r] = static_cast<uint16_t>((s << 8) | o);
    }
  }
};

// ranking.cpp: scratch of stable_top, reused across the images of a thread.
struct TopScratch {
  std::vector<uint32_t> codes, maxima;
  std::vector<Key> kept;
};

// ranking.cpp: the stable descending top-k of values[0, n) (NaN last) into `listed`, best first. Long rows are cut
// first: the maxima of m >= k disjoint blocks of entries are m distinct entries, so the k-th largest of them (and a
// lower bound of it) is at most the k-th largest entry, and every listed entry reaches it; only the entries reaching
// it (ties included) are keyed, then selected and sorted, as a stable sort of all n entries would order them.
// Entries are compared on their value codes (the high half of rank_key: -0.0 ties with +0.0, NaN ranks as -inf).
void stable_top(const float* values, int64_t n, int64_t k, TopScratch& scratch, std::vector<Key>& listed);
// ranking.cpp: the index of the k-th entry of values[0, n) in stable_top's order (its value is the k-th largest
// value); 1 <= k <= n.
int64_t kth_largest(const float* values, int64_t n, int64_t k, TopScratch& scratch);

// scores.cpp: one image's row maxima (as int32 bit patterns into out[0, rows)) and value check; with `pairs`,
// also its graph-constrained pair step for every row r < rows, once that row's maximum is known (rows in small blocks).
bool image_row_maxima(const int32_t* data, int64_t rows, int64_t cols, int64_t column, int32_t* out,
                      GraphPairStep* pairs = nullptr);

// ngc.cpp: scratch of image_ngc, reused across the images of a thread.
struct Workspace {
  std::vector<float> pair_best;                 // each row's best entry
  std::vector<float> selection;                 // scratch for the k-th largest of them
  std::vector<std::pair<float, int64_t>> rows;  // (best entry, row) of the rows reaching the row bound
  std::vector<float> heap;
  std::vector<int64_t> passing;                 // the rows whose best entry reaches the bound
};

// ngc.cpp: the stable top-k (pair, predicate) entries of one image into `listed` (see ngc.cpp).
void image_ngc(const float* data, int64_t rows, int64_t cols, int64_t column, const float* best,
               const float* pair_score, const int64_t* top_pairs, int64_t top_length, int64_t k, Workspace& work,
               std::vector<Key>& listed);

// ngc.cpp: the rows r < rows whose best entry pair_score[r] * best[r] (float32) reaches low, in ascending order,
// into `passing` (cleared first; 8 rows at a time where AVX2 runs; low = -inf: every row).
void rows_reaching(const float* pair_score, const float* best, int64_t rows, float low, std::vector<int64_t>& passing);

// ngc.cpp: (pair [B, L], predicate [B, L], valid [B, L]) of each image's listed entries.
std::tuple<at::Tensor, at::Tensor, at::Tensor> entry_tensors(const std::vector<std::vector<Key>>& lists,
                                                             int64_t num_predicates);

// oi.cpp: scratch of one thread's Open Images lists, reused across its images.
struct OIListScratch {
  std::vector<float> pair_score, first;  // per real pair: subject * object, and * its row maximum
  std::vector<int64_t> columns;          // one row's best predicates
  std::vector<int64_t> rows;             // the candidate pairs' rows
  TopScratch top;
};

// oi.cpp: one image's Open Images entries (candidate-major: entry i is slot i % k of candidate pair pair[i / k])
// and its listed ones.
struct OIImageList {
  std::vector<int64_t> pair;             // the candidate pairs, in pair order
  std::vector<float> pair_score;         // their pair scores
  std::vector<float> score;              // per entry
  std::vector<int64_t> predicate;        // per entry: 0-based predicate column
  std::vector<Key> listed;               // the stable top `length` entries, best first
  int64_t bad = -1;                      // the first pair with an object index outside [0, N), -1 when none
};

// oi.cpp: one image's candidate pairs (their rows asked of the caches), then its entries and list (see oi.cpp;
// ranking.cpp's pass calls both while the image's matrix is in cache).
void oi_image_candidates(const float* matrix, int64_t cols, int64_t column, int64_t num_predicates,
                         const int64_t* pairs, const float* object_scores, int64_t objects, const float* best,
                         const float* given, int64_t real, bool prune, int64_t length, OIListScratch& scratch,
                         OIImageList& out);
void oi_image_list(const float* matrix, int64_t cols, int64_t column, int64_t num_predicates, int64_t length,
                   int64_t k, OIListScratch& scratch, OIImageList& out);

// oi.cpp: (score, predicate, pair, subject, object [B, E], valid [B, E]) of the images' lists, E = min(length,
// k * the most candidates of an image); an image with a bad pair is refused.
std::vector<at::Tensor> oi_list_tensors(const std::vector<OIImageList>& images, const PairRows& pairs,
                                        int64_t objects, int64_t length, int64_t k, double min_score);

}  // namespace mmsgg_ext

// ------------------------------------------------------------------ the kernels bound in bindings.cpp
// scores.cpp
std::tuple<at::Tensor, at::Tensor> row_maxima_checked(const std::vector<at::Tensor>& matrices, int64_t column,
                                                      int64_t num_predicates, int64_t width);
at::Tensor gather_rows(const std::vector<at::Tensor>& matrices, const at::Tensor& image, const at::Tensor& pos,
                       int64_t column, int64_t num_predicates);
bool matrices_suit(const std::vector<at::Tensor>& matrices, int64_t num_predicates, int64_t max_entries);
// ngc.cpp
std::tuple<at::Tensor, at::Tensor, at::Tensor> no_graph_constraint_list(
    const std::vector<at::Tensor>& matrices, int64_t column, int64_t num_predicates, const at::Tensor& best,
    const at::Tensor& pair_score, int64_t ng_topk, const std::optional<at::Tensor>& top_pairs);
// detection.cpp
std::vector<at::Tensor> coco_match_images(const at::Tensor& det_boxes, const at::Tensor& det_scores,
                                          const at::Tensor& det_labels, const at::Tensor& det_valid,
                                          const at::Tensor& gt_boxes, const at::Tensor& gt_labels,
                                          const at::Tensor& gt_valid, const at::Tensor& gt_unmatchable,
                                          const at::Tensor& thresholds, int64_t num_classes, int64_t max_dets,
                                          bool plus_one, bool float32_det_sizes, double area_lo, double area_hi);
at::Tensor coco_precision_table(const at::Tensor& matched, const at::Tensor& ignored, const at::Tensor& bounds,
                                const at::Tensor& gt_counts, const at::Tensor& recall_thresholds);
// oi.cpp
std::vector<at::Tensor> oi_ranked_lists(const std::vector<at::Tensor>& matrices, int64_t column, int64_t num_predicates,
                                        const std::vector<at::Tensor>& rel_pairs, const at::Tensor& object_scores,
                                        const at::Tensor& best, const at::Tensor& count, int64_t length,
                                        int64_t per_pair, double min_score,
                                        const std::optional<at::Tensor>& pair_score);
std::vector<at::Tensor> oi_match_lists(const at::Tensor& pred_boxes, const at::Tensor& pred_labels,
                                       const at::Tensor& gt_boxes, const at::Tensor& gt_labels,
                                       const at::Tensor& gt_pairs, const at::Tensor& gt_predicates,
                                       const at::Tensor& gt_valid, const at::Tensor& subject, const at::Tensor& object,
                                       const at::Tensor& predicate, const at::Tensor& valid, bool plus_one,
                                       double recall_thr, double ap_thr);
// ranking.cpp
std::tuple<at::Tensor, at::Tensor> stable_topk_prefix(const at::Tensor& values, const at::Tensor& count, int64_t k);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> graph_constrained_pairs(
    const std::vector<at::Tensor>& rel_pairs, const at::Tensor& object_scores, const at::Tensor& best,
    const at::Tensor& count, int64_t k);
std::vector<at::Tensor> ranked_relation_lists(const std::vector<at::Tensor>& matrices, int64_t column,
                                              int64_t num_predicates, const std::vector<at::Tensor>& rel_pairs,
                                              const at::Tensor& object_scores, const at::Tensor& count, int64_t k,
                                              int64_t ng_topk, const std::optional<at::Tensor>& out,
                                              bool pair_codes, int64_t oi_length, int64_t oi_per_pair,
                                              double oi_min_score);
// ranked_relation_lists as an object, so that several threads may share its images: the constructor checks the
// inputs and allocates the outputs, work() reads images (taken one at a time) until none is left, from any number
// of threads at once, start(n) runs work() on n threads of the process' own (they start at once: no Python thread,
// no interpreter lock to wait for; a pass' tasks start when the previous pass has no image left, at most n of them
// running), and finish() waits for the images still being read and returns the outputs of ranked_relation_lists
// (a caller that needs them calls work() first: it reads the images not started).
struct RankedPassScratch {
  mmsgg_ext::TopScratch top_scratch;
  mmsgg_ext::Workspace workspace;
  mmsgg_ext::OIListScratch oi_scratch;
  std::vector<mmsgg_ext::Key> listed;
  std::vector<int64_t> top;
};
class __attribute__((visibility("hidden"))) RankedPass  // (hidden, as pybind11's types)
    : public std::enable_shared_from_this<RankedPass> {
 public:
  RankedPass(const std::vector<at::Tensor>& matrices, int64_t column, int64_t num_predicates,
             const std::vector<at::Tensor>& rel_pairs, const at::Tensor& object_scores, const at::Tensor& count,
             int64_t k, int64_t ng_topk, const std::optional<at::Tensor>& out, bool pair_codes, int64_t oi_length,
             int64_t oi_per_pair, double oi_min_score);
  void work();
  void start(int64_t tasks);
  bool finished() const { return done_.load(std::memory_order_acquire) >= batch_; }
  std::vector<at::Tensor> finish();

 private:
  void image(int64_t b, RankedPassScratch& scratch);
  std::vector<at::Tensor> matrices_, rel_pairs_;
  std::optional<mmsgg_ext::PairRows> pairs_;
  int64_t column_, num_predicates_, ng_topk_, oi_length_;
  double oi_min_score_;
  int64_t batch_, objects_ = 0, width_ = 0, listed_width_ = 0, oi_k_ = 0;
  bool coded_ = false;
  at::Tensor scores_, rows_out_, passed_, bad_, pair_range_, index_, valid_, gc_predicate_, gc_ends_, codes_;
  std::vector<std::vector<mmsgg_ext::Key>> lists_;
  std::vector<std::vector<int64_t>> ngc_ends_;
  std::vector<mmsgg_ext::OIImageList> oi_images_;
  std::atomic<int64_t> next_image_{0}, done_{0};
  std::mutex error_lock_;
  std::exception_ptr error_;
  std::shared_ptr<RankedPass> previous_;  // the pass started before this one, until finish()
};
// Wait until no pass started by RankedPass::start is queued or running (their references to the inputs released).
void wait_beside_idle();
std::tuple<at::Tensor, at::Tensor> gt_pair_list(const std::vector<at::Tensor>& rel_pairs, const at::Tensor& count,
                                                const at::Tensor& gt_pairs, const at::Tensor& gt_valid,
                                                const at::Tensor& values, int64_t k);
// first_hits.cpp
std::tuple<at::Tensor, at::Tensor> box_relation_end_bits(const at::Tensor& pred_boxes, const at::Tensor& pred_labels,
                                                         const at::Tensor& gt_boxes, const at::Tensor& gt_labels,
                                                         const at::Tensor& gt_pairs, const at::Tensor& gt_valid,
                                                         double iou_thr, bool plus_one);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> box_overlap_flags(
    const at::Tensor& pred_boxes, const at::Tensor& pred_labels, const at::Tensor& gt_boxes,
    const at::Tensor& gt_labels, const at::Tensor& gt_pairs, const at::Tensor& gt_valid, double iou_thr,
    bool plus_one);
std::tuple<at::Tensor, at::Tensor> image_diagnostics(
    const at::Tensor& pred_boxes, const at::Tensor& pred_labels, const at::Tensor& gt_boxes,
    const at::Tensor& gt_labels, const at::Tensor& original, const at::Tensor& resized,
    const at::Tensor& label_images, double label_iou, bool plus_one, double tolerance_px, double tolerance_rel,
    double downscale_limit, double unit_min_side, const std::vector<int64_t>& flag_bits);
at::Tensor first_hit_ranks(const at::Tensor& subject_bits, const at::Tensor& object_bits,
                           const at::Tensor& gt_predicates, const at::Tensor& gt_valid,
                           const std::vector<at::Tensor>& rel_pairs,
                           const at::Tensor& index, const at::Tensor& valid, const std::optional<at::Tensor>& predicate,
                           const std::optional<at::Tensor>& list_valid, const std::vector<at::Tensor>& matrices,
                           const std::optional<at::Tensor>& start, int64_t column, int64_t num_predicates,
                           bool ends_only);
std::tuple<at::Tensor, at::Tensor> relation_pair_flags(const at::Tensor& subject_bits, const at::Tensor& object_bits,
                                                       const at::Tensor& gt_predicates, const at::Tensor& gt_valid,
                                                       const std::vector<at::Tensor>& rel_pairs, const at::Tensor& count,
                                                       const std::vector<at::Tensor>& matrices,
                                                       const std::optional<at::Tensor>& start, int64_t column,
                                                       int64_t num_predicates,
                                                       const std::optional<at::Tensor>& pair_codes);
// padding.cpp
at::Tensor pad_zero_rows(const std::vector<at::Tensor>& tensors, int64_t width);
std::optional<std::tuple<std::optional<at::Tensor>, std::optional<at::Tensor>, std::optional<at::Tensor>, at::Tensor>>
pad_int64_rows(const std::vector<at::Tensor>& tensors, int64_t value, bool pad, bool ranges, bool strided);
std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> pad_float_rows_checked(
    const std::vector<at::Tensor>& tensors, int64_t kind);
std::optional<std::tuple<std::vector<int64_t>, std::vector<int64_t>, bool, bool>> matrix_shapes(
    const std::vector<at::Tensor>& tensors);
at::Tensor lengths_mask(const std::vector<int64_t>& lengths, int64_t width);
// recall.cpp
at::Tensor hit_counts(const at::Tensor& key, const at::Tensor& rank, const std::vector<int64_t>& limits,
                      int64_t size);
std::tuple<at::Tensor, at::Tensor> predicate_quotient_sums(const at::Tensor& key, const std::vector<at::Tensor>& ranks,
                                                           const std::vector<std::vector<int64_t>>& limits,
                                                           int64_t num_images, int64_t num_predicates);
// first_hits.cpp (the error analysis' one-pass kernels)
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
box_match_overlap_flags(const at::Tensor& pred_boxes, const at::Tensor& pred_labels, const at::Tensor& gt_boxes,
                        const at::Tensor& gt_labels, const at::Tensor& gt_pairs, const at::Tensor& gt_valid,
                        double iou_thr, bool plus_one, const std::vector<int64_t>& cause_codes);
at::Tensor stage_first_hit_ranks(const at::Tensor& subject_bits, const at::Tensor& object_bits,
                                 const at::Tensor& located_subject_bits, const at::Tensor& located_object_bits,
                                 const at::Tensor& gt_predicates, const at::Tensor& gt_valid, const at::Tensor& ends,
                                 const at::Tensor& valid, const at::Tensor& predicate, int64_t num_predicates);
