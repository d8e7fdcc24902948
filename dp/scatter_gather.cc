#include "dp/scatter_gather.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace lockstep {
namespace {

// Elements before and after `dim` (the tensor is [outer, size(dim), inner]).
struct Layout {
  int64_t outer = 1;
  int64_t inner = 1;
};

Layout LayoutAround(const Shape& shape, int64_t dim) {
  Layout l;
  for (int64_t d = 0; d < dim; ++d) l.outer *= shape[d];
  for (int64_t d = dim + 1; d < static_cast<int64_t>(shape.size()); ++d) l.inner *= shape[d];
  return l;
}

absl::Status CheckDim(const char* op, const Tensor& t, int64_t dim) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": undefined tensor"));
  if (t.dim() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", t.DebugString(), " is 0-d; there is no dimension to split"));
  }
  if (dim < 0 || dim >= t.dim()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": dim ", dim, " is out of range for ", t.DebugString()));
  }
  return absl::OkStatus();
}

// Copies rows [start, start + size) of `input` along `dim` into a new tensor
// on `device`, or returns a view when that needs no copy.
absl::StatusOr<Tensor> Chunk(const Tensor& input, int64_t dim, int64_t start, int64_t size, Device device) {
  if (dim == 0) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor rows, input.Slice(start, start + size));
    if (device == input.device()) return rows;
    return rows.To(device);
  }
  Shape shape = input.shape();
  const int64_t n = shape[dim];
  shape[dim] = size;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(shape, input.dtype(), device));
  const Layout l = LayoutAround(input.shape(), dim);
  if (size == 0 || l.inner == 0) return out;
  // One contiguous run per outer index; CopyFrom crosses devices.
  for (int64_t o = 0; o < l.outer; ++o) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor dst, out.Flat(o * size * l.inner, size * l.inner));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor src, input.Flat((o * n + start) * l.inner, size * l.inner));
    LOCKSTEP_RETURN_IF_ERROR(dst.CopyFrom(src));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> ChunkSizes(int64_t n, int64_t chunks) {
  if (n < 1 || chunks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ChunkSizes: cannot split ", n, " into ", chunks, " chunks; both must be at least 1"));
  }
  const int64_t size = (n + chunks - 1) / chunks;
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < n; start += size) sizes.push_back(std::min(size, n - start));
  return sizes;
}

absl::StatusOr<std::vector<Tensor>> Scatter(const Tensor& input, absl::Span<const Device> devices, int64_t dim) {
  LOCKSTEP_RETURN_IF_ERROR(CheckDim("Scatter", input, dim));
  if (devices.empty()) return absl::InvalidArgumentError("Scatter: the device list is empty");
  const int64_t n = input.shape()[dim];
  if (n == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Scatter: ", input.DebugString(), " has no elements along dim ", dim));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, ChunkSizes(n, static_cast<int64_t>(devices.size())));
  return ScatterSizes(input, sizes, devices.subspan(0, sizes.size()), dim);
}

absl::StatusOr<std::vector<Tensor>> ScatterSizes(const Tensor& input, absl::Span<const int64_t> sizes,
                                                 absl::Span<const Device> devices, int64_t dim) {
  LOCKSTEP_RETURN_IF_ERROR(CheckDim("ScatterSizes", input, dim));
  if (sizes.size() != devices.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ScatterSizes: ", sizes.size(), " chunk sizes but ", devices.size(), " devices"));
  }
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) return absl::InvalidArgumentError(absl::StrCat("ScatterSizes: negative chunk size ", s));
    total += s;
  }
  if (total != input.shape()[dim]) {
    return absl::InvalidArgumentError(absl::StrCat("ScatterSizes: chunk sizes add up to ", total, " but ",
                                                   input.DebugString(), " has ", input.shape()[dim], " along dim ",
                                                   dim));
  }
  std::vector<Tensor> out;
  out.reserve(sizes.size());
  int64_t start = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor chunk, Chunk(input, dim, start, sizes[i], devices[i]));
    out.push_back(std::move(chunk));
    start += sizes[i];
  }
  return out;
}

absl::StatusOr<Tensor> Gather(absl::Span<const Tensor> chunks, Device device, int64_t dim) {
  if (chunks.empty()) return absl::InvalidArgumentError("Gather: no tensors to gather");
  const Tensor& first = chunks[0];
  LOCKSTEP_RETURN_IF_ERROR(CheckDim("Gather", first, dim));
  Shape shape = first.shape();
  int64_t total = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const Tensor& c = chunks[i];
    bool ok = c.defined() && c.dtype() == first.dtype() && c.dim() == first.dim();
    for (int64_t d = 0; ok && d < c.dim(); ++d) ok = d == dim || c.shape()[d] == shape[d];
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Gather: tensor ", i, " is ", c.defined() ? c.DebugString() : "undefined", "; every tensor must be ",
          DTypeName(first.dtype()), " with shape ", ShapeToString(shape), " except along dim ", dim));
    }
    total += c.shape()[dim];
  }
  shape[dim] = total;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(shape, first.dtype(), device));
  const Layout l = LayoutAround(shape, dim);
  if (l.inner == 0 || l.outer == 0) return out;
  int64_t start = 0;
  for (const Tensor& c : chunks) {
    const int64_t size = c.shape()[dim];
    for (int64_t o = 0; size > 0 && o < l.outer; ++o) {
      // Along dim 0 (outer == 1) this is one copy per chunk.
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor dst, out.Flat((o * total + start) * l.inner, size * l.inner));
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor src, c.Flat(o * size * l.inner, size * l.inner));
      LOCKSTEP_RETURN_IF_ERROR(dst.CopyFrom(src));
    }
    start += size;
  }
  return out;
}

}  // namespace lockstep
