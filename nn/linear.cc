#include "nn/linear.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/kernels.h"
#include "core/status.h"
#include "nn/init.h"
#include "nn/math.h"

namespace lockstep {
namespace {

bool IsComputeDType(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

}  // namespace

absl::StatusOr<std::unique_ptr<Linear>> Linear::Create(const LinearOptions& options, Mt19937& gen) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Linear> layer, Create(options));
  // PyTorch's order: the whole weight, then the bias.
  const double weight_bound = KaimingUniformBound(options.in_features, std::sqrt(5.0));
  LOCKSTEP_RETURN_IF_ERROR(UniformFill(layer->weight_.value, -weight_bound, weight_bound, gen));
  if (options.bias) {
    const double bound = options.in_features > 0 ? 1.0 / std::sqrt(static_cast<double>(options.in_features)) : 0.0;
    LOCKSTEP_RETURN_IF_ERROR(UniformFill(layer->bias_.value, -bound, bound, gen));
  }
  return layer;
}

absl::StatusOr<std::unique_ptr<Linear>> Linear::Create(const LinearOptions& options) {
  if (options.in_features < 0 || options.out_features < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Linear: features must be >= 0, got in=", options.in_features, " out=", options.out_features));
  }
  if (!IsComputeDType(options.compute_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Linear: compute dtype must be f32, f16 or bf16, got ", DTypeName(options.compute_dtype)));
  }
  std::unique_ptr<Linear> layer(new Linear(options));
  LOCKSTEP_ASSIGN_OR_RETURN(layer->weight_.value,
                            Tensor::Zeros({options.out_features, options.in_features}, DType::kF32, options.device));
  layer->RegisterParameter("weight", &layer->weight_);
  if (options.bias) {
    LOCKSTEP_ASSIGN_OR_RETURN(layer->bias_.value, Tensor::Zeros({options.out_features}, DType::kF32, options.device));
    layer->RegisterParameter("bias", &layer->bias_);
  }
  return layer;
}

absl::Status Linear::set_compute_dtype(DType dtype) {
  if (!IsComputeDType(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Linear::set_compute_dtype: f32, f16 or bf16, got ", DTypeName(dtype)));
  }
  options_.compute_dtype = dtype;
  ones_ = Tensor();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Module>> Linear::NewLike(Device device) const {
  LinearOptions options = options_;
  options.device = device;
  // Values are overwritten by CloneTo.
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Linear> copy, Create(options));
  return std::unique_ptr<Module>(std::move(copy));
}

absl::StatusOr<Tensor> Linear::OnesColumn(int64_t rows) {
  const DType dtype = options_.compute_dtype;
  if (ones_.defined() && ones_.shape()[0] == rows && ones_.dtype() == dtype) return ones_;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor ones32, Tensor::Empty({rows, 1}, DType::kF32));
  std::fill(ones32.data<float>(), ones32.data<float>() + rows, 1.0f);
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor ones, CastTo(ones32, dtype));
  LOCKSTEP_ASSIGN_OR_RETURN(ones_, ones.To(options_.device));
  return ones_;
}

absl::StatusOr<Tensor> Linear::Forward(const Tensor& input) {
  const Device device = weight_.value.device();
  if (!input.defined() || input.dim() != 2 || input.shape()[1] != options_.in_features || input.device() != device ||
      !(input.dtype() == DType::kF32 || input.dtype() == DType::kF16 || input.dtype() == DType::kBF16)) {
    return absl::InvalidArgumentError(absl::StrCat("Linear(", options_.in_features, " -> ", options_.out_features,
                                                   ").Forward: expected a [batch, ", options_.in_features,
                                                   "] floating tensor on ", device.ToString(), ", got ",
                                                   input.defined() ? input.DebugString() : "undefined"));
  }
  const DType dtype = options_.compute_dtype;
  const int64_t rows = input.shape()[0];
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor x, CastTo(input, dtype));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor w, CastTo(weight_.value, dtype));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor y, Tensor::Empty({rows, options_.out_features}, dtype, device));
  float beta = 0.0f;
  if (options_.bias) {
    // y = 1 b^T, then y = x W^T + y: the bias joins the f32 sum before the
    // one rounding, as addmm does.
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor ones, OnesColumn(rows));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor b, CastTo(bias_.value, dtype));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor b_row, b.Reshape({1, options_.out_features}));
    LOCKSTEP_RETURN_IF_ERROR(Gemm(ones, false, b_row, false, y));
    beta = 1.0f;
  }
  LOCKSTEP_RETURN_IF_ERROR(Gemm(x, false, w, true, y, 1.0f, beta));
  saved_input_ = x;
  saved_weight_ = w;
  saved_input_dtype_ = input.dtype();
  return y;
}

absl::StatusOr<Tensor> Linear::BackwardImpl(const Tensor& grad_output, bool input_grad, const ParameterReadyFn& ready) {
  if (!saved_input_.defined()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Linear(", options_.in_features, " -> ", options_.out_features,
                     ").Backward: no pending Forward (each Backward consumes the last Forward; call Forward "
                     "first)"));
  }
  const Tensor x = std::exchange(saved_input_, Tensor());
  const Tensor w = std::exchange(saved_weight_, Tensor());
  const int64_t rows = x.shape()[0];
  if (!grad_output.defined() || grad_output.dim() != 2 || grad_output.shape()[0] != rows ||
      grad_output.shape()[1] != options_.out_features || grad_output.device() != x.device()) {
    return absl::InvalidArgumentError(absl::StrCat("Linear.Backward: expected a gradient of shape [", rows, ", ",
                                                   options_.out_features, "] on ", x.device().ToString(), ", got ",
                                                   grad_output.defined() ? grad_output.DebugString() : "undefined"));
  }
  const DType dtype = options_.compute_dtype;
  const Device device = x.device();
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor g, CastTo(grad_output, dtype));
  // Reverse registration order: bias, then weight, then the input.
  if (options_.bias && bias_.requires_grad) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor ones, OnesColumn(rows));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor gb, Tensor::Empty({1, options_.out_features}, dtype, device));
    LOCKSTEP_RETURN_IF_ERROR(Gemm(ones, true, g, false, gb));
    LOCKSTEP_RETURN_IF_ERROR(AccumulateGrad(bias_, gb, ready));
  }
  if (!weight_.requires_grad) {
    // Frozen: no gradient to compute.
  } else if (dtype == DType::kF32 && weight_.grad.defined()) {
    // Accumulate in the GEMM (beta = 1): no temporary, no extra pass.
    LOCKSTEP_RETURN_IF_ERROR(Gemm(g, true, x, false, weight_.grad, 1.0f, 1.0f));
    LOCKSTEP_RETURN_IF_ERROR(GradReady(weight_, ready));
  } else {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor gw, Tensor::Empty(w.shape(), dtype, device));
    LOCKSTEP_RETURN_IF_ERROR(Gemm(g, true, x, false, gw));
    LOCKSTEP_RETURN_IF_ERROR(AccumulateGrad(weight_, gw, ready));
  }
  if (!input_grad) return Tensor();
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor gx, Tensor::Empty(x.shape(), dtype, device));
  LOCKSTEP_RETURN_IF_ERROR(Gemm(g, false, w, false, gx));
  return CastTo(gx, saved_input_dtype_);
}

}  // namespace lockstep
