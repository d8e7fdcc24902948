#include "amp/grad_scaler.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/dtype.h"
#include "core/kernels.h"
#include "core/status.h"

namespace lockstep {
namespace {

constexpr int64_t kMaxGrowthInterval = std::numeric_limits<int32_t>::max();

// PyTorch's state_dict keys.
constexpr absl::string_view kScaleKey = "scale";
constexpr absl::string_view kGrowthFactorKey = "growth_factor";
constexpr absl::string_view kBackoffFactorKey = "backoff_factor";
constexpr absl::string_view kGrowthIntervalKey = "growth_interval";
constexpr absl::string_view kGrowthTrackerKey = "_growth_tracker";

std::string Num(double v) { return absl::StrFormat("%.9g", v); }

absl::Status ValidateFactors(const char* op, double growth_factor, double backoff_factor, int64_t growth_interval) {
  if (!(growth_factor > 1.0) || !std::isfinite(growth_factor)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": growth_factor must be finite and > 1, got ", Num(growth_factor), "; the default is 2"));
  }
  if (!(backoff_factor > 0.0 && backoff_factor < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": backoff_factor must be in (0, 1), got ", Num(backoff_factor), "; the default is 0.5"));
  }
  if (growth_interval < 1 || growth_interval > kMaxGrowthInterval) {
    return absl::InvalidArgumentError(absl::StrCat(op,
                                                   ": growth_interval must be in [1, 2^31 - 1] (an int in PyTorch's "
                                                   "update kernel), got ",
                                                   growth_interval, "; the default is 2000"));
  }
  return absl::OkStatus();
}

// Exactly the whole string, in the C locale: no spaces, no '+', no suffix.
template <typename T>
absl::Status ParseStrict(const std::map<std::string, std::string>& metadata, const std::string& key, const char* type,
                         T* out) {
  const std::string& s = metadata.at(key);
  const char* begin = s.data();
  const char* end = begin + s.size();
  const std::from_chars_result r = std::from_chars(begin, end, *out);
  if (s.empty() || r.ec != std::errc() || r.ptr != end) {
    return absl::InvalidArgumentError(absl::StrCat("GradScaler::LoadStateFromMetadata: \"", key, "\" is \"",
                                                   absl::CHexEscape(s), "\", not ", type,
                                                   r.ec == std::errc::result_out_of_range ? " (out of range)" : "",
                                                   "; expected a value written by GradScaler::StateToMetadata"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GradScaler> GradScaler::Create(const GradScalerOptions& options) {
  const float scale = static_cast<float>(options.init_scale);
  if (!(std::isfinite(scale) && scale > 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GradScaler::Create: init_scale must be finite and > 0 as an f32 (the scale is a "
                     "float, as in PyTorch), got ",
                     Num(options.init_scale), " (", Num(scale), " as f32); the default is 65536"));
  }
  LOCKSTEP_RETURN_IF_ERROR(
      ValidateFactors("GradScaler::Create", options.growth_factor, options.backoff_factor, options.growth_interval));
  return GradScaler(options);
}

absl::Status GradScaler::Scale(const Tensor& t) const {
  if (!enabled()) return absl::OkStatus();
  if (!t.defined() || !IsFloatingPoint(t.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("GradScaler::Scale: expected a defined f32, f64, f16 or bf16 tensor (the loss or its "
                     "gradient), got ",
                     t.defined() ? t.DebugString() : "an undefined tensor"));
  }
  // A float factor: the kernel then multiplies f32 by exactly the f32 scale.
  return ::lockstep::Scale(t, static_cast<double>(scale_));
}

float GradScaler::Scale(float loss) const { return enabled() ? loss * scale_ : loss; }

GradScaler::PerOptimizer& GradScaler::StateOf(const void* optimizer) {
  for (PerOptimizer& s : per_optimizer_) {
    if (s.optimizer == optimizer) return s;
  }
  per_optimizer_.push_back(PerOptimizer{optimizer});
  return per_optimizer_.back();
}

absl::Status GradScaler::Unscale(absl::Span<const Tensor> grads) { return Unscale(nullptr, grads); }

absl::Status GradScaler::Unscale(const void* optimizer, absl::Span<const Tensor> grads) {
  if (!enabled()) return absl::OkStatus();
  PerOptimizer& state = StateOf(optimizer);
  if (state.stage == Stage::kUnscaled) {
    return absl::FailedPreconditionError(
        "GradScaler::Unscale: already called for this optimizer since the last Update() (PyTorch: \"unscale_() "
        "has already been called on this optimizer since the last update().\"); call it at "
        "most once per optimizer per iteration: Step() uses the gradients it unscaled");
  }
  if (state.stage == Stage::kStepped) {
    return absl::FailedPreconditionError(
        "GradScaler::Unscale: called after Step() for this optimizer (PyTorch: \"unscale_() is being called "
        "after step().\"); Step() has already unscaled this iteration's gradients, call "
        "Update() first");
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].defined() && !IsFloatingPoint(grads[i].dtype())) {
      return absl::InvalidArgumentError(absl::StrCat("GradScaler::Unscale: grads[", i, "] is ", grads[i].DebugString(),
                                                     "; gradients must be f32, f64, f16 or bf16"));
    }
  }
  // The reciprocal in f64, rounded to f32, as PyTorch (f32 division may be
  // imprecise under some compile options).
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_));

  // Checked before any gradient is written, so an error leaves them intact.
  bool found_inf = false;
  bool checked = false;
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    LOCKSTEP_ASSIGN_OR_RETURN(const bool finite, AllFinite(g));
    found_inf = found_inf || !finite;
    checked = true;
  }
  if (!std::isfinite(inv_scale)) {
    if (checked && !found_inf) {
      return absl::FailedPreconditionError(
          absl::StrCat("GradScaler::Unscale: the scale ", Num(scale_),
                       " has backed off so far that 1/scale overflows f32: the unscaled gradients would "
                       "be inf/NaN (PyTorch would step with them). Loss scaling has collapsed after many "
                       "steps with inf/NaN gradients; look for the source of the non-finite values, or "
                       "reset the scale with Update(new_scale)"));
    }
    // Otherwise the step is skipped: leave the (non-finite) gradients alone.
  } else if (inv_scale != 1.0f) {
    for (const Tensor& g : grads) {
      if (g.defined()) LOCKSTEP_RETURN_IF_ERROR(::lockstep::Scale(g, inv_scale));
    }
  }
  state.stage = Stage::kUnscaled;
  state.found_inf = found_inf;
  state.inf_checks_recorded = checked;
  found_inf_ = false;
  for (const PerOptimizer& s : per_optimizer_) found_inf_ = found_inf_ || s.found_inf;
  return absl::OkStatus();
}

absl::StatusOr<bool> GradScaler::Step(absl::Span<const Tensor> grads,
                                      absl::FunctionRef<absl::Status()> optimizer_step) {
  return Step(nullptr, grads, optimizer_step);
}

absl::StatusOr<bool> GradScaler::Step(const void* optimizer, absl::Span<const Tensor> grads,
                                      absl::FunctionRef<absl::Status()> optimizer_step) {
  if (!enabled()) {
    LOCKSTEP_RETURN_IF_ERROR(optimizer_step());
    return true;
  }
  if (StateOf(optimizer).stage == Stage::kStepped) {
    return absl::FailedPreconditionError(
        "GradScaler::Step: already called for this optimizer since the last Update() (PyTorch: \"step() has "
        "already been called since the last update().\"); call Update() once per iteration");
  }
  if (StateOf(optimizer).stage == Stage::kReady) LOCKSTEP_RETURN_IF_ERROR(Unscale(optimizer, grads));
  PerOptimizer& state = StateOf(optimizer);
  if (!state.inf_checks_recorded) {
    return absl::FailedPreconditionError(
        absl::StrCat("GradScaler::Step: no gradient was checked for inf/NaN (PyTorch: \"No inf checks "
                     "were recorded for this optimizer.\"): all ",
                     grads.size(),
                     " gradient tensors were undefined; pass the gradients of the parameters the "
                     "optimizer updates"));
  }
  // The decision is this optimizer's own: another one may step or skip.
  if (state.found_inf) {
    state.stage = Stage::kStepped;
    return false;
  }
  LOCKSTEP_RETURN_IF_ERROR(optimizer_step());
  state.stage = Stage::kStepped;
  return true;
}

absl::Status GradScaler::Update() {
  if (!enabled()) return absl::OkStatus();
  // PyTorch sums every optimizer's found_inf (each 0 or 1) and tests the sum
  // for non-zero: any number of optimizers with an inf backs off once.
  bool recorded = false, found_inf = false;
  for (const PerOptimizer& s : per_optimizer_) {
    recorded = recorded || s.inf_checks_recorded;
    found_inf = found_inf || s.found_inf;
  }
  if (!recorded) {
    return absl::FailedPreconditionError(
        "GradScaler::Update: no inf checks were recorded since the last update (PyTorch: \"No "
        "inf checks were recorded prior to update.\"); call Step() (or Unscale()) with this "
        "iteration's gradients first, or Update(new_scale) to set the scale");
  }
  // AmpKernels.cu's amp_update_scale_cuda_kernel: float * double in double,
  // rounded to float once.
  if (found_inf) {
    scale_ = static_cast<float>(static_cast<double>(scale_) * options_.backoff_factor);
    growth_tracker_ = 0;
  } else {
    const int64_t successful = growth_tracker_ + 1;
    if (successful == options_.growth_interval) {
      const float new_scale = static_cast<float>(static_cast<double>(scale_) * options_.growth_factor);
      if (std::isfinite(new_scale)) scale_ = new_scale;
      growth_tracker_ = 0;
    } else {
      growth_tracker_ = successful;
    }
  }
  found_inf_ = found_inf;
  per_optimizer_.clear();
  return absl::OkStatus();
}

absl::Status GradScaler::Update(float new_scale) {
  if (!(std::isfinite(new_scale) && new_scale > 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("GradScaler::Update: new_scale must be finite and > 0, got ",
                                                   Num(new_scale), "; the scale was left at ", Num(scale_)));
  }
  if (!enabled()) return absl::OkStatus();
  scale_ = new_scale;
  per_optimizer_.clear();
  return absl::OkStatus();
}

GradScalerState GradScaler::GetState() const {
  GradScalerState s;
  s.scale = scale();
  s.growth_tracker = growth_tracker();
  s.growth_factor = options_.growth_factor;
  s.backoff_factor = options_.backoff_factor;
  s.growth_interval = options_.growth_interval;
  return s;
}

absl::Status GradScaler::LoadState(const GradScalerState& state) {
  if (!std::isfinite(state.scale) || std::signbit(state.scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GradScaler::LoadState: scale must be finite and >= 0 (as every scale GetState "
                     "reports), got ",
                     Num(state.scale)));
  }
  LOCKSTEP_RETURN_IF_ERROR(
      ValidateFactors("GradScaler::LoadState", state.growth_factor, state.backoff_factor, state.growth_interval));
  if (state.growth_tracker < 0 || state.growth_tracker >= state.growth_interval) {
    return absl::InvalidArgumentError(
        absl::StrCat("GradScaler::LoadState: growth_tracker must be in [0, growth_interval) = [0, ",
                     state.growth_interval, "), got ", state.growth_tracker,
                     " (Update resets it on reaching growth_interval, so a larger value would never grow "
                     "the scale)"));
  }
  if (!enabled()) return absl::OkStatus();
  scale_ = state.scale;
  growth_tracker_ = state.growth_tracker;
  options_.init_scale = state.scale;
  options_.growth_factor = state.growth_factor;
  options_.backoff_factor = state.backoff_factor;
  options_.growth_interval = state.growth_interval;
  return absl::OkStatus();
}

std::map<std::string, std::string> GradScaler::StateToMetadata(absl::string_view prefix) const {
  if (!enabled()) return {};
  const GradScalerState s = GetState();
  return {
      // 9 significant digits round-trip every float, 17 every double.
      {absl::StrCat(prefix, kScaleKey), absl::StrFormat("%.9g", s.scale)},
      {absl::StrCat(prefix, kGrowthFactorKey), absl::StrFormat("%.17g", s.growth_factor)},
      {absl::StrCat(prefix, kBackoffFactorKey), absl::StrFormat("%.17g", s.backoff_factor)},
      {absl::StrCat(prefix, kGrowthIntervalKey), absl::StrCat(s.growth_interval)},
      {absl::StrCat(prefix, kGrowthTrackerKey), absl::StrCat(s.growth_tracker)},
  };
}

absl::Status GradScaler::LoadStateFromMetadata(const std::map<std::string, std::string>& metadata,
                                               absl::string_view prefix) {
  if (!enabled()) return absl::OkStatus();
  const std::string keys[] = {absl::StrCat(prefix, kScaleKey), absl::StrCat(prefix, kGrowthFactorKey),
                              absl::StrCat(prefix, kBackoffFactorKey), absl::StrCat(prefix, kGrowthIntervalKey),
                              absl::StrCat(prefix, kGrowthTrackerKey)};
  std::string missing;
  int num_missing = 0;
  for (const std::string& key : keys) {
    if (metadata.count(key) > 0) continue;
    absl::StrAppend(&missing, num_missing++ == 0 ? "" : ", ", "\"", key, "\"");
  }
  if (num_missing > 0) {
    if (num_missing == 5) {
      return absl::NotFoundError(
          absl::StrCat("GradScaler::LoadStateFromMetadata: none of the GradScaler keys (", missing,
                       ") is in the metadata; it was probably saved from a disabled GradScaler (PyTorch: "
                       "\"The source state dict is empty\"). Load it with enabled = false, or check the "
                       "prefix \"",
                       prefix, "\""));
    }
    return absl::InvalidArgumentError(absl::StrCat("GradScaler::LoadStateFromMetadata: missing ", missing,
                                                   "; expected all five keys written by GradScaler::StateToMetadata"));
  }
  GradScalerState s;
  LOCKSTEP_RETURN_IF_ERROR(ParseStrict(metadata, keys[0], "a float", &s.scale));
  LOCKSTEP_RETURN_IF_ERROR(ParseStrict(metadata, keys[1], "a number", &s.growth_factor));
  LOCKSTEP_RETURN_IF_ERROR(ParseStrict(metadata, keys[2], "a number", &s.backoff_factor));
  LOCKSTEP_RETURN_IF_ERROR(ParseStrict(metadata, keys[3], "an integer", &s.growth_interval));
  LOCKSTEP_RETURN_IF_ERROR(ParseStrict(metadata, keys[4], "an integer", &s.growth_tracker));
  absl::Status status = LoadState(s);
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("GradScaler::LoadStateFromMetadata: ", status.message()));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
