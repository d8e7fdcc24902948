#include "core/tensor.h"

#include <cstdio>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"

namespace lockstep {

absl::StatusOr<int64_t> ShapeNumel(absl::Span<const int64_t> shape) {
  int64_t numel = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t d = shape[i];
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeToString(shape), ": dimension ", i, " is negative (", d, ")"));
    }
    if (d != 0 && numel > std::numeric_limits<int64_t>::max() / d) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeToString(shape), " has too many elements for int64"));
    }
    numel *= d;
  }
  return numel;
}

std::string ShapeToString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<Tensor> Tensor::Empty(Shape shape, DType dtype, Device device, bool pinned) {
  LOCKSTEP_ASSIGN_OR_RETURN(int64_t numel, ShapeNumel(shape));
  const size_t size = DTypeSize(dtype);
  if (static_cast<uint64_t>(numel) > std::numeric_limits<size_t>::max() / size) {
    return absl::InvalidArgumentError(
        absl::StrCat("Tensor::Empty: ", ShapeToString(shape), " x ", DTypeName(dtype), " is too large"));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(std::shared_ptr<Storage> storage,
                            Storage::Allocate(static_cast<size_t>(numel) * size, device, pinned));
  return Tensor(std::move(storage), 0, std::move(shape), numel, dtype);
}

absl::StatusOr<Tensor> Tensor::Zeros(Shape shape, DType dtype, Device device) {
  const Device host = device.is_cpu() ? device : Device::Cpu();
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Empty(std::move(shape), dtype, host));
  if (t.nbytes() > 0) std::memset(t.raw_data(), 0, t.nbytes());
  if (device.is_cpu()) return t;
  return t.To(device);
}

absl::Status Tensor::SetZero() const {
  if (!defined()) return absl::FailedPreconditionError("Tensor::SetZero on an undefined tensor");
  if (nbytes() == 0) return absl::OkStatus();
  if (device().is_cpu()) {
    std::memset(raw_data(), 0, nbytes());
    return absl::OkStatus();
  }
  return cuda::Zero(raw_data(), nbytes(), device().index(), nullptr);
}

absl::StatusOr<Tensor> Tensor::Slice(int64_t start, int64_t end) const {
  if (!defined()) return absl::FailedPreconditionError("Tensor::Slice on an undefined tensor");
  if (shape_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("Tensor::Slice(", start, ", ", end,
                                                   "): a 0-dimensional tensor has no rows; ", "Reshape it first"));
  }
  const int64_t rows = shape_[0];
  if (start < 0 || end < start || end > rows) {
    return absl::OutOfRangeError(absl::StrCat("Tensor::Slice(", start, ", ", end, ") of ", DebugString(),
                                              ": expected 0 <= start <= end <= ", rows, " (the size of dim 0)"));
  }
  const int64_t row_elements = rows == 0 ? 0 : numel_ / rows;
  Shape shape = shape_;
  shape[0] = end - start;
  return Tensor(storage_, offset_ + static_cast<size_t>(start * row_elements) * element_size(), std::move(shape),
                (end - start) * row_elements, dtype_);
}

absl::StatusOr<Tensor> Tensor::FromStorage(std::shared_ptr<Storage> storage, size_t offset, Shape shape, DType dtype) {
  if (storage == nullptr) return absl::InvalidArgumentError("Tensor::FromStorage: null storage");
  LOCKSTEP_ASSIGN_OR_RETURN(const int64_t numel, ShapeNumel(shape));
  const size_t element = DTypeSize(dtype);
  const size_t bytes = static_cast<size_t>(numel) * element;
  if (offset > storage->nbytes() || bytes > storage->nbytes() - offset) {
    return absl::InvalidArgumentError(absl::StrCat("Tensor::FromStorage: ", DTypeName(dtype), ShapeToString(shape),
                                                   " (", bytes, " bytes) at byte offset ", offset,
                                                   " does not fit a storage of ", storage->nbytes(), " bytes"));
  }
  const uintptr_t address = reinterpret_cast<uintptr_t>(storage->data()) + offset;
  if (bytes > 0 && address % element != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Tensor::FromStorage: the first element (address 0x",
                                                   absl::Hex(address), ") is not aligned to its ", element, " bytes (",
                                                   DTypeName(dtype), ")"));
  }
  return Tensor(std::move(storage), offset, std::move(shape), numel, dtype);
}

absl::StatusOr<Tensor> Tensor::Flat(int64_t offset, int64_t count) const {
  if (!defined()) return absl::FailedPreconditionError("Tensor::Flat on an undefined tensor");
  if (offset < 0 || count < 0 || offset > numel_ || count > numel_ - offset) {
    return absl::OutOfRangeError(absl::StrCat("Tensor::Flat(offset=", offset, ", count=", count, ") of ", DebugString(),
                                              ": expected 0 <= offset and ", "offset + count <= ", numel_,
                                              " elements"));
  }
  return Tensor(storage_, offset_ + static_cast<size_t>(offset) * element_size(), Shape{count}, count, dtype_);
}

absl::StatusOr<Tensor> Tensor::Reshape(Shape shape) const {
  if (!defined()) return absl::FailedPreconditionError("Tensor::Reshape on an undefined tensor");
  int inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (inferred >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("Tensor::Reshape(", ShapeToString(shape), "): only one dimension may be -1"));
      }
      inferred = static_cast<int>(i);
    } else if (shape[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Tensor::Reshape(", ShapeToString(shape), "): dimension ", i, " is negative"));
    } else {
      LOCKSTEP_ASSIGN_OR_RETURN(known, ShapeNumel({known, shape[i]}));
    }
  }
  if (inferred >= 0) {
    if (known == 0 || numel_ % known != 0) {
      return absl::InvalidArgumentError(absl::StrCat("Tensor::Reshape(", ShapeToString(shape), ") of ", DebugString(),
                                                     ": cannot infer the -1 dimension"));
    }
    shape[inferred] = numel_ / known;
    known = numel_;
  }
  if (known != numel_) {
    return absl::InvalidArgumentError(absl::StrCat("Tensor::Reshape(", ShapeToString(shape), ") of ", DebugString(),
                                                   ": the new shape has ", known, " elements, expected ", numel_));
  }
  return Tensor(storage_, offset_, std::move(shape), numel_, dtype_);
}

absl::StatusOr<Tensor> Tensor::ViewAs(DType dtype) const {
  if (!defined()) return absl::FailedPreconditionError("Tensor::ViewAs on an undefined tensor");
  const size_t size = DTypeSize(dtype);
  if (nbytes() % size != 0 || offset_ % size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Tensor::ViewAs(", DTypeName(dtype), ") of ", DebugString(), ": ",
                                                   nbytes(), " bytes at offset ", offset_,
                                                   " are not a whole number of aligned ", size, "-byte elements"));
  }
  const int64_t count = static_cast<int64_t>(nbytes() / size);
  return Tensor(storage_, offset_, Shape{count}, count, dtype);
}

bool Tensor::Overlaps(const Tensor& other) const {
  if (!SharesStorageWith(other) || nbytes() == 0 || other.nbytes() == 0) return false;
  return offset_ < other.offset_ + other.nbytes() && other.offset_ < offset_ + nbytes();
}

absl::Status Tensor::CheckCopyArgs(const Tensor& src, const char* operation) const {
  if (!defined() || !src.defined()) {
    return absl::FailedPreconditionError(absl::StrCat(operation, ": undefined tensor"));
  }
  if (src.dtype_ != dtype_) {
    return absl::InvalidArgumentError(absl::StrCat(operation, ": source ", src.DebugString(), " and destination ",
                                                   DebugString(), " differ in dtype; use Cast() to convert"));
  }
  if (src.numel_ != numel_) {
    return absl::InvalidArgumentError(absl::StrCat(operation, ": source ", src.DebugString(), " has ", src.numel_,
                                                   " elements but destination ", DebugString(), " has ", numel_));
  }
  if (Overlaps(src) && offset_ != src.offset_) {
    return absl::InvalidArgumentError(
        absl::StrCat(operation, ": source and destination partially overlap in one storage; copy via a temporary"));
  }
  return absl::OkStatus();
}

absl::Status Tensor::CopyFrom(const Tensor& src) const {
  LOCKSTEP_RETURN_IF_ERROR(CheckCopyArgs(src, "Tensor::CopyFrom"));
  if (nbytes() == 0 || raw_data() == src.raw_data()) return absl::OkStatus();
  if (device().is_cpu() && src.device().is_cpu()) {
    std::memcpy(raw_data(), src.raw_data(), nbytes());
    return absl::OkStatus();
  }
  const int cuda_device = device().is_cuda() ? device().index() : src.device().index();
  return cuda::Copy(raw_data(), src.raw_data(), nbytes(), cuda_device, nullptr);
}

absl::Status Tensor::CopyFromAsync(const Tensor& src, cuda::Stream& stream) const {
  LOCKSTEP_RETURN_IF_ERROR(CheckCopyArgs(src, "Tensor::CopyFromAsync"));
  if (!device().is_cuda() && !src.device().is_cuda()) {
    return absl::InvalidArgumentError("Tensor::CopyFromAsync: both tensors are on the host; use CopyFrom");
  }
  if (nbytes() == 0 || raw_data() == src.raw_data()) return absl::OkStatus();
  return cuda::Copy(raw_data(), src.raw_data(), nbytes(), stream.device(), &stream);
}

absl::StatusOr<Tensor> Tensor::To(Device device, bool pinned) const {
  if (!defined()) return absl::FailedPreconditionError("Tensor::To on an undefined tensor");
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor out, Empty(shape_, dtype_, device, pinned));
  LOCKSTEP_RETURN_IF_ERROR(out.CopyFrom(*this));
  return out;
}

std::string Tensor::DebugString() const {
  if (!defined()) return "Tensor(undefined)";
  return absl::StrCat("Tensor(", DTypeName(dtype_), ShapeToString(shape_), " on ", device().ToString(), ")");
}

void Tensor::AbortDTypeMismatch(DType requested) const {
  std::fprintf(stderr, "lockstep: Tensor::data<%s>() called on %s; use the tensor's dtype\n",
               std::string(DTypeName(requested)).c_str(), DebugString().c_str());
  std::abort();
}

}  // namespace lockstep
