// Gradient clipping, as PyTorch 1.13's torch.nn.utils.clip_grad_norm_ and
// clip_grad_value_: after backward (and after GradScaler::Unscale when loss
// scaling is on), before the optimizer step.
//
//   LOCKSTEP_RETURN_IF_ERROR(scaler.Unscale(grads));
//   LOCKSTEP_ASSIGN_OR_RETURN(double norm, ClipGradNorm(model->Parameters(), /*max_norm=*/1.0));
//   LOCKSTEP_RETURN_IF_ERROR(ClipGradValue(model->Parameters(), /*clip_value=*/0.5));
//
// ClipGradNorm: the parameters with a gradient (undefined ones, frozen
// parameters included, are skipped; none at all returns 0 and changes
// nothing) are seen as one vector g. Its norm of order p is taken as
// PyTorch takes it, per tensor first: total = || (||g_1||_p, ..., ||g_k||_p) ||_p,
// and for p = inf, max_i max |g_i|. Then every gradient is multiplied, in its
// own dtype, by
//   coef = min(fl(fl(1 / fl(total + 1e-6)) * max_norm), 1)
// computed in the gradients' dtype (f32: the rounding steps of PyTorch's
// `max_norm / (total_norm + 1e-6)`, which is a reciprocal then a product),
// always, also when coef is 1; the unclipped total is returned. A non-finite
// total with error_if_nonfinite is an error in PyTorch's words ("The total
// norm of order 2.0 for gradients from `parameters` is non-finite, ..."),
// nothing changed; without it the gradients are scaled anyway (NaN or 0).
//
// Where lockstep is more exact than PyTorch: each norm is summed in f64 and
// rounded once to the gradients' dtype, where PyTorch sums f32 in f32 in an
// order that depends on the CPU's vector width. Both are within the f32
// summation bound of the exact norm (nn/testing/error_bound.h); lockstep's
// result is the same on every CPU.
//
// ClipGradValue: every defined gradient clamped to [-clip_value, clip_value]
// in place (NaN stays NaN); clip_value must not be negative or NaN.
//
// Gradients may be f32 or f64 (all of one dtype), on the CPU or a CUDA
// device (there the norm is taken on a host copy: one transfer per tensor).
#ifndef LOCKSTEP_NN_CLIP_GRAD_H_
#define LOCKSTEP_NN_CLIP_GRAD_H_

#include <vector>

#include "absl/status/statusor.h"
#include "nn/module.h"

namespace lockstep {

struct ClipGradNormOptions {
  double norm_type = 2.0;  // > 0, or infinity
  bool error_if_nonfinite = false;
};

// Returns the total norm (before clipping), as the gradients' dtype holds it.
absl::StatusOr<double> ClipGradNorm(const std::vector<Parameter*>& parameters, double max_norm,
                                    const ClipGradNormOptions& options = {});

absl::Status ClipGradValue(const std::vector<Parameter*>& parameters, double clip_value);

// The steps of ClipGradNorm after the norm, for norms taken elsewhere (over
// FSDP's shards, fsdp/clip_grad.h): PyTorch's error for a non-finite total,
// the coefficient from the total (rounded as above, in f32 when `f32`), and
// multiplying every gradient by it in place.
absl::Status NonFiniteNormError(double norm_type);
double ClipCoefficient(double total, double max_norm, bool f32);
absl::Status MultiplyGradients(const std::vector<Tensor>& grads, double coef);

}  // namespace lockstep

#endif  // LOCKSTEP_NN_CLIP_GRAD_H_
