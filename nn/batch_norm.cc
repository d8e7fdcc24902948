#include "nn/batch_norm.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace lockstep {
namespace {

// A [count] f32 tensor of `value` on `device` (filled on the host).
absl::StatusOr<Tensor> Filled(int64_t count, float value, Device device) {
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::FromVector<float>(
                                          std::vector<float>(static_cast<size_t>(count), value)));
  if (t.device() == device) return t;  // cpu:N with N > 0 included.
  return t.To(device);
}

// The layout of an [N, C, ...] tensor as N x C x S.
struct Planes {
  int64_t n, c, s;
  int64_t count() const { return n * s; }  // values per channel
  int64_t at(int64_t i, int64_t ch, int64_t k) const { return (i * c + ch) * s + k; }
};

Planes PlanesOf(const Shape& shape) {
  int64_t s = 1;
  for (size_t d = 2; d < shape.size(); ++d) s *= shape[d];
  return Planes{shape[0], shape[1], s};
}

// Sums over one contiguous plane, in double, in 8 independent lanes: a
// single accumulator is one dependent add per value (latency-bound); lanes
// let the compiler vectorize. Any order of a double sum of f32 values is
// far inside the f32 result's rounding (the golden tests' bounds allow any).
constexpr int kLanes = 8;

template <typename Term>
double LaneSum(int64_t n, Term term) {
  double acc[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += term(k + j);
  }
  double total = 0.0;
  for (int j = 0; j < kLanes; ++j) total += acc[j];
  for (; k < n; ++k) total += term(k);
  return total;
}

}  // namespace

absl::Status BatchNorm::Init() {
  const BatchNormOptions& o = options_;
  if (o.num_features < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(type_name(), ": num_features must be >= 1, got ", o.num_features));
  }
  if (!(o.eps > 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat(type_name(), ": eps must be > 0, got ", o.eps));
  }
  if (o.momentum && !(*o.momentum >= 0.0 && *o.momentum <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        type_name(), ": momentum must be in [0, 1] (or nullopt for a cumulative average), got ",
        *o.momentum));
  }
  // Registration order is torch's state_dict order.
  if (o.affine) {
    LOCKSTEP_ASSIGN_OR_RETURN(weight_.value, Filled(o.num_features, 1.0f, o.device));
    LOCKSTEP_ASSIGN_OR_RETURN(bias_.value, Tensor::Zeros({o.num_features}, DType::kF32, o.device));
    RegisterParameter("weight", &weight_);
    RegisterParameter("bias", &bias_);
  }
  if (o.track_running_stats) {
    LOCKSTEP_ASSIGN_OR_RETURN(running_mean_, Tensor::Zeros({o.num_features}, DType::kF32, o.device));
    LOCKSTEP_ASSIGN_OR_RETURN(running_var_, Filled(o.num_features, 1.0f, o.device));
    LOCKSTEP_ASSIGN_OR_RETURN(num_batches_tracked_, Tensor::Zeros({}, DType::kI64, o.device));
    RegisterBuffer("running_mean", &running_mean_);
    RegisterBuffer("running_var", &running_var_);
    RegisterBuffer("num_batches_tracked", &num_batches_tracked_);
  }
  return absl::OkStatus();
}

absl::Status BatchNorm::CheckInput(const Tensor& input) const {
  const Device device = options_.device;
  const bool rank_ok = input.defined() && input.dim() >= min_rank_ && input.dim() <= max_rank_;
  if (!rank_ok || input.shape()[1] != options_.num_features || input.dtype() != DType::kF32 ||
      input.device() != device) {
    const std::string ranks = min_rank_ == max_rank_
                                  ? absl::StrCat(min_rank_, "D")
                                  : absl::StrCat(min_rank_, "D or ", max_rank_, "D");
    return absl::InvalidArgumentError(absl::StrCat(
        type_name(), "(", options_.num_features, ").Forward: expected ", ranks,
        " f32 input with ", options_.num_features, " channels in dim 1 on ", device.ToString(),
        ", got ", input.defined() ? input.DebugString() : "undefined"));
  }
  if (!device.is_cpu()) {
    return absl::UnimplementedError(absl::StrCat(
        type_name(), " on ", device.ToString(),
        " is not implemented (CPU only so far); keep this module and its inputs on the CPU"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> BatchNorm::Forward(const Tensor& input) {
  LOCKSTEP_RETURN_IF_ERROR(CheckInput(input));
  const Planes p = PlanesOf(input.shape());
  const bool tracking = options_.track_running_stats;
  const bool batch_stats = is_training() || !tracking;
  // SyncBatchNorm's statistics are the group's, in training mode only (as
  // PyTorch's need_sync; eval without running statistics stays local).
  BatchNormSync* const sync = is_training() ? sync_.get() : nullptr;
  const float* x = input.data<float>();
  // Per channel: the sum of the values, then (once the mean is known) of the
  // squared f32 deviations; with a sync each summed over the group. The
  // count rides along as the last element (exact in double below 2^53).
  std::vector<double> sums(static_cast<size_t>(p.c) + 1, 0.0);
  sums[static_cast<size_t>(p.c)] = static_cast<double>(p.count());
  if (batch_stats) {
    for (int64_t c = 0; c < p.c; ++c) {
      double sum = 0.0;
      for (int64_t i = 0; i < p.n; ++i) {
        const float* plane = x + p.at(i, c, 0);
        sum += LaneSum(p.s, [plane](int64_t k) { return static_cast<double>(plane[k]); });
      }
      sums[static_cast<size_t>(c)] = sum;
    }
    if (sync != nullptr) {
      absl::Status s = sync->AllSum(sums);
      if (!s.ok()) return absl::Status(s.code(), absl::StrCat(type_name(), ".Forward (synchronized statistics): ", s.message()));
    }
  }
  const double count_d = sums[static_cast<size_t>(p.c)];
  const int64_t count = static_cast<int64_t>(count_d);
  if (batch_stats && count <= 1) {
    // PyTorch's _verify_batch_size, checked before any state changes (with
    // a sync, over the group's batch: an empty batch on one rank is fine).
    return absl::InvalidArgumentError(absl::StrCat(
        type_name(), ".Forward: expected more than 1 value per channel when training, got input ",
        ShapeToString(input.shape()), sync != nullptr ? absl::StrCat(" (", count, " over the group)") : ""));
  }
  std::vector<float> mean(static_cast<size_t>(p.c)), invstd(static_cast<size_t>(p.c));
  if (batch_stats) {
    // As PyTorch's CPU kernel: the mean rounded to f32 first, then the sum
    // of squared f32 deviations, both accumulated in double.
    std::vector<double> var_sums(static_cast<size_t>(p.c));
    for (int64_t c = 0; c < p.c; ++c) {
      const float m = static_cast<float>(sums[static_cast<size_t>(c)] / count_d);
      double var_sum = 0.0;
      for (int64_t i = 0; i < p.n; ++i) {
        const float* plane = x + p.at(i, c, 0);
        var_sum += LaneSum(p.s, [plane, m](int64_t k) {
          const float d = plane[k] - m;
          return static_cast<double>(d * d);
        });
      }
      mean[c] = m;
      var_sums[static_cast<size_t>(c)] = var_sum;
    }
    if (sync != nullptr) {
      absl::Status s = sync->AllSum(var_sums);
      if (!s.ok()) return absl::Status(s.code(), absl::StrCat(type_name(), ".Forward (synchronized statistics): ", s.message()));
    }
    double factor = 0.0;
    if (is_training() && tracking) {
      int64_t& tracked = num_batches_tracked_.data<int64_t>()[0];
      ++tracked;
      factor = options_.momentum ? *options_.momentum : 1.0 / static_cast<double>(tracked);
    }
    for (int64_t c = 0; c < p.c; ++c) {
      const double var_sum = var_sums[static_cast<size_t>(c)];
      invstd[c] = static_cast<float>(1.0 / std::sqrt(var_sum / count_d + options_.eps));
      if (is_training() && tracking) {
        float& rm = running_mean_.data<float>()[c];
        float& rv = running_var_.data<float>()[c];
        rm = static_cast<float>(factor * mean[c] + (1.0 - factor) * rm);
        rv = static_cast<float>(factor * (var_sum / (count_d - 1.0)) + (1.0 - factor) * rv);
      }
    }
  } else {
    for (int64_t c = 0; c < p.c; ++c) {
      mean[c] = running_mean_.data<float>()[c];
      invstd[c] =
          static_cast<float>(1.0 / std::sqrt(static_cast<double>(running_var_.data<float>()[c]) +
                                             options_.eps));
    }
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(input.shape(), DType::kF32, input.device()));
  float* y = out.data<float>();
  for (int64_t c = 0; c < p.c; ++c) {
    // y = x * alpha + beta, as PyTorch's transform.
    const float w = options_.affine ? weight_.value.data<float>()[c] : 1.0f;
    const float b = options_.affine ? bias_.value.data<float>()[c] : 0.0f;
    const float alpha = invstd[c] * w;
    const float beta = b - mean[c] * alpha;
    for (int64_t i = 0; i < p.n; ++i) {
      for (int64_t k = 0; k < p.s; ++k) y[p.at(i, c, k)] = x[p.at(i, c, k)] * alpha + beta;
    }
  }
  saved_input_ = input;
  saved_mean_ = std::move(mean);
  saved_invstd_ = std::move(invstd);
  saved_batch_stats_ = batch_stats;
  saved_count_ = count_d;
  saved_synced_ = sync != nullptr;
  return out;
}

absl::StatusOr<Tensor> BatchNorm::BackwardImpl(const Tensor& grad_output, bool input_grad,
                                               const ParameterReadyFn& ready) {
  if (!saved_input_.defined()) {
    return absl::FailedPreconditionError(absl::StrCat(
        type_name(), ".Backward: no pending Forward (each Backward consumes the last Forward)"));
  }
  const Tensor input = std::exchange(saved_input_, Tensor());
  if (!grad_output.defined() || grad_output.shape() != input.shape() ||
      grad_output.dtype() != DType::kF32 || grad_output.device() != input.device()) {
    return absl::InvalidArgumentError(absl::StrCat(
        type_name(), ".Backward: expected an f32 gradient of shape ", ShapeToString(input.shape()),
        " on ", input.device().ToString(), ", got ",
        grad_output.defined() ? grad_output.DebugString() : "undefined"));
  }
  const Planes p = PlanesOf(input.shape());
  const double count = saved_count_;  // The group's with a sync.
  const float* x = input.data<float>();
  const float* dy = grad_output.data<float>();
  // Per channel: sum(dy) and sum((x - mean) dy).
  std::vector<double> sum(static_cast<size_t>(p.c)), dotp(static_cast<size_t>(p.c));
  for (int64_t c = 0; c < p.c; ++c) {
    double s = 0.0, d = 0.0;
    const float m = saved_mean_[c];
    for (int64_t i = 0; i < p.n; ++i) {
      const float* xp = x + p.at(i, c, 0);
      const float* dyp = dy + p.at(i, c, 0);
      s += LaneSum(p.s, [dyp](int64_t k) { return static_cast<double>(dyp[k]); });
      d += LaneSum(p.s, [xp, dyp, m](int64_t k) { return static_cast<double>(xp[k] - m) * dyp[k]; });
    }
    sum[c] = s;
    dotp[c] = d;
  }
  if (options_.affine) {
    // Reverse registration order: bias, then weight; both before the input
    // gradient, so a reducer can start on them.
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor gb, Tensor::Empty({p.c}, DType::kF32, input.device()));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor gw, Tensor::Empty({p.c}, DType::kF32, input.device()));
    for (int64_t c = 0; c < p.c; ++c) {
      gb.data<float>()[c] = static_cast<float>(sum[c]);
      gw.data<float>()[c] = static_cast<float>(dotp[c] * saved_invstd_[c]);
    }
    LOCKSTEP_RETURN_IF_ERROR(AccumulateGrad(bias_, gb, ready));
    LOCKSTEP_RETURN_IF_ERROR(AccumulateGrad(weight_, gw, ready));
  }
  if (!input_grad) return Tensor();
  if (saved_synced_ && saved_batch_stats_) {
    // The input gradient needs the group's sums (PyTorch's SyncBatchNorm
    // all-reduces sum_dy and sum_dy_xmu, and only when the input needs a
    // gradient); the parameters' gradients above stay this rank's (DDP
    // averages them).
    std::vector<double> both(sum);
    both.insert(both.end(), dotp.begin(), dotp.end());
    absl::Status s = sync_ == nullptr ? absl::FailedPreconditionError("the sync was removed after Forward")
                                      : sync_->AllSum(both);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(type_name(), ".Backward (synchronized statistics): ", s.message()));
    std::copy(both.begin(), both.begin() + p.c, sum.begin());
    std::copy(both.begin() + p.c, both.end(), dotp.begin());
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor gx, Tensor::Empty(input.shape(), DType::kF32, input.device()));
  float* dx = gx.data<float>();
  for (int64_t c = 0; c < p.c; ++c) {
    const float invstd = saved_invstd_[c];
    const float w = options_.affine ? weight_.value.data<float>()[c] : 1.0f;
    if (saved_batch_stats_) {
      // dx = (dy - mean(dy) - (x - mean) * sum((x - mean) dy) invstd^2 / n) * invstd * w
      const double k = dotp[c] * invstd * invstd / count;
      const double grad_mean = sum[c] / count;
      for (int64_t i = 0; i < p.n; ++i) {
        for (int64_t j = 0; j < p.s; ++j) {
          const int64_t at = p.at(i, c, j);
          const double centered = static_cast<double>(x[at] - saved_mean_[c]) * k;
          dx[at] = static_cast<float>((dy[at] - grad_mean - centered) * invstd * w);
        }
      }
    } else {
      // The running statistics are constants: dx = dy * invstd * w.
      const float scale = invstd * w;
      for (int64_t i = 0; i < p.n; ++i) {
        for (int64_t j = 0; j < p.s; ++j) dx[p.at(i, c, j)] = dy[p.at(i, c, j)] * scale;
      }
    }
  }
  return gx;
}

void BatchNorm::SetSync(std::shared_ptr<BatchNormSync> sync) { sync_ = std::move(sync); }

absl::StatusOr<std::unique_ptr<BatchNorm1d>> BatchNorm1d::Create(const BatchNormOptions& options) {
  std::unique_ptr<BatchNorm1d> bn(new BatchNorm1d(options));
  LOCKSTEP_RETURN_IF_ERROR(bn->Init());
  return bn;
}

absl::StatusOr<std::unique_ptr<Module>> BatchNorm1d::NewLike(Device device) const {
  BatchNormOptions options = this->options();
  options.device = device;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<BatchNorm1d> copy, Create(options));
  return std::unique_ptr<Module>(std::move(copy));
}

absl::StatusOr<std::unique_ptr<BatchNorm2d>> BatchNorm2d::Create(const BatchNormOptions& options) {
  std::unique_ptr<BatchNorm2d> bn(new BatchNorm2d(options));
  LOCKSTEP_RETURN_IF_ERROR(bn->Init());
  return bn;
}

absl::StatusOr<std::unique_ptr<Module>> BatchNorm2d::NewLike(Device device) const {
  BatchNormOptions options = this->options();
  options.device = device;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<BatchNorm2d> copy, Create(options));
  return std::unique_ptr<Module>(std::move(copy));
}

}  // namespace lockstep
