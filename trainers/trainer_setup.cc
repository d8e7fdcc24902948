#include "trainers/trainer_setup.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "collectives/bootstrap/local_launch.h"
#include "nn/blas_kernels.h"

namespace lockstep {

TrainerConfig StartTrainerOrExit(int argc, char** argv, const char* program, const char* extra_usage) {
  RestartWithFasterBlasKernelsIfNeeded(argv);
  ParseTrainerFlagsOrExit(argc, argv, program, extra_usage);
  absl::StatusOr<TrainerConfig> config = TrainerConfigFromFlags();
  if (!config.ok()) std::exit(UsageError(program, config.status()));
  // Flags that name the model's parts, checked once here rather than on
  // every rank.
  if (absl::Status s = CheckModelFlags(*config); !s.ok()) std::exit(UsageError(program, s));
  return *std::move(config);
}

void PrintStepBreakdown(const char* program, const TrainResult& result, const std::string& comm_hint) {
  if (result.breakdown.examples == 0) return;
  std::printf("%s: %s\n", program, StepBreakdownLine(result.breakdown, comm_hint).c_str());
  std::fflush(stdout);
}

void PrintFinalResult(const char* program, const TrainResult& result, const std::string& where) {
  if (result.epochs.empty()) return;
  const EpochMetrics& last = result.epochs.back();
  std::printf("%s: final test accuracy %.2f%% (%lld examples), %.0f samples/s%s, %lld steps\n", program,
              100 * last.test.accuracy(), static_cast<long long>(last.test.count), last.samples_per_second,
              where.empty() ? "" : (" " + where).c_str(), static_cast<long long>(result.steps));
}

TrainLoopOptions MakeLoopOptions(const TrainerConfig& c, int rank, int world_size) {
  TrainLoopOptions o;
  o.epochs = c.epochs;
  o.batch_size = c.batch_size;
  o.num_workers = c.num_workers;
  o.rank = rank;
  o.world_size = world_size;
  o.seed = c.seed;
  o.device = c.device;
  o.checkpoint_dir = c.checkpoint_dir;
  o.checkpoint_every = c.checkpoint_every;
  o.resume = c.resume;
  o.max_steps = c.max_steps;
  o.metrics_path = c.metrics;
  o.trace_dir = c.trace;
  o.clip_grad_norm = c.clip_grad_norm;
  o.grad_accum_steps = c.grad_accum_steps;
  o.log_every = c.log_every;
  o.device_prefetch = c.device_prefetch;
  return o;
}

bool HasRankEnvironment() {
  for (const char* name : {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

int RunLocalRanksOfSelf(const char* program, int argc, char** argv, int nproc, bool bind_to_core) {
  if (nproc < 1) return UsageError(program, absl::InvalidArgumentError("--nproc must be >= 1"));
  LocalLaunchOptions launch;
  launch.nproc = nproc;
  launch.bind_to_core = bind_to_core;
  launch.name = program;
  launch.argv = {"/proc/self/exe"};
  for (int i = 1; i < argc; ++i) launch.argv.push_back(argv[i]);
  const absl::Status s = RunLocalRanks(launch);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace lockstep
