// Sharded checkpoints of fully sharded data parallel: each rank writes only
// its own shards (PyTorch's SHARDED_STATE_DICT with torch.distributed.checkpoint),
// and a checkpoint written on W ranks loads on any number of ranks, with
// any units, by parameter name.
//
//   LOCKSTEP_RETURN_IF_ERROR(SaveShardedCheckpoint(dir, *fsdp, adam.get(), model->NamedBuffers(),
//                                                  {{"step", "1200"}}));  // every rank: one file each
//   LOCKSTEP_ASSIGN_OR_RETURN(ShardedCheckpointInfo info,
//                             LoadShardedCheckpoint(dir, *fsdp, adam.get(), model->NamedBuffers()));
//   info.metadata["step"];  // "1200"; info.world_size: the ranks that wrote it
//
// Files, in `dir` (one checkpoint per directory): "shard-<r>-of-<W>.safetensors"
// for r in [0, W), written atomically by rank r:
//   * "<unit>.flat_param" (ShardParameters' names): rank r's shard of the
//     unit, padding included;
//   * "optimizer/state.<u>.<key>": the state of the shards' optimizer
//     (ShardedOptimizer::local()), per element like the shard, or a scalar;
//   * "buffer/<name>": this rank's buffers (FSDP keeps each rank's own;
//     BatchNorm's running statistics);
//   * metadata: "lockstep.fsdp_shard" = "1", "fsdp.world_size", "fsdp.rank",
//     "fsdp.save_id" (one random number per save, in every file of it, so
//     that files of two saves are never mixed), "fsdp.units", each unit's
//     "fsdp.unit.<u>.path", ".names" and ".shapes" (its parameters in flat
//     order, one a line; shapes as "64x3x3x3"), "optimizer.type", and the
//     caller's entries (not "fsdp.*" or "lockstep.*").
// The whole checkpoint is W files of 1/W of the model each; no rank ever
// holds more than its own shards and the files it reads.
//
// Loading reads every file's header (each checked against its size, the
// same save id and world size, the same units description), maps every
// parameter of this model by name to the saved units' layout, and reads
// just the files that hold this rank's elements: the old rank floor(e / s')
// for element e of a saved unit of shard size s'. Buffers come from the file
// of rank (r mod W). Every problem (a missing or extra file, a file of
// another save, a parameter missing, extra or of another shape, another
// optimizer type, a damaged file) is an error that names it, and nothing
// is changed unless everything loads. Only regular files are read: a
// symbolic link, FIFO or directory named like a shard is an error, never
// opened (a hostile local user cannot point a load at another file).
// Save is collective (the save id is rank 0's, broadcast; a barrier at the
// end, so that every file exists when any rank returns); Load is not.
#ifndef LOCKSTEP_FSDP_SHARDED_CHECKPOINT_H_
#define LOCKSTEP_FSDP_SHARDED_CHECKPOINT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fsdp/shard_view.h"
#include "fsdp/sharded_optimizer.h"
#include "nn/module.h"

namespace lockstep {

// `optimizer` may be null (no optimizer state written).
absl::Status SaveShardedCheckpoint(const std::string& dir, ShardView& fsdp, ShardedOptimizer* optimizer,
                                   const std::vector<NamedTensor>& buffers,
                                   const std::map<std::string, std::string>& metadata = {});

struct ShardedCheckpointInfo {
  int world_size = 0;                           // Ranks that wrote it.
  std::map<std::string, std::string> metadata;  // The caller's entries.
};

// `optimizer` may be null (the saved state is then ignored).
absl::StatusOr<ShardedCheckpointInfo> LoadShardedCheckpoint(const std::string& dir, ShardView& fsdp,
                                                            ShardedOptimizer* optimizer,
                                                            const std::vector<NamedTensor>& buffers);

}  // namespace lockstep

#endif  // LOCKSTEP_FSDP_SHARDED_CHECKPOINT_H_
