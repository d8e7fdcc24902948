// SyncBatchNorm: BatchNorm whose batch statistics are the whole group's, as
// torch.nn.SyncBatchNorm, for convnets whose per-rank batches are too small
// for good statistics.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(int converted, ConvertSyncBatchNorm(*model, *comm));  // before DDP
//   LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, *comm));
//
// ConvertSyncBatchNorm (torch's SyncBatchNorm.convert_sync_batchnorm) makes
// every BatchNorm1d/2d under `module` synchronize over `comm`, which may be
// the whole group or a subgroup (Communicator::Split / NewGroup: e.g. the
// ranks of one host), and returns how many it converted (0 is no error here;
// the trainers refuse --sync_bn for a model without BatchNorm). The layers
// keep their parameters, buffers and state-dict names. In training mode each
// layer's forward then sums its per-channel statistics over the group (two
// f64 all-reduces of C + 1 and C elements) and its backward sums the two
// per-channel gradient sums (one f64 all-reduce of 2C elements) when the
// input needs a gradient: the result is BatchNorm on the concatenation of
// the ranks' batches (nn/batch_norm.h states the exact arithmetic), with
// ranks' batches of any sizes, an empty one included. Evaluation mode and a
// group of one rank are local. The collectives are issued in the model's
// forward and backward order, so every rank must run the same layers;
// a rank that has run out of data cannot shadow them (Join does not: see
// ddp/join.h).
//
// Where lockstep differs from PyTorch: PyTorch's SyncBatchNorm refuses CPU
// tensors (it is CUDA-only); here it runs wherever BatchNorm runs. PyTorch
// all-gathers each rank's (mean, invstd, count) in the input's dtype and
// recovers the variance from invstd; here the sums themselves are reduced
// in f64, which is as exact as BatchNorm on the whole batch.
//
// `comm` must outlive the converted layers' use (or call
// ConvertSyncBatchNorm's inverse, RevertSyncBatchNorm, first).
#ifndef LOCKSTEP_DDP_SYNC_BATCH_NORM_H_
#define LOCKSTEP_DDP_SYNC_BATCH_NORM_H_

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "nn/module.h"

namespace lockstep {

absl::StatusOr<int> ConvertSyncBatchNorm(Module& module, Communicator& comm);

// Makes every BatchNorm under `module` local again; returns how many were
// synchronized.
int RevertSyncBatchNorm(Module& module);

}  // namespace lockstep

#endif  // LOCKSTEP_DDP_SYNC_BATCH_NORM_H_
