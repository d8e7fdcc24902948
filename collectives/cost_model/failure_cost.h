// What a lost rank costs a data-parallel job, and the goodput that follows
// from a mean time between failures: today's restart from a checkpoint
// beside fault-tolerant training that shrinks the group and heals a
// replacement from a live peer (trainers/fault_tolerant_loop.h).
//
//   using namespace lockstep::cost_model;
//   absl::StatusOr<Topology> t = MakeTopology(1024, 8);
//   FailureInputs in;
//   in.mttf_s = 8 * 3600;  // the job's: one failure every 8 hours
//   in.step_s = 0.2;
//   absl::StatusOr<FailurePrediction> f = PredictFailureCost(*t, DefaultCostModel(), in);
//   // f->restart.lost_s, f->restart.goodput, f->shrink.lost_s, f->shrink.goodput
//
// Restart (lockstep-run --max_restarts, --checkpoint_every, --resume): a
// failure is detected, every process stops and starts again, the group is
// set up anew, the newest checkpoint is read, and the steps since it are
// redone (half an interval on average):
//   lost = detect + restart + setup(p) + read + interval·step / 2
// and every interval pays one checkpoint write.
// Shrink (lockstep-run --fault_tolerant): the survivors agree on the next
// membership through the store (each takes a ticket and writes its id,
// p(3 + c(p)) requests and p² values at the store's costs), set up a group
// of p − 1, rebuild DDP (a broadcast of the parameters) and redo the one
// step that failed; the replacement starts while the others train (not
// lost) and is admitted with a second set-up and a broadcast of the whole
// state:
//   lost = detect + 2·(agreement + setup(p)) + step
//          + bcast(parameters) + bcast(state)
// and every admit_every steps pay one store request and a small broadcast.
// A broadcast of m bytes is the pipelined tree's bound, m·β + α·log2 p
// (between hosts). Goodput is useful time over wall time:
//   goodput = (1 − lost / mttf) / (1 + overhead)
// with overhead the per-step cost as a fraction of the step.
// An upper bound in the store's terms (its requests are serial); the other
// terms are the model's constants, so read it as orders of magnitude.
#ifndef LOCKSTEP_COLLECTIVES_COST_MODEL_FAILURE_COST_H_
#define LOCKSTEP_COLLECTIVES_COST_MODEL_FAILURE_COST_H_

#include "absl/status/statusor.h"
#include "collectives/cost_model/cost_model.h"
#include "collectives/cost_model/topology.h"

namespace lockstep {
namespace cost_model {

struct FailureInputs {
  double mttf_s = 8 * 3600.0;  // the whole job's mean time between failures
  double step_s = 0.2;         // one training step
  double detect_s = 0;         // to the survivors' knowing (a dead process closes its connections: ~0)
  double restart_s = 2;        // restart path: stop and start every process, the launcher's rendezvous
  double checkpoint_every_steps = 100;
  double checkpoint_write_s = 0.5;  // each checkpoint stalls the run this long
  double checkpoint_read_s = 0.5;
  double parameter_bytes = 44.7e6;  // rebuilt DDP's broadcast (ResNet-18's f32)
  double state_bytes = 89.4e6;      // a replacement's heal: parameters, optimizer state, buffers
  double admit_every_steps = 10;
};

struct PathCost {
  double lost_s = 0;    // per failure
  double overhead = 0;  // per step, without failures, as a fraction of the step
  double goodput = 0;
};

struct FailurePrediction {
  double setup_s = 0;      // a group's set-up at p (PredictSetup)
  double agreement_s = 0;  // the survivors' agreement through the store
  PathCost restart;
  PathCost shrink;
};

// InvalidArgument for inputs out of range (naming them).
absl::StatusOr<FailurePrediction> PredictFailureCost(const Topology& topology, const CostModel& model,
                                                     const FailureInputs& inputs);

}  // namespace cost_model
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_COST_MODEL_FAILURE_COST_H_
