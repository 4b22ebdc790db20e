// The no-graph-constraint list: the stable descending top-k of every (pair, predicate) entry
// pair_score[r] * prob[r, p] of each image, found from a lower bound on the k-th best entry so that only the
// entries reaching it are keyed (image_ngc, also called by ranking.cpp's fused pass).
#include "common.h"

using namespace mmsgg_ext;

namespace {

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

// A row's best entry pair_score[r] * best[r] (-inf for NaN: never listed).
inline float row_best(const float* pair_score, const float* best, int64_t r) {
  const float value = pair_score[r] * best[r];
  return value == value ? value : -std::numeric_limits<float>::infinity();
}

// The rows r < rows whose row_best reaches low (never NaN), in ascending order, into `passing`.
void rows_reaching_scalar(const float* pair_score, const float* best, int64_t begin, int64_t rows, float low,
                          std::vector<int64_t>& passing) {
  for (int64_t r = begin; r < rows; ++r) {
    if (row_best(pair_score, best, r) >= low) {
      passing.push_back(r);
    }
  }
}

#if defined(__x86_64__)
// The same, 8 rows at a time (the same float32 products; with low > -inf a NaN product never reaches it),
// branch-free: the 8 rows' indices written whole into a chunk with the passing ones moved to the front
// (front_lanes), the count advanced by how many pass; full chunks appended to `passing` (rows < 2^31).
__attribute__((target("avx2,bmi,popcnt")))
void rows_reaching_avx2(const float* pair_score, const float* best, int64_t rows, float low,
                        std::vector<int64_t>& passing) {
  constexpr int64_t kChunk = 256;
  int64_t chunk[kChunk + 8];
  const __m256 bar = _mm256_set1_ps(low);
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  int64_t filled = 0, r = 0;
  for (; r + 8 <= rows; r += 8) {
    const __m256 products = _mm256_mul_ps(_mm256_loadu_ps(pair_score + r), _mm256_loadu_ps(best + r));
    const unsigned mask = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(products, bar, _CMP_GE_OQ)));
    const __m256i index = _mm256_permutevar8x32_epi32(
        _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(r)), lanes), front_lanes(mask));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(chunk + filled),
                        _mm256_cvtepi32_epi64(_mm256_castsi256_si128(index)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(chunk + filled + 4),
                        _mm256_cvtepi32_epi64(_mm256_extracti128_si256(index, 1)));
    filled += __builtin_popcount(mask);
    if (filled > kChunk - 8) {
      passing.insert(passing.end(), chunk, chunk + filled);
      filled = 0;
    }
  }
  passing.insert(passing.end(), chunk, chunk + filled);
  rows_reaching_scalar(pair_score, best, r, rows, low, passing);
}
#endif

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

}  // namespace

void mmsgg_ext::rows_reaching(const float* pair_score, const float* best, int64_t rows, float low,
                              std::vector<int64_t>& passing) {
  passing.clear();
  if (low == -std::numeric_limits<float>::infinity()) {  // every row (a NaN best counts as -inf)
    passing.resize(rows);
    for (int64_t r = 0; r < rows; ++r) {
      passing[r] = r;
    }
    return;
  }
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi") &&
                           __builtin_cpu_supports("popcnt");
  if (avx2 && rows < (int64_t(1) << 31)) {
    rows_reaching_avx2(pair_score, best, rows, low, passing);
    return;
  }
#endif
  rows_reaching_scalar(pair_score, best, 0, rows, low, passing);
}

void mmsgg_ext::image_ngc(const float* data, int64_t rows, int64_t cols, int64_t column, const float* best,
               const float* pair_score, const int64_t* top_pairs, int64_t top_length, int64_t k, Workspace& work,
               std::vector<Key>& listed) {
  const int64_t num_pred = cols - column;
  float low = -std::numeric_limits<float>::infinity();
  bool bounded = false;
  if (top_pairs != nullptr && top_length >= k) {  // k distinct pairs ranked high by the caller: their smallest best
    float smallest = std::numeric_limits<float>::infinity();
    bounded = true;
    for (int64_t i = 0; i < k && bounded; ++i) {
      bounded = top_pairs[i] >= 0 && top_pairs[i] < rows;
      smallest = bounded ? std::min(smallest, row_best(pair_score, best, top_pairs[i])) : smallest;
    }
    low = bounded ? smallest : low;
  }
  const bool by_rows = !bounded && rows >= k, by_heap = rows < kRowsPerEntryForRowBound * k && rows * num_pred > k;
  if (by_rows || by_heap) {  // the row bests of every row (else only the rows reaching low are looked at, below)
    std::vector<float>& pair_best = work.pair_best;
    pair_best.resize(rows);
    for (int64_t r = 0; r < rows; ++r) {
      pair_best[r] = row_best(pair_score, best, r);
    }
  }
  if (by_rows) {
    std::vector<float>& selection = work.selection;
    selection.assign(work.pair_best.begin(), work.pair_best.end());
    std::nth_element(selection.begin(), selection.begin() + (k - 1), selection.end(), std::greater<float>());
    low = selection[k - 1];
  }
  if (by_heap) {
    low = heap_bound(data, cols, column, pair_score, low, k, work);
  }
  std::vector<int64_t>& passing = work.passing;  // the rows reaching low, read below with the next ones prefetched
  rows_reaching(pair_score, best, rows, low, passing);
  constexpr size_t kAhead = 4;
  const int64_t row_bytes = cols * static_cast<int64_t>(sizeof(float));
  size_t count = 0;
  for (size_t i = 0; i < passing.size(); ++i) {
    if (i + kAhead < passing.size()) {
      prefetch_bytes(data + passing[i + kAhead] * cols, row_bytes);
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
std::tuple<at::Tensor, at::Tensor, at::Tensor> mmsgg_ext::entry_tensors(const std::vector<std::vector<Key>>& lists,
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
