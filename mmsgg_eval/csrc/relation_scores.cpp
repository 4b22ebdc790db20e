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
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

constexpr int32_t kFiniteBits = 0x7F800000;  // the bit pattern of +inf: finite non-negative floats lie below

inline float as_float(int32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

void check_cpu(const at::Tensor& t, at::ScalarType dtype, int64_t dim, const char* what) {
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

void check_matrices(const std::vector<at::Tensor>& matrices, int64_t column, int64_t num_predicates) {
  for (size_t b = 0; b < matrices.size(); ++b) {
    const at::Tensor& m = matrices[b];
    TORCH_CHECK(m.device().is_cpu(), "image ", b, ": the score matrix is not on the CPU");
    TORCH_CHECK(m.scalar_type() == at::kFloat, "image ", b, ": the score matrix is not float32");
    TORCH_CHECK(m.dim() == 2 && m.size(1) == column + num_predicates, "image ", b,
                ": the score matrix must have shape [R, ", column + num_predicates, "], got ", m.sizes());
    TORCH_CHECK(m.is_contiguous(), "image ", b, ": the score matrix is not contiguous");
  }
}

// Row maxima of one image's predicate columns (into out[0, rows)) and the integer range check of all its entries,
// in one pass over the matrix: each row is read once, as 8-lane vectors (the last one overlapping the previous
// where the predicates are not a multiple of 8), into its maximum and the running (min, max) of every entry.
#if defined(__x86_64__)
__attribute__((target("avx2")))
bool image_row_maxima_avx2(const int32_t* data, int64_t rows, int64_t cols, int64_t column, int32_t* out) {
  const int64_t num_pred = cols - column;  // >= 8 (the caller checks)
  __m256i low = _mm256_set1_epi32(std::numeric_limits<int32_t>::max());
  __m256i high = _mm256_set1_epi32(std::numeric_limits<int32_t>::min());
  int32_t low_lead = std::numeric_limits<int32_t>::max(), high_lead = std::numeric_limits<int32_t>::min();
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* row = data + r * cols;
    for (int64_t c = 0; c < column; ++c) {  // the background column(s): checked, not maxed
      low_lead = std::min(low_lead, row[c]);
      high_lead = std::max(high_lead, row[c]);
    }
    const int32_t* pred = row + column;
    __m256i best = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pred));
    int64_t c = 8;
    for (; c + 8 <= num_pred; c += 8) {
      best = _mm256_max_epi32(best, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pred + c)));
    }
    if (c < num_pred) {
      best = _mm256_max_epi32(best, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pred + num_pred - 8)));
    }
    // every predicate entry went into `best` (the maximum) and the minimum of the same loads is taken again
    __m256i least = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pred));
    for (c = 8; c + 8 <= num_pred; c += 8) {
      least = _mm256_min_epi32(least, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pred + c)));
    }
    if (c < num_pred) {
      least = _mm256_min_epi32(least, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pred + num_pred - 8)));
    }
    low = _mm256_min_epi32(low, least);
    high = _mm256_max_epi32(high, best);
    __m128i half = _mm_max_epi32(_mm256_castsi256_si128(best), _mm256_extracti128_si256(best, 1));
    half = _mm_max_epi32(half, _mm_shuffle_epi32(half, _MM_SHUFFLE(1, 0, 3, 2)));
    half = _mm_max_epi32(half, _mm_shuffle_epi32(half, _MM_SHUFFLE(2, 3, 0, 1)));
    out[r] = _mm_cvtsi128_si32(half);
  }
  alignas(32) int32_t lows[8], highs[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lows), low);
  _mm256_store_si256(reinterpret_cast<__m256i*>(highs), high);
  for (int i = 0; i < 8; ++i) {
    low_lead = std::min(low_lead, lows[i]);
    high_lead = std::max(high_lead, highs[i]);
  }
  return rows == 0 || (low_lead >= 0 && high_lead < kFiniteBits);
}
#endif

bool image_row_maxima_scalar(const int32_t* data, int64_t rows, int64_t cols, int64_t column, int32_t* out) {
  int32_t low = std::numeric_limits<int32_t>::max();
  int32_t high = std::numeric_limits<int32_t>::min();
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* row = data + r * cols;
    int32_t best = std::numeric_limits<int32_t>::min();
    for (int64_t c = 0; c < cols; ++c) {
      low = std::min(low, row[c]);
      high = std::max(high, row[c]);
      best = c >= column ? std::max(best, row[c]) : best;
    }
    out[r] = best;
  }
  return rows == 0 || cols == 0 || (low >= 0 && high < kFiniteBits);
}

bool image_row_maxima(const int32_t* data, int64_t rows, int64_t cols, int64_t column, int32_t* out) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2 && cols - column >= 8) {
    return image_row_maxima_avx2(data, rows, cols, column, out);
  }
#endif
  return image_row_maxima_scalar(data, rows, cols, column, out);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> row_maxima_checked(const std::vector<at::Tensor>& matrices, int64_t column,
                                                      int64_t num_predicates, int64_t width) {
  TORCH_CHECK(num_predicates > 0, "row_maxima_checked needs at least one predicate column");
  check_matrices(matrices, column, num_predicates);
  const int64_t batch = static_cast<int64_t>(matrices.size());
  at::Tensor best = at::zeros({batch, width}, at::kFloat);
  at::Tensor passed = at::empty({batch}, at::kBool);
  int32_t* best_bits = reinterpret_cast<int32_t*>(best.data_ptr<float>());
  bool* passed_ptr = passed.data_ptr<bool>();
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(matrices[b].size(0) <= width, "image ", b, " has more rows than the width ", width);
  }
  at::parallel_for(0, batch, 8, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const at::Tensor& m = matrices[b];
      const int32_t* data = reinterpret_cast<const int32_t*>(m.data_ptr<float>());
      passed_ptr[b] = image_row_maxima(data, m.size(0), m.size(1), column, best_bits + b * width);
    }
  });
  return {best, passed};
}

at::Tensor gather_rows(const std::vector<at::Tensor>& matrices, const at::Tensor& image, const at::Tensor& pos,
                       int64_t column, int64_t num_predicates) {
  check_matrices(matrices, column, num_predicates);
  TORCH_CHECK(image.scalar_type() == at::kLong && pos.scalar_type() == at::kLong && image.dim() == 1 &&
                  pos.dim() == 1 && image.numel() == pos.numel(),
              "gather_rows: image and pos must be int64 vectors of one length");
  at::Tensor image_c = image.contiguous(), pos_c = pos.contiguous();
  const int64_t* image_ptr = image_c.data_ptr<int64_t>();
  const int64_t* pos_ptr = pos_c.data_ptr<int64_t>();
  const int64_t n = image_c.numel();
  const int64_t batch = static_cast<int64_t>(matrices.size());
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(image_ptr[i] >= 0 && image_ptr[i] < batch, "gather_rows: image ", image_ptr[i], " out of range");
    TORCH_CHECK(pos_ptr[i] >= 0 && pos_ptr[i] < matrices[image_ptr[i]].size(0), "gather_rows: row ", pos_ptr[i],
                " out of range for image ", image_ptr[i]);
  }
  at::Tensor out = at::empty({n, num_predicates}, at::kFloat);
  float* out_ptr = out.data_ptr<float>();
  const int64_t cols = column + num_predicates;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = matrices[image_ptr[i]].data_ptr<float>() + pos_ptr[i] * cols + column;
    std::memcpy(out_ptr + i * num_predicates, row, sizeof(float) * num_predicates);
  }
  return out;
}

namespace {

// A ranked entry as one unsigned integer: the order-preserving image of its float32 value (NaN as -inf, -0.0 as
// +0.0) in the high 32 bits and the complement of its index in the low 32, so that a larger key ranks first:
// value descending, ties in ascending index (a stable sort's order). Indices must be below 2^32.
using Key = uint64_t;

inline Key rank_key(float value, int64_t index) {
  value = value == value ? value + 0.0f : -std::numeric_limits<float>::infinity();
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  bits = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<Key>(bits) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(index));
}

constexpr int64_t kMaxKeyIndex = int64_t(1) << 32;

inline int64_t key_index(Key key) { return static_cast<uint32_t>(~static_cast<uint32_t>(key)); }

inline void select_best(Key* first, Key* last, int64_t k) {  // the k largest keys of [first, last), sorted
  if (last - first > k) {
    std::nth_element(first, first + (k - 1), last, std::greater<Key>());
    last = first + k;
  }
  std::sort(first, last, std::greater<Key>());
}

// The stable top-k entries of one image into `listed`.
//
// Every listed entry is >= the image's k-th best entry V, and lies in a row whose best entry (pair_score * best:
// rounding is monotone, so that is the row's largest entry) is >= V. A lower bound `low` <= V selects the
// candidates: the entries >= low (ties at low included) of the rows reaching low, read in row-major order; the
// first k of them by (value descending, row-major position) are listed, as a stable sort of all entries would
// list them. The bound:
//   * the smallest row best of k distinct pairs the caller ranked high (`top_pairs`, -1 where a slot holds none;
//     e.g. the graph-constrained list), else the k-th largest row best: the k rows' best entries are k distinct
//     entries. Tight when the image has many rows per listed entry;
//   * with fewer than 2 k rows that bound lets most entries through; there the rows reaching it are read by
//     descending best entry, keeping the k largest entries seen in a min-heap, until the next row's best entry
//     is below the heap's smallest, which is then the bound (the rows not read hold only entries below it).
constexpr int64_t kRowsPerEntryForRowBound = 2;

struct Workspace {
  std::vector<float> pair_best;                 // each row's best entry
  std::vector<float> selection;                 // scratch for the k-th largest of them
  std::vector<std::pair<float, int64_t>> rows;  // (best entry, row) of the rows reaching the row bound
  std::vector<float> heap;
  std::vector<int64_t> passing;                 // the rows whose best entry reaches the bound
};

float heap_bound(const float* data, int64_t cols, int64_t column, const float* pair_score, float low, int64_t k,
                 Workspace& work) {
  const std::vector<float>& pair_best = work.pair_best;
  auto& order = work.rows;
  order.clear();
  for (int64_t r = 0; r < static_cast<int64_t>(pair_best.size()); ++r) {
    if (pair_best[r] >= low) {
      order.emplace_back(pair_best[r], r);
    }
  }
  std::sort(order.begin(), order.end(),
            [](const std::pair<float, int64_t>& a, const std::pair<float, int64_t>& b) { return a.first > b.first; });
  std::vector<float>& heap = work.heap;
  heap.clear();
  const int64_t num_pred = cols - column;
  for (const auto& [row_best, r] : order) {
    if (static_cast<int64_t>(heap.size()) == k && row_best < heap.front()) {
      break;
    }
    const float* row = data + r * cols + column;
    for (int64_t p = 0; p < num_pred; ++p) {
      const float value = row[p] * pair_score[r];
      if (static_cast<int64_t>(heap.size()) < k) {
        if (value >= low) {
          heap.push_back(value);
          std::push_heap(heap.begin(), heap.end(), std::greater<float>());
        }
      } else if (value > heap.front()) {
        std::pop_heap(heap.begin(), heap.end(), std::greater<float>());
        heap.back() = value;
        std::push_heap(heap.begin(), heap.end(), std::greater<float>());
      }
    }
  }
  return static_cast<int64_t>(heap.size()) == k ? heap.front() : low;
}

// The keys of the entries row[p] * weight >= low of one row (NaN never), in ascending p, into out (room for
// num_pred keys); returns how many. Entry index: base + p.
int64_t keep_entries_scalar(const float* row, int64_t num_pred, float weight, float low, int64_t base, Key* out) {
  int64_t count = 0;
  for (int64_t p = 0; p < num_pred; ++p) {  // branch-free: each entry written, kept when it reaches low
    const float value = row[p] * weight;
    out[count] = rank_key(value, base + p);
    count += value >= low;
  }
  return count;
}

#if defined(__x86_64__)
// The same, 8 entries at a time: the products and the comparison as vectors (the same float32 products), the
// keys of the entries that pass only.
__attribute__((target("avx2,bmi")))
int64_t keep_entries_avx2(const float* row, int64_t num_pred, float weight, float low, int64_t base, Key* out) {
  const __m256 weights = _mm256_set1_ps(weight), bar = _mm256_set1_ps(low);
  alignas(32) float values[8];
  int64_t count = 0, p = 0;
  for (; p + 8 <= num_pred; p += 8) {
    const __m256 products = _mm256_mul_ps(_mm256_loadu_ps(row + p), weights);
    unsigned mask = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(products, bar, _CMP_GE_OQ)));
    if (mask == 0) {
      continue;
    }
    _mm256_store_ps(values, products);
    while (mask != 0) {
      const int j = __builtin_ctz(mask);
      mask &= mask - 1;
      out[count++] = rank_key(values[j], base + p + j);
    }
  }
  return count + keep_entries_scalar(row + p, num_pred - p, weight, low, base + p, out + count);
}
#endif

int64_t keep_entries(const float* row, int64_t num_pred, float weight, float low, int64_t base, Key* out) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi");
  if (avx2) {
    return keep_entries_avx2(row, num_pred, weight, low, base, out);
  }
#endif
  return keep_entries_scalar(row, num_pred, weight, low, base, out);
}

void image_ngc(const float* data, int64_t rows, int64_t cols, int64_t column, const float* best,
               const float* pair_score, const int64_t* top_pairs, int64_t top_length, int64_t k, Workspace& work,
               std::vector<Key>& listed) {
  const int64_t num_pred = cols - column;
  std::vector<float>& pair_best = work.pair_best;
  pair_best.resize(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float value = pair_score[r] * best[r];
    pair_best[r] = value == value ? value : -std::numeric_limits<float>::infinity();  // NaN: never listed
  }
  float low = -std::numeric_limits<float>::infinity();
  bool bounded = false;
  if (top_pairs != nullptr && top_length >= k) {  // k distinct pairs ranked high by the caller: their smallest best
    float smallest = std::numeric_limits<float>::infinity();
    bounded = true;
    for (int64_t i = 0; i < k && bounded; ++i) {
      bounded = top_pairs[i] >= 0 && top_pairs[i] < rows;
      smallest = bounded ? std::min(smallest, pair_best[top_pairs[i]]) : smallest;
    }
    low = bounded ? smallest : low;
  }
  if (!bounded && rows >= k) {
    std::vector<float>& selection = work.selection;
    selection.assign(pair_best.begin(), pair_best.end());
    std::nth_element(selection.begin(), selection.begin() + (k - 1), selection.end(), std::greater<float>());
    low = selection[k - 1];
  }
  if (rows < kRowsPerEntryForRowBound * k && rows * num_pred > k) {
    low = heap_bound(data, cols, column, pair_score, low, k, work);
  }
  std::vector<int64_t>& passing = work.passing;  // the rows reaching low, read below with the next ones prefetched
  passing.clear();
  for (int64_t r = 0; r < rows; ++r) {
    if (pair_best[r] >= low) {
      passing.push_back(r);
    }
  }
  constexpr size_t kAhead = 4;
  const int64_t row_bytes = cols * static_cast<int64_t>(sizeof(float));
  size_t count = 0;
  for (size_t i = 0; i < passing.size(); ++i) {
    if (i + kAhead < passing.size()) {
      const char* ahead = reinterpret_cast<const char*>(data + passing[i + kAhead] * cols);
      for (int64_t offset = 0; offset < row_bytes; offset += 64) {
        __builtin_prefetch(ahead + offset);
      }
    }
    const int64_t r = passing[i];
    if (listed.size() < count + num_pred) {
      listed.resize(2 * (count + num_pred));
    }
    count += keep_entries(data + r * cols + column, num_pred, pair_score[r], low, r * num_pred,
                          listed.data() + count);
  }
  select_best(listed.data(), listed.data() + count, k);
  listed.resize(std::min<int64_t>(count, k));
}

// (pair [B, L], predicate [B, L], valid [B, L]) of each image's listed (pair, predicate) entries (entry index
// pair * num_predicates + predicate), L the longest list.
std::tuple<at::Tensor, at::Tensor, at::Tensor> entry_tensors(const std::vector<std::vector<Key>>& lists,
                                                             int64_t num_predicates) {
  const int64_t batch = static_cast<int64_t>(lists.size());
  int64_t length = 0;
  for (const auto& list : lists) {
    length = std::max<int64_t>(length, static_cast<int64_t>(list.size()));
  }
  at::Tensor pair = at::zeros({batch, length}, at::kLong);
  at::Tensor predicate = at::zeros({batch, length}, at::kLong);
  at::Tensor valid = at::zeros({batch, length}, at::kBool);
  int64_t* pair_ptr = pair.data_ptr<int64_t>();
  int64_t* predicate_ptr = predicate.data_ptr<int64_t>();
  bool* valid_ptr = valid.data_ptr<bool>();
  for (int64_t b = 0; b < batch; ++b) {
    const auto& list = lists[b];
    for (size_t i = 0; i < list.size(); ++i) {
      pair_ptr[b * length + i] = key_index(list[i]) / num_predicates;
      predicate_ptr[b * length + i] = key_index(list[i]) % num_predicates;
      valid_ptr[b * length + i] = true;
    }
  }
  return {pair, predicate, valid};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> no_graph_constraint_list(
    const std::vector<at::Tensor>& matrices, int64_t column, int64_t num_predicates, const at::Tensor& best,
    const at::Tensor& pair_score, int64_t ng_topk, const std::optional<at::Tensor>& top_pairs) {
  TORCH_CHECK(num_predicates > 0 && ng_topk > 0, "no_graph_constraint_list needs predicates and ng_topk > 0");
  check_matrices(matrices, column, num_predicates);
  const int64_t batch = static_cast<int64_t>(matrices.size());
  TORCH_CHECK(best.scalar_type() == at::kFloat && pair_score.scalar_type() == at::kFloat && best.dim() == 2 &&
                  best.sizes() == pair_score.sizes() && best.size(0) == batch,
              "no_graph_constraint_list: best and pair_score must be float32 [B, R] of one shape");
  at::Tensor best_c = best.contiguous(), pair_score_c = pair_score.contiguous();
  const int64_t width = best_c.size(1);
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(matrices[b].size(0) <= width, "image ", b, " has more rows than the width ", width);
    TORCH_CHECK(matrices[b].size(0) * num_predicates < kMaxKeyIndex, "image ", b, " has ", matrices[b].size(0),
                " x ", num_predicates, " entries, more than the kernels rank (2^32)");
  }
  const float* best_ptr = best_c.data_ptr<float>();
  const float* pair_score_ptr = pair_score_c.data_ptr<float>();
  at::Tensor top_c;
  const int64_t* top_ptr = nullptr;
  int64_t top_length = 0;
  if (top_pairs.has_value()) {
    top_c = top_pairs->contiguous();
    TORCH_CHECK(top_c.scalar_type() == at::kLong && top_c.dim() == 2 && top_c.size(0) == batch,
                "no_graph_constraint_list: top_pairs must be int64 [B, L]");
    top_ptr = top_c.data_ptr<int64_t>();
    top_length = top_c.size(1);
  }
  std::vector<std::vector<Key>> lists(batch);
  at::parallel_for(0, batch, 8, [&](int64_t begin, int64_t end) {
    Workspace work;
    for (int64_t b = begin; b < end; ++b) {
      const at::Tensor& m = matrices[b];
      image_ngc(m.data_ptr<float>(), m.size(0), m.size(1), column, best_ptr + b * width,
                pair_score_ptr + b * width, top_ptr == nullptr ? nullptr : top_ptr + b * top_length, top_length,
                ng_topk, work, lists[b]);
    }
  });
  return entry_tensors(lists, num_predicates);
}

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

__attribute__((target("avx2,bmi")))
int64_t keys_reaching_avx2(const uint32_t* codes, int64_t n, uint32_t bar, Key* out) {
  const __m256i flip = _mm256_set1_epi32(static_cast<int32_t>(0x80000000u));  // unsigned order as signed
  const __m256i bar_v = _mm256_set1_epi32(static_cast<int32_t>(bar ^ 0x80000000u));
  int64_t count = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i c = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + i)), flip);
    // code >= bar  <=>  not (bar > code)
    unsigned mask = ~static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(bar_v, c)))) &
                    0xFFu;
    while (mask != 0) {
      const int j = __builtin_ctz(mask);
      mask &= mask - 1;
      out[count++] = code_key(codes[i + j], i + j);
    }
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
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi");
  if (avx2) {
    return keys_reaching_avx2(codes, n, bar, out);
  }
#endif
  return keys_reaching_scalar(codes, 0, n, bar, out);
}

// Scratch of stable_top, reused across the images of a thread.
struct TopScratch {
  std::vector<uint32_t> codes, maxima;
  std::vector<Key> kept;
};

// The stable descending top-k of values[0, n) (NaN last) into `listed`, best first. Long rows are cut first:
// the maxima of m >= k disjoint blocks of entries are m distinct entries, so the k-th largest of them is at most
// the k-th largest entry, and every listed entry reaches it; only the entries reaching it (ties included) are
// keyed, then selected and sorted, as a stable sort of all n entries would order them. Entries are compared on
// their value codes (the high half of rank_key: -0.0 ties with +0.0, NaN ranks as -inf).
constexpr int64_t kBlocksPerListed = 2;

void stable_top(const float* values, int64_t n, int64_t k, TopScratch& scratch, std::vector<Key>& listed) {
  listed.clear();
  if (k <= 0 || n <= 0) {
    return;
  }
  const bool long_row = n >= 4 * kBlocksPerListed * k;  // blocks of at least 4 entries
  scratch.codes.resize(n);
  scratch.maxima.resize(long_row ? kBlocksPerListed * k + 8 : 0);
  const int64_t blocks = value_codes(values, n, scratch.codes.data(), long_row ? kBlocksPerListed * k : 0,
                                     scratch.maxima.data());
  uint32_t bar = 0;  // every code reaches 0
  if (blocks >= k) {
    uint32_t* maxima = scratch.maxima.data();
    std::nth_element(maxima, maxima + (k - 1), maxima + blocks, std::greater<uint32_t>());
    bar = maxima[k - 1];
  }
  scratch.kept.resize(n);
  Key* kept = scratch.kept.data();
  const int64_t size = keys_reaching(scratch.codes.data(), n, bar, kept);
  select_best(kept, kept + size, k);
  listed.assign(kept, kept + std::min(size, k));
}

void write_list(const std::vector<Key>& listed, int64_t* index, bool* valid) {
  for (size_t i = 0; i < listed.size(); ++i) {
    index[i] = key_index(listed[i]);
    valid[i] = true;
  }
}

}  // namespace

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

// The first maximal entry's column of row[0, n) (as argmax: equal values, -0.0 and +0.0 among them, keep the
// first); n >= 1.
int64_t first_max_column_scalar(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t c = 1; c < n; ++c) {
    best = row[c] > row[best] ? c : best;
  }
  return best;
}

#if defined(__x86_64__)
__attribute__((target("avx2,bmi")))
int64_t first_max_column_avx2(const float* row, int64_t n) {  // n >= 8
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

int64_t first_max_column(const float* row, int64_t n) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi");
  if (avx2 && n >= 8) {
    return first_max_column_avx2(row, n);
  }
#endif
  return first_max_column_scalar(row, n);
}

// One image's graph-constrained pass (graph_constrained_pairs): for its `real` pairs (pairs[2 r], pairs[2 r + 1])
// the pair score subject * object and the triplet score (best * subject) * object (float32, in that order) into
// pair_score / triplet (entries real..width-1 set to 0), then the stable top-k of the triplet scores into
// `listed`. Returns the first pair with an object index outside [0, objects), -1 when none (`listed` empty then).
// `range` (when given): the (min, max) of all the image's pair indices (0, -1 without pairs), for the caller's
// index check.
int64_t image_gc_pairs(const int64_t* pairs, int64_t real, int64_t width, const float* scores, int64_t objects,
                       const float* best, float* triplet, float* pair_score, int64_t k, TopScratch& scratch,
                       std::vector<Key>& listed, int64_t* range = nullptr) {
  std::fill(pair_score + real, pair_score + width, 0.0f);
  std::fill(triplet + real, triplet + width, 0.0f);
  int64_t least = real > 0 ? pairs[0] : 0, most = real > 0 ? pairs[0] : -1, bad = -1;
  for (int64_t r = 0; r < real; ++r) {
    const int64_t s = pairs[2 * r], o = pairs[2 * r + 1];
    least = std::min(least, std::min(s, o));
    most = std::max(most, std::max(s, o));
    if (s < 0 || s >= objects || o < 0 || o >= objects) {
      bad = r;
      break;
    }
    const float subject = scores[s], object = scores[o];
    pair_score[r] = subject * object;
    triplet[r] = (best[r] * subject) * object;
  }
  if (range != nullptr) {
    for (int64_t i = bad < 0 ? 2 * real : 2 * bad; i < 2 * real; ++i) {  // the rest of a bad image's indices
      least = std::min(least, pairs[i]);
      most = std::max(most, pairs[i]);
    }
    range[0] = least;
    range[1] = most;
  }
  if (bad >= 0) {
    listed.clear();
    return bad;
  }
  stable_top(triplet, real, k, scratch, listed);
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
      bad[b] = image_gc_pairs(pairs.pairs(b), count_ptr[b], width, object_ptr + b * objects, objects,
                              best_ptr + b * width, triplet_ptr + b * width, pair_score_ptr + b * width,
                              listed_width, scratch, listed);
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
// ngc ends [B, L, 2]: the (subject, object) indices of each list's entries, 0 on empty slots);
// best, triplet and pair scores are written into `out` ([3, B, W], e.g. a buffer the caller reuses across pools)
// when it is given.
std::vector<at::Tensor> ranked_relation_lists(const std::vector<at::Tensor>& matrices, int64_t column,
                                              int64_t num_predicates, const std::vector<at::Tensor>& rel_pairs,
                                              const at::Tensor& object_scores, const at::Tensor& count, int64_t k,
                                              int64_t ng_topk, const std::optional<at::Tensor>& out) {
  TORCH_CHECK(num_predicates > 0 && k >= 0 && ng_topk >= 0,
              "ranked_relation_lists needs predicates, k >= 0 and ng_topk >= 0");
  check_matrices(matrices, column, num_predicates);
  check_cpu(object_scores, at::kFloat, 2, "ranked_relation_lists: object_scores must be float32 [B, N] on the CPU");
  check_cpu(count, at::kLong, 1, "ranked_relation_lists: count must be int64 [B] on the CPU");
  const int64_t batch = static_cast<int64_t>(matrices.size()), objects = object_scores.size(1);
  const PairRows pairs(rel_pairs, batch, "ranked_relation_lists");
  TORCH_CHECK(object_scores.size(0) == batch && objects > 0 && count.size(0) == batch,
              "ranked_relation_lists: the batch fields do not have matching shapes");
  at::Tensor scores_c = object_scores.contiguous(), count_c = count.contiguous();
  const int64_t* count_ptr = count_c.data_ptr<int64_t>();
  int64_t width = 0;  // the batch's pair width: its longest image
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(count_ptr[b] == matrices[b].size(0) && count_ptr[b] <= pairs.slots(b), "ranked_relation_lists: image ",
                b, " has ", matrices[b].size(0), " score rows and ", pairs.slots(b), " pair slots for ", count_ptr[b],
                " pairs");
    TORCH_CHECK(matrices[b].size(0) * num_predicates < kMaxKeyIndex, "image ", b, " has ", matrices[b].size(0),
                " x ", num_predicates, " entries, more than the kernels rank (2^32)");
    width = std::max(width, count_ptr[b]);
  }
  const int64_t listed_width = std::min(k, width);
  at::Tensor rows_out;  // best, triplet and pair scores, [3, B, W]: the caller's reused buffer or a new one
  if (out.has_value()) {
    TORCH_CHECK(out->device().is_cpu() && out->scalar_type() == at::kFloat && out->is_contiguous() &&
                    out->dim() == 3 && out->size(0) == 3 && out->size(1) == batch && out->size(2) == width,
                "ranked_relation_lists: out must be a contiguous float32 [3, ", batch, ", ", width, "] CPU tensor");
    rows_out = *out;
  } else {
    rows_out = at::empty({3, batch, width}, at::kFloat);
  }
  at::Tensor best = rows_out[0], triplet = rows_out[1], pair_score = rows_out[2];
  at::Tensor passed = at::empty({batch}, at::kBool), bad = at::empty({batch}, at::kLong);
  at::Tensor pair_range = at::empty({batch, 2}, at::kLong);  // (min, max) of each image's pair indices
  int64_t* range_ptr = pair_range.data_ptr<int64_t>();
  at::Tensor index = at::zeros({batch, listed_width}, at::kLong), valid = at::zeros({batch, listed_width}, at::kBool);
  at::Tensor gc_predicate = at::zeros({batch, listed_width}, at::kLong);  // the listed pairs' arg-max predicates
  int64_t* gc_predicate_ptr = gc_predicate.data_ptr<int64_t>();
  at::Tensor gc_ends = at::zeros({batch, listed_width, 2}, at::kLong);  // the listed pairs' (subject, object)
  int64_t* gc_ends_ptr = gc_ends.data_ptr<int64_t>();
  std::vector<std::vector<int64_t>> ngc_ends(batch);  // the no-graph-constraint entries' (subject, object)
  float* best_ptr = best.data_ptr<float>();
  bool* passed_ptr = passed.data_ptr<bool>();
  float* triplet_ptr = triplet.data_ptr<float>();
  float* pair_score_ptr = pair_score.data_ptr<float>();
  int64_t* index_ptr = index.data_ptr<int64_t>();
  bool* valid_ptr = valid.data_ptr<bool>();
  int64_t* bad_ptr = bad.data_ptr<int64_t>();
  const float* object_ptr = scores_c.data_ptr<float>();
  std::vector<std::vector<Key>> lists(batch);
  at::parallel_for(0, batch, 8, [&](int64_t begin, int64_t end) {
    TopScratch scratch;
    Workspace work;
    std::vector<Key> listed;
    std::vector<int64_t> top;
    for (int64_t b = begin; b < end; ++b) {
      const at::Tensor& m = matrices[b];
      const float* data = m.data_ptr<float>();
      const int64_t rows = m.size(0);
      float* image_best = best_ptr + b * width;
      passed_ptr[b] = image_row_maxima(reinterpret_cast<const int32_t*>(data), rows, m.size(1), column,
                                       reinterpret_cast<int32_t*>(image_best));
      std::fill(image_best + rows, image_best + width, 0.0f);
      bad_ptr[b] = image_gc_pairs(pairs.pairs(b), rows, width, object_ptr + b * objects, objects,
                                  image_best, triplet_ptr + b * width, pair_score_ptr + b * width, listed_width,
                                  scratch, listed, range_ptr + 2 * b);
      write_list(listed, index_ptr + b * listed_width, valid_ptr + b * listed_width);
      const int64_t* image_pairs = pairs.pairs(b);
      for (size_t i = 0; i < listed.size(); ++i) {  // rows and pairs still in cache
        const int64_t r = key_index(listed[i]), slot = b * listed_width + static_cast<int64_t>(i);
        gc_predicate_ptr[slot] = first_max_column(data + r * m.size(1) + column, num_predicates);
        gc_ends_ptr[2 * slot] = image_pairs[2 * r];
        gc_ends_ptr[2 * slot + 1] = image_pairs[2 * r + 1];
      }
      if (bad_ptr[b] >= 0 || ng_topk == 0 || rows == 0) {
        continue;
      }
      top.resize(listed.size());  // the graph-constrained pairs bound the entry threshold
      for (size_t i = 0; i < listed.size(); ++i) {
        top[i] = key_index(listed[i]);
      }
      image_ngc(data, rows, m.size(1), column, image_best, pair_score_ptr + b * width, top.data(),
                static_cast<int64_t>(top.size()), ng_topk, work, lists[b]);
      ngc_ends[b].resize(2 * lists[b].size());
      for (size_t i = 0; i < lists[b].size(); ++i) {
        const int64_t r = key_index(lists[b][i]) / num_predicates;
        ngc_ends[b][2 * i] = image_pairs[2 * r];
        ngc_ends[b][2 * i + 1] = image_pairs[2 * r + 1];
      }
    }
  });
  auto [ngc_pair, ngc_predicate, ngc_valid] = entry_tensors(lists, num_predicates);
  const int64_t ngc_width = ngc_pair.size(1);
  at::Tensor ngc_ends_t = at::zeros({batch, ngc_width, 2}, at::kLong);
  int64_t* ngc_ends_ptr = ngc_ends_t.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    std::copy(ngc_ends[b].begin(), ngc_ends[b].end(), ngc_ends_ptr + b * ngc_width * 2);
  }
  return {best, passed, index, valid, triplet, pair_score, ngc_pair, ngc_predicate, ngc_valid, bad, pair_range,
          gc_predicate, gc_ends, ngc_ends_t};
}

// [B, width, ...] from B contiguous CPU tensors [L_b, ...] of one dtype and trailing shape (L_b <= width): each
// tensor's bytes copied into place and the rest of its row zero-filled (one pass over the output).
at::Tensor pad_zero_rows(const std::vector<at::Tensor>& tensors, int64_t width) {
  TORCH_CHECK(!tensors.empty(), "pad_zero_rows needs at least one tensor");
  const at::Tensor& first = tensors[0];
  TORCH_CHECK(first.dim() >= 1, "pad_zero_rows: 0-d tensors have no rows");
  std::vector<int64_t> shape{static_cast<int64_t>(tensors.size()), width};
  for (int64_t d = 1; d < first.dim(); ++d) {
    shape.push_back(first.size(d));
  }
  for (size_t b = 0; b < tensors.size(); ++b) {
    const at::Tensor& t = tensors[b];
    TORCH_CHECK(t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == first.scalar_type() &&
                    t.dim() == first.dim() && t.size(0) <= width,
                "pad_zero_rows: tensor ", b, " is not a contiguous CPU tensor of the first one's dtype and rank with "
                "at most ", width, " rows");
    for (int64_t d = 1; d < first.dim(); ++d) {
      TORCH_CHECK(t.size(d) == first.size(d), "pad_zero_rows: tensor ", b, " has another trailing shape");
    }
  }
  at::Tensor out = at::empty(shape, first.options());
  const int64_t row_bytes = width == 0 ? 0 : out.nbytes() / (static_cast<int64_t>(tensors.size()) * width);
  char* out_ptr = static_cast<char*>(out.data_ptr());
  at::parallel_for(0, static_cast<int64_t>(tensors.size()), 16, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const at::Tensor& t = tensors[b];
      char* row = out_ptr + b * width * row_bytes;
      const int64_t used = t.size(0) * row_bytes;
      if (used > 0) {
        std::memcpy(row, t.data_ptr(), used);
      }
      std::memset(row + used, 0, width * row_bytes - used);
    }
  });
  return out;
}

// ---------------------------------------------------------------------------------------- first-hit ranks
// Box matching and first hits, image by image, as the torch path of mmsgg_eval.functional.matching computes them:
// GT relation g of an image is hit by a ranked (pair, predicate) entry when the pair's subject matches g's GT
// subject, its object matches g's GT object (same class and box IoU >= thr) and the predicates are equal. The
// matched GT relations are bit sets of 64-bit words (bit g % 64 of word g / 64), as in the torch path.
namespace {

constexpr int32_t kNoHit = 1 << 30;  // the rank of a GT relation no entry hits; exported as NO_HIT, which
                                     // functional/compiled.py checks against limits.NO_HIT at load

// IoU of two xyxy float32 boxes in the torch path's operation order (paired_box_iou): intersection sides
// (min - max) + extra clamped at 0, areas (x2 - x1 + extra) * (y2 - y1 + extra), inter / ((area_a + area_b) -
// inter), NaN (two empty boxes) read as 0. Every operation rounds to float32 (the build disables contraction).
inline float box_iou_f32(const float* a, const float* b, float extra) {
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

}  // namespace

// For every predicted object n of every image, the bit sets of the GT relations whose subject (resp. object) it
// matches: two int64 [B, N, W] tensors (W = max(ceil(G / 64), 1)). Labels < 0 are padding (never matched);
// invalid GT relations are in no set. Equal to relation_end_bits(box_object_match_list(...)).
std::tuple<at::Tensor, at::Tensor> box_relation_end_bits(const at::Tensor& pred_boxes, const at::Tensor& pred_labels,
                                                         const at::Tensor& gt_boxes, const at::Tensor& gt_labels,
                                                         const at::Tensor& gt_pairs, const at::Tensor& gt_valid,
                                                         double iou_thr, bool plus_one) {
  check_cpu(pred_boxes, at::kFloat, 3, "box_relation_end_bits: pred_boxes must be float32 [B, N, 4] on the CPU");
  check_cpu(gt_boxes, at::kFloat, 3, "box_relation_end_bits: gt_boxes must be float32 [B, M, 4] on the CPU");
  check_cpu(pred_labels, at::kLong, 2, "box_relation_end_bits: pred_labels must be int64 [B, N] on the CPU");
  check_cpu(gt_labels, at::kLong, 2, "box_relation_end_bits: gt_labels must be int64 [B, M] on the CPU");
  check_cpu(gt_pairs, at::kLong, 3, "box_relation_end_bits: gt_pairs must be int64 [B, G, 2] on the CPU");
  check_cpu(gt_valid, at::kBool, 2, "box_relation_end_bits: gt_valid must be bool [B, G] on the CPU");
  const int64_t batch = pred_boxes.size(0), num_pred = pred_boxes.size(1), num_gt_obj = gt_boxes.size(1);
  const int64_t num_rel = gt_pairs.size(1);
  TORCH_CHECK(pred_boxes.size(2) == 4 && gt_boxes.size(2) == 4 && gt_pairs.size(2) == 2,
              "box_relation_end_bits: boxes must be [B, N, 4] / [B, M, 4] and gt_pairs [B, G, 2]");
  TORCH_CHECK(pred_labels.size(0) == batch && pred_labels.size(1) == num_pred && gt_boxes.size(0) == batch &&
                  gt_labels.size(0) == batch && gt_labels.size(1) == num_gt_obj && gt_pairs.size(0) == batch &&
                  gt_valid.size(0) == batch && gt_valid.size(1) == num_rel,
              "box_relation_end_bits: the batch fields do not have matching shapes");
  const int64_t words = std::max<int64_t>((num_rel + 63) / 64, 1);
  at::Tensor pb = pred_boxes.contiguous(), pl = pred_labels.contiguous(), gb = gt_boxes.contiguous(),
             gl = gt_labels.contiguous(), gp = gt_pairs.contiguous(), gv = gt_valid.contiguous();
  at::Tensor subject_bits = at::zeros({batch, num_pred, words}, at::kLong);
  at::Tensor object_bits = at::zeros({batch, num_pred, words}, at::kLong);
  const float* pb_ptr = pb.data_ptr<float>();
  const float* gb_ptr = gb.data_ptr<float>();
  const int64_t* pl_ptr = pl.data_ptr<int64_t>();
  const int64_t* gl_ptr = gl.data_ptr<int64_t>();
  const int64_t* gp_ptr = gp.data_ptr<int64_t>();
  const bool* gv_ptr = gv.data_ptr<bool>();
  uint64_t* sub_ptr = reinterpret_cast<uint64_t*>(subject_bits.data_ptr<int64_t>());
  uint64_t* obj_ptr = reinterpret_cast<uint64_t*>(object_bits.data_ptr<int64_t>());
  const float thr = static_cast<float>(iou_thr), extra = plus_one ? 1.0f : 0.0f;
  std::vector<int64_t> bad(batch, -1);  // a GT relation whose object index is outside [0, M)
  at::parallel_for(0, batch, 8, [&](int64_t begin, int64_t end) {
    std::vector<uint64_t> subject_of, object_of;  // [M, W]: the relations whose subject / object is GT object m
    std::vector<int64_t> first_of, next_of;
    for (int64_t b = begin; b < end; ++b) {
      subject_of.assign(num_gt_obj * words, 0);
      object_of.assign(num_gt_obj * words, 0);
      const int64_t* pairs = gp_ptr + b * num_rel * 2;
      for (int64_t g = 0; g < num_rel; ++g) {
        if (!gv_ptr[b * num_rel + g]) {
          continue;
        }
        const int64_t s = pairs[2 * g], o = pairs[2 * g + 1];
        if (s < 0 || s >= num_gt_obj || o < 0 || o >= num_gt_obj) {
          bad[b] = g;
          break;
        }
        subject_of[s * words + g / 64] |= uint64_t(1) << (g % 64);
        object_of[o * words + g / 64] |= uint64_t(1) << (g % 64);
      }
      if (bad[b] >= 0) {
        continue;
      }
      // the GT objects of each class as chains (first_of[label] -> next_of[m] -> ...), in ascending m
      const int64_t* labels = pl_ptr + b * num_pred;
      const int64_t* gt_lab = gl_ptr + b * num_gt_obj;
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
        const float* box = pb_ptr + (b * num_pred + n) * 4;
        uint64_t* sub = sub_ptr + (b * num_pred + n) * words;
        uint64_t* obj = obj_ptr + (b * num_pred + n) * words;
        for (int64_t m = first_of[label]; m >= 0; m = next_of[m]) {
          if (!(box_iou_f32(box, gb_ptr + (b * num_gt_obj + m) * 4, extra) >= thr)) {
            continue;
          }
          for (int64_t w = 0; w < words; ++w) {
            sub[w] |= subject_of[m * words + w];
            obj[w] |= object_of[m * words + w];
          }
        }
      }
    }
  });
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(bad[b] < 0, "box_relation_end_bits: image ", b, " GT relation ", bad[b],
                " has an object index outside [0, ", num_gt_obj, ")");
  }
  return {subject_bits, object_bits};
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
  check_cpu(subject_bits, at::kLong, 3, "first_hit_ranks: subject_bits must be int64 [B, N, W] on the CPU");
  check_cpu(object_bits, at::kLong, 3, "first_hit_ranks: object_bits must be int64 [B, N, W] on the CPU");
  check_cpu(gt_predicates, at::kLong, 2, "first_hit_ranks: gt_predicates must be int64 [B, G] on the CPU");
  check_cpu(gt_valid, at::kBool, 2, "first_hit_ranks: gt_valid must be bool [B, G] on the CPU");
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
    TORCH_CHECK(num_predicates > 0, "first_hit_ranks: no predicate columns");
    check_matrices(matrices, column, num_predicates);
    if (start.has_value()) {
      check_cpu(*start, at::kLong, 1, "first_hit_ranks: start must be int64 [B] on the CPU");
      TORCH_CHECK(matrices.size() == 1 && start->size(0) == batch,
                  "first_hit_ranks: with start, one matrix holds the rows of every image");
    } else {
      TORCH_CHECK(static_cast<int64_t>(matrices.size()) == batch, "first_hit_ranks: one score matrix per image");
    }
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

// Error analysis (mmsgg_eval.functional.error_causes): for every GT relation, whether some predicted pair of its
// image joins a predicted object matching its subject to one matching its object (scored), and whether such a
// pair's graph-constrained predicate (first maximal score column) is its own (listed). One pass over each image's
// first count[b] pairs (no index list), reading the score row of a pair only when it matches both ends of a GT
// relation not yet known to be listed. Returns (scored [B, G] bool, listed [B, G] bool).
std::tuple<at::Tensor, at::Tensor> relation_pair_flags(const at::Tensor& subject_bits, const at::Tensor& object_bits,
                                                       const at::Tensor& gt_predicates, const at::Tensor& gt_valid,
                                                       const std::vector<at::Tensor>& rel_pairs, const at::Tensor& count,
                                                       const std::vector<at::Tensor>& matrices,
                                                       const std::optional<at::Tensor>& start, int64_t column,
                                                       int64_t num_predicates) {
  check_cpu(subject_bits, at::kLong, 3, "relation_pair_flags: subject_bits must be int64 [B, N, W] on the CPU");
  check_cpu(object_bits, at::kLong, 3, "relation_pair_flags: object_bits must be int64 [B, N, W] on the CPU");
  check_cpu(gt_predicates, at::kLong, 2, "relation_pair_flags: gt_predicates must be int64 [B, G] on the CPU");
  check_cpu(gt_valid, at::kBool, 2, "relation_pair_flags: gt_valid must be bool [B, G] on the CPU");
  check_cpu(count, at::kLong, 1, "relation_pair_flags: count must be int64 [B] on the CPU");
  const int64_t batch = subject_bits.size(0), num_obj = subject_bits.size(1), words = subject_bits.size(2);
  const int64_t num_rel = gt_predicates.size(1);
  const PairRows pairs(rel_pairs, batch, "relation_pair_flags");
  TORCH_CHECK(object_bits.sizes() == subject_bits.sizes() && gt_valid.sizes() == gt_predicates.sizes() &&
                  gt_predicates.size(0) == batch && count.size(0) == batch &&
                  words >= std::max<int64_t>((num_rel + 63) / 64, 1),
              "relation_pair_flags: the batch fields do not have matching shapes");
  TORCH_CHECK(num_predicates > 0, "relation_pair_flags: no predicate columns");
  check_matrices(matrices, column, num_predicates);
  if (start.has_value()) {
    check_cpu(*start, at::kLong, 1, "relation_pair_flags: start must be int64 [B] on the CPU");
    TORCH_CHECK(matrices.size() == 1 && start->size(0) == batch,
                "relation_pair_flags: with start, one matrix holds the rows of every image");
  } else {
    TORCH_CHECK(static_cast<int64_t>(matrices.size()) == batch, "relation_pair_flags: one score matrix per image");
  }
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
      if (n < 0 || n > pairs.slots(b) || n > rows_count) {
        bad[b] = n;
        continue;
      }
      const int64_t* pr = pairs.pairs(b);
      for (int64_t r = 0; r < n; ++r) {
        const int64_t s = pr[2 * r], o = pr[2 * r + 1];
        if (s < 0 || s >= num_obj || o < 0 || o >= num_obj) {
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
        const int64_t p = first_max_column(rows + r * cols + column, num_predicates);
        for (int64_t w = 0; w < words; ++w) {
          any_listed[w] |= sub[w] & obj[w] & carries[p * words + w];
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

// [B, W, ...] padded with `value` from B contiguous int64 CPU tensors [L_b, ...] of one trailing shape (W = max
// L_b; None with pad = false: nothing is copied), each tensor's (min, max) over its entries (0 and -1 for an empty
// one; None with ranges = false: no entry is read) and the lengths L_b [B]; None when the tensors are not all such
// tensors (the caller's general path takes them).
std::optional<std::tuple<std::optional<at::Tensor>, std::optional<at::Tensor>, std::optional<at::Tensor>, at::Tensor>>
pad_int64_rows(const std::vector<at::Tensor>& tensors, int64_t value, bool pad, bool ranges) {
  if (tensors.empty()) {
    return std::nullopt;
  }
  const at::Tensor& first = tensors[0];
  if (first.dim() < 1) {
    return std::nullopt;
  }
  const int64_t batch = static_cast<int64_t>(tensors.size());
  int64_t width = 0;
  for (const at::Tensor& t : tensors) {
    if (!t.device().is_cpu() || t.scalar_type() != at::kLong || !t.is_contiguous() || t.dim() != first.dim()) {
      return std::nullopt;
    }
    for (int64_t d = 1; d < first.dim(); ++d) {
      if (t.size(d) != first.size(d)) {
        return std::nullopt;
      }
    }
    width = std::max(width, t.size(0));
  }
  std::vector<int64_t> shape{batch, width};
  int64_t row = 1;
  for (int64_t d = 1; d < first.dim(); ++d) {
    shape.push_back(first.size(d));
    row *= first.size(d);
  }
  at::Tensor out = pad ? at::empty(shape, at::kLong) : at::Tensor(), lengths = at::empty({batch}, at::kLong);
  at::Tensor low = at::zeros({batch}, at::kLong), high = at::full({batch}, -1, at::kLong);
  int64_t* out_ptr = pad ? out.data_ptr<int64_t>() : nullptr;
  int64_t* length_ptr = lengths.data_ptr<int64_t>();
  int64_t* low_ptr = low.data_ptr<int64_t>();
  int64_t* high_ptr = high.data_ptr<int64_t>();
  at::parallel_for(0, batch, 16, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const at::Tensor& t = tensors[b];
      const int64_t n = t.numel();
      const int64_t* src = t.data_ptr<int64_t>();
      length_ptr[b] = t.size(0);
      if (n > 0 && ranges) {
        int64_t least = src[0], most = src[0];
        for (int64_t i = 0; i < n; ++i) {
          least = src[i] < least ? src[i] : least;
          most = src[i] > most ? src[i] : most;
        }
        low_ptr[b] = least;
        high_ptr[b] = most;
      }
      if (out_ptr != nullptr) {
        int64_t* dst = out_ptr + b * width * row;
        std::copy(src, src + n, dst);
        std::fill(dst + n, dst + width * row, value);
      }
    }
  });
  const auto maybe = [](bool given, const at::Tensor& t) { return given ? std::optional<at::Tensor>(t) : std::nullopt; };
  return std::make_tuple(maybe(pad, out), maybe(ranges, low), maybe(ranges, high), lengths);
}

// [B, width] bool, true on the first lengths[b] entries of row b (lengths clamped to [0, width]).
at::Tensor lengths_mask(const std::vector<int64_t>& lengths, int64_t width) {
  TORCH_CHECK(width >= 0, "lengths_mask: width must be >= 0");
  const int64_t batch = static_cast<int64_t>(lengths.size());
  at::Tensor mask = at::empty({batch, width}, at::kBool);
  bool* out = mask.data_ptr<bool>();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t n = std::min(std::max<int64_t>(lengths[b], 0), width);
    std::memset(out + b * width, 1, n);
    std::memset(out + b * width + n, 0, width - n);
  }
  return mask;
}

// Whether every matrix is a contiguous float32 CPU tensor with fewer than max_entries (rows x num_predicates).
bool matrices_suit(const std::vector<at::Tensor>& matrices, int64_t num_predicates, int64_t max_entries) {
  for (const at::Tensor& m : matrices) {
    if (!m.device().is_cpu() || m.scalar_type() != at::kFloat || !m.is_contiguous() || m.dim() < 1 ||
        m.size(0) * num_predicates >= max_entries) {
      return false;
    }
  }
  return true;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "mmsgg_eval compiled CPU kernels over per-image predicate score matrices";
  m.attr("NO_HIT") = kNoHit;  // checked against mmsgg_eval.functional.limits.NO_HIT when the module loads
  m.def("row_maxima_checked", &row_maxima_checked, "row maxima [B, width] and the integer range check [B]",
        py::arg("matrices"), py::arg("column"), py::arg("num_predicates"), py::arg("width"));
  m.def("gather_rows", &gather_rows, "predicate columns of rows (image[i], pos[i]) -> [n, P]", py::arg("matrices"),
        py::arg("image"), py::arg("pos"), py::arg("column"), py::arg("num_predicates"));
  m.def("no_graph_constraint_list", &no_graph_constraint_list,
        "stable top-k (pair, predicate) entries pair_score * prob of each image", py::arg("matrices"),
        py::arg("column"), py::arg("num_predicates"), py::arg("best"), py::arg("pair_score"), py::arg("ng_topk"),
        py::arg("top_pairs") = py::none());
  m.def("stable_topk_prefix", &stable_topk_prefix,
        "stable descending top-k of the first count[b] entries of each row: (index [B, k'], valid [B, k'])",
        py::arg("values"), py::arg("count"), py::arg("k"));
  m.def("pad_zero_rows", &pad_zero_rows, "[B, width, ...] zero-padded from tensors [L_b, ...]",
        py::arg("tensors"), py::arg("width"));
  // rel_pairs (every kernel below): B per-image int64 [R_b, 2] tensors, or one padded [B, W, 2] tensor (in a list or
  // alone: the second definition of each name takes a single tensor)
  const char* gc_doc = "the graph-constrained list of a batch: (index [B, k'], valid [B, k'], triplet score [B, W], "
                       "pair score [B, W])";
  m.def("graph_constrained_pairs", &graph_constrained_pairs, gc_doc, py::arg("rel_pairs"), py::arg("object_scores"),
        py::arg("best"), py::arg("count"), py::arg("k"));
  m.def(
      "graph_constrained_pairs",
      [](const at::Tensor& rel_pairs, const at::Tensor& object_scores, const at::Tensor& best, const at::Tensor& count,
         int64_t k) { return graph_constrained_pairs({rel_pairs}, object_scores, best, count, k); },
      gc_doc, py::arg("rel_pairs"), py::arg("object_scores"), py::arg("best"), py::arg("count"), py::arg("k"));
  m.def("ranked_relation_lists", &ranked_relation_lists,
        "row maxima, value check, graph-constrained and no-graph-constraint lists of a pool, one pass per image",
        py::arg("matrices"), py::arg("column"), py::arg("num_predicates"), py::arg("rel_pairs"),
        py::arg("object_scores"), py::arg("count"), py::arg("k"), py::arg("ng_topk"), py::arg("out") = py::none());
  m.def("box_relation_end_bits", &box_relation_end_bits,
        "bit sets [B, N, W] of the GT relations whose subject / object each predicted object matches (box IoU)",
        py::arg("pred_boxes"), py::arg("pred_labels"), py::arg("gt_boxes"), py::arg("gt_labels"), py::arg("gt_pairs"),
        py::arg("gt_valid"), py::arg("iou_thr"), py::arg("plus_one"));
  const char* hits_doc = "first-hit rank [B, G] int32 of every GT relation in a ranked list";
  m.def("first_hit_ranks", &first_hit_ranks, hits_doc, py::arg("subject_bits"), py::arg("object_bits"),
        py::arg("gt_predicates"), py::arg("gt_valid"), py::arg("rel_pairs"), py::arg("index"), py::arg("valid"),
        py::arg("predicate"), py::arg("list_valid"), py::arg("matrices"), py::arg("start"), py::arg("column"),
        py::arg("num_predicates"), py::arg("ends_only"));
  m.def(
      "first_hit_ranks",
      [](const at::Tensor& subject_bits, const at::Tensor& object_bits, const at::Tensor& gt_predicates,
         const at::Tensor& gt_valid, const at::Tensor& rel_pairs, const at::Tensor& index, const at::Tensor& valid,
         const std::optional<at::Tensor>& predicate, const std::optional<at::Tensor>& list_valid,
         const std::vector<at::Tensor>& matrices, const std::optional<at::Tensor>& start, int64_t column,
         int64_t num_predicates, bool ends_only) {
        return first_hit_ranks(subject_bits, object_bits, gt_predicates, gt_valid, {rel_pairs}, index, valid, predicate,
                               list_valid, matrices, start, column, num_predicates, ends_only);
      },
      hits_doc, py::arg("subject_bits"), py::arg("object_bits"), py::arg("gt_predicates"), py::arg("gt_valid"),
      py::arg("rel_pairs"), py::arg("index"), py::arg("valid"), py::arg("predicate"), py::arg("list_valid"),
      py::arg("matrices"), py::arg("start"), py::arg("column"), py::arg("num_predicates"), py::arg("ends_only"));
  m.def("relation_pair_flags", &relation_pair_flags,
        "(scored, listed) [B, G] bool: some pair joins matching ends of each GT relation / with its predicate",
        py::arg("subject_bits"), py::arg("object_bits"), py::arg("gt_predicates"), py::arg("gt_valid"),
        py::arg("rel_pairs"), py::arg("count"), py::arg("matrices"), py::arg("start"), py::arg("column"),
        py::arg("num_predicates"));
  const char* gt_doc = "stable top-k of values over each image's real pairs that are GT pairs: (index [B, k'], "
                       "valid [B, k'])";
  m.def("gt_pair_list", &gt_pair_list, gt_doc, py::arg("rel_pairs"), py::arg("count"), py::arg("gt_pairs"),
        py::arg("gt_valid"), py::arg("values"), py::arg("k"));
  m.def(
      "gt_pair_list",
      [](const at::Tensor& rel_pairs, const at::Tensor& count, const at::Tensor& gt_pairs, const at::Tensor& gt_valid,
         const at::Tensor& values, int64_t k) { return gt_pair_list({rel_pairs}, count, gt_pairs, gt_valid, values, k); },
      gt_doc, py::arg("rel_pairs"), py::arg("count"), py::arg("gt_pairs"), py::arg("gt_valid"), py::arg("values"),
      py::arg("k"));
  m.def("pad_int64_rows", &pad_int64_rows,
        "(padded [B, W, ...] or None without pad, min [B], max [B] or None without ranges, lengths [B]) of int64 "
        "CPU tensors, or None for other tensors",
        py::arg("tensors"), py::arg("value"), py::arg("pad") = true, py::arg("ranges") = true);
  m.def("lengths_mask", &lengths_mask, "[B, width] bool: true on the first lengths[b] entries of each row",
        py::arg("lengths"), py::arg("width"));
  m.def("matrices_suit", &matrices_suit, "whether every matrix is a contiguous float32 CPU tensor of few entries",
        py::arg("matrices"), py::arg("num_predicates"), py::arg("max_entries"));
}
