// Reading the score matrices: each row's maximum over its predicate columns and the value check of every entry
// (row_maxima_checked; image_row_maxima is also the first step of ranking.cpp's fused pass), the predicate columns
// of selected rows (gather_rows) and whether a batch's matrices suit the kernels (matrices_suit).
#include "common.h"

using namespace mmsgg_ext;

namespace {

constexpr int32_t kFiniteBits = 0x7F800000;  // the bit pattern of +inf: finite non-negative floats lie below

inline float as_float(int32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// Row maxima of one image's predicate columns (into out[0, rows)) and the integer range check of all its entries,
// in one pass over the matrix: each row is read once, as 8-lane vectors (the last one overlapping the previous
// where the predicates are not a multiple of 8), into its maximum and the running unsigned maximum of every entry.
// With kPairs, the graph-constrained pair step of each row once its maximum is known (in blocks of rows, below).
// The check compares entries as unsigned: a valid entry (finite, >= 0) lies below kFiniteBits, an invalid one
// (sign bit set: negative or -0.0; inf, NaN) at or above it, so the unsigned maximum of every entry checks them all.
// kUnsigned: each row's maximum is an unsigned one too (one max per load): the maxima where the check passes (on
// non-negative bit patterns both orders agree). Else each row's maximum is a signed one beside the unsigned one
// of the check: -0.0 (an image the reader accepts on a second look at its values) is then below every positive
// entry of its row.
#if defined(__x86_64__)
// With kPairs the pair steps run block by block, after the maxima of the block's kPairBlock rows: a row's loads no
// longer wait behind the previous row's pair step (pair loads, object-score gathers, stores), and the step's index
// range stays in registers (a local copy of the step). The rows kAheadBytes ahead of the one being read are asked
// for (prefetch): the hardware's stream prefetch alone left the loop waiting on its loads (one thread, 512 images of
// 6,320 x 51 scores: the pass 75 -> 58 us per image, the reader without pairs 42 -> 37 us, on a 2-core AMD EPYC VM).
constexpr int64_t kPairBlock = 16;
constexpr int64_t kAheadBytes = 12 << 10;

// The lane-wise maximum of 8 (max8) or 4 (max4) int32 bit patterns, compared as unsigned or as signed.
template <bool kUnsigned>
__attribute__((target("avx2"))) inline __m256i max8(__m256i a, __m256i b) {
  return kUnsigned ? _mm256_max_epu32(a, b) : _mm256_max_epi32(a, b);
}

template <bool kUnsigned>
__attribute__((target("avx2"))) inline __m128i max4(__m128i a, __m128i b) {
  return kUnsigned ? _mm_max_epu32(a, b) : _mm_max_epi32(a, b);
}

template <bool kPairs, bool kUnsigned>
__attribute__((target("avx2")))
bool image_row_maxima_avx2(const int32_t* data, int64_t rows, int64_t cols, int64_t column, int32_t* out,
                           GraphPairStep* pairs) {
  const int64_t num_pred = cols - column;  // >= 8 (the caller checks)
  __m256i high = _mm256_setzero_si256();
  uint32_t high_lead = 0;
  GraphPairStep step = kPairs ? *pairs : GraphPairStep{};  // a local copy: its index range stays in registers
  const int64_t ahead = std::max<int64_t>(1, kAheadBytes / (cols * static_cast<int64_t>(sizeof(int32_t))));
  for (int64_t r = 0; r < rows; ++r) {
    if constexpr (kPairs) {  // the pair steps of the previous block of rows, once its maxima are known
      if (r % kPairBlock == 0 && r > 0) {
        for (int64_t q = r - kPairBlock; q < r; ++q) {
          step(q, as_float(out[q]));
        }
      }
    }
    const int32_t* row = data + r * cols;
    if (r + ahead < rows) {
      prefetch_bytes(row + ahead * cols, cols * static_cast<int64_t>(sizeof(int32_t)));
    }
    for (int64_t c = 0; c < column; ++c) {  // the background column(s): checked, not maxed
      high_lead = std::max(high_lead, static_cast<uint32_t>(row[c]));
    }
    const int32_t* pred = row + column;
    __m256i best = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pred));
    if constexpr (!kUnsigned) {
      high = _mm256_max_epu32(high, best);
    }
    int64_t c = 8;
    for (; c + 8 <= num_pred; c += 8) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pred + c));
      best = max8<kUnsigned>(best, v);
      if constexpr (!kUnsigned) {
        high = _mm256_max_epu32(high, v);
      }
    }
    if (c < num_pred) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pred + num_pred - 8));
      best = max8<kUnsigned>(best, v);
      if constexpr (!kUnsigned) {
        high = _mm256_max_epu32(high, v);
      }
    }
    if constexpr (kUnsigned) {
      high = _mm256_max_epu32(high, best);
    }
    __m128i half = max4<kUnsigned>(_mm256_castsi256_si128(best), _mm256_extracti128_si256(best, 1));
    half = max4<kUnsigned>(half, _mm_shuffle_epi32(half, _MM_SHUFFLE(1, 0, 3, 2)));
    half = max4<kUnsigned>(half, _mm_shuffle_epi32(half, _MM_SHUFFLE(2, 3, 0, 1)));
    out[r] = _mm_cvtsi128_si32(half);
  }
  if constexpr (kPairs) {
    for (int64_t q = rows > 0 ? (rows - 1) / kPairBlock * kPairBlock : 0; q < rows; ++q) {
      step(q, as_float(out[q]));
    }
    *pairs = step;
  }
  alignas(32) uint32_t highs[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(highs), high);
  for (int i = 0; i < 8; ++i) {
    high_lead = std::max(high_lead, highs[i]);
  }
  return rows == 0 || high_lead < static_cast<uint32_t>(kFiniteBits);
}

// image_row_maxima_avx2 with unsigned row maxima, read again with signed ones where the check fails (the pair
// step's outputs are written again and its index range and first bad pair are the same).
template <bool kPairs>
bool image_row_maxima_vector(const int32_t* data, int64_t rows, int64_t cols, int64_t column, int32_t* out,
                             GraphPairStep* pairs) {
  return image_row_maxima_avx2<kPairs, true>(data, rows, cols, column, out, pairs) ||
         image_row_maxima_avx2<kPairs, false>(data, rows, cols, column, out, pairs);
}
#endif

template <bool kPairs>
bool image_row_maxima_scalar(const int32_t* data, int64_t rows, int64_t cols, int64_t column, int32_t* out,
                             GraphPairStep* pairs) {
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
    if constexpr (kPairs) {
      (*pairs)(r, as_float(best));
    }
  }
  return rows == 0 || cols == 0 || (low >= 0 && high < kFiniteBits);
}

}  // namespace

bool mmsgg_ext::image_row_maxima(const int32_t* data, int64_t rows, int64_t cols, int64_t column, int32_t* out,
                                 GraphPairStep* pairs) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2 && cols - column >= 8) {
    return pairs != nullptr ? image_row_maxima_vector<true>(data, rows, cols, column, out, pairs)
                            : image_row_maxima_vector<false>(data, rows, cols, column, out, nullptr);
  }
#endif
  return pairs != nullptr ? image_row_maxima_scalar<true>(data, rows, cols, column, out, pairs)
                          : image_row_maxima_scalar<false>(data, rows, cols, column, out, nullptr);
}

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
