#include "trainers/fault_tolerant_rank.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "amp/precision_policy.h"
#include "collectives/bootstrap/init_from_env.h"
#include "collectives/elastic/elastic_group.h"
#include "core/status.h"
#include "trainers/trainer_setup.h"

ABSL_FLAG(bool, fault_tolerant, false,
          "survive a lost rank without stopping: the group shrinks, heals from a live peer and goes on; a "
          "replacement (lockstep-run --fault_tolerant) joins and heals (trainers/fault_tolerant_loop.h)");
ABSL_FLAG(std::string, ft_log_dir, "",
          "--fault_tolerant: append a JSON line per committed step to DIR/member-<id>.jsonl (step, world, rank, "
          "parameter checksum, every rank's batch)");
ABSL_FLAG(int64_t, ft_admit_every, 10,
          "--fault_tolerant: admit waiting replacements before every N-th step (one store read and a small "
          "broadcast each time)");
ABSL_FLAG(double, ft_settle, 1.0,
          "--fault_tolerant: seconds the survivors of a failure wait for each other before re-forming without the "
          "missing (at once when the launcher says who died)");

namespace lockstep {
namespace {

const char* Env(const char* name) { return std::getenv(name); }

}  // namespace

bool FaultTolerantRequested() { return absl::GetFlag(FLAGS_fault_tolerant); }

absl::Status CheckFaultTolerantConfig(const TrainerConfig& config, const char* program) {
  if (!FaultTolerantRequested()) {
    if (!absl::GetFlag(FLAGS_ft_log_dir).empty()) {
      return absl::InvalidArgumentError("--ft_log_dir needs --fault_tolerant");
    }
    return absl::OkStatus();
  }
  std::vector<std::string> refused;
  if (!config.checkpoint_dir.empty()) refused.push_back("--checkpoint_dir");
  if (config.checkpoint_every > 0) refused.push_back("--checkpoint_every");
  if (config.resume) refused.push_back("--resume");
  if (!config.metrics.empty()) refused.push_back("--metrics");
  if (!config.trace.empty()) refused.push_back("--trace");
  if (config.grad_accum_steps > 1) refused.push_back("--grad_accum_steps");
  if (NeedsLossScaling(config.precision)) refused.push_back("--amp=fp16");
  if (config.device.is_cuda()) refused.push_back("--device=cuda");
  if (!refused.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        program, " --fault_tolerant: ", absl::StrJoin(refused, ", "),
        " cannot be honoured: a fault-tolerant run heals from live peers and writes no checkpoints, metrics or "
        "traces; it reduces every step (no accumulation), scales no loss, and runs on the host backend (NCCL jobs "
        "keep the restart path with --resume). Drop them, or drop --fault_tolerant"));
  }
  if (absl::GetFlag(FLAGS_ft_admit_every) < 1) {
    return absl::InvalidArgumentError("--ft_admit_every must be at least 1 (1: before every step)");
  }
  const double settle = absl::GetFlag(FLAGS_ft_settle);
  if (!(settle >= 0) || settle > 600) {
    return absl::InvalidArgumentError(absl::StrCat("--ft_settle=", settle, ": expected seconds in [0, 600]"));
  }
  return absl::OkStatus();
}

absl::Status RunFaultTolerantTrainer(const TrainerConfig& config, const FaultTolerantTrainer& t) {
  // The launcher's variables first: a bad one is named before anything connects.
  const char* join = Env("LOCKSTEP_ELASTIC_JOIN");
  const bool joining = join != nullptr && std::string(join) == "1";
  int member = -1;  // -1: RANK (or, joining, a new id from the store)
  if (const char* m = Env("LOCKSTEP_ELASTIC_MEMBER"); m != nullptr && *m != '\0') {
    if (!absl::SimpleAtoi(m, &member) || member < 0) {
      return absl::InvalidArgumentError(absl::StrCat(t.program, ": LOCKSTEP_ELASTIC_MEMBER='", m,
                                                     "' is not a member id (an integer >= 0); unset it, or let "
                                                     "lockstep-run --fault_tolerant set it"));
    }
  }
  FaultInjection inject;
  if (const char* spec = Env("LOCKSTEP_FT_KILL"); spec != nullptr && *spec != '\0') {
    LOCKSTEP_ASSIGN_OR_RETURN(inject, ParseFaultInjection(spec));
  }
  InitOptions init;
  // Who died is known at once; the others' reports need not be awaited.
  init.communicator.communicator.failure_report_window = Milliseconds(50);
  LOCKSTEP_ASSIGN_OR_RETURN(ProcessGroup connected, ConnectFromEnv(Env, init));
  LOCKSTEP_ASSIGN_OR_RETURN(CommunicatorFactoryOptions factory, CommunicatorOptionsFromEnv(Env, connected.env, init));
  ElasticGroupOptions options;
  options.settle = Milliseconds(static_cast<int64_t>(std::llround(absl::GetFlag(FLAGS_ft_settle) * 1000)));
  options.timeout = init.store_timeout;
  options.make_communicator = [factory](std::shared_ptr<Store> store, int rank, int size,
                                        const std::string& prefix) -> absl::StatusOr<std::unique_ptr<Communicator>> {
    CommunicatorFactoryOptions f = factory;
    f.store_prefix = prefix;
    return CreateCommunicator(std::move(store), rank, size, f);
  };
  if (member < 0 && joining) {
    // A new id for a replacement nobody numbered: after the first world's.
    LOCKSTEP_ASSIGN_OR_RETURN(const int64_t k, connected.store->Add(options.store_prefix + "/next_member", 1));
    member = connected.env.world_size - 1 + static_cast<int>(k);
  } else if (member < 0) {
    member = connected.env.rank;
  }
  std::unique_ptr<ElasticGroup> group;
  if (joining) {
    LOCKSTEP_ASSIGN_OR_RETURN(group, ElasticGroup::Join(connected.store, member, options));
    std::printf("%s: member %d joined the running group as rank %d of %d (epoch %lld)\n", t.program, member,
                group->rank(), group->size(), static_cast<long long>(group->epoch()));
  } else {
    LOCKSTEP_ASSIGN_OR_RETURN(group, ElasticGroup::Create(connected.store, member, connected.env.world_size, options));
    if (group->rank() == 0) {
      std::printf("%s: fault-tolerant data parallel over %d ranks (%s, %s): %s, %s, batch %lld per rank\n", t.program,
                  group->size(), connected.env.source.c_str(), group->comm().capabilities().name.c_str(),
                  t.model_description.c_str(), config.optimizer.c_str(), static_cast<long long>(config.batch_size));
    }
  }
  std::fflush(stdout);
  FaultTolerantOptions o;
  o.loop = MakeLoopOptions(config, group->rank(), group->size());
  o.log_dir = absl::GetFlag(FLAGS_ft_log_dir);
  o.admit_every = absl::GetFlag(FLAGS_ft_admit_every);
  o.inject = inject;
  o.program = t.program;
  FaultTolerantParts parts;
  parts.group = group.get();
  parts.model = t.model;
  parts.optimizer = t.optimizer;
  parts.make_stepper = t.make_stepper;
  parts.train = t.train;
  parts.test = t.test;
  parts.joined = joining;
  LOCKSTEP_ASSIGN_OR_RETURN(FaultTolerantResult result, RunFaultTolerantTraining(o, parts));
  // The line, exactly (tests and users grep it).
  std::printf("rank %d: parameter checksum %s\n", group->rank(), ParameterChecksum(*t.model).c_str());
  if (group->rank() == 0) {
    std::printf("%s: %lld steps, %lld epochs; %d re-formation(s), %d admission(s), %.3f s of %.3f s re-forming\n",
                t.program, static_cast<long long>(result.steps), static_cast<long long>(result.epochs_done),
                result.reformations, result.admissions, result.reform_seconds, result.seconds);
    if (result.evaluated) {
      std::printf("%s: final test accuracy %.2f%% (%lld examples)%s over %d ranks\n", t.program,
                  100.0 * result.test.accuracy(), static_cast<long long>(result.test.examples),
                  t.language_model ? absl::StrCat(", perplexity ", std::exp(result.test.loss())).c_str() : "",
                  group->size());
    }
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

}  // namespace lockstep
