// Recall counts from first-hit ranks (functional/recall.py), each in one pass over the GT relations:
//   * hit_counts: per key (an image, a bootstrap unit, ...) and rank limit the relations hit (hits_per_k_columns);
//   * predicate_quotient_sums: the summary's per-predicate recall sums (per_predicate_recalls, average='image').
#include "common.h"

using namespace mmsgg_ext;

namespace {

// hits[cell_of[g] * stride + offset + j] += rank[g] < limits[j] for every relation g and limit j.
template <typename T>
void count_cell_hits(const at::Tensor& rank, const std::vector<int32_t>& cell_of, const std::vector<int64_t>& limits,
                     int64_t stride, int64_t offset, std::vector<int32_t>& hits) {
  const T* r = rank.data_ptr<T>();
  const int64_t n = static_cast<int64_t>(cell_of.size());
  const int64_t m = static_cast<int64_t>(limits.size());
  for (int64_t g = 0; g < n; ++g) {
    const int64_t value = r[g];
    int32_t* row = hits.data() + static_cast<int64_t>(cell_of[g]) * stride + offset;
    for (int64_t j = 0; j < m; ++j) {
      row[j] += value < limits[j];
    }
  }
}

void check_ranks(const std::vector<at::Tensor>& ranks, int64_t n, const char* kernel) {
  for (size_t c = 0; c < ranks.size(); ++c) {
    const at::Tensor& rank = ranks[c];
    TORCH_CHECK(rank.device().is_cpu() && rank.dim() == 1 && rank.numel() == n && rank.is_contiguous() &&
                    (rank.scalar_type() == at::kShort || rank.scalar_type() == at::kInt ||
                     rank.scalar_type() == at::kLong),
                kernel, ": rank column ", c, " must be a contiguous int16/32/64 CPU tensor of ", n, " entries");
  }
}

void check_keys(const at::Tensor& key, int64_t size, const char* kernel) {
  TORCH_CHECK(key.device().is_cpu() && key.scalar_type() == at::kLong && key.dim() == 1 && key.is_contiguous(),
              kernel, ": the keys must be a contiguous 1-D int64 CPU tensor");
  const int64_t* k = key.data_ptr<int64_t>();
  bool inside = true;
  for (int64_t g = 0; g < key.numel(); ++g) {
    inside &= k[g] >= 0 && k[g] < size;
  }
  TORCH_CHECK(inside, kernel, ": a key is outside [0, ", size, ")");
}

// count_cell_hits of one rank column, its dtype dispatched once.
void hits_of_column(const at::Tensor& rank, const std::vector<int32_t>& cell_of, const std::vector<int64_t>& limits,
                    int64_t stride, int64_t offset, std::vector<int32_t>& hits) {
  switch (rank.scalar_type()) {
    case at::kShort:
      count_cell_hits<int16_t>(rank, cell_of, limits, stride, offset, hits);
      break;
    case at::kInt:
      count_cell_hits<int32_t>(rank, cell_of, limits, stride, offset, hits);
      break;
    default:
      count_cell_hits<int64_t>(rank, cell_of, limits, stride, offset, hits);
  }
}

}  // namespace

// [L, size] int64: out[j, c] counts the relations g with key[g] = c and rank[g] < limits[j] (one bincount of the
// keys of the relations hit per limit). key[g] in [0, size).
at::Tensor hit_counts(const at::Tensor& key, const at::Tensor& rank, const std::vector<int64_t>& limits,
                      int64_t size) {
  TORCH_CHECK(size >= 0 && size < (int64_t(1) << 31), "hit_counts: size must be in [0, 2^31)");
  check_keys(key, size, "hit_counts");
  check_ranks({rank}, key.numel(), "hit_counts");
  const int64_t* k = key.data_ptr<int64_t>();
  std::vector<int32_t> cell_of(k, k + key.numel());
  const int64_t stride = static_cast<int64_t>(limits.size());
  std::vector<int32_t> hits(size * stride, 0);
  hits_of_column(rank, cell_of, limits, stride, 0, hits);
  at::Tensor out = at::empty({stride, size}, at::kLong);
  int64_t* o = out.data_ptr<int64_t>();
  for (int64_t j = 0; j < stride; ++j) {
    for (int64_t c = 0; c < size; ++c) {
      o[j * size + c] = hits[c * stride + j];
    }
  }
  return out;
}

// (sums [L, P] float64, images [P] int64) for the L = sum of len(limits[c]) (rank column c, limit j) pairs, in that
// order: sums[l] is quotient.view(num_images, P).sum(0) of the table holding, in each cell (i, p) with a GT relation,
// (its relations with rank < limit) / (its relations) as float64 (0 elsewhere), the very reduction torch runs on the
// same table (so the sums are torch's, bit for bit); images[p] counts the images with a GT relation of predicate p.
// key[g] = image * P + predicate of relation g, in [0, num_images * P).
std::tuple<at::Tensor, at::Tensor> predicate_quotient_sums(const at::Tensor& key, const std::vector<at::Tensor>& ranks,
                                                           const std::vector<std::vector<int64_t>>& limits,
                                                           int64_t num_images, int64_t num_predicates) {
  TORCH_CHECK(num_images >= 1 && num_predicates >= 1, "predicate_quotient_sums: needs images and predicates");
  TORCH_CHECK(ranks.size() == limits.size(), "predicate_quotient_sums: one list of limits per rank column");
  const int64_t n = key.numel();
  const int64_t size = num_images * num_predicates;
  TORCH_CHECK(size < (int64_t(1) << 31), "predicate_quotient_sums: too many (image, predicate) cells");
  check_keys(key, size, "predicate_quotient_sums");
  check_ranks(ranks, n, "predicate_quotient_sums");
  int64_t stride = 0;
  for (const auto& column : limits) {
    stride += static_cast<int64_t>(column.size());
  }
  // the count of each cell, then (cells with a relation) its index among those cells, ascending
  const int64_t* k = key.data_ptr<int64_t>();
  std::vector<int32_t> slot(size, 0);
  for (int64_t g = 0; g < n; ++g) {
    ++slot[k[g]];
  }
  at::Tensor images = at::zeros({num_predicates}, at::kLong);
  int64_t* per_predicate = images.data_ptr<int64_t>();
  std::vector<int64_t> cells(n + 1);  // (written without a branch: a cell with relations advances the count)
  std::vector<int32_t> counts(n + 1);
  int64_t num_cells = 0;
  for (int64_t c = 0, p = 0; c < size; ++c) {
    const int32_t count = slot[c];
    const int64_t held = count != 0;
    cells[num_cells] = c;
    counts[num_cells] = count;
    slot[c] = static_cast<int32_t>(num_cells);  // (read back only for cells with relations)
    per_predicate[p] += held;
    num_cells += held;
    p = p + 1 == num_predicates ? 0 : p + 1;
  }
  std::vector<int32_t> cell_of(n);
  for (int64_t g = 0; g < n; ++g) {
    cell_of[g] = slot[k[g]];
  }
  std::vector<int32_t> hits(num_cells * stride, 0);
  for (size_t c = 0, offset = 0; c < ranks.size(); offset += limits[c].size(), ++c) {
    hits_of_column(ranks[c], cell_of, limits[c], stride, static_cast<int64_t>(offset), hits);
  }
  at::Tensor quotient = at::zeros({size}, at::kDouble);  // one table for every limit: the same cells rewritten
  double* q = quotient.data_ptr<double>();
  const at::Tensor table = quotient.view({num_images, num_predicates});
  at::Tensor sums = at::empty({stride, num_predicates}, at::kDouble);
  std::vector<int64_t> single, shared;  // the cells of one relation (h / 1 = h exactly: no division), the others
  for (int64_t i = 0; i < num_cells; ++i) {
    (counts[i] == 1 ? single : shared).push_back(i);
  }
  for (int64_t l = 0; l < stride; ++l) {
    for (const int64_t i : single) {
      q[cells[i]] = static_cast<double>(hits[i * stride + l]);
    }
    for (const int64_t i : shared) {
      q[cells[i]] = static_cast<double>(hits[i * stride + l]) / static_cast<double>(counts[i]);
    }
    sums.select(0, l).copy_(table.sum(at::IntArrayRef{0}));
  }
  return {sums, images};
}
