// What a trainer's process does with --fault_tolerant (ddp_trainer,
// resnet18_trainer, char_transformer_trainer): it joins the job's elastic
// group instead of a fixed one, trains with RunFaultTolerantTraining
// (trainers/fault_tolerant_loop.h) and ends with the line "rank R:
// parameter checksum X" (X: ParameterChecksum, equal on every rank of a
// healthy group).
//
//   FaultTolerantTrainer t;
//   t.program = "ddp_trainer";
//   t.model = model.get();
//   t.optimizer = optimizer.get();
//   t.make_stepper = ...;  // DDP with DdpOptions::fault_tolerant over the given communicator
//   t.train = AsExamples(data.train);
//   return RunFaultTolerantTrainer(config, t);
//
// The rank's identity comes from the launcher's environment (RANK,
// WORLD_SIZE, the store as InitFromEnv finds it, ConnectFromEnv):
//   * LOCKSTEP_ELASTIC_MEMBER: this process's member id (lockstep-run
//     --fault_tolerant sets it; default RANK);
//   * LOCKSTEP_ELASTIC_JOIN=1: a replacement, which joins the running group
//     (ElasticGroup::Join) and heals from a live member;
//   * LOCKSTEP_FT_KILL: fault injection for tests (trainers/fault_injection.h).
// Every epoch's communicator is made as InitFromEnv makes one (transport by
// host, the job's secret). The store must outlive any one rank: under
// lockstep-run the agent of node 0 holds it; under torchrun with
// --rdzv_backend=c10d its agent does.
//
// Flags (this library's): --fault_tolerant, --ft_log_dir (a JSON line per
// committed step per member: trainers/fault_tolerant_loop.h), --ft_settle
// (seconds survivors wait for each other when no launcher says who died),
// --ft_admit_every (10: replacements are admitted before every 10th step).
// With --fault_tolerant these shared flags are refused: --checkpoint_dir,
// --checkpoint_every, --resume, --metrics, --trace,
// --grad_accum_steps > 1, --amp=fp16 and --device=cuda (NCCL keeps the
// restart path).
#ifndef LOCKSTEP_TRAINERS_FAULT_TOLERANT_RANK_H_
#define LOCKSTEP_TRAINERS_FAULT_TOLERANT_RANK_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "collectives/communicator.h"
#include "data/example_dataset.h"
#include "ddp/comm_hook.h"
#include "nn/module.h"
#include "nn/optimizer.h"
#include "trainers/fault_tolerant_loop.h"
#include "trainers/model_stepper.h"
#include "trainers/trainer_flags.h"

namespace lockstep {

// --fault_tolerant.
bool FaultTolerantRequested();

// The shared flags --fault_tolerant cannot honour, as an InvalidArgument
// naming them; OK when there are none (or without --fault_tolerant).
absl::Status CheckFaultTolerantConfig(const TrainerConfig& config, const char* program);

struct FaultTolerantTrainer {
  const char* program = "trainer";
  std::string model_description;
  Module* model = nullptr;
  Optimizer* optimizer = nullptr;
  std::function<absl::StatusOr<std::unique_ptr<ModelStepper>>(Communicator& comm, std::unique_ptr<CommHook> hook)>
      make_stepper;
  std::shared_ptr<const ExampleDataset> train, test;
  bool language_model = false;  // perplexity in the final line
};

// Runs this rank to the end (see above); prints the final lines.
absl::Status RunFaultTolerantTrainer(const TrainerConfig& config, const FaultTolerantTrainer& trainer);

}  // namespace lockstep

#endif  // LOCKSTEP_TRAINERS_FAULT_TOLERANT_RANK_H_
