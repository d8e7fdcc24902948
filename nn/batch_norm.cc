#include "nn/batch_norm.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "nn/kernels/batch_norm_elementwise.h"
#include "nn/kernels/cuda_math.h"
#include "nn/math.h"

namespace lockstep {
namespace {

// A [count] f32 tensor of `value` on `device` (filled on the host).
absl::StatusOr<Tensor> Filled(int64_t count, float value, Device device) {
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::FromVector<float>(std::vector<float>(static_cast<size_t>(count), value)));
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

namespace bn = ::lockstep::batch_norm_elementwise;

// The device side of BatchNorm: per-plane sums (plane = image * c + channel)
// and the elementwise passes, as loops here on the CPU or as CUDA kernels
// (nn/kernels/cuda_math.h) with the same arithmetic
// (nn/kernels/batch_norm_elementwise.h), so both devices give the same bits.
// Per-channel arrays are on the host.

// out[plane] = sum x, or sum (x - mean[channel])^2 when `mean` is non-null.
absl::Status PlaneSums(const Tensor& input, const Planes& p, const float* mean, std::vector<double>& out) {
  out.assign(static_cast<size_t>(p.n * p.c), 0.0);
  if (input.device().is_cuda()) {
    return nn_cuda::BatchNormPlaneSums(input.device().index(), p.n, p.c, p.s, input.data<float>(), mean, out.data());
  }
  const float* x = input.data<float>();
  for (int64_t i = 0; i < p.n; ++i) {
    for (int64_t c = 0; c < p.c; ++c) {
      const float* plane = x + p.at(i, c, 0);
      out[static_cast<size_t>(i * p.c + c)] =
          mean == nullptr ? bn::PlaneSum(plane, p.s) : bn::PlaneSquaredDeviations(plane, p.s, mean[c]);
    }
  }
  return absl::OkStatus();
}

// sum[plane] = sum dy, dot[plane] = sum (x - mean[channel]) dy.
absl::Status PlaneGradSums(const Tensor& input, const Tensor& grad, const Planes& p, const float* mean,
                           std::vector<double>& sum, std::vector<double>& dot) {
  sum.assign(static_cast<size_t>(p.n * p.c), 0.0);
  dot.assign(static_cast<size_t>(p.n * p.c), 0.0);
  if (input.device().is_cuda()) {
    return nn_cuda::BatchNormPlaneGradSums(input.device().index(), p.n, p.c, p.s, input.data<float>(),
                                           grad.data<float>(), mean, sum.data(), dot.data());
  }
  const float* x = input.data<float>();
  const float* dy = grad.data<float>();
  for (int64_t i = 0; i < p.n; ++i) {
    for (int64_t c = 0; c < p.c; ++c) {
      const size_t plane = static_cast<size_t>(i * p.c + c);
      sum[plane] = bn::PlaneSum(dy + p.at(i, c, 0), p.s);
      dot[plane] = bn::PlaneDot(x + p.at(i, c, 0), dy + p.at(i, c, 0), p.s, mean[c]);
    }
  }
  return absl::OkStatus();
}

// Per channel, the planes' sums added in image order.
std::vector<double> ChannelSums(const std::vector<double>& planes, const Planes& p) {
  std::vector<double> sums(static_cast<size_t>(p.c), 0.0);
  for (int64_t i = 0; i < p.n; ++i) {
    for (int64_t c = 0; c < p.c; ++c) sums[static_cast<size_t>(c)] += planes[static_cast<size_t>(i * p.c + c)];
  }
  return sums;
}

// y = x alpha[channel] + beta[channel], as PyTorch's transform.
absl::Status Transform(const Tensor& input, const Planes& p, const std::vector<float>& alpha,
                       const std::vector<float>& beta, const Tensor& out) {
  if (input.device().is_cuda()) {
    return nn_cuda::BatchNormTransform(input.device().index(), p.n, p.c, p.s, input.data<float>(), alpha.data(),
                                       beta.data(), out.data<float>());
  }
  const float* x = input.data<float>();
  float* y = out.data<float>();
  for (int64_t c = 0; c < p.c; ++c) {
    const float a = alpha[static_cast<size_t>(c)], b = beta[static_cast<size_t>(c)];
    for (int64_t i = 0; i < p.n; ++i) {
      const float* __restrict xp = x + p.at(i, c, 0);
      float* __restrict yp = y + p.at(i, c, 0);
      for (int64_t k = 0; k < p.s; ++k) yp[k] = xp[k] * a + b;
    }
  }
  return absl::OkStatus();
}

// dx with batch statistics (k and grad_mean non-null), else dy (invstd w):
// the running statistics are constants.
absl::Status InputGrad(const Tensor& input, const Tensor& grad, const Planes& p, const float* mean, const float* invstd,
                       const float* w, const double* k, const double* grad_mean, const Tensor& out) {
  if (input.device().is_cuda()) {
    return nn_cuda::BatchNormInputGrad(input.device().index(), p.n, p.c, p.s, input.data<float>(), grad.data<float>(),
                                       mean, invstd, w, k, grad_mean, out.data<float>());
  }
  const float* x = input.data<float>();
  const float* dy = grad.data<float>();
  float* dx = out.data<float>();
  for (int64_t c = 0; c < p.c; ++c) {
    if (k != nullptr) {
      // The channel's constants in locals: dx's stores could alias the
      // arrays, which would reload them per element and stop vectorization.
      const float m = mean[c], is = invstd[c], wc = w[c];
      const double kc = k[c], gm = grad_mean[c];
      for (int64_t i = 0; i < p.n; ++i) {
        const float* __restrict xp = x + p.at(i, c, 0);
        const float* __restrict dyp = dy + p.at(i, c, 0);
        float* __restrict dxp = dx + p.at(i, c, 0);
        for (int64_t j = 0; j < p.s; ++j) dxp[j] = bn::InputGradBatch(xp[j], dyp[j], m, kc, gm, is, wc);
      }
    } else {
      const float scale = invstd[c] * w[c];
      for (int64_t i = 0; i < p.n; ++i) {
        const float* __restrict dyp = dy + p.at(i, c, 0);
        float* __restrict dxp = dx + p.at(i, c, 0);
        for (int64_t j = 0; j < p.s; ++j) dxp[j] = dyp[j] * scale;
      }
    }
  }
  return absl::OkStatus();
}

// Writes host values into `dst` (on any device).
template <typename T>
absl::Status StoreValues(const Tensor& dst, const std::vector<T>& values) {
  if (dst.device().is_cpu()) {
    std::copy(values.begin(), values.end(), dst.data<T>());
    return absl::OkStatus();
  }
  // Empty + copy rather than FromVector, which makes [count] of a 0-d shape.
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor host, Tensor::Empty(dst.shape(), dst.dtype(), Device::Cpu()));
  std::copy(values.begin(), values.end(), host.data<T>());
  return dst.CopyFrom(host);
}

// A new tensor on `device` holding host values.
absl::StatusOr<Tensor> FromHost(const std::vector<float>& values, Device device) {
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::FromVector<float>(values));
  if (t.device() == device) return t;
  return t.To(device);
}

}  // namespace

absl::Status BatchNorm::Init() {
  const BatchNormOptions& o = options_;
  if (o.num_features < 1) {
    return absl::InvalidArgumentError(absl::StrCat(type_name(), ": num_features must be >= 1, got ", o.num_features));
  }
  if (!(o.eps > 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat(type_name(), ": eps must be > 0, got ", o.eps));
  }
  if (o.momentum && !(*o.momentum >= 0.0 && *o.momentum <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        type_name(), ": momentum must be in [0, 1] (or nullopt for a cumulative average), got ", *o.momentum));
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
  const bool dtype_ok = input.defined() &&
                        (input.dtype() == DType::kF32 || input.dtype() == DType::kBF16 || input.dtype() == DType::kF16);
  if (!rank_ok || !dtype_ok || input.shape()[1] != options_.num_features || input.device() != device) {
    const std::string ranks =
        min_rank_ == max_rank_ ? absl::StrCat(min_rank_, "D") : absl::StrCat(min_rank_, "D or ", max_rank_, "D");
    return absl::InvalidArgumentError(absl::StrCat(type_name(), "(", options_.num_features, ").Forward: expected ",
                                                   ranks, " f32, bf16 or f16 input with ", options_.num_features,
                                                   " channels in dim 1 on ", device.ToString(), ", got ",
                                                   input.defined() ? input.DebugString() : "undefined"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> BatchNorm::Forward(const Tensor& input) {
  LOCKSTEP_RETURN_IF_ERROR(CheckInput(input));
  if (input.dtype() == DType::kF32) {
    saved_input_dtype_ = DType::kF32;
    return ForwardF32(input);
  }
  // Autocast's bf16/f16 activations with f32 parameters, as PyTorch's
  // mixed-type batch_norm: the values widen exactly, everything is computed
  // as for f32 input, and the output is rounded once to the input's dtype.
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor x32, CastTo(input, DType::kF32));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor y32, ForwardF32(x32));
  saved_input_dtype_ = input.dtype();
  return CastTo(y32, input.dtype());
}

absl::StatusOr<Tensor> BatchNorm::ForwardF32(const Tensor& input) {
  const Planes p = PlanesOf(input.shape());
  const size_t channels = static_cast<size_t>(p.c);
  const bool tracking = options_.track_running_stats;
  const bool batch_stats = is_training() || !tracking;
  // SyncBatchNorm's statistics are the group's, in training mode only (as
  // PyTorch's need_sync; eval without running statistics stays local).
  BatchNormSync* const sync = is_training() ? sync_.get() : nullptr;
  // Per channel: the sum of the values, then (once the mean is known) of the
  // squared f32 deviations; with a sync each summed over the group. The
  // count rides along as the last element (exact in double below 2^53).
  std::vector<double> sums(channels + 1, 0.0);
  sums[channels] = static_cast<double>(p.count());
  std::vector<double> planes;
  if (batch_stats) {
    LOCKSTEP_RETURN_IF_ERROR(PlaneSums(input, p, nullptr, planes));
    const std::vector<double> channel = ChannelSums(planes, p);
    std::copy(channel.begin(), channel.end(), sums.begin());
    if (sync != nullptr) {
      absl::Status s = sync->AllSum(sums);
      if (!s.ok())
        return absl::Status(s.code(), absl::StrCat(type_name(), ".Forward (synchronized statistics): ", s.message()));
    }
  }
  const double count_d = sums[channels];
  const int64_t count = static_cast<int64_t>(count_d);
  if (batch_stats && count <= 1) {
    // PyTorch's _verify_batch_size, checked before any state changes (with
    // a sync, over the group's batch: an empty batch on one rank is fine).
    return absl::InvalidArgumentError(absl::StrCat(
        type_name(), ".Forward: expected more than 1 value per channel when training, got input ",
        ShapeToString(input.shape()), sync != nullptr ? absl::StrCat(" (", count, " over the group)") : ""));
  }
  std::vector<float> mean(channels), invstd(channels);
  if (batch_stats) {
    // As PyTorch's CPU kernel: the mean rounded to f32 first, then the sum
    // of squared f32 deviations, both accumulated in double.
    for (size_t c = 0; c < channels; ++c) mean[c] = static_cast<float>(sums[c] / count_d);
    LOCKSTEP_RETURN_IF_ERROR(PlaneSums(input, p, mean.data(), planes));
    std::vector<double> var_sums = ChannelSums(planes, p);
    if (sync != nullptr) {
      absl::Status s = sync->AllSum(var_sums);
      if (!s.ok())
        return absl::Status(s.code(), absl::StrCat(type_name(), ".Forward (synchronized statistics): ", s.message()));
    }
    double factor = 0.0;
    std::vector<float> rm, rv;
    if (is_training() && tracking) {
      LOCKSTEP_ASSIGN_OR_RETURN(std::vector<int64_t> tracked, num_batches_tracked_.ToVector<int64_t>());
      ++tracked[0];
      LOCKSTEP_RETURN_IF_ERROR(StoreValues(num_batches_tracked_, tracked));
      factor = options_.momentum ? *options_.momentum : 1.0 / static_cast<double>(tracked[0]);
      LOCKSTEP_ASSIGN_OR_RETURN(rm, running_mean_.ToVector<float>());
      LOCKSTEP_ASSIGN_OR_RETURN(rv, running_var_.ToVector<float>());
    }
    for (size_t c = 0; c < channels; ++c) {
      const double var_sum = var_sums[c];
      invstd[c] = static_cast<float>(1.0 / std::sqrt(var_sum / count_d + options_.eps));
      if (is_training() && tracking) {
        rm[c] = static_cast<float>(factor * mean[c] + (1.0 - factor) * rm[c]);
        rv[c] = static_cast<float>(factor * (var_sum / (count_d - 1.0)) + (1.0 - factor) * rv[c]);
      }
    }
    if (is_training() && tracking) {
      LOCKSTEP_RETURN_IF_ERROR(StoreValues(running_mean_, rm));
      LOCKSTEP_RETURN_IF_ERROR(StoreValues(running_var_, rv));
    }
  } else {
    LOCKSTEP_ASSIGN_OR_RETURN(mean, running_mean_.ToVector<float>());
    LOCKSTEP_ASSIGN_OR_RETURN(std::vector<float> rv, running_var_.ToVector<float>());
    for (size_t c = 0; c < channels; ++c) {
      invstd[c] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(rv[c]) + options_.eps));
    }
  }
  std::vector<float> alpha(channels), beta(channels);
  {
    std::vector<float> w(channels, 1.0f), b(channels, 0.0f);
    if (options_.affine) {
      LOCKSTEP_ASSIGN_OR_RETURN(w, weight_.value.ToVector<float>());
      LOCKSTEP_ASSIGN_OR_RETURN(b, bias_.value.ToVector<float>());
    }
    for (size_t c = 0; c < channels; ++c) {
      // y = x * alpha + beta, as PyTorch's transform.
      alpha[c] = invstd[c] * w[c];
      beta[c] = b[c] - mean[c] * alpha[c];
    }
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(input.shape(), DType::kF32, input.device()));
  LOCKSTEP_RETURN_IF_ERROR(Transform(input, p, alpha, beta, out));
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
    return absl::FailedPreconditionError(
        absl::StrCat(type_name(), ".Backward: no pending Forward (each Backward consumes the last Forward)"));
  }
  // Checked before the Forward is consumed: a refused gradient loses nothing.
  if (!grad_output.defined() || grad_output.shape() != saved_input_.shape() ||
      !(grad_output.dtype() == DType::kF32 || grad_output.dtype() == DType::kBF16 ||
        grad_output.dtype() == DType::kF16) ||
      grad_output.device() != saved_input_.device()) {
    return absl::InvalidArgumentError(
        absl::StrCat(type_name(), ".Backward: expected an f32, bf16 or f16 gradient of shape ",
                     ShapeToString(saved_input_.shape()), " on ", saved_input_.device().ToString(), ", got ",
                     grad_output.defined() ? grad_output.DebugString() : "undefined"));
  }
  const Tensor input = std::exchange(saved_input_, Tensor());
  const DType input_dtype = saved_input_dtype_;
  // A bf16/f16 gradient widens exactly; the input gradient is rounded once
  // to the forward input's dtype (see Forward).
  LOCKSTEP_ASSIGN_OR_RETURN(const Tensor g, CastTo(grad_output, DType::kF32));
  const Planes p = PlanesOf(input.shape());
  const size_t channels = static_cast<size_t>(p.c);
  const double count = saved_count_;  // The group's with a sync.
  // Per channel: sum(dy) and sum((x - mean) dy).
  std::vector<double> plane_sum, plane_dot;
  LOCKSTEP_RETURN_IF_ERROR(PlaneGradSums(input, g, p, saved_mean_.data(), plane_sum, plane_dot));
  std::vector<double> sum = ChannelSums(plane_sum, p), dotp = ChannelSums(plane_dot, p);
  if (options_.affine) {
    // Reverse registration order: bias, then weight; both before the input
    // gradient, so a reducer can start on them.
    std::vector<float> gb(channels), gw(channels);
    for (size_t c = 0; c < channels; ++c) {
      gb[c] = static_cast<float>(sum[c]);
      gw[c] = static_cast<float>(dotp[c] * saved_invstd_[c]);
    }
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor gb_t, FromHost(gb, input.device()));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor gw_t, FromHost(gw, input.device()));
    LOCKSTEP_RETURN_IF_ERROR(AccumulateGrad(bias_, gb_t, ready));
    LOCKSTEP_RETURN_IF_ERROR(AccumulateGrad(weight_, gw_t, ready));
  }
  if (!input_grad) return Tensor();
  if (saved_synced_ && saved_batch_stats_) {
    // The input gradient needs the group's sums (PyTorch's SyncBatchNorm
    // all-reduces sum_dy and sum_dy_xmu, and only when the input needs a
    // gradient); the parameters' gradients above stay this rank's (DDP
    // averages them).
    std::vector<double> both(sum);
    both.insert(both.end(), dotp.begin(), dotp.end());
    absl::Status s =
        sync_ == nullptr ? absl::FailedPreconditionError("the sync was removed after Forward") : sync_->AllSum(both);
    if (!s.ok())
      return absl::Status(s.code(), absl::StrCat(type_name(), ".Backward (synchronized statistics): ", s.message()));
    std::copy(both.begin(), both.begin() + p.c, sum.begin());
    std::copy(both.begin() + p.c, both.end(), dotp.begin());
  }
  std::vector<float> w(channels, 1.0f);
  if (options_.affine) {
    LOCKSTEP_ASSIGN_OR_RETURN(w, weight_.value.ToVector<float>());
  }
  std::vector<double> k, grad_mean;
  if (saved_batch_stats_) {
    k.resize(channels);
    grad_mean.resize(channels);
    for (size_t c = 0; c < channels; ++c) {
      const float invstd = saved_invstd_[c];
      k[c] = dotp[c] * invstd * invstd / count;
      grad_mean[c] = sum[c] / count;
    }
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor gx, Tensor::Empty(input.shape(), DType::kF32, input.device()));
  LOCKSTEP_RETURN_IF_ERROR(InputGrad(input, g, p, saved_mean_.data(), saved_invstd_.data(), w.data(),
                                     saved_batch_stats_ ? k.data() : nullptr,
                                     saved_batch_stats_ ? grad_mean.data() : nullptr, gx));
  return CastTo(gx, input_dtype);
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
