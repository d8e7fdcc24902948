#include "interop/torch/bridge/tensor_bridge.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/Exception.h>

#include <exception>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace lockstep {
namespace {

std::string Describe(const at::Tensor& t) {
  return absl::StrCat(std::string(c10::toString(t.scalar_type())), " tensor of sizes ",
                      std::string(c10::str(t.sizes())), " on ", t.device().str());
}

absl::StatusOr<Device> DeviceFromTorch(const c10::Device& d, const at::Tensor& t) {
  if (d.is_cpu()) return Device::Cpu();
  if (d.is_cuda()) return Device::Cuda(d.has_index() ? d.index() : 0);
  return absl::InvalidArgumentError(absl::StrCat("FromTorch: a ", Describe(t),
                                                 ": lockstep tensors live on the CPU or a CUDA device; "
                                                 "move it with .to(torch::kCPU) first"));
}

}  // namespace

absl::StatusOr<DType> DTypeFromTorch(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float:
      return DType::kF32;
    case c10::ScalarType::Double:
      return DType::kF64;
    case c10::ScalarType::Half:
      return DType::kF16;
    case c10::ScalarType::BFloat16:
      return DType::kBF16;
    case c10::ScalarType::Int:
      return DType::kI32;
    case c10::ScalarType::Long:
      return DType::kI64;
    case c10::ScalarType::Byte:
      return DType::kU8;
    case c10::ScalarType::Char:
      return DType::kI8;
    case c10::ScalarType::Bool:
      return DType::kBool;
    default:
      return absl::InvalidArgumentError(absl::StrCat("libtorch dtype ", std::string(c10::toString(type)),
                                                     " has no lockstep counterpart (f32, f64, f16, bf16, i32, "
                                                     "i64, u8, i8, bool); convert it with .to(...) first"));
  }
}

c10::ScalarType DTypeToTorch(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return c10::ScalarType::Float;
    case DType::kF64:
      return c10::ScalarType::Double;
    case DType::kF16:
      return c10::ScalarType::Half;
    case DType::kBF16:
      return c10::ScalarType::BFloat16;
    case DType::kI32:
      return c10::ScalarType::Int;
    case DType::kI64:
      return c10::ScalarType::Long;
    case DType::kU8:
      return c10::ScalarType::Byte;
    case DType::kI8:
      return c10::ScalarType::Char;
    case DType::kBool:
      return c10::ScalarType::Bool;
  }
  return c10::ScalarType::Undefined;
}

absl::StatusOr<Tensor> FromTorch(const at::Tensor& t) {
  try {
    if (!t.defined()) return absl::InvalidArgumentError("FromTorch: the at::Tensor is undefined");
    if (t.layout() != c10::kStrided || t.is_quantized()) {
      return absl::InvalidArgumentError(
          absl::StrCat("FromTorch: a ", Describe(t), " with layout ", std::string(c10::str(t.layout())),
                       (t.is_quantized() ? " (quantized)" : ""), ": only dense strided tensors can be shared"));
    }
    LOCKSTEP_ASSIGN_OR_RETURN(const DType dtype, DTypeFromTorch(t.scalar_type()));
    if (!t.is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat("FromTorch: a ", Describe(t), " with strides ",
                                                     std::string(c10::str(t.strides())),
                                                     " is not contiguous; lockstep tensors are row-major without "
                                                     "strides: pass t.contiguous() (a copy)"));
    }
    LOCKSTEP_ASSIGN_OR_RETURN(const Device device, DeviceFromTorch(t.device(), t));
    const size_t nbytes = static_cast<size_t>(t.numel()) * t.element_size();
    // The at::Tensor (and with it its storage) lives as long as the Storage.
    std::shared_ptr<const void> owner = std::make_shared<const at::Tensor>(t);
    LOCKSTEP_ASSIGN_OR_RETURN(std::shared_ptr<Storage> storage,
                              Storage::Wrap(nbytes > 0 ? t.data_ptr() : nullptr, nbytes, device, std::move(owner)));
    return Tensor::FromStorage(std::move(storage), 0, Shape(t.sizes().begin(), t.sizes().end()), dtype);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("FromTorch: libtorch raised: ", e.what()));
  }
}

absl::StatusOr<at::Tensor> ToTorch(const Tensor& t) {
  if (!t.defined()) return absl::InvalidArgumentError("ToTorch: the lockstep Tensor is undefined");
  try {
    const Device d = t.device();
    const c10::Device device = d.is_cuda()
                                   ? c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(d.index()))
                                   : c10::Device(c10::DeviceType::CPU);
    const auto options = at::TensorOptions().dtype(DTypeToTorch(t.dtype())).device(device);
    const std::vector<int64_t> sizes(t.shape().begin(), t.shape().end());
    if (t.numel() == 0) return at::empty(sizes, options);  // Nothing to share.
    // The lockstep Tensor (and with it its Storage) lives as long as the
    // at::Tensor's storage: its deleter drops it.
    auto keep = std::make_shared<Tensor>(t);
    return at::from_blob(
        t.raw_data(), sizes, [keep](void*) mutable { keep.reset(); }, options);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("ToTorch: libtorch refused ", t.DebugString(), ": ", e.what()));
  }
}

}  // namespace lockstep
