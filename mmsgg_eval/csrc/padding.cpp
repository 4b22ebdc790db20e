// Padding per-image tensors into batch tensors: zero-padded rows of any dtype (pad_zero_rows), int64 rows padded with
// a value plus their ranges and lengths (pad_int64_rows), float32 rows zero-padded with their value rule
// (pad_float_rows_checked), and the [B, width] mask of row lengths (lengths_mask).
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
  for_images(static_cast<int64_t>(tensors.size()), 16, out.numel(), [&](int64_t begin, int64_t end) {
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

namespace {

// The padded shape [B, W, ...] of B tensors [L_b, ...] (W = max L_b) and the entries of one row (the product of the
// trailing sizes), when every tensor is a CPU tensor of `dtype` with the first one's rank and trailing sizes, laid
// out as the caller reads it (contiguous, or with `strided` of rank 1 or 2 with any strides); nullopt otherwise.
struct PaddedShape {
  std::vector<int64_t> shape;
  int64_t width;
  int64_t row;
};

std::optional<PaddedShape> padded_shape(const std::vector<at::Tensor>& tensors, at::ScalarType dtype, bool strided) {
  const at::Tensor& first = tensors[0];
  int64_t width = 0;
  for (const at::Tensor& t : tensors) {
    if (!t.device().is_cpu() || t.scalar_type() != dtype || t.dim() != first.dim() ||
        !(t.is_contiguous() || (strided && t.dim() <= 2))) {
      return std::nullopt;
    }
    for (int64_t d = 1; d < first.dim(); ++d) {
      if (t.size(d) != first.size(d)) {
        return std::nullopt;
      }
    }
    width = std::max(width, t.size(0));
  }
  PaddedShape out{{static_cast<int64_t>(tensors.size()), width}, width, 1};
  for (int64_t d = 1; d < first.dim(); ++d) {
    out.shape.push_back(first.size(d));
    out.row *= first.size(d);
  }
  return out;
}

}  // namespace

// [B, W, ...] padded with `value` from B int64 CPU tensors [L_b, ...] of one trailing shape (W = max L_b; None
// with pad = false: nothing is copied), each tensor's (min, max) over its entries (0 and -1 for an empty one; None
// with ranges = false: no entry is read) and the lengths L_b [B]; None when the tensors are not all such tensors (the
// caller's general path takes them). The tensors must be contiguous, or with strided = true of rank 1 or 2 with any
// strides (e.g. the columns of one [G, 3] array: read element by element, the same values).
std::optional<std::tuple<std::optional<at::Tensor>, std::optional<at::Tensor>, std::optional<at::Tensor>, at::Tensor>>
pad_int64_rows(const std::vector<at::Tensor>& tensors, int64_t value, bool pad, bool ranges, bool strided) {
  if (tensors.empty()) {
    return std::nullopt;
  }
  const at::Tensor& first = tensors[0];
  if (first.dim() < 1) {
    return std::nullopt;
  }
  const int64_t batch = static_cast<int64_t>(tensors.size());
  const std::optional<PaddedShape> padded = padded_shape(tensors, at::kLong, strided);
  if (!padded) {
    return std::nullopt;
  }
  const std::vector<int64_t>& shape = padded->shape;
  const int64_t width = padded->width, row = padded->row;
  at::Tensor out = pad ? at::empty(shape, at::kLong) : at::Tensor(), lengths = at::empty({batch}, at::kLong);
  at::Tensor low = ranges ? at::empty({batch}, at::kLong) : at::Tensor();
  at::Tensor high = ranges ? at::empty({batch}, at::kLong) : at::Tensor();
  int64_t* out_ptr = pad ? out.data_ptr<int64_t>() : nullptr;
  int64_t* length_ptr = lengths.data_ptr<int64_t>();
  int64_t* low_ptr = ranges ? low.data_ptr<int64_t>() : nullptr;
  int64_t* high_ptr = ranges ? high.data_ptr<int64_t>() : nullptr;
  const int64_t entries = pad || ranges ? batch * std::max<int64_t>(width, 1) * row : batch;  // (else lengths only)
  for_images(batch, 16, entries, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> gathered;  // a strided tensor's entries in row-major order
    for (int64_t b = begin; b < end; ++b) {
      const at::Tensor& t = tensors[b];
      const int64_t n = t.numel();
      const int64_t* src = t.data_ptr<int64_t>();
      if (n > 0 && !t.is_contiguous()) {
        gathered.resize(n);
        const int64_t rows = t.size(0), cols = t.dim() == 2 ? t.size(1) : 1;
        const int64_t row_stride = t.stride(0), col_stride = t.dim() == 2 ? t.stride(1) : 0;
        for (int64_t i = 0; i < rows; ++i) {
          for (int64_t j = 0; j < cols; ++j) {
            gathered[i * cols + j] = src[i * row_stride + j * col_stride];
          }
        }
        src = gathered.data();
      }
      length_ptr[b] = t.size(0);
      if (ranges) {
        int64_t least = n > 0 ? src[0] : 0, most = n > 0 ? src[0] : -1;
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

// (padded [B, W, ...] float32, bad [B] bool, lengths [B]) of B contiguous float32 CPU tensors [L_b, ...] of one
// trailing shape (W = max L_b, zero-padded), with each image's value rule read in the same pass: kind 0 (scores):
// bad where an entry is NaN, inf or < 0; kind 1 (xyxy boxes, trailing shape [4]): bad where a coordinate is NaN or
// inf or x2 - x1 < 0 or y2 - y1 < 0 (the padding zeros pass both rules). None for other tensors (the caller's
// general path pads them and its torch rules decide).
std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> pad_float_rows_checked(
    const std::vector<at::Tensor>& tensors, int64_t kind) {
  if (tensors.empty() || (kind != 0 && kind != 1)) {
    return std::nullopt;
  }
  const at::Tensor& first = tensors[0];
  if (first.dim() < 1 || (kind == 1 && (first.dim() != 2 || first.size(1) != 4))) {
    return std::nullopt;
  }
  const int64_t batch = static_cast<int64_t>(tensors.size());
  const std::optional<PaddedShape> padded = padded_shape(tensors, at::kFloat, false);
  if (!padded) {
    return std::nullopt;
  }
  const std::vector<int64_t>& shape = padded->shape;
  const int64_t width = padded->width, row = padded->row;
  at::Tensor out = at::empty(shape, at::kFloat), bad = at::empty({batch}, at::kBool);
  at::Tensor lengths = at::empty({batch}, at::kLong);
  float* out_ptr = out.data_ptr<float>();
  bool* bad_ptr = bad.data_ptr<bool>();
  int64_t* length_ptr = lengths.data_ptr<int64_t>();
  for_images(batch, 16, batch * std::max<int64_t>(width, 1) * row, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const at::Tensor& t = tensors[b];
      const int64_t n = t.numel();
      const float* src = t.data_ptr<float>();
      // branch-free, so that the compiler vectorises it: |x| < inf is false for NaN and +-inf; -0.0 >= 0 holds
      constexpr float inf = std::numeric_limits<float>::infinity();
      int ok = 1;
      if (kind == 0) {
        for (int64_t i = 0; i < n; ++i) {
          ok &= static_cast<int>(src[i] >= 0.0f) & static_cast<int>(src[i] < inf);
        }
      } else {
        for (int64_t i = 0; i < n; i += 4) {
          const float x1 = src[i], y1 = src[i + 1], x2 = src[i + 2], y2 = src[i + 3];
          ok &= static_cast<int>(std::fabs(x1) < inf) & static_cast<int>(std::fabs(y1) < inf) &
                static_cast<int>(std::fabs(x2) < inf) & static_cast<int>(std::fabs(y2) < inf) &
                static_cast<int>(x2 - x1 >= 0.0f) & static_cast<int>(y2 - y1 >= 0.0f);
        }
      }
      bad_ptr[b] = ok == 0;
      length_ptr[b] = t.size(0);
      float* dst = out_ptr + b * width * row;
      std::copy(src, src + n, dst);
      std::fill(dst + n, dst + width * row, 0.0f);
    }
  });
  return std::make_tuple(out, bad, lengths);
}

// (rows [B], columns [B], every matrix float32, every matrix on the first one's device) of B 2-D tensors, read from
// their metadata in one call (a reader's shape check of the score matrices); None when one is not 2-D.
std::optional<std::tuple<std::vector<int64_t>, std::vector<int64_t>, bool, bool>> matrix_shapes(
    const std::vector<at::Tensor>& tensors) {
  std::vector<int64_t> rows, columns;
  rows.reserve(tensors.size());
  columns.reserve(tensors.size());
  bool float32 = true, one_device = true;
  for (const at::Tensor& t : tensors) {
    if (t.dim() != 2) {
      return std::nullopt;
    }
    rows.push_back(t.size(0));
    columns.push_back(t.size(1));
    float32 = float32 && t.scalar_type() == at::kFloat && t.is_contiguous();  // (as the kernels read them)
    one_device = one_device && t.device() == tensors[0].device();
  }
  return std::make_tuple(rows, columns, float32, one_device);
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
