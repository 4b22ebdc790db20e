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
// block by block: the (min, max) of a block of rows as one flat run (long vectorised loop), then each row's maximum
// while the block is in cache.
__attribute__((target_clones("avx2", "default")))
bool image_row_maxima(const int32_t* data, int64_t rows, int64_t cols, int64_t column, int32_t* out) {
  constexpr int64_t kBlockRows = 64;
  int32_t low = std::numeric_limits<int32_t>::max();
  int32_t high = std::numeric_limits<int32_t>::min();
  for (int64_t start = 0; start < rows; start += kBlockRows) {
    const int64_t stop = std::min(rows, start + kBlockRows);
    const int32_t* block = data + start * cols;
    for (int64_t i = 0, n = (stop - start) * cols; i < n; ++i) {
      low = std::min(low, block[i]);
      high = std::max(high, block[i]);
    }
    for (int64_t r = start; r < stop; ++r) {
      const int32_t* row = data + r * cols;
      int32_t best = std::numeric_limits<int32_t>::min();
      for (int64_t c = column; c < cols; ++c) {
        best = std::max(best, row[c]);
      }
      out[r] = best;
    }
  }
  return rows == 0 || cols == 0 || (low >= 0 && high < kFiniteBits);
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

struct Entry {
  float value;
  int64_t index;  // r * P + p: row-major position in the image's predicate matrix
};

// descending value; ties in ascending position (a stable sort of the row-major entries)
inline bool ranks_before(const Entry& a, const Entry& b) {
  return a.value > b.value || (a.value == b.value && a.index < b.index);
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

void image_ngc(const float* data, int64_t rows, int64_t cols, int64_t column, const float* best,
               const float* pair_score, const int64_t* top_pairs, int64_t top_length, int64_t k, Workspace& work,
               std::vector<Entry>& listed) {
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
  size_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (!(pair_best[r] >= low)) {
      continue;
    }
    if (listed.size() < count + num_pred) {
      listed.resize(2 * (count + num_pred));
    }
    Entry* out = listed.data();
    const float* row = data + r * cols + column;
    const float weight = pair_score[r];
    for (int64_t p = 0; p < num_pred; ++p) {  // branch-free: each entry written, kept when it reaches low
      const float value = row[p] * weight;
      out[count] = Entry{value, r * num_pred + p};
      count += value >= low;
    }
  }
  listed.resize(count);
  if (static_cast<int64_t>(count) > k) {
    std::nth_element(listed.begin(), listed.begin() + (k - 1), listed.end(), ranks_before);
    listed.resize(k);
  }
  std::sort(listed.begin(), listed.end(), ranks_before);
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
  std::vector<std::vector<Entry>> lists(batch);
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
      pair_ptr[b * length + i] = list[i].index / num_predicates;
      predicate_ptr[b * length + i] = list[i].index % num_predicates;
      valid_ptr[b * length + i] = true;
    }
  }
  return {pair, predicate, valid};
}

std::tuple<at::Tensor, at::Tensor> stable_topk_prefix(const at::Tensor& values, const at::Tensor& count, int64_t k) {
  TORCH_CHECK(values.device().is_cpu() && values.scalar_type() == at::kFloat && values.dim() == 2,
              "stable_topk_prefix: values must be a float32 [B, L] CPU tensor");
  TORCH_CHECK(count.scalar_type() == at::kLong && count.dim() == 1 && count.size(0) == values.size(0),
              "stable_topk_prefix: count must be int64 [B]");
  TORCH_CHECK(k >= 0, "stable_topk_prefix: k must be >= 0");
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
    std::vector<Entry> row;
    for (int64_t b = begin; b < end; ++b) {
      const float* v = values_ptr + b * length;
      row.resize(count_ptr[b]);
      for (int64_t i = 0; i < count_ptr[b]; ++i) {
        row[i] = Entry{v[i] == v[i] ? v[i] : -std::numeric_limits<float>::infinity(), i};  // NaN ranks last
      }
      if (static_cast<int64_t>(row.size()) > width) {
        std::nth_element(row.begin(), row.begin() + (width - 1), row.end(), ranks_before);
        row.resize(width);
      }
      std::sort(row.begin(), row.end(), ranks_before);
      for (size_t i = 0; i < row.size(); ++i) {
        index_ptr[b * width + i] = row[i].index;
        valid_ptr[b * width + i] = true;
      }
    }
  });
  return {index, valid};
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
}
