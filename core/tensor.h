// Tensor: a contiguous, typed, shaped view of shared storage on a device.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(Tensor grads, Tensor::Zeros({1000}, DType::kF32));
//   LOCKSTEP_ASSIGN_OR_RETURN(Tensor bucket, grads.Flat(200, 300));  // no copy
//   LOCKSTEP_ASSIGN_OR_RETURN(Tensor rows, batch.Slice(0, 64));      // no copy
//   LOCKSTEP_ASSIGN_OR_RETURN(Tensor on_gpu, grads.To(Device::Cuda(0)));
//   float* p = grads.data<float>();
//
// Every tensor is contiguous (row-major, no strides). Views are tensors that
// share storage with an offset: a range of rows (`Slice`, along dim 0), a flat
// range of elements (`Flat`) and a reshape (`Reshape`). Writing through a view
// writes the original. Copying a Tensor object copies the reference, not the
// data; use `Clone`, `To` or `CopyFrom` for data.
//
// All element access goes through `data<T>()`, which checks T against the
// dtype. Anything that can fail on user input (shapes, ranges, devices,
// sizes) returns a Status naming the operation, what was expected and what
// came. Methods that write data (CopyFrom) are const: they change the
// elements, not the handle, so they work on temporary views.
#ifndef LOCKSTEP_CORE_TENSOR_H_
#define LOCKSTEP_CORE_TENSOR_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/cuda/cuda_runtime.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/storage.h"

namespace lockstep {

using Shape = std::vector<int64_t>;

// Number of elements of `shape`; an error for negative dimensions or overflow.
absl::StatusOr<int64_t> ShapeNumel(absl::Span<const int64_t> shape);

// "[2, 3]".
std::string ShapeToString(absl::Span<const int64_t> shape);

class Tensor {
 public:
  // An undefined tensor (`defined()` is false).
  Tensor() = default;

  // Uninitialized memory. `pinned` asks for page-locked host memory (see
  // core/storage.h); it is ignored for CUDA devices.
  static absl::StatusOr<Tensor> Empty(Shape shape, DType dtype, Device device = Device::Cpu(), bool pinned = false);
  static absl::StatusOr<Tensor> Zeros(Shape shape, DType dtype, Device device = Device::Cpu());

  // A CPU tensor holding a copy of `values` (a vector, array or Span); the
  // shape defaults to {values.size()} and must otherwise have values.size()
  // elements. Spell out T: `Tensor::FromVector<float>(v)`.
  template <typename T>
  static absl::StatusOr<Tensor> FromVector(absl::Span<const T> values, Shape shape = {});

  // A view of `shape` elements of `dtype` at byte `offset` of `storage`
  // (e.g. memory another library owns, Storage::Wrap), sharing it. The
  // bytes must lie inside the storage and the first element be aligned to
  // its size; else InvalidArgument.
  static absl::StatusOr<Tensor> FromStorage(std::shared_ptr<Storage> storage, size_t offset, Shape shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  size_t element_size() const { return DTypeSize(dtype_); }
  size_t nbytes() const { return static_cast<size_t>(numel_) * element_size(); }
  Device device() const { return storage_ ? storage_->device() : Device(); }
  bool is_pinned() const { return storage_ && storage_->pinned(); }
  // Byte offset of this view into its storage.
  size_t storage_offset() const { return offset_; }

  void* raw_data() const {
    return storage_ && storage_->data() ? static_cast<char*>(storage_->data()) + offset_ : nullptr;
  }

  // Typed pointer to the first element. T must match dtype(): a mismatch is a
  // programming error and aborts with a message naming both types.
  template <typename T>
  T* data() const {
    if (DTypeOf<T>::value != dtype_) AbortDTypeMismatch(DTypeOf<T>::value);
    return static_cast<T*>(raw_data());
  }

  // Rows [start, end) along dim 0, sharing storage.
  absl::StatusOr<Tensor> Slice(int64_t start, int64_t end) const;
  // Elements [offset, offset + count) of the flattened tensor as a 1-D view.
  absl::StatusOr<Tensor> Flat(int64_t offset, int64_t count) const;
  // The same elements with another shape (same number of elements); one
  // dimension may be -1 and is then inferred.
  absl::StatusOr<Tensor> Reshape(Shape shape) const;

  // The same bytes seen as another dtype, 1-D (like torch's view(dtype)):
  // nbytes() must be a multiple of the new element size.
  absl::StatusOr<Tensor> ViewAs(DType dtype) const;

  // True when both tensors view the same allocation (not necessarily the same
  // elements).
  bool SharesStorageWith(const Tensor& other) const { return storage_ != nullptr && storage_ == other.storage_; }
  // True when the byte ranges of the two tensors intersect.
  bool Overlaps(const Tensor& other) const;

  // Copies `src`'s elements into this tensor. Both must have the same dtype and
  // number of elements (shapes may differ); devices may differ. Completes
  // before returning.
  absl::Status CopyFrom(const Tensor& src) const;
  // The same, queued on `stream` (one side must be a CUDA tensor); returns at
  // once. Keep both tensors alive until the stream is synchronized (freed
  // memory is handed out again at once: core/storage.h). Use pinned
  // host memory for a truly asynchronous host<->device copy.
  absl::Status CopyFromAsync(const Tensor& src, cuda::Stream& stream) const;

  // Sets every element to zero (all bits clear) in place, on any device.
  absl::Status SetZero() const;

  // A new tensor with a copy of the data on `device`.
  absl::StatusOr<Tensor> To(Device device, bool pinned = false) const;
  absl::StatusOr<Tensor> Clone() const { return To(device()); }

  // The elements as a vector (copies from the device if needed); T must match.
  template <typename T>
  absl::StatusOr<std::vector<T>> ToVector() const;

  // "Tensor(f32[2, 3] on cpu:0)".
  std::string DebugString() const;

 private:
  Tensor(std::shared_ptr<Storage> storage, size_t offset, Shape shape, int64_t numel, DType dtype)
      : storage_(std::move(storage)), offset_(offset), shape_(std::move(shape)), numel_(numel), dtype_(dtype) {}

  absl::Status CheckCopyArgs(const Tensor& src, const char* operation) const;
  [[noreturn]] void AbortDTypeMismatch(DType requested) const;

  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
};

template <typename T>
absl::StatusOr<Tensor> Tensor::FromVector(absl::Span<const T> values, Shape shape) {
  if (shape.empty()) shape = {static_cast<int64_t>(values.size())};
  absl::StatusOr<Tensor> t = Empty(shape, DTypeOf<T>::value);
  if (!t.ok()) return t.status();
  if (t->numel() != static_cast<int64_t>(values.size())) {
    return absl::InvalidArgumentError("Tensor::FromVector: shape " + ShapeToString(shape) + " has " +
                                      std::to_string(t->numel()) + " elements but " + std::to_string(values.size()) +
                                      " values were given");
  }
  if (!values.empty()) std::memcpy(t->raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}

template <typename T>
absl::StatusOr<std::vector<T>> Tensor::ToVector() const {
  if (DTypeOf<T>::value != dtype_) {
    return absl::InvalidArgumentError("Tensor::ToVector: asked for " + std::string(DTypeName(DTypeOf<T>::value)) +
                                      " elements of a " + std::string(DTypeName(dtype_)) + " tensor");
  }
  std::vector<T> out(static_cast<size_t>(numel_));
  if (numel_ == 0) return out;
  if constexpr (std::is_same_v<T, bool>) {
    // std::vector<bool> packs bits: element by element.
    absl::StatusOr<Tensor> host = device().is_cpu() ? *this : To(Device::Cpu());
    if (!host.ok()) return host.status();
    const bool* p = static_cast<const bool*>(host->raw_data());
    for (int64_t i = 0; i < numel_; ++i) out[static_cast<size_t>(i)] = p[i];
    return out;
  } else {
    if (device().is_cpu()) {
      std::memcpy(out.data(), raw_data(), nbytes());
      return out;
    }
    absl::Status s = cuda::Copy(out.data(), raw_data(), nbytes(), device().index(), nullptr);
    if (!s.ok()) return s;
    return out;
  }
}

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_TENSOR_H_
