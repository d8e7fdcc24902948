#include "interop/torch/trainers/torch_trainer.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "collectives/bootstrap/init_from_env.h"
#include "core/status.h"
#include "ddp/ddp_options.h"
#include "fsdp/sharded_optimizer.h"
#include "interop/torch/trainers/torch_ddp_stepper.h"
#include "interop/torch/trainers/torch_fsdp_stepper.h"
#include "nn/blas_kernels.h"
#include "nn/math.h"
#include "trainers/fault_tolerant_rank.h"
#include "trainers/train_loop.h"

ABSL_FLAG(int, nproc, 2, "local ranks to start when no launcher set a rank environment");
ABSL_FLAG(std::string, bind_to, "core", "core (each local rank on its own CPU) or none");
ABSL_FLAG(double, bucket_cap_mb, 25, "DDP bucket size limit, MiB");
ABSL_FLAG(double, first_bucket_mb, 1,
          "DDP's first rebuilt bucket's limit, MiB (PyTorch's dist._DEFAULT_FIRST_BUCKET_BYTES)");
ABSL_FLAG(int, timeout, 300, "seconds the group's setup and each collective may take before they fail");
ABSL_FLAG(bool, fsdp, false,
          "fully sharded data parallel (interop/torch/fsdp) instead of DDP: each block a unit, each rank a shard of "
          "every parameter, gradient and optimizer state");

namespace lockstep {
namespace interop {
namespace {

constexpr char kTorchUsage[] =
    "  --nproc=2  --bind_to=core|none  --bucket_cap_mb=25  --first_bucket_mb=1  --timeout=300  --fsdp\n"
    "  --fault_tolerant  --ft_log_dir=DIR  --ft_settle=1  --ft_admit_every=10 (with lockstep-run --fault_tolerant)\n";

struct TorchFlags {
  int nproc = 2;
  bool bind_to_core = true;
  DdpOptions ddp;
  int timeout_s = 300;
  bool fsdp = false;
};

// Whether argv sets --name (--name, --name=..., -name, --noname), before "--".
bool Given(int argc, char** argv, const std::string& name) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--")) absl::ConsumePrefix(&arg, "-");
    arg = arg.substr(0, arg.find('='));
    if (arg == name || arg == "no" + name) return true;
  }
  return false;
}

absl::StatusOr<TorchFlags> ReadTorchFlags(const TorchTrainerInfo& info, int argc, char** argv) {
  for (const std::string& name : info.unused_flags) {
    if (Given(argc, argv, name)) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " does not apply to ", info.program,
                                                     " (it trains its own libtorch model in f32 "
                                                     "on the CPU)"));
    }
  }
  TorchFlags f;
  f.nproc = absl::GetFlag(FLAGS_nproc);
  if (f.nproc < 1) return absl::InvalidArgumentError("--nproc must be >= 1");
  const std::string bind_to = absl::GetFlag(FLAGS_bind_to);
  if (bind_to != "core" && bind_to != "none") {
    return absl::InvalidArgumentError(absl::StrCat("--bind_to=", bind_to, ": expected core or none"));
  }
  f.bind_to_core = bind_to == "core";
  f.ddp.bucket_cap_mb = absl::GetFlag(FLAGS_bucket_cap_mb);
  if (!(f.ddp.bucket_cap_mb > 0) || f.ddp.bucket_cap_mb > 1e6) {
    return absl::InvalidArgumentError("--bucket_cap_mb must be in (0, 1e6]");
  }
  const double first_bucket_mb = absl::GetFlag(FLAGS_first_bucket_mb);
  if (!(first_bucket_mb > 0) || first_bucket_mb > 1e6) {
    return absl::InvalidArgumentError("--first_bucket_mb must be in (0, 1e6]");
  }
  f.ddp.first_bucket_bytes = std::max<size_t>(1, static_cast<size_t>(first_bucket_mb * 1024 * 1024));
  f.timeout_s = absl::GetFlag(FLAGS_timeout);
  if (f.timeout_s < 1) return absl::InvalidArgumentError("--timeout must be at least 1 (seconds)");
  f.fsdp = absl::GetFlag(FLAGS_fsdp);
  if (f.fsdp && (Given(argc, argv, "bucket_cap_mb") || Given(argc, argv, "first_bucket_mb"))) {
    return absl::InvalidArgumentError(
        "--bucket_cap_mb and --first_bucket_mb are DDP's; with --fsdp each unit is reduced as one flat buffer");
  }
  return f;
}

// libtorch's and OpenBLAS's threads: one per rank (ranks run a process per
// core), or OMP_NUM_THREADS.
absl::Status SetIntraOpThreads() {
  int threads = 1;
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env != nullptr && std::atoi(env) > 0) {
    threads = std::atoi(env);
  }
  at::set_num_threads(threads);
  return SetCpuMathThreads(threads);
}

// --fault_tolerant: the libtorch model under interop/torch's DDP, rebuilt
// over each epoch of an elastic group (trainers/fault_tolerant_rank.h).
absl::Status RunFaultTolerantRank(const TorchTrainerInfo& info, const TrainerConfig& config,
                                  const TorchTrainerSpec& spec, const TorchFlags& flags) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TorchModule> model, spec.make_model(config.seed, /*sharded=*/false));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, MakeOptimizer(config, *model));
  DdpOptions ddp = flags.ddp;
  ddp.fault_tolerant = true;
  TorchModule& module = *model;
  FaultTolerantTrainer t;
  t.program = info.program;
  t.model_description = absl::StrCat(spec.model_description, " (", model->NumParameterElements(), " parameters), ",
                                     spec.data_description);
  t.model = model.get();
  t.optimizer = optimizer.get();
  t.make_stepper = [&module, ddp](Communicator& comm,
                                  std::unique_ptr<CommHook> hook) -> absl::StatusOr<std::unique_ptr<ModelStepper>> {
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TorchDdpStepper> stepper, TorchDdpStepper::Create(module, comm, ddp));
    if (hook != nullptr) LOCKSTEP_RETURN_IF_ERROR(stepper->ddp().RegisterCommHook(std::move(hook)));
    return std::unique_ptr<ModelStepper>(std::move(stepper));
  };
  t.train = spec.train;
  t.test = spec.test;
  t.language_model = spec.language_model;
  return RunFaultTolerantTrainer(config, t);
}

absl::Status RunRank(const TorchTrainerInfo& info, const TrainerConfig& config, const TorchTrainerSpec& spec,
                     const TorchFlags& flags) {
  LOCKSTEP_RETURN_IF_ERROR(SetIntraOpThreads());
  if (FaultTolerantRequested()) return RunFaultTolerantRank(info, config, spec, flags);
  InitOptions init;
  const Milliseconds timeout(int64_t{flags.timeout_s} * 1000);
  init.store_timeout = timeout;
  init.communicator.communicator.timeout = timeout;
  init.communicator.transport.timeout = timeout;
  LOCKSTEP_ASSIGN_OR_RETURN(ProcessGroup group, InitFromEnv(init));
  const int rank = group.env.rank;
  const int world_size = group.env.world_size;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TorchModule> model, spec.make_model(config.seed, flags.fsdp));
  const long long parameters = static_cast<long long>(model->NumParameterElements());
  std::unique_ptr<ModelStepper> stepper;
  std::unique_ptr<Optimizer> optimizer;
  std::string parallelism;
  if (flags.fsdp) {
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TorchFsdpStepper> fsdp, TorchFsdpStepper::Create(*model, *group.comm));
    LOCKSTEP_ASSIGN_OR_RETURN(optimizer, ShardedOptimizer::Create(*fsdp, [&config](std::vector<NamedParameter> shards) {
                                return MakeOptimizerFor(config, std::move(shards));
                              }));
    int64_t shard = 0;
    for (const NamedParameter& p : fsdp->ShardParameters()) shard += p.parameter->value.numel();
    parallelism =
        absl::StrFormat("fully sharded: %d units, %d parameter elements a rank (padded)", fsdp->num_units(), shard);
    stepper = std::move(fsdp);
  } else {
    LOCKSTEP_ASSIGN_OR_RETURN(optimizer, MakeOptimizer(config, *model));
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TorchDdpStepper> ddp,
                              TorchDdpStepper::Create(*model, *group.comm, flags.ddp));
    parallelism = absl::StrCat(ddp->ddp().bucket_indices().size(), " buckets before the first rebuild");
    stepper = std::move(ddp);
  }
  if (rank == 0) {
    std::printf(
        "%s: %d ranks (%s), model %s (%lld parameters), %s, optimizer %s (lr %g), %s, libtorch %d intra-op "
        "thread(s), BLAS kernels %s\n",
        info.program, world_size, group.env.source.c_str(), spec.model_description.c_str(), parameters,
        spec.data_description.c_str(), config.optimizer.c_str(), config.lr, parallelism.c_str(), at::get_num_threads(),
        BlasCoreName().c_str());
    std::fflush(stdout);
  }
  TrainLoopOptions loop = MakeLoopOptions(config, rank, world_size);
  loop.report_perplexity = spec.language_model;
  loop.checkpoint_metadata = spec.checkpoint_metadata;
  TrainParts parts;
  parts.stepper = stepper.get();
  parts.optimizer = optimizer.get();
  parts.train_examples = spec.train;
  parts.test_examples = spec.test;
  parts.comm = group.comm.get();
  LOCKSTEP_ASSIGN_OR_RETURN(TrainResult result, RunTraining(loop, parts));

  EvalCounts test;
  if (!result.epochs.empty() && !result.stopped_at_max_steps) {
    test = result.epochs.back().test;
  } else if (spec.test != nullptr) {
    // Stopped inside an epoch: the loop evaluates at epoch ends only.
    LOCKSTEP_RETURN_IF_ERROR(stepper->SummonModule());
    absl::StatusOr<EvalCounts> mine =
        EvaluateShard(*model, spec.test, rank, world_size, config.batch_size, config.num_workers, Device::Cpu());
    LOCKSTEP_RETURN_IF_ERROR(stepper->ReleaseModule(/*write_back=*/false));
    LOCKSTEP_RETURN_IF_ERROR(mine.status());
    LOCKSTEP_ASSIGN_OR_RETURN(test, SumOverRanks(*mine, group.comm.get()));
  }
  if (spec.after_training) {
    // Rank 0's sample needs the whole model, which FSDP gathers on every rank.
    LOCKSTEP_RETURN_IF_ERROR(stepper->SummonModule());
    absl::Status sampled = rank == 0 ? spec.after_training(*model) : absl::OkStatus();
    LOCKSTEP_RETURN_IF_ERROR(stepper->ReleaseModule(/*write_back=*/false));
    LOCKSTEP_RETURN_IF_ERROR(sampled);
  }
  if (rank != 0) return absl::OkStatus();
  std::string perplexity;
  if (spec.language_model) perplexity = absl::StrFormat(" (perplexity %.3f)", std::exp(test.loss()));
  std::printf(
      "%s: final test loss %.4f%s, accuracy %.2f%% (%lld examples), %.0f samples/s over %d ranks, %lld "
      "steps\n",
      info.program, test.loss(), perplexity.c_str(), 100 * test.accuracy(), static_cast<long long>(test.examples),
      result.samples_per_second, world_size, static_cast<long long>(result.steps));
  std::fflush(stdout);
  PrintStepBreakdown(info.program, result);
  return absl::OkStatus();
}

}  // namespace

int TorchTrainerMain(int argc, char** argv, const TorchTrainerInfo& info, const MakeTorchTrainerSpec& make_spec) {
  for (const auto& [name, value] : info.defaults) {
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    std::string error;
    if (flag == nullptr || !flag->ParseFrom(value, &error)) {
      std::fprintf(stderr, "%s: internal error: default --%s=%s: %s\n", info.program, name.c_str(), value.c_str(),
                   flag == nullptr ? "no such flag" : error.c_str());
      return 1;
    }
  }
  const std::string usage = absl::StrCat(kTorchUsage, info.extra_usage);
  const TrainerConfig config = StartTrainerOrExit(argc, argv, info.program, usage.c_str());
  absl::StatusOr<TorchFlags> flags = ReadTorchFlags(info, argc, argv);
  if (!flags.ok()) return UsageError(info.program, flags.status());
  if (FaultTolerantRequested() && flags->fsdp) {
    return UsageError(info.program, absl::InvalidArgumentError(
                                        "--fault_tolerant with --fsdp: a sharded model cannot heal from one peer "
                                        "(each rank holds a different shard); use DDP"));
  }
  if (absl::Status ft = CheckFaultTolerantConfig(config, info.program); !ft.ok()) {
    return UsageError(info.program, ft);
  }
  absl::StatusOr<TorchTrainerSpec> spec = make_spec(config);
  if (absl::IsInvalidArgument(spec.status())) return UsageError(info.program, spec.status());
  if (!spec.ok()) {
    std::fprintf(stderr, "%s: %s\n", info.program, std::string(spec.status().message()).c_str());
    return 1;
  }
  if (!HasRankEnvironment()) {
    spec = absl::StatusOr<TorchTrainerSpec>();  // The ranks load their own.
    return RunLocalRanksOfSelf(info.program, argc, argv, flags->nproc, flags->bind_to_core);
  }
  if (absl::Status s = RunRank(info, config, *spec, *flags); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", info.program, s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace interop
}  // namespace lockstep
