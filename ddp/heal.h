// HealFromPeer: after a group re-formed (collectives/elastic/elastic_group.h)
// the members agree on the newest committed step, and every other member
// takes the whole training state (parameters, buffers, optimizer state and
// any string state, such as a GradScaler's or a sampler's position) from
// one member that has it, over the collectives: no checkpoint is read
// (torchft's max_step healing).
//
//   LOCKSTEP_ASSIGN_OR_RETURN(HealResult healed,
//                             HealFromPeer(group->comm(), step, *model, optimizer.get(), &state));
//   step = healed.step;  // every member's now, with the same parameters
//
// The rule: the committed step of the group is the largest any member
// reports; its source is the lowest rank reporting it. When every member
// reports it, nothing is sent. Otherwise the source serializes its state
// once (safetensors: the model's state dict under its names, the
// optimizer's as "optimizer/state.<i>.<key>", the strings as metadata) and
// broadcasts it as one byte string, and every other member loads it,
// strictly: a member whose model does not match gets an error naming the
// entries, and keeps what it had. After it, the members' states are equal
// bit for bit.
//
// Collective over `comm`: every member calls it with its own step.
#ifndef LOCKSTEP_DDP_HEAL_H_
#define LOCKSTEP_DDP_HEAL_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "nn/module.h"
#include "nn/optimizer.h"

namespace lockstep {

struct HealResult {
  int64_t step = 0;     // The group's committed step, now every member's.
  int source = -1;      // The rank whose state the others took; -1: none needed.
  bool healed = false;  // This member took the source's state.
};

// `optimizer` may be null (no optimizer state is sent). `state` may be null;
// otherwise the source's strings replace the others'.
absl::StatusOr<HealResult> HealFromPeer(Communicator& comm, int64_t step, Module& model, Optimizer* optimizer,
                                        std::map<std::string, std::string>* state);

}  // namespace lockstep

#endif  // LOCKSTEP_DDP_HEAL_H_
