// ClipShardedGradNorm: gradient clipping for FullyShard (fsdp/fully_shard.h)
// and the libtorch front (fsdp/shard_view.h),
// where each rank holds only its shard of every gradient: PyTorch FSDP's
// FullyShardedDataParallel.clip_grad_norm_, with lockstep's rounding.
//
//   LOCKSTEP_RETURN_IF_ERROR(fsdp->Backward(ce.grad_logits));
//   LOCKSTEP_ASSIGN_OR_RETURN(double norm, ClipShardedGradNorm(*fsdp, /*max_norm=*/1.0));
//   LOCKSTEP_RETURN_IF_ERROR(optimizer->Step());
//
// Collective: every rank calls it after the same Backward. Each rank sums
// |g|^p (f64) over its elements of every module parameter, one all-reduce
// (SUM; MAX for p = inf, NaN-propagating) adds the ranks' parts, and then
// every rank does what ClipGradNorm (nn/clip_grad.h) does with the same
// per-parameter sums: each parameter's norm rounded once to f32, the norm of
// those norms in module order, the same coefficient, every shard gradient
// multiplied by it. So ranks agree on the total, and it is DDP's
// ClipGradNorm's over the whole gradients except for the order in which the
// f64 partial sums were added.
//
// Bound against DDP's ClipGradNorm on the same gradients (fsdp/clip_grad_test.cc
// checks it): each parameter's f64 sum differs by at most a few f64
// roundings (relative n * 2^-53 for n elements), which changes its f32 norm
// by at most one rounding, u = 2^-24, only when the f64 value lies within
// that distance of a rounding boundary; so each norm differs by at most
// u relative, the total by at most 2u (+ its own rounding: 3u T in all),
// the coefficient min(max_norm / (T + 1e-6), 1) by 3u + 2 x 3 roundings,
// and each clipped gradient element by |g| (9u + 2u) of its value. In
// practice the totals are equal bit for bit.
//
// Padding elements are zero and add nothing. Gradients must be defined on
// every shard (they are after Backward); an undefined one counts as zero.
#ifndef LOCKSTEP_FSDP_CLIP_GRAD_H_
#define LOCKSTEP_FSDP_CLIP_GRAD_H_

#include "absl/status/statusor.h"
#include "fsdp/shard_view.h"
#include "nn/clip_grad.h"

namespace lockstep {

// Returns the total norm over all ranks' shards (before clipping), the
// same on every rank.
// `fsdp` is a FullyShard or another front's ShardView.
absl::StatusOr<double> ClipShardedGradNorm(ShardView& fsdp, double max_norm, const ClipGradNormOptions& options = {});

}  // namespace lockstep

#endif  // LOCKSTEP_FSDP_CLIP_GRAD_H_
