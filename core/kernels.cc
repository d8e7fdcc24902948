#include "core/kernels.h"

#include <cmath>
#include <vector>

#include "absl/container/inlined_vector.h"

#include "absl/strings/str_cat.h"
#include "core/cpu_kernels.h"
#include "core/cuda/cuda_runtime.h"
#include "core/status.h"

namespace lockstep {
namespace {

absl::Status CheckDefined(const Tensor& t, absl::string_view operation, absl::string_view what) {
  if (!t.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(operation, ": ", what, " is an undefined tensor"));
  }
  return absl::OkStatus();
}

// "Reduce(SUM)": a literal, so the hot path (every ring segment) allocates
// nothing; messages are built only on error.
absl::string_view ReduceName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "Reduce(SUM)";
    case ReduceOp::kAvg:
      return "Reduce(AVG)";
    case ReduceOp::kProd:
      return "Reduce(PROD)";
    case ReduceOp::kMin:
      return "Reduce(MIN)";
    case ReduceOp::kMax:
      return "Reduce(MAX)";
    case ReduceOp::kBand:
      return "Reduce(BAND)";
    case ReduceOp::kBor:
      return "Reduce(BOR)";
    case ReduceOp::kBxor:
      return "Reduce(BXOR)";
  }
  return "Reduce(INVALID)";
}

// The bitwise ops apply to integer and bool elements only (as gloo's).
absl::Status CheckOpForDType(ReduceOp op, DType dtype, absl::string_view operation) {
  if (IsBitwise(op) && !IsIntegral(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(operation, ": ", ReduceOpName(op),
                                                   " applies to integer and bool elements, not ", DTypeName(dtype)));
  }
  if (op == ReduceOp::kAvg && dtype == DType::kBool) {
    return absl::InvalidArgumentError(absl::StrCat(operation,
                                                   ": AVG has no meaning for bool elements; use SUM "
                                                   "(or) or PROD (and)"));
  }
  return absl::OkStatus();
}

// Input `index` must match the output in dtype, element count and device.
absl::Status CheckInput(const Tensor& t, const Tensor& out, absl::string_view operation, size_t index) {
  if (!t.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(operation, ": input ", index, " is an undefined tensor"));
  }
  if (t.dtype() != out.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(
        operation, ": input ", index, " ", t.DebugString(), " has dtype ", DTypeName(t.dtype()), " but the output ",
        out.DebugString(), " has dtype ", DTypeName(out.dtype()), "; Cast() one of them first"));
  }
  if (t.numel() != out.numel()) {
    return absl::InvalidArgumentError(absl::StrCat(operation, ": input ", index, " ", t.DebugString(), " has ",
                                                   t.numel(), " elements but the output ", out.DebugString(), " has ",
                                                   out.numel()));
  }
  if (t.device() != out.device()) {
    return absl::InvalidArgumentError(absl::StrCat(operation, ": input ", index, " is on ", t.device().ToString(),
                                                   " but the output is on ", out.device().ToString(),
                                                   "; move it with Tensor::To() first"));
  }
  // The kernels run elementwise in order, so exact aliasing is fine but a
  // shifted overlap would read already-written elements.
  if (t.Overlaps(out) && t.raw_data() != out.raw_data()) {
    return absl::InvalidArgumentError(
        absl::StrCat(operation, ": input ", index, " partially overlaps the output; use a separate output"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Reduce(ReduceOp op, absl::Span<const Tensor> inputs, const Tensor& out) {
  const absl::string_view operation = ReduceName(op);
  if (!IsValidReduceOp(static_cast<uint8_t>(op))) {
    return absl::InvalidArgumentError(absl::StrCat(operation, ": invalid reduce op value ", static_cast<int>(op)));
  }
  if (inputs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(operation, ": needs at least one input"));
  }
  LOCKSTEP_RETURN_IF_ERROR(CheckDefined(out, operation, "the output"));
  LOCKSTEP_RETURN_IF_ERROR(CheckOpForDType(op, out.dtype(), operation));
  absl::InlinedVector<const void*, 8> pointers;
  for (size_t i = 0; i < inputs.size(); ++i) {
    LOCKSTEP_RETURN_IF_ERROR(CheckInput(inputs[i], out, operation, i));
    pointers.push_back(inputs[i].raw_data());
  }
  if (out.device().is_cuda()) {
    if (inputs.size() > static_cast<size_t>(cuda::kMaxReduceInputs)) {
      return absl::InvalidArgumentError(absl::StrCat(operation, ": ", inputs.size(), " inputs on CUDA; at most ",
                                                     cuda::kMaxReduceInputs, " per call (reduce in groups)"));
    }
    return cuda::Reduce(op, out.dtype(), pointers, out.raw_data(), out.numel(), out.device().index(), nullptr);
  }
  cpu::Reduce(op, out.dtype(), pointers, out.raw_data(), out.numel());
  return absl::OkStatus();
}

absl::Status ReduceHost(ReduceOp op, DType dtype, const void* first, const void* second, void* out, int64_t count) {
  const absl::string_view operation = ReduceName(op);
  if (!IsValidReduceOp(static_cast<uint8_t>(op))) {
    return absl::InvalidArgumentError(absl::StrCat(operation, ": invalid reduce op value ", static_cast<int>(op)));
  }
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat(operation, ": negative count ", count));
  LOCKSTEP_RETURN_IF_ERROR(CheckOpForDType(op, dtype, operation));
  if (count == 0) return absl::OkStatus();
  const uintptr_t size = DTypeSize(dtype);
  for (const void* p : {first, second, static_cast<const void*>(out)}) {
    if (p == nullptr || reinterpret_cast<uintptr_t>(p) % size != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(operation, ": a pointer is null or not aligned to ", DTypeName(dtype), "'s ", size, " bytes"));
    }
  }
  const void* inputs[] = {first, second};
  cpu::Reduce(op, dtype, inputs, out, count);
  return absl::OkStatus();
}

absl::Status ReduceInto(ReduceOp op, const Tensor& src, const Tensor& dst) {
  const Tensor inputs[] = {dst, src};
  return Reduce(op, inputs, dst);
}

absl::Status Scale(const Tensor& t, double factor) {
  LOCKSTEP_RETURN_IF_ERROR(CheckDefined(t, "Scale", "the tensor"));
  if (!std::isfinite(factor)) {
    return absl::InvalidArgumentError(absl::StrCat("Scale: factor ", factor, " is not finite; nothing was changed"));
  }
  if (t.device().is_cuda()) {
    return cuda::Scale(t.dtype(), t.raw_data(), t.numel(), factor, t.device().index(), nullptr);
  }
  cpu::Scale(t.dtype(), t.raw_data(), t.numel(), factor);
  return absl::OkStatus();
}

absl::Status Divide(const Tensor& t, int64_t divisor) {
  LOCKSTEP_RETURN_IF_ERROR(CheckDefined(t, "Divide", "the tensor"));
  if (divisor < 1 || divisor > 0x7fffffff) {
    return absl::InvalidArgumentError(
        absl::StrCat("Divide: divisor ", divisor, " is outside [1, 2^31); nothing was changed"));
  }
  if (t.device().is_cuda()) {
    return cuda::Divide(t.dtype(), t.raw_data(), t.numel(), static_cast<int>(divisor), t.device().index(), nullptr);
  }
  cpu::Divide(t.dtype(), t.raw_data(), t.numel(), static_cast<int>(divisor));
  return absl::OkStatus();
}

absl::Status Cast(const Tensor& src, const Tensor& dst) {
  LOCKSTEP_RETURN_IF_ERROR(CheckDefined(src, "Cast", "the source"));
  LOCKSTEP_RETURN_IF_ERROR(CheckDefined(dst, "Cast", "the destination"));
  if (!IsFloatingPoint(src.dtype()) || !IsFloatingPoint(dst.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat("Cast: from ", DTypeName(src.dtype()), " to ",
                                                   DTypeName(dst.dtype()),
                                                   " is not supported; Cast converts between f32, f64, f16 and bf16"));
  }
  if (src.numel() != dst.numel()) {
    return absl::InvalidArgumentError(absl::StrCat("Cast: source ", src.DebugString(), " has ", src.numel(),
                                                   " elements but destination ", dst.DebugString(), " has ",
                                                   dst.numel()));
  }
  if (src.device() != dst.device()) {
    return absl::InvalidArgumentError(absl::StrCat("Cast: source is on ", src.device().ToString(),
                                                   " but destination is on ", dst.device().ToString(),
                                                   "; move one with Tensor::To() first"));
  }
  if (src.Overlaps(dst) && (src.raw_data() != dst.raw_data() || src.dtype() != dst.dtype())) {
    return absl::InvalidArgumentError("Cast: source and destination overlap; cast into a separate tensor");
  }
  if (dst.device().is_cuda()) {
    return cuda::Cast(src.dtype(), src.raw_data(), dst.dtype(), dst.raw_data(), dst.numel(), dst.device().index(),
                      nullptr);
  }
  cpu::Cast(src.dtype(), src.raw_data(), dst.dtype(), dst.raw_data(), dst.numel());
  return absl::OkStatus();
}

absl::StatusOr<bool> AllFinite(const Tensor& t) {
  LOCKSTEP_RETURN_IF_ERROR(CheckDefined(t, "AllFinite", "the tensor"));
  if (t.device().is_cuda()) {
    return cuda::AllFinite(t.dtype(), t.raw_data(), t.numel(), t.device().index(), nullptr);
  }
  return cpu::AllFinite(t.dtype(), t.raw_data(), t.numel());
}

}  // namespace lockstep
