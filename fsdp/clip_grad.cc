#include "fsdp/clip_grad.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace lockstep {
namespace {

// |v|^p's contribution to a parameter's p-sum (or its max for p = inf).
double Term(double v, double p) {
  if (p == 2.0) return v * v;
  if (p == 1.0 || std::isinf(p)) return std::abs(v);
  return std::pow(std::abs(v), p);
}

// A p-sum finished into the norm, as ClipGradNorm finishes it, rounded to f32.
double Finish(double s, double p) {
  const double r = std::isinf(p) || p == 1.0 ? s : p == 2.0 ? std::sqrt(s) : std::pow(s, 1.0 / p);
  return static_cast<double>(static_cast<float>(r));
}

}  // namespace

absl::StatusOr<double> ClipShardedGradNorm(ShardView& fsdp, double max_norm, const ClipGradNormOptions& options) {
  const double p = options.norm_type;
  if (!(p > 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClipShardedGradNorm: norm_type ", p, " is not supported; use a positive order or infinity"));
  }
  if (std::isnan(max_norm)) return absl::InvalidArgumentError("ClipShardedGradNorm: max_norm is NaN");
  const bool inf = std::isinf(p);
  const int rank = fsdp.comm().rank();
  std::map<std::string, size_t> index;
  for (const std::string& name : fsdp.parameter_names()) index.emplace(name, index.size());
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor sums, Tensor::Zeros({static_cast<int64_t>(index.size())}, DType::kF64));
  double* sum = sums.data<double>();
  std::vector<NamedParameter> shards = fsdp.ShardParameters();
  std::vector<Tensor> grads;
  for (size_t u = 0; u < shards.size(); ++u) {
    const Tensor& grad = shards[u].parameter->grad;
    if (!grad.defined()) continue;
    Tensor host = grad;
    if (!grad.device().is_cpu()) {
      LOCKSTEP_ASSIGN_OR_RETURN(host, grad.To(Device::Cpu()));
    }
    grads.push_back(grad);
    const float* g = host.data<float>();
    const FlatShardLayout& layout = fsdp.layout(u);
    const std::vector<std::pair<std::string, Shape>> params = fsdp.unit_parameters(u);
    for (size_t i = 0; i < params.size(); ++i) {
      const auto [begin, end] = layout.ParameterRange(i, rank);
      const int64_t start = layout.offsets[i] + begin - rank * layout.shard;
      double& s = sum[index.at(params[i].first)];
      for (int64_t j = 0; j < end - begin; ++j) {
        const double t = Term(g[start + j], p);
        s = inf ? (std::isnan(t) || std::isnan(s) ? t + s : std::max(s, t)) : s + t;
      }
    }
  }
  LOCKSTEP_RETURN_IF_ERROR(fsdp.comm().AllReduce(sums, inf ? ReduceOp::kMax : ReduceOp::kSum)->Wait());
  // The norm of the per-parameter norms, as ClipGradNorm takes it.
  double total = 0;
  if (inf) {
    for (size_t k = 0; k < index.size(); ++k) {
      const double n = Finish(sum[k], p);
      total = std::isnan(n) || std::isnan(total) ? std::numeric_limits<double>::quiet_NaN() : std::max(total, n);
    }
  } else {
    double s = 0;
    for (size_t k = 0; k < index.size(); ++k) s += Term(Finish(sum[k], p), p);
    total = Finish(s, p);
  }
  if (options.error_if_nonfinite && !std::isfinite(total)) return NonFiniteNormError(p);
  LOCKSTEP_RETURN_IF_ERROR(MultiplyGradients(grads, ClipCoefficient(total, max_norm, /*f32=*/true)));
  return total;
}

}  // namespace lockstep
