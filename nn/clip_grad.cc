#include "nn/clip_grad.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/kernels.h"
#include "core/status.h"

namespace lockstep {
namespace {

// The defined gradients, all of one floating dtype (f32 or f64).
absl::StatusOr<std::vector<Tensor>> Gradients(const std::vector<Parameter*>& parameters, const char* op) {
  std::vector<Tensor> grads;
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (parameters[i] == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": parameter ", i, " is null"));
    const Tensor& g = parameters[i]->grad;
    if (!g.defined()) continue;
    if (g.dtype() != DType::kF32 && g.dtype() != DType::kF64) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": gradient of parameter ", i, " is ", g.DebugString(),
                                                     "; f32 and f64 gradients are supported"));
    }
    if (!grads.empty() && g.dtype() != grads.front().dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": gradients of several dtypes (",
                                                     DTypeName(grads.front().dtype()), " and ", DTypeName(g.dtype()),
                                                     "); clip each dtype's parameters separately"));
    }
    grads.push_back(g);
  }
  return grads;
}

// The elements as doubles (a host copy for a device tensor).
absl::StatusOr<std::vector<double>> HostValues(const Tensor& t) {
  if (t.dtype() == DType::kF64) return t.ToVector<double>();
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<float> v, t.ToVector<float>());
  return std::vector<double>(v.begin(), v.end());
}

// ||x||_p summed in f64, rounded once to the gradients' dtype.
double Norm(const std::vector<double>& x, double p, bool f32) {
  double r = 0.0;
  if (std::isinf(p)) {
    for (double v : x)
      r = std::isnan(v) || std::isnan(r) ? std::numeric_limits<double>::quiet_NaN() : std::max(r, std::abs(v));
  } else {
    double s = 0.0;
    if (p == 2.0) {
      for (double v : x) s += v * v;
      r = std::sqrt(s);
    } else if (p == 1.0) {
      for (double v : x) s += std::abs(v);
      r = s;
    } else {
      for (double v : x) s += std::pow(std::abs(v), p);
      r = std::pow(s, 1.0 / p);
    }
  }
  return f32 ? static_cast<double>(static_cast<float>(r)) : r;
}

}  // namespace

absl::StatusOr<double> ClipGradNorm(const std::vector<Parameter*>& parameters, double max_norm,
                                    const ClipGradNormOptions& options) {
  const double p = options.norm_type;
  if (!(p > 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClipGradNorm: norm_type ", p, " is not supported; use a positive order or infinity"));
  }
  if (std::isnan(max_norm)) return absl::InvalidArgumentError("ClipGradNorm: max_norm is NaN");
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<Tensor> grads, Gradients(parameters, "ClipGradNorm"));
  if (grads.empty()) return 0.0;
  const bool f32 = grads.front().dtype() == DType::kF32;
  std::vector<double> norms;
  norms.reserve(grads.size());
  for (const Tensor& g : grads) {
    LOCKSTEP_ASSIGN_OR_RETURN(std::vector<double> values, HostValues(g));
    norms.push_back(Norm(values, p, f32));
  }
  const double total = norms.size() == 1 && std::isinf(p) ? norms[0] : Norm(norms, p, f32);
  if (options.error_if_nonfinite && !std::isfinite(total)) return NonFiniteNormError(p);
  const double coef = ClipCoefficient(total, max_norm, f32);
  LOCKSTEP_RETURN_IF_ERROR(MultiplyGradients(grads, coef));
  return total;
}

absl::Status NonFiniteNormError(double norm_type) {
  const double p = norm_type;
  // PyTorch prints the order as a Python float: "2.0", "inf".
  const std::string order = std::isinf(p)                              ? "inf"
                            : p == std::floor(p) && std::abs(p) < 1e15 ? absl::StrCat(static_cast<int64_t>(p), ".0")
                                                                       : absl::StrCat(p);
  return absl::InvalidArgumentError(absl::StrCat(
      "The total norm of order ", order,
      " for gradients from `parameters` is non-finite, so it cannot be clipped. To disable this error and scale "
      "the gradients by the non-finite norm anyway, set `error_if_nonfinite=False`"));
}

double ClipCoefficient(double total, double max_norm, bool f32) {
  if (f32) {
    const float reciprocal = 1.0f / (static_cast<float>(total) + 1e-6f);
    const float c = reciprocal * static_cast<float>(max_norm);
    return std::isnan(c) ? c : std::min(c, 1.0f);
  }
  const double c = (1.0 / (total + 1e-6)) * max_norm;
  return std::isnan(c) ? c : std::min(c, 1.0);
}

absl::Status MultiplyGradients(const std::vector<Tensor>& grads, double coef) {
  // Scale multiplies f32 by float(coef): exactly PyTorch's g.mul_(coef).
  // Scale refuses a non-finite factor; NaN is applied as PyTorch would.
  for (const Tensor& g : grads) {
    if (std::isfinite(coef)) {
      LOCKSTEP_RETURN_IF_ERROR(Scale(g, coef));
      continue;
    }
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor host, g.To(Device::Cpu()));
    if (g.dtype() == DType::kF32) {
      for (int64_t i = 0; i < host.numel(); ++i) host.data<float>()[i] *= static_cast<float>(coef);
    } else {
      for (int64_t i = 0; i < host.numel(); ++i) host.data<double>()[i] *= coef;
    }
    LOCKSTEP_RETURN_IF_ERROR(g.CopyFrom(host));
  }
  return absl::OkStatus();
}

absl::Status ClipGradValue(const std::vector<Parameter*>& parameters, double clip_value) {
  if (!(clip_value >= 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClipGradValue: clip_value ", clip_value, " must be a number >= 0 (the range is [-v, v])"));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<Tensor> grads, Gradients(parameters, "ClipGradValue"));
  for (const Tensor& g : grads) {
    const bool on_host = g.device().is_cpu();
    Tensor host = g;
    if (!on_host) {
      LOCKSTEP_ASSIGN_OR_RETURN(host, g.To(Device::Cpu()));
    }
    if (g.dtype() == DType::kF32) {
      const float hi = static_cast<float>(clip_value), lo = -hi;
      float* x = host.data<float>();
      for (int64_t i = 0; i < host.numel(); ++i) {
        if (!std::isnan(x[i])) x[i] = std::min(std::max(x[i], lo), hi);
      }
    } else {
      double* x = host.data<double>();
      for (int64_t i = 0; i < host.numel(); ++i) {
        if (!std::isnan(x[i])) x[i] = std::min(std::max(x[i], -clip_value), clip_value);
      }
    }
    if (!on_host) LOCKSTEP_RETURN_IF_ERROR(g.CopyFrom(host));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
