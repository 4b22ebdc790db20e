// Padding per-image tensors into batch tensors: zero-padded rows of any dtype (pad_zero_rows), int64 rows padded with
// a value plus their ranges and lengths (pad_int64_rows), and the [B, width] mask of row lengths (lengths_mask).
#include "common.h"

using namespace mmsgg_ext;

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
