// RunFaultTolerantTraining: data-parallel training that survives a lost
// rank without stopping (the trainers' --fault_tolerant). The ranks are an
// ElasticGroup's members (collectives/elastic/elastic_group.h); when a
// collective fails the survivors re-form a smaller group, agree on the last
// committed step, take the state of one that has it (ddp/heal.h), re-deal
// the epoch's remaining examples (data/elastic_sampler.h) and go on; a
// replacement (lockstep-run --fault_tolerant restarts just the dead worker)
// is admitted between two steps and heals from a live peer: no checkpoint
// is read.
//
//   FaultTolerantParts parts;
//   parts.group = group.get();                 // ElasticGroup::Create or ::Join
//   parts.model = model.get();
//   parts.optimizer = optimizer.get();
//   parts.make_stepper = [&](Communicator& comm, std::unique_ptr<CommHook> hook)
//       -> absl::StatusOr<std::unique_ptr<ModelStepper>> {
//     DdpOptions ddp;
//     ddp.fault_tolerant = true;
//     return DdpStepper::Create(*model, comm, ddp, std::move(hook));
//   };
//   parts.train = AsExamples(train_set);
//   FaultTolerantOptions options;
//   options.loop.epochs = 2;
//   LOCKSTEP_ASSIGN_OR_RETURN(FaultTolerantResult result, RunFaultTolerantTraining(options, parts));
//   std::printf("rank %d: parameter checksum %s\n", group->rank(), ParameterChecksum(*model).c_str());
//
// The rules (docs/ARCHITECTURE.md, "Fault tolerance"):
//   * Commit: a rank steps its optimizer only when its whole gradient
//     reduction completed (it then holds the step's complete reduced
//     gradients, the lost rank's batch included); a reduction that failed
//     leaves the gradients zero (DdpOptions::fault_tolerant) and the step is
//     redone in the new group. So a step is committed when any survivor
//     committed it.
//   * Re-formation: every survivor calls ElasticGroup::Shrink; then
//     HealFromPeer makes the largest committed step every member's, with the
//     state of the lowest rank that has it: parameters, buffers, optimizer
//     state, the epoch, the batches done in it and the sampler's state.
//     Parameters never diverge and no committed step is lost.
//   * Data: an epoch is ElasticSampler's list; after a change of world every
//     member re-deals what the committed steps left of it (the same on every
//     member: they hold the same state after healing), so each example is
//     read once per epoch. Averaging divides by the live world size (DDP's).
//   * A member's randomness must derive from (seed, rank, step) or come from
//     the healed state: the loop itself draws none (the sampler is a function
//     of seed, epoch and its changes).
//   * Newcomers: before every admit_every-th step (by number, the same on
//     every member) the group admits the newcomers registered (one store
//     read on rank 0 and one small broadcast), then every member heals (the
//     newcomers take everything) and rebuilds its stepper over the new
//     communicator.
//   * A failure that re-forming does not mend (8 re-formations in a row
//     without a committed step) ends the loop with the last error; so does
//     a member that arrives after the others closed an epoch
//     (FailedPrecondition: under lockstep-run it restarts as a newcomer).
// What it does not do, and the trainers refuse with --fault_tolerant:
// checkpoints (nothing is read back), gradient accumulation, uneven shards,
// loss scaling with fp16, metrics files and traces. NCCL jobs keep the
// restart path: one GPU cannot test NCCL's abort and shrink.
//
// With log_dir, each member appends one JSON line per committed step to
// <log_dir>/member-<id>.jsonl: step, epoch, the group's epoch, world, rank,
// member, the parameter checksum after the step, and every rank's batch
// (example indices) of that step, so a test can recompute the trajectory.
#ifndef LOCKSTEP_TRAINERS_FAULT_TOLERANT_LOOP_H_
#define LOCKSTEP_TRAINERS_FAULT_TOLERANT_LOOP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "collectives/elastic/elastic_group.h"
#include "data/example_dataset.h"
#include "ddp/comm_hook.h"
#include "nn/module.h"
#include "nn/optimizer.h"
#include "trainers/evaluation.h"
#include "trainers/fault_injection.h"
#include "trainers/model_stepper.h"
#include "trainers/train_loop.h"

namespace lockstep {

struct FaultTolerantOptions {
  // Used: epochs, batch_size, seed, max_steps, clip_grad_norm, device and
  // log_every (rank 0 prints "<program>: step N  loss L  acc A%  (rank 0's
  // last N steps)  W ranks": its own batches, no collective); rank and
  // world_size come from the group.
  TrainLoopOptions loop;
  std::string log_dir;  // Empty: no per-step log.
  // Newcomers are admitted before steps whose number is a multiple of this
  // (1: before every step).
  int64_t admit_every = 10;
  FaultInjection inject;
  std::string program = "trainer";  // Prefix of the lines printed.
};

struct FaultTolerantParts {
  ElasticGroup* group = nullptr;
  Module* model = nullptr;  // The plain module: healing reads and writes it.
  Optimizer* optimizer = nullptr;
  // The stepper over one epoch of the group (DDP with fault_tolerant). The
  // loop destroys it before the group re-forms. `hook`, when not null, must
  // be registered (fault injection).
  std::function<absl::StatusOr<std::unique_ptr<ModelStepper>>(Communicator& comm, std::unique_ptr<CommHook> hook)>
      make_stepper;
  std::shared_ptr<const ExampleDataset> train;
  std::shared_ptr<const ExampleDataset> test;  // Null: no evaluation.
  // A newcomer (ElasticGroup::Join): takes the whole state from the group.
  bool joined = false;
};

struct FaultTolerantResult {
  int64_t steps = 0;        // Committed, the group's.
  int64_t epochs_done = 0;  // Whole epochs.
  EvalCounts train;         // This member's committed batches (its share).
  EvalCounts test;          // Over the final group.
  bool evaluated = false;
  int reformations = 0;       // Shrinks this member took part in.
  int admissions = 0;         // Groups grown with newcomers.
  double seconds = 0;         // Wall time of the loop.
  double reform_seconds = 0;  // Spent re-forming and healing.
};

absl::StatusOr<FaultTolerantResult> RunFaultTolerantTraining(const FaultTolerantOptions& options,
                                                             const FaultTolerantParts& parts);

// The parameters' bytes (NamedParameters order) as 16 hex digits of
// FNV-1a 64: equal on every rank of a healthy data-parallel group.
std::string ParameterChecksum(Module& model);

}  // namespace lockstep

#endif  // LOCKSTEP_TRAINERS_FAULT_TOLERANT_LOOP_H_
