#include "collectives/cost_model/failure_cost.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "collectives/cost_model/setup_cost.h"

namespace lockstep {
namespace cost_model {
namespace {

double Requests(double keys) { return std::ceil(keys / 1024.0); }

}  // namespace

absl::StatusOr<FailurePrediction> PredictFailureCost(const Topology& topology, const CostModel& model,
                                                     const FailureInputs& in) {
  const std::pair<const char*, double> positive[] = {{"mttf_s", in.mttf_s},
                                                     {"step_s", in.step_s},
                                                     {"checkpoint_every_steps", in.checkpoint_every_steps},
                                                     {"admit_every_steps", in.admit_every_steps}};
  for (const auto& [name, v] : positive) {
    if (!(v > 0) || std::isinf(v)) {
      return absl::InvalidArgumentError(absl::StrCat("PredictFailureCost: ", name, " = ", v, "; expected > 0"));
    }
  }
  const std::pair<const char*, double> non_negative[] = {{"detect_s", in.detect_s},
                                                         {"restart_s", in.restart_s},
                                                         {"checkpoint_write_s", in.checkpoint_write_s},
                                                         {"checkpoint_read_s", in.checkpoint_read_s},
                                                         {"parameter_bytes", in.parameter_bytes},
                                                         {"state_bytes", in.state_bytes}};
  for (const auto& [name, v] : non_negative) {
    if (!(v >= 0) || std::isinf(v)) {
      return absl::InvalidArgumentError(absl::StrCat("PredictFailureCost: ", name, " = ", v, "; expected >= 0"));
    }
  }
  absl::StatusOr<SetupPrediction> setup = PredictSetup(topology, model);
  if (!setup.ok()) return setup.status();
  const double p = static_cast<double>(topology.p);
  FailurePrediction f;
  f.setup_s = setup->time_us * 1e-6;
  // The agreement: a ticket (Add) and an arrival (Set) per survivor, the
  // decision (a CompareSet and a Get), and every survivor's MultiGet of the
  // p arrivals.
  f.agreement_s =
      (model.setup.store_us_per_request * p * (4 + Requests(p)) + model.setup.store_us_per_value * p * p) * 1e-6;
  const LinkCost& remote =
      model.links[static_cast<int>(topology.single_host() ? LinkKind::kShm : LinkKind::kTcpRemote)];
  const double hops = p > 1 ? std::ceil(std::log2(p)) : 0;
  auto bcast_s = [&](double bytes) { return (bytes * remote.beta_us_per_byte + remote.alpha_us * hops) * 1e-6; };

  f.restart.lost_s =
      in.detect_s + in.restart_s + f.setup_s + in.checkpoint_read_s + in.checkpoint_every_steps * in.step_s / 2;
  f.restart.overhead = in.checkpoint_write_s / (in.checkpoint_every_steps * in.step_s);

  f.shrink.lost_s =
      in.detect_s + 2 * (f.agreement_s + f.setup_s) + in.step_s + bcast_s(in.parameter_bytes) + bcast_s(in.state_bytes);
  // An admission check: one store request on rank 0 and an 8-byte broadcast.
  f.shrink.overhead = (model.setup.store_us_per_request * 1e-6 + bcast_s(8)) / (in.admit_every_steps * in.step_s);

  for (PathCost* c : {&f.restart, &f.shrink}) {
    c->goodput = std::max(0.0, 1 - c->lost_s / in.mttf_s) / (1 + c->overhead);
  }
  return f;
}

}  // namespace cost_model
}  // namespace lockstep
