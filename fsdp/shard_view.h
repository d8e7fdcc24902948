// ShardView: what works on FSDP's shards without running the model -- the
// sharded optimizer (fsdp/sharded_optimizer.h) and clipping
// (fsdp/clip_grad.h) -- sees of either front: lockstep nn's FullyShard
// (fsdp/fully_shard.h) or a libtorch model's (interop/torch/fsdp, through
// its trainers' stepper).
//
//   ShardView& view = *fsdp;                       // a FullyShard is one
//   for (size_t u = 0; u < view.num_units(); ++u) {
//     const FlatShardLayout& layout = view.layout(u);  // where unit u's parameters lie
//   }
//
// Unit u's shard is ShardParameters()[u], one flat f32 tensor of
// layout(u).shard elements holding this rank's part of the unit's
// parameters (unit_parameters(u), in their flat order).
#ifndef LOCKSTEP_FSDP_SHARD_VIEW_H_
#define LOCKSTEP_FSDP_SHARD_VIEW_H_

#include <string>
#include <utility>
#include <vector>

#include "collectives/communicator.h"
#include "core/tensor.h"
#include "fsdp/flat_shard.h"
#include "nn/module.h"

namespace lockstep {

class ShardView {
 public:
  virtual ~ShardView() = default;
  // One per unit, root first; their gradients are the shards' gradients.
  virtual std::vector<NamedParameter> ShardParameters() = 0;
  virtual size_t num_units() const = 0;
  // The units' paths, root ("") first (for messages).
  virtual std::vector<std::string> unit_paths() const = 0;
  virtual const FlatShardLayout& layout(size_t unit) const = 0;
  // Unit `unit`'s parameters in its flat order: names and shapes.
  virtual std::vector<std::pair<std::string, Shape>> unit_parameters(size_t unit) const = 0;
  // Every parameter's name in the plain model's order (its state dict's):
  // the indices of a plain optimizer's "state.<i>.<key>".
  virtual std::vector<std::string> parameter_names() const = 0;
  // The group the shards are split over.
  virtual Communicator& comm() = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_FSDP_SHARD_VIEW_H_
