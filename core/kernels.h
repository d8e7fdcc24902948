// Elementwise kernels used by the collectives, DDP and the optimizers, for
// every dtype, on CPU and CUDA tensors alike (dispatch on the device).
//
//   // grad = grad + other (in place), f16 accumulated in f32, rounded once:
//   LOCKSTEP_RETURN_IF_ERROR(ReduceInto(ReduceOp::kSum, other, grad));
//   // out = max(a, b, c):
//   LOCKSTEP_RETURN_IF_ERROR(Reduce(ReduceOp::kMax, {a, b, c}, out));
//   LOCKSTEP_RETURN_IF_ERROR(Scale(grad, 1.0 / world_size));
//   LOCKSTEP_RETURN_IF_ERROR(Cast(fp32_master, fp16_copy));
//   LOCKSTEP_ASSIGN_OR_RETURN(bool finite, AllFinite(grad));
//
// Semantics (see core/internal/elementwise.h for the exact arithmetic):
//   * f16 and bf16 are accumulated in f32 over all inputs and rounded once;
//     f32 in f32, f64 in f64.
//   * Integer SUM and PROD wrap around (two's complement), as in PyTorch.
//   * MIN and MAX propagate NaN.
//   * AVG is SUM over the inputs divided by their number (integers truncate).
// Outputs are `const Tensor&` because a Tensor is a handle: the data is
// written through it, so a temporary view works (`Cast(a, *b.Flat(0, n))`).
// All tensors of one call must have the same dtype (except Cast), the same
// number of elements and the same device; violations are InvalidArgument
// errors that name the operation and the offending tensor, and nothing is
// written. The output may be one of the inputs (exactly, not partially).
#ifndef LOCKSTEP_CORE_KERNELS_H_
#define LOCKSTEP_CORE_KERNELS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/reduce_op.h"
#include "core/tensor.h"

namespace lockstep {

// out = op(inputs[0], ..., inputs[n-1]) elementwise; n >= 1.
absl::Status Reduce(ReduceOp op, absl::Span<const Tensor> inputs, const Tensor& out);

// dst = op(dst, src).
absl::Status ReduceInto(ReduceOp op, const Tensor& src, const Tensor& dst);

// out = op(first, second) over `count` elements of `dtype` in host memory
// that is not a tensor's (a transport's receive buffer), each pointer
// aligned to the element size; `out` may be `first` or `second`, or must
// not overlap them. For the collectives' hot loops: Reduce on tensors is
// the checked interface.
absl::Status ReduceHost(ReduceOp op, DType dtype, const void* first, const void* second, void* out, int64_t count);

// t *= factor. Floating types compute in their accumulator type and round
// once; integers truncate toward zero and saturate. `factor` must be finite.
absl::Status Scale(const Tensor& t, double factor);

// t /= divisor, elementwise, exactly as PyTorch's t.div_(divisor): floating
// types divide in their accumulator type and round once (f16/bf16 via f32);
// integers truncate toward zero. 1 <= divisor < 2^31. The AVG of the
// collectives uses it (PyTorch's DDP averages with grad.div_(world_size)).
absl::Status Divide(const Tensor& t, int64_t divisor);

// dst = src converted, between f32, f64, f16 and bf16 (round to nearest even,
// exactly once, also from f64 to f16/bf16).
absl::Status Cast(const Tensor& src, const Tensor& dst);

// False if any element is Inf or NaN (always true for integer dtypes).
absl::StatusOr<bool> AllFinite(const Tensor& t);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_KERNELS_H_
