// GradScaler: dynamic loss scaling for f16 mixed-precision training, exactly
// as PyTorch 1.13's torch.cuda.amp.GradScaler.
//
// f16 gradients of small magnitude underflow to zero. Multiplying the loss by
// a large factor S scales every gradient by S (backward is linear), keeping
// them representable; the optimizer must then see the gradients divided by S
// again. If S is too large, some gradient overflows to inf/NaN: that step is
// skipped and S shrinks. After `growth_interval` clean steps in a row S grows.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(GradScaler scaler, GradScaler::Create({}));
//   for (...) {
//     ... forward; loss = ...;
//     LOCKSTEP_RETURN_IF_ERROR(scaler.Scale(loss_grad));  // d(S*loss) = S*d(loss)
//     ... backward, DDP all-reduce: `grads` now hold S * the true gradients.
//     LOCKSTEP_RETURN_IF_ERROR(scaler.Unscale(grads));    // optional: to clip
//     LOCKSTEP_ASSIGN_OR_RETURN(bool stepped,
//         scaler.Step(grads, [&] { return optimizer.Step(); }));
//     LOCKSTEP_RETURN_IF_ERROR(scaler.Update());
//   }
//
// lockstep has no autograd: the caller scales whatever starts backward (the
// loss, or the loss's gradient), with `Scale`.
//
// The numbers, as in PyTorch:
//   * The scale is an f32 (PyTorch's _scale tensor), starting at
//     float(init_scale); the growth tracker counts clean steps since the last
//     growth or backoff.
//   * Unscale: inv_scale = float(1.0 / double(scale)); each gradient element
//     is checked for inf/NaN (before unscaling) and multiplied by inv_scale in
//     its accumulator type (f32 for f16/bf16/f32, f64 for f64), rounded once.
//   * Update (aten/src/ATen/native/cuda/AmpKernels.cu, _amp_update_scale_):
//       found_inf:  scale = float(double(scale) * backoff_factor); tracker = 0
//       otherwise:  if ++tracker == growth_interval {
//                     s = float(double(scale) * growth_factor);
//                     if (isfinite(s)) scale = s;  // never grows to inf
//                     tracker = 0; }
//   * Per iteration: at most one Unscale, at most one Step, then Update; any
//     other order is a FailedPrecondition error with PyTorch's message.
//   * Several optimizers (PyTorch's per-optimizer state): the overloads that
//     take an `optimizer` key (any address that identifies it, e.g. the
//     Optimizer*) keep that protocol per optimizer. Each optimizer's Step
//     skips or steps on its own gradients' check; Update backs off once if
//     any optimizer found an inf/NaN (PyTorch tests the sum of the
//     per-optimizer flags for non-zero), else counts one clean step, and
//     resets every optimizer. The overloads without a key are the key
//     nullptr.
//
//       LOCKSTEP_RETURN_IF_ERROR(scaler.Unscale(&encoder_opt, encoder_grads));  // e.g. to clip
//       LOCKSTEP_ASSIGN_OR_RETURN(bool a, scaler.Step(&encoder_opt, encoder_grads, [&] { return encoder_opt.Step(); }));
//       LOCKSTEP_ASSIGN_OR_RETURN(bool b, scaler.Step(&decoder_opt, decoder_grads, [&] { return decoder_opt.Step(); }));
//       LOCKSTEP_RETURN_IF_ERROR(scaler.Update());
//   * A disabled scaler (enabled = false) makes every method a no-op: Step
//     just runs the optimizer step, scale() is 1.
//
// Where lockstep differs (PyTorch has no answer or a worse one):
//   * Scale works in place, so an f16/bf16 loss stays f16/bf16 (PyTorch
//     returns an f32 product); scale an f32 loss to avoid the rounding.
//   * Unscale accepts f16 gradients (PyTorch's unscale_ refuses them, "Attempting
//     to unscale FP16 gradients", because its master weights are f32 params).
//   * Once the scale has backed off so far that 1/scale overflows f32 (below
//     about 2.9e-39, including 0), unscaled gradients would be inf/NaN and
//     PyTorch would let the optimizer step with them. Here Unscale then fails
//     (FailedPrecondition) if the gradients are finite; if they are not, the
//     step is skipped as usual and they are left as they are.
//   * One GradScaler serves one optimizer (PyTorch keeps per-optimizer state).
//
// The state for checkpoints is PyTorch's state_dict (GetState/LoadState), also
// as string metadata with the same keys (StateToMetadata), which round-trips
// exactly.
//
// Not thread-safe; gradients may live on CPU or CUDA devices (the kernels of
// core/kernels.h dispatch on the device).
#ifndef LOCKSTEP_AMP_GRAD_SCALER_H_
#define LOCKSTEP_AMP_GRAD_SCALER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/tensor.h"

namespace lockstep {

// PyTorch's constructor arguments and defaults.
struct GradScalerOptions {
  double init_scale = 65536.0;     // Stored as float: must be finite and > 0 as an f32.
  double growth_factor = 2.0;      // > 1, finite.
  double backoff_factor = 0.5;     // In (0, 1).
  int64_t growth_interval = 2000;  // In [1, 2^31 - 1] (an int in PyTorch's kernel).
  bool enabled = true;
};

// PyTorch's state_dict: "scale", "growth_factor", "backoff_factor",
// "growth_interval", "_growth_tracker".
struct GradScalerState {
  float scale = 65536.0f;
  int64_t growth_tracker = 0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class GradScaler {
 public:
  // InvalidArgument for options outside the ranges above.
  static absl::StatusOr<GradScaler> Create(const GradScalerOptions& options);

  // t *= scale, in place (f32, f64, f16 or bf16; computed like Scale in
  // core/kernels.h, i.e. one rounding). No-op when disabled.
  absl::Status Scale(const Tensor& t) const;
  // loss * scale in f32; `loss` when disabled.
  float Scale(float loss) const;

  // Checks `grads` for inf/NaN and multiplies them by 1/scale, in place.
  // Undefined tensors (parameters without a gradient) are skipped; each
  // element must appear in only one tensor. At most once per iteration, and
  // not after Step. On an error nothing is recorded; a device failure midway
  // may leave some gradients unscaled.
  absl::Status Unscale(absl::Span<const Tensor> grads);
  // The same for the optimizer identified by `optimizer` (see above).
  absl::Status Unscale(const void* optimizer, absl::Span<const Tensor> grads);

  // Unscales `grads` unless Unscale already ran this iteration; then runs
  // `optimizer_step` and returns true, or skips it and returns false when a
  // gradient had an inf/NaN. An error from `optimizer_step` is returned as is
  // (Step may then be called again). At least one gradient must be defined.
  // When disabled, runs `optimizer_step` and returns true.
  absl::StatusOr<bool> Step(absl::Span<const Tensor> grads, absl::FunctionRef<absl::Status()> optimizer_step);
  absl::StatusOr<bool> Step(const void* optimizer, absl::Span<const Tensor> grads,
                            absl::FunctionRef<absl::Status()> optimizer_step);

  // Grows or backs off the scale (rule above) and starts the next iteration.
  // Needs an Unscale or Step (of any optimizer) since the last Update.
  absl::Status Update();
  // Sets the scale (finite, > 0) and starts the next iteration; the growth
  // tracker is kept, as in PyTorch's update(new_scale).
  absl::Status Update(float new_scale);

  // 1 and 0 when disabled, as PyTorch's get_scale() and _get_growth_tracker().
  float scale() const { return enabled() ? scale_ : 1.0f; }
  int64_t growth_tracker() const { return enabled() ? growth_tracker_ : 0; }
  bool enabled() const { return options_.enabled; }
  // Whether this iteration's Unscale (or Step) of any optimizer found an
  // inf/NaN; after Update, whether the iteration it ended did.
  bool found_inf() const { return found_inf_; }

  GradScalerState GetState() const;
  // Validates all fields first (InvalidArgument, nothing changed):
  // scale finite and >= 0 (a scale that backed off to 0 is a reachable
  // state), growth_factor and backoff_factor as in the options,
  // growth_interval in [1, 2^31 - 1], growth_tracker in [0, growth_interval).
  // A disabled scaler ignores valid states, as PyTorch's load_state_dict().
  absl::Status LoadState(const GradScalerState& state);

  // The state as strings under `prefix` + PyTorch's keys: the scale as
  // "%.9g", the factors as "%.17g" (both round-trip exactly), the integers in
  // decimal. Empty when disabled, as PyTorch's state_dict().
  std::map<std::string, std::string> StateToMetadata(absl::string_view prefix = "") const;
  // Reads what StateToMetadata wrote (other keys are ignored). Values are
  // parsed strictly: no spaces, no trailing characters. A no-op when disabled.
  // If none of the keys is there, the error says the checkpoint probably came
  // from a disabled scaler.
  absl::Status LoadStateFromMetadata(const std::map<std::string, std::string>& metadata, absl::string_view prefix = "");

 private:
  // Where the current iteration is (PyTorch's OptState).
  enum class Stage { kReady, kUnscaled, kStepped };

  explicit GradScaler(const GradScalerOptions& options)
      : options_(options), scale_(static_cast<float>(options.init_scale)) {}

  // One optimizer's iteration (PyTorch's _per_optimizer_states entry).
  struct PerOptimizer {
    const void* optimizer = nullptr;
    Stage stage = Stage::kReady;
    // Whether this iteration checked at least one gradient (PyTorch's
    // non-empty found_inf_per_device).
    bool inf_checks_recorded = false;
    bool found_inf = false;
  };
  PerOptimizer& StateOf(const void* optimizer);

  GradScalerOptions options_;
  float scale_;
  int64_t growth_tracker_ = 0;
  std::vector<PerOptimizer> per_optimizer_;  // This iteration's, in first-use order.
  bool found_inf_ = false;
};

}  // namespace lockstep

#endif  // LOCKSTEP_AMP_GRAD_SCALER_H_
