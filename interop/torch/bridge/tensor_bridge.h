// The tensor bridge between libtorch and lockstep: an at::Tensor seen as a
// lockstep Tensor and back, sharing the memory (no copy) and keeping its
// owner alive.
//
//   at::Tensor w = torch::randn({4, 3});
//   LOCKSTEP_ASSIGN_OR_RETURN(Tensor view, FromTorch(w));  // w's memory, as lockstep's
//   LOCKSTEP_ASSIGN_OR_RETURN(at::Tensor back, ToTorch(view));  // and as libtorch's again
//
// Writing through either side writes the other. A view keeps the memory of
// the other side alive (the at::Tensor's storage, or the lockstep Storage)
// for as long as it lives, however the original goes away.
//
// Both ways need a contiguous (row-major) tensor of a dtype both libraries
// have: f32, f64, f16, bf16, i32, i64, u8. Anything else (a transposed or
// strided view, a sparse or quantized tensor, complex or bool) is refused
// with InvalidArgument naming what came and what to do (.contiguous(),
// .to(torch::kFloat)); nothing is copied silently. The device carries
// over (CPU, or CUDA with its index). Errors libtorch raises (c10::Error)
// come back as a Status: nothing throws across this API.
#ifndef LOCKSTEP_INTEROP_TORCH_BRIDGE_TENSOR_BRIDGE_H_
#define LOCKSTEP_INTEROP_TORCH_BRIDGE_TENSOR_BRIDGE_H_

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace lockstep {

// lockstep's dtype of a libtorch scalar type; InvalidArgument for types
// lockstep lacks (complex, bool, i8, i16, quantized).
absl::StatusOr<DType> DTypeFromTorch(c10::ScalarType type);
c10::ScalarType DTypeToTorch(DType dtype);

// `t`'s memory as a lockstep Tensor of the same shape, dtype and device.
absl::StatusOr<Tensor> FromTorch(const at::Tensor& t);

// `t`'s memory as an at::Tensor of the same shape, dtype and device. An
// undefined `t` is an error; requires_grad is false (wrap it in a
// parameter or call requires_grad_() as needed).
absl::StatusOr<at::Tensor> ToTorch(const Tensor& t);

}  // namespace lockstep

#endif  // LOCKSTEP_INTEROP_TORCH_BRIDGE_TENSOR_BRIDGE_H_
