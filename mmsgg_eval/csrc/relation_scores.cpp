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

namespace {

// The stable descending top-k of values[0, n) (NaN last) into `listed`, best first, in one pass: entries are
// appended to a buffer of 2k; when it is full, its k best (value descending, index ascending) are kept and the
// k-th one's value becomes the bar: a later entry must exceed it (one equal to it ranks after k entries that
// rank before it: its index is larger). The <= 2k entries left are then selected and sorted, as a stable sort of
// all n entries would order them.
void stable_top(const float* values, int64_t n, int64_t k, std::vector<Key>& buffer, std::vector<Key>& listed) {
  listed.clear();
  if (k <= 0 || n <= 0) {
    return;
  }
  buffer.resize(2 * k + 1);
  Key* kept = buffer.data();
  int64_t size = 0;
  Key bar = 0;  // every key is above 0
  for (int64_t i = 0; i < n; ++i) {
    const Key key = rank_key(values[i], i);
    kept[size] = key;  // written always, kept when it passes (branch-free)
    size += key > bar;
    if (size == 2 * k) {
      std::nth_element(kept, kept + (k - 1), kept + size, std::greater<Key>());
      size = k;
      bar = kept[k - 1];
    }
  }
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
    std::vector<Key> scratch, listed;
    for (int64_t b = begin; b < end; ++b) {
      stable_top(values_ptr + b * length, count_ptr[b], width, scratch, listed);
      write_list(listed, index_ptr + b * width, valid_ptr + b * width);
    }
  });
  return {index, valid};
}

// The graph-constrained list of a padded batch in one pass per image: each pair's subject and object scores
// (the object scores at its indices), its pair score subject * object and its triplet score
// (best * subject) * object, float32 in that order (as the torch path), for its first count[b] pairs (the
// padding entries after them hold 0), then the stable top-k of those triplet scores.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> graph_constrained_pairs(
    const at::Tensor& rel_pairs, const at::Tensor& object_scores, const at::Tensor& best, const at::Tensor& count,
    int64_t k) {
  TORCH_CHECK(rel_pairs.device().is_cpu() && rel_pairs.scalar_type() == at::kLong && rel_pairs.dim() == 3 &&
                  rel_pairs.size(2) == 2,
              "graph_constrained_pairs: rel_pairs must be an int64 [B, W, 2] CPU tensor");
  const int64_t batch = rel_pairs.size(0), width = rel_pairs.size(1);
  TORCH_CHECK(object_scores.scalar_type() == at::kFloat && object_scores.dim() == 2 &&
                  object_scores.size(0) == batch && object_scores.size(1) > 0,
              "graph_constrained_pairs: object_scores must be float32 [B, N], N > 0");
  TORCH_CHECK(best.scalar_type() == at::kFloat && best.dim() == 2 && best.size(0) == batch && best.size(1) == width,
              "graph_constrained_pairs: best must be float32 [B, W]");
  TORCH_CHECK(count.scalar_type() == at::kLong && count.dim() == 1 && count.size(0) == batch,
              "graph_constrained_pairs: count must be int64 [B]");
  TORCH_CHECK(k >= 0, "graph_constrained_pairs: k must be >= 0");
  TORCH_CHECK(rel_pairs.size(1) < kMaxKeyIndex, "graph_constrained_pairs: more than 2^32 pairs in an image");
  at::Tensor pairs_c = rel_pairs.contiguous(), scores_c = object_scores.contiguous(), best_c = best.contiguous(),
             count_c = count.contiguous();
  const int64_t objects = scores_c.size(1), listed_width = std::min(k, width);
  const int64_t* pair_ptr = pairs_c.data_ptr<int64_t>();
  const int64_t* count_ptr = count_c.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(count_ptr[b] >= 0 && count_ptr[b] <= width, "graph_constrained_pairs: image ", b, " has count ",
                count_ptr[b], " outside [0, ", width, "]");
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
    std::vector<Key> scratch, listed;
    for (int64_t b = begin; b < end; ++b) {
      const int64_t* pairs = pair_ptr + b * width * 2;
      const float* scores = object_ptr + b * objects;
      const int64_t real = count_ptr[b];
      std::fill(pair_score_ptr + b * width + real, pair_score_ptr + (b + 1) * width, 0.0f);
      std::fill(triplet_ptr + b * width + real, triplet_ptr + (b + 1) * width, 0.0f);
      for (int64_t r = 0; r < real; ++r) {
        const int64_t s = pairs[2 * r], o = pairs[2 * r + 1];
        if (s < 0 || s >= objects || o < 0 || o >= objects) {
          bad[b] = r;
          break;
        }
        const float subject = scores[s], object = scores[o];
        pair_score_ptr[b * width + r] = subject * object;
        triplet_ptr[b * width + r] = (best_ptr[b * width + r] * subject) * object;
      }
      if (bad[b] >= 0) {
        continue;
      }
      stable_top(triplet_ptr + b * width, count_ptr[b], listed_width, scratch, listed);
      write_list(listed, index_ptr + b * listed_width, valid_ptr + b * listed_width);
    }
  });
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(bad[b] < 0, "graph_constrained_pairs: image ", b, " pair ", bad[b], " has an object index outside [0, ",
                objects, ")");
  }
  return {index, valid, triplet, pair_score};
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

// pad_zero_rows of int64 tensors, with each tensor's (min, max) over its entries (0 and -1 for an empty one).
std::tuple<at::Tensor, at::Tensor, at::Tensor> pad_zero_rows_range(const std::vector<at::Tensor>& tensors,
                                                                    int64_t width) {
  at::Tensor out = pad_zero_rows(tensors, width);
  TORCH_CHECK(out.scalar_type() == at::kLong, "pad_zero_rows_range: int64 tensors only");
  const int64_t batch = static_cast<int64_t>(tensors.size());
  at::Tensor low = at::zeros({batch}, at::kLong), high = at::full({batch}, -1, at::kLong);
  int64_t* low_ptr = low.data_ptr<int64_t>();
  int64_t* high_ptr = high.data_ptr<int64_t>();
  at::parallel_for(0, batch, 16, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t* values = tensors[b].data_ptr<int64_t>();
      const int64_t n = tensors[b].numel();
      if (n == 0) {
        continue;
      }
      int64_t least = values[0], most = values[0];
      for (int64_t i = 1; i < n; ++i) {
        least = std::min(least, values[i]);
        most = std::max(most, values[i]);
      }
      low_ptr[b] = least;
      high_ptr[b] = most;
    }
  });
  return {out, low, high};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "mmsgg_eval compiled CPU kernels over per-image predicate score matrices";
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
  m.def("pad_zero_rows_range", &pad_zero_rows_range,
        "pad_zero_rows of int64 tensors and each one's (min [B], max [B]) (0, -1 when empty)", py::arg("tensors"),
        py::arg("width"));
  m.def("graph_constrained_pairs", &graph_constrained_pairs,
        "the graph-constrained list of a padded batch: (index [B, k'], valid [B, k'], triplet score [B, W], "
        "pair score [B, W])",
        py::arg("rel_pairs"), py::arg("object_scores"), py::arg("best"), py::arg("count"), py::arg("k"));
}
