#include "nn/init.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace lockstep {

absl::Status UniformFill(const Tensor& t, double from, double to, Mt19937& gen) {
  if (!t.defined() || t.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat("UniformFill: expected an f32 tensor, got ", t.defined() ? t.DebugString() : "undefined"));
  }
  if (!std::isfinite(from) || !std::isfinite(to) || from > to) {
    return absl::InvalidArgumentError(absl::StrCat("UniformFill: need finite from <= to, got [", from, ", ", to, ")"));
  }
  const float lo = static_cast<float>(from);
  const float width = static_cast<float>(to) - lo;
  std::vector<float> values(static_cast<size_t>(t.numel()));
  for (float& v : values) {
    const float x = static_cast<float>(gen.Next32() & ((1u << 24) - 1)) * 0x1p-24f;
    v = std::fmaf(x, width, lo);
  }
  if (t.device().is_cpu()) {
    std::copy(values.begin(), values.end(), t.data<float>());
    return absl::OkStatus();
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor host, Tensor::FromVector<float>(values, t.shape()));
  return t.CopyFrom(host);
}

double KaimingUniformBound(int64_t fan_in, double a) {
  if (fan_in <= 0) return 0.0;
  const double gain = std::sqrt(2.0 / (1.0 + std::pow(a, 2)));
  const double std_dev = gain / std::sqrt(static_cast<double>(fan_in));
  return std::sqrt(3.0) * std_dev;
}

}  // namespace lockstep
