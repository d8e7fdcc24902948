// ddp_trainer: the reference DistributedDataParallel trainer.
//
//   bazel run --config=opt //trainers:ddp_trainer -- --nproc=2 --epochs=3
//
// Without a rank environment (no RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID)
// it starts --nproc ranks of itself on this machine under a store it holds
// (collectives/bootstrap/local_launch.h), each bound to its own CPU (--bind_to=core), and
// stops them all when one fails. Under tools/launch, torchrun, mpirun or srun
// it is one rank and joins the group from the environment (InitFromEnv).
// Rank 0 prints the progress and writes --metrics and the checkpoints; every
// rank writes its own trace_rank<r>.json under --trace.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/marshalling.h"

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectives/bootstrap/backend_choice.h"
#include "collectives/bootstrap/init_from_env.h"
#include "collectives/nccl/nccl_communicator.h"
#include "core/cuda/cuda_runtime.h"
#include "core/status.h"
#include "ddp/comm_hook.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/local_sgd.h"
#include "ddp/powersgd_hook.h"
#include "ddp/sync_batch_norm.h"
#include "ddp/zero_redundancy_optimizer.h"
#include "fsdp/sharded_optimizer.h"
#include "nn/batch_norm.h"
#include "nn/blas_kernels.h"
#include "trainers/ddp_stepper.h"
#include "trainers/fault_tolerant_rank.h"
#include "trainers/fsdp_stepper.h"
#include "trainers/train_loop.h"
#include "trainers/trainer_setup.h"

ABSL_FLAG(int, nproc, 2, "local ranks to start when no launcher set a rank environment");
ABSL_FLAG(std::string, bind_to, "core", "core (each local rank on its own CPU) or none");
ABSL_FLAG(double, bucket_cap_mb, 25, "DDP bucket size limit, MiB");
ABSL_FLAG(int, timeout, 300, "seconds the group's setup and each collective may take before they fail");
ABSL_FLAG(std::string, dump_on_failure, "",
          "a directory: when the group fails, each rank writes its flight recorder (its last operations and "
          "what the other ranks reported) there as flight_recorder_rank<r>.json (empty: only the error says it)");
ABSL_FLAG(double, first_bucket_mb, 1,
          "DDP's first rebuilt bucket's limit, MiB (PyTorch's dist._DEFAULT_FIRST_BUCKET_BYTES)");
ABSL_FLAG(std::string, comm_hook, "none",
          "none, allreduce, fp16_compress, bf16_compress, powersgd or batched_powersgd");
ABSL_FLAG(bool, find_unused_parameters, false, "DDP: allow parameters without gradients");
ABSL_FLAG(bool, gradient_as_bucket_view, false, "DDP: gradients are views into the buckets");
ABSL_FLAG(bool, static_graph, false, "DDP: the set of used parameters never changes");
ABSL_FLAG(bool, uneven_shards, false,
          "each rank reads its own share of the training set without DistributedSampler's padding (so ranks may "
          "take different numbers of steps) and trains under Join: a rank that runs out shadows the others' "
          "collectives, and every rank ends with the model of a rank that finished last");
ABSL_FLAG(bool, sync_bn, false,
          "SyncBatchNorm: BatchNorm layers normalize with the statistics of all ranks' batches "
          "(torch.nn.SyncBatchNorm.convert_sync_batchnorm); needs a model with BatchNorm (--model=cnn)");
ABSL_FLAG(bool, zero, false,
          "ZeroRedundancyOptimizer: each rank keeps the optimizer state of its share of the parameters only "
          "(PyTorch's greedy partition), and the updated parameters are broadcast after each step");
ABSL_FLAG(bool, fsdp, false,
          "fully sharded data parallel (fsdp/fully_shard.h) instead of DDP: each rank keeps a shard of every "
          "parameter, gradient and optimizer state, and each unit's parameters are all-gathered for its forward "
          "and backward; evaluation and checkpoints gather the whole model for their duration");
ABSL_FLAG(std::vector<std::string>, fsdp_units, {},
          "--fsdp: the units, as comma-separated module paths (empty: each child of the model with parameters)");
ABSL_FLAG(int, powersgd_rank, 1, "--comm_hook=powersgd: the approximation's rank (matrix_approximation_rank)");
ABSL_FLAG(int64_t, powersgd_start_iter, 1000,
          "--comm_hook=powersgd: plain all-reduce for this many iterations first (start_powerSGD_iter, > 1)");
ABSL_FLAG(int64_t, local_sgd_period, 0,
          "post-local SGD: after --local_sgd_start_iter iterations, gradients are averaged within groups of "
          "--local_sgd_group_size ranks only and the parameters over all ranks every this many steps "
          "(post_localSGD_hook and PeriodicModelAverager); 0: off");
ABSL_FLAG(int64_t, local_sgd_start_iter, 100, "post-local SGD: iterations of ordinary DDP first");
ABSL_FLAG(int, local_sgd_group_size, 0,
          "post-local SGD: ranks per local group, in blocks of consecutive ranks (0: the ranks of one node, "
          "LOCAL_WORLD_SIZE); must divide the world size");
ABSL_FLAG(std::string, backend, "auto",
          "gradient all-reduce backend: auto (NCCL for --device=cuda when each local rank has its own GPU, "
          "else the host backend), nccl or host; LOCKSTEP_BACKEND sets it when this flag is auto");

namespace lockstep {
namespace {

constexpr char kProgram[] = "ddp_trainer";
constexpr char kDdpUsage[] =
    "  --nproc=2  --bind_to=core|none  --bucket_cap_mb=25  --first_bucket_mb=1  --timeout=300\n"
    "  --comm_hook=none|allreduce|fp16_compress|bf16_compress|powersgd|batched_powersgd  --powersgd_rank=1  "
    "--powersgd_start_iter=1000\n"
    "  --find_unused_parameters  --gradient_as_bucket_view  --static_graph  --backend=auto|nccl|host\n"
    "  --uneven_shards  --sync_bn  --zero  --fsdp  --fsdp_units=PATH,...\n"
    "  --fault_tolerant  --ft_log_dir=DIR  --ft_settle=1  --ft_admit_every=10 (with lockstep-run --fault_tolerant)\n"
    "  --local_sgd_period=N  --local_sgd_start_iter=100  --local_sgd_group_size=N\n";

// NCCL for the gradients when collectives/bootstrap/backend_choice.h picks it on every
// rank (all ranks must use the same backend, so they agree through the host
// group first); nullptr: the host group carries them.
absl::StatusOr<std::unique_ptr<Communicator>> MaybeCreateNccl(ProcessGroup& group, Device device,
                                                              Milliseconds timeout) {
  BackendChoiceInput in;
  in.requested = absl::GetFlag(FLAGS_backend);
  in.environment = BackendFromEnvironment();
  in.device = device;
  in.nccl_version = device.is_cuda() ? LinkedNcclVersion() : 0;
  in.visible_gpus = device.is_cuda() ? cuda::DeviceCount() : 0;
  in.local_world_size = group.env.local_world_size;
  LOCKSTEP_ASSIGN_OR_RETURN(BackendChoice choice, ChooseBackend(in));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor vote, Tensor::FromVector<int32_t>({choice.kind == BackendKind::kNccl ? 1 : 0}));
  LOCKSTEP_RETURN_IF_ERROR(group.comm->AllReduce(vote, ReduceOp::kMin)->Wait());
  const bool all_nccl = vote.data<int32_t>()[0] == 1;
  if (group.env.rank == 0) {
    std::printf(
        "%s: backend choice: %s%s\n", kProgram, choice.reason.c_str(),
        choice.kind == BackendKind::kNccl && !all_nccl ? " (but another rank cannot use NCCL: host backend)" : "");
  }
  if (!all_nccl) return std::unique_ptr<Communicator>();
  NcclCommunicatorOptions options;
  options.communicator.timeout = timeout;
  options.communicator.dump_on_failure = absl::GetFlag(FLAGS_dump_on_failure);
  options.init_timeout = timeout;
  return CreateNcclCommunicator(group.store, group.env.rank, group.env.world_size, device, options);
}

// The loop over this run's data with `stepper`, `optimizer` and `scaler`.
absl::StatusOr<TrainResult> Train(const TrainerConfig& config, const TrainerDatasets& data, ProcessGroup& group,
                                  Device device, bool uneven_shards, ModelStepper& stepper, Optimizer& optimizer,
                                  GradScaler& scaler) {
  TrainLoopOptions loop = MakeLoopOptions(config, group.env.rank, group.env.world_size);
  loop.device = device;
  loop.uneven_shards = uneven_shards;
  TrainParts parts;
  parts.stepper = &stepper;
  parts.optimizer = &optimizer;
  parts.scaler = &scaler;
  parts.train = data.train;
  parts.test = data.test;
  parts.comm = group.comm.get();
  return RunTraining(loop, parts);
}

// Every rank's bytes sent, then (after every rank's lines) rank 0's result
// and step breakdown: the run's last lines.
absl::Status FinishRank(const TrainResult& result, ProcessGroup& group, Communicator& grad_comm,
                        const std::string& comm_hint) {
  uint64_t sent = 0;
  for (uint64_t b : grad_comm.Traffic().bytes_sent) sent += b;
  std::printf("%s: rank %d: %llu bytes sent to the other ranks over the gradients' group\n", kProgram, group.env.rank,
              static_cast<unsigned long long>(sent));
  std::fflush(stdout);
  LOCKSTEP_RETURN_IF_ERROR(grad_comm.Barrier()->Wait());
  if (group.env.rank == 0) {
    PrintFinalResult(kProgram, result, absl::StrCat("over ", group.env.world_size, " ranks"));
    PrintStepBreakdown(kProgram, result, comm_hint);
  }
  return absl::OkStatus();
}

// --fsdp: the model sharded over the gradients' group, Adam or SGD over the
// shards; the checkpoints are the plain model's (train_loop.h).
absl::Status RunFsdpRank(const TrainerConfig& config, const TrainerDatasets& data, ProcessGroup& group,
                         Communicator& grad_comm, Module& model, Device device) {
  const int rank = group.env.rank;
  const int world_size = group.env.world_size;
  const int64_t parameters = model.NumParameterElements();
  FullyShardOptions options;
  options.units = absl::GetFlag(FLAGS_fsdp_units);
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FsdpStepper> stepper, FsdpStepper::Create(model, grad_comm, options));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<ShardedOptimizer> optimizer,
                            ShardedOptimizer::Create(stepper->fsdp(), [&config](std::vector<NamedParameter> shards) {
                              return MakeOptimizerFor(config, std::move(shards));
                            }));
  LOCKSTEP_ASSIGN_OR_RETURN(GradScaler scaler, MakeGradScaler(config));  // Disabled: fp16 is refused in main.
  int64_t shard = 0;
  for (const NamedParameter& p : stepper->fsdp().ShardParameters()) shard += p.parameter->value.numel();
  if (rank == 0) {
    std::printf(
        "%s: %d ranks (%s), model %s (%lld parameters), %s, optimizer %s, precision %s, device %s, fully sharded: "
        "%zu units, %lld parameter elements a rank (padded)\n",
        kProgram, world_size, group.env.source.c_str(), config.model.c_str(), static_cast<long long>(parameters),
        data.description.c_str(), config.optimizer.c_str(), PrecisionName(config.precision).c_str(),
        device.ToString().c_str(), stepper->fsdp().unit_paths().size(), static_cast<long long>(shard));
    std::fflush(stdout);
  }
  LOCKSTEP_ASSIGN_OR_RETURN(TrainResult result,
                            Train(config, data, group, device, /*uneven_shards=*/false, *stepper, *optimizer, scaler));
  return FinishRank(result, group, grad_comm, "");
}

// --fault_tolerant: an elastic group, DDP rebuilt over each of its epochs.
absl::Status RunFaultTolerantRank(const TrainerConfig& config, const TrainerDatasets& data, DdpOptions ddp_options) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Module> model,
                            MakeModel(config.model, config.seed, config.precision.compute_dtype, Device::Cpu()));
  LOCKSTEP_RETURN_IF_ERROR(FreezeParameters(config, *model));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, MakeOptimizer(config, *model));
  ddp_options.fault_tolerant = true;
  FaultTolerantTrainer t;
  t.program = kProgram;
  t.model_description =
      absl::StrCat("model ", config.model, " (", model->NumParameterElements(), " parameters), ", data.description);
  t.model = model.get();
  t.optimizer = optimizer.get();
  Module& module = *model;
  t.make_stepper = [&module, ddp_options](
                       Communicator& comm,
                       std::unique_ptr<CommHook> hook) -> absl::StatusOr<std::unique_ptr<ModelStepper>> {
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<DdpStepper> stepper,
                              DdpStepper::Create(module, comm, ddp_options, std::move(hook)));
    return std::unique_ptr<ModelStepper>(std::move(stepper));
  };
  t.train = AsExamples(data.train);
  t.test = data.test != nullptr ? AsExamples(data.test) : nullptr;
  return RunFaultTolerantTrainer(config, t);
}

absl::Status RunRank(const TrainerConfig& config, const TrainerDatasets& data, const DdpOptions& ddp_options,
                     const std::string& comm_hook) {
  if (FaultTolerantRequested()) return RunFaultTolerantRank(config, data, ddp_options);
  InitOptions init;
  const Milliseconds timeout(int64_t{absl::GetFlag(FLAGS_timeout)} * 1000);
  init.store_timeout = timeout;
  init.communicator.communicator.timeout = timeout;
  init.communicator.communicator.dump_on_failure = absl::GetFlag(FLAGS_dump_on_failure);
  init.communicator.transport.timeout = timeout;
  LOCKSTEP_ASSIGN_OR_RETURN(ProcessGroup group, InitFromEnv(init));
  const int rank = group.env.rank;
  const int world_size = group.env.world_size;
  Device device = config.device;
  if (device.is_cuda()) {
    const int gpus = cuda::DeviceCount();
    if (gpus == 0) {
      return absl::FailedPreconditionError(absl::StrCat("--device=cuda on rank ", rank, ": no CUDA device is visible (",
                                                        cuda::BuiltWithCuda()
                                                            ? "check "
                                                              "CUDA_VISIBLE_DEVICES and the driver"
                                                            : "this build has no CUDA; build with --config=cuda",
                                                        ")"));
    }
    // One GPU per local rank; with fewer GPUs than local ranks they share
    // round-robin, and the host backend carries the gradients.
    device = Device::Cuda(group.env.local_rank % gpus);
  }
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> nccl_comm, MaybeCreateNccl(group, device, timeout));
  // Gradients go over NCCL when chosen; metrics stay on the host group.
  Communicator& grad_comm = nccl_comm != nullptr ? *nccl_comm : *group.comm;
  // Every rank builds the same model (same seed); DDP broadcasts rank 0's anyway.
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Module> model,
                            MakeModel(config.model, config.seed, config.precision.compute_dtype, device));
  LOCKSTEP_RETURN_IF_ERROR(FreezeParameters(config, *model));
  if (absl::GetFlag(FLAGS_sync_bn)) {
    // Over the gradients' group, before DDP wraps the model.
    LOCKSTEP_ASSIGN_OR_RETURN(const int converted, ConvertSyncBatchNorm(*model, grad_comm));
    if (rank == 0) std::printf("%s: SyncBatchNorm: %d BatchNorm layers synchronized\n", kProgram, converted);
  }
  if (absl::GetFlag(FLAGS_fsdp)) return RunFsdpRank(config, data, group, grad_comm, *model, device);
  std::unique_ptr<Optimizer> optimizer;
  if (absl::GetFlag(FLAGS_zero)) {
    // The parameter broadcasts go where the gradients go.
    LOCKSTEP_ASSIGN_OR_RETURN(optimizer, ZeroRedundancyOptimizer::Create(model->NamedParameters(), grad_comm,
                                                                         [&config](std::vector<NamedParameter> shard) {
                                                                           return MakeOptimizerFor(config,
                                                                                                   std::move(shard));
                                                                         }));
  } else {
    LOCKSTEP_ASSIGN_OR_RETURN(optimizer, MakeOptimizer(config, *model));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(GradScaler scaler, MakeGradScaler(config));
  std::unique_ptr<CommHook> hook;
  std::unique_ptr<Communicator> local_group;  // Post-local SGD's; outlives the hook.
  std::unique_ptr<PeriodicModelAverager> averager;
  const int64_t local_sgd_period = absl::GetFlag(FLAGS_local_sgd_period);
  if (comm_hook == "powersgd" || comm_hook == "batched_powersgd") {
    PowerSgdOptions options;
    options.matrix_approximation_rank = absl::GetFlag(FLAGS_powersgd_rank);
    options.start_powersgd_iter = absl::GetFlag(FLAGS_powersgd_start_iter);
    options.batched = comm_hook == "batched_powersgd";
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<PowerSgdHook> powersgd, PowerSgdHook::Create(options));
    hook = std::move(powersgd);
  } else if (local_sgd_period > 0) {
    const int size = absl::GetFlag(FLAGS_local_sgd_group_size) > 0 ? absl::GetFlag(FLAGS_local_sgd_group_size)
                                                                   : group.env.local_world_size;
    if (size < 1 || world_size % size != 0) {
      return absl::InvalidArgumentError(absl::StrCat("--local_sgd_group_size=", size,
                                                     ": The world size must be divisible by 'group_size' (world size ",
                                                     world_size, ")"));
    }
    LOCKSTEP_ASSIGN_OR_RETURN(local_group, grad_comm.Split(rank / size, rank));
    LocalSgdOptions options;
    options.start_local_sgd_iter = absl::GetFlag(FLAGS_local_sgd_start_iter);
    LOCKSTEP_ASSIGN_OR_RETURN(hook, MakePostLocalSgdHook(options, local_group.get()));
    LOCKSTEP_ASSIGN_OR_RETURN(PeriodicModelAverager a, PeriodicModelAverager::Create(
                                                           local_sgd_period, options.start_local_sgd_iter, &grad_comm));
    averager = std::make_unique<PeriodicModelAverager>(std::move(a));
    if (rank == 0) {
      std::printf(
          "%s: post-local SGD from iteration %lld: gradients averaged in groups of %d ranks, parameters over "
          "all %d every %lld steps\n",
          kProgram, static_cast<long long>(options.start_local_sgd_iter), size, world_size,
          static_cast<long long>(local_sgd_period));
    }
  } else {
    LOCKSTEP_ASSIGN_OR_RETURN(hook, MakeCommHook(comm_hook));
  }
  CommHook* const hook_view = hook.get();
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<DdpStepper> stepper,
                            DdpStepper::Create(*model, grad_comm, ddp_options, std::move(hook)));
  if (averager != nullptr) stepper->SetAverager(std::move(averager));
  if (rank == 0) {
    std::printf(
        "%s: %d ranks (%s), model %s (%lld parameters), %s, optimizer %s, precision %s, "
        "device %s, comm hook %s, %zu buckets, BLAS kernels %s%s\n",
        kProgram, world_size, group.env.source.c_str(), config.model.c_str(),
        static_cast<long long>(model->NumParameterElements()), data.description.c_str(), config.optimizer.c_str(),
        PrecisionName(config.precision).c_str(), device.ToString().c_str(), comm_hook.c_str(),
        stepper->ddp().bucket_indices().size(), BlasCoreName().c_str(), ConvolutionKernelsNote(config).c_str());
    std::printf("%s: gradient backend %s\n", kProgram, grad_comm.capabilities().name.c_str());
    std::fflush(stdout);
  }
  const bool uneven_shards = absl::GetFlag(FLAGS_uneven_shards);
  LOCKSTEP_ASSIGN_OR_RETURN(TrainResult result,
                            Train(config, data, group, device, uneven_shards, *stepper, *optimizer, scaler));
  if (uneven_shards) {
    // Every rank's final model, as a checksum: Join leaves them identical.
    double sum = 0;
    for (Parameter* p : model->Parameters()) {
      LOCKSTEP_ASSIGN_OR_RETURN(std::vector<float> v, p->value.ToVector<float>());
      for (float x : v) sum += x;
    }
    std::printf("%s: rank %d: %lld steps, the last epoch shadowed %lld steps of other ranks; parameter sum %.17g\n",
                kProgram, rank, static_cast<long long>(result.steps), static_cast<long long>(stepper->shadowed_steps()),
                sum);
    std::fflush(stdout);
  }
  if (auto* powersgd = dynamic_cast<PowerSgdHook*>(hook_view); powersgd != nullptr && rank == 0) {
    std::printf("%s: PowerSGD: %lld gradient elements compressed to %lld (%.1fx) over the compressed iterations\n",
                kProgram, static_cast<long long>(powersgd->numel_before_compression()),
                static_cast<long long>(powersgd->numel_after_compression()),
                powersgd->numel_after_compression() > 0
                    ? static_cast<double>(powersgd->numel_before_compression()) / powersgd->numel_after_compression()
                    : 0.0);
  }
  if (auto* zero = dynamic_cast<ZeroRedundancyOptimizer*>(optimizer.get()); zero != nullptr) {
    int64_t mine = 0;
    for (const NamedTensor& t : zero->local().StateTensors()) mine += t.second.numel();
    std::printf("%s: rank %d: ZeRO: %zu of %zu parameters' optimizer state here (%lld elements)\n", kProgram, rank,
                zero->owned().size(), zero->parameters().size(), static_cast<long long>(mine));
  }
  return FinishRank(result, group, grad_comm, " or --comm_hook=fp16_compress");
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  using namespace lockstep;
  absl::StatusOr<TrainerConfig> config = StartTrainerOrExit(argc, argv, kProgram, kDdpUsage);
  DdpOptions ddp_options;
  ddp_options.bucket_cap_mb = absl::GetFlag(FLAGS_bucket_cap_mb);
  if (absl::GetFlag(FLAGS_timeout) < 1) {
    return UsageError(kProgram, absl::InvalidArgumentError("--timeout must be at least 1 (seconds)"));
  }
  const double first_bucket_mb = absl::GetFlag(FLAGS_first_bucket_mb);
  if (!(first_bucket_mb > 0) || first_bucket_mb > 1e6) {
    return UsageError(kProgram, absl::InvalidArgumentError("--first_bucket_mb must be in (0, 1e6]"));
  }
  ddp_options.first_bucket_bytes = std::max<size_t>(1, static_cast<size_t>(first_bucket_mb * 1024 * 1024));
  ddp_options.find_unused_parameters = absl::GetFlag(FLAGS_find_unused_parameters);
  ddp_options.gradient_as_bucket_view = absl::GetFlag(FLAGS_gradient_as_bucket_view);
  ddp_options.static_graph = absl::GetFlag(FLAGS_static_graph);
  if (!(ddp_options.bucket_cap_mb > 0)) {
    return UsageError(kProgram, absl::InvalidArgumentError("--bucket_cap_mb must be > 0"));
  }
  const std::string comm_hook = absl::GetFlag(FLAGS_comm_hook);
  if (comm_hook == "powersgd" || comm_hook == "batched_powersgd") {
    PowerSgdOptions options;
    options.matrix_approximation_rank = absl::GetFlag(FLAGS_powersgd_rank);
    options.start_powersgd_iter = absl::GetFlag(FLAGS_powersgd_start_iter);
    if (absl::Status s = PowerSgdHook::Create(options).status(); !s.ok()) {
      return UsageError(kProgram, absl::InvalidArgumentError(absl::StrCat("--comm_hook=powersgd: ", s.message())));
    }
  } else if (absl::StatusOr<std::unique_ptr<CommHook>> hook = MakeCommHook(comm_hook); !hook.ok()) {
    return UsageError(kProgram,
                      absl::InvalidArgumentError(absl::StrCat(
                          "--comm_hook=", comm_hook,
                          ": expected none, allreduce, fp16_compress, bf16_compress, powersgd or batched_powersgd")));
  } else if (absl::GetFlag(FLAGS_powersgd_rank) != 1 || absl::GetFlag(FLAGS_powersgd_start_iter) != 1000) {
    return UsageError(kProgram,
                      absl::InvalidArgumentError(
                          "--powersgd_rank and --powersgd_start_iter need --comm_hook=powersgd or batched_powersgd"));
  }
  const int64_t local_sgd_period = absl::GetFlag(FLAGS_local_sgd_period);
  if (local_sgd_period < 0 || absl::GetFlag(FLAGS_local_sgd_start_iter) < 0 ||
      absl::GetFlag(FLAGS_local_sgd_group_size) < 0) {
    return UsageError(kProgram,
                      absl::InvalidArgumentError(
                          "--local_sgd_period, --local_sgd_start_iter and --local_sgd_group_size must be >= 0"));
  }
  if (local_sgd_period > 0 && comm_hook != "none") {
    return UsageError(kProgram, absl::InvalidArgumentError(absl::StrCat(
                                    "--local_sgd_period with --comm_hook=", comm_hook,
                                    ": post-local SGD is DDP's comm hook itself (post_localSGD_hook); use one")));
  }
  if (local_sgd_period > 0 && absl::GetFlag(FLAGS_zero)) {
    return UsageError(kProgram, absl::InvalidArgumentError(
                                    "--local_sgd_period with --zero: model averaging and a sharded optimizer do "
                                    "not combine (PyTorch's PostLocalSGDOptimizer wraps a plain optimizer)"));
  }
  if (absl::GetFlag(FLAGS_zero) && absl::GetFlag(FLAGS_uneven_shards)) {
    return UsageError(kProgram, absl::InvalidArgumentError(
                                    "--zero with --uneven_shards: a rank that has run out of data would have to "
                                    "shadow ZeRO's parameter broadcasts too (PyTorch joins the optimizer as a second "
                                    "joinable); use one of them"));
  }
  if (absl::GetFlag(FLAGS_sync_bn) && absl::GetFlag(FLAGS_uneven_shards)) {
    return UsageError(kProgram, absl::InvalidArgumentError(
                                    "--sync_bn with --uneven_shards: a rank that has run out of data cannot shadow "
                                    "SyncBatchNorm's collectives inside the forward and backward (PyTorch's Join "
                                    "hangs there); use one of them"));
  }
  if (absl::GetFlag(FLAGS_sync_bn)) {
    absl::StatusOr<std::unique_ptr<Module>> probe = MakeModel(config->model, config->seed, DType::kF32, Device::Cpu());
    bool has_bn = false;
    if (probe.ok()) {
      for (auto& [path, m] : (*probe)->NamedModules()) has_bn = has_bn || dynamic_cast<BatchNorm*>(m) != nullptr;
    }
    if (!has_bn) {
      return UsageError(kProgram, absl::InvalidArgumentError(absl::StrCat(
                                      "--sync_bn: --model=", config->model,
                                      " has no BatchNorm layer to synchronize (--model=cnn has BatchNorm2d)")));
    }
  }
  if (absl::GetFlag(FLAGS_uneven_shards) && config->grad_accum_steps > 1) {
    return UsageError(kProgram, absl::InvalidArgumentError(
                                    "--uneven_shards with --grad_accum_steps > 1: ranks with different numbers of "
                                    "micro-batches would end their last accumulation group at different points, "
                                    "one synchronizing while another still accumulates; use one of them"));
  }
  if (absl::GetFlag(FLAGS_uneven_shards) && config->checkpoint_every > 0) {
    return UsageError(kProgram, absl::InvalidArgumentError(
                                    "--uneven_shards with --checkpoint_every: ranks end their shards at different "
                                    "steps, so only epoch ends are checkpointed; drop --checkpoint_every"));
  }
  if (absl::GetFlag(FLAGS_fsdp)) {
    const std::vector<std::pair<bool, const char*>> ddp_only = {
        {absl::GetFlag(FLAGS_zero), "--zero (FSDP shards the optimizer state already)"},
        {comm_hook != "none", "--comm_hook (FSDP reduce-scatters its gradients itself)"},
        {local_sgd_period > 0, "--local_sgd_period"},
        {absl::GetFlag(FLAGS_sync_bn), "--sync_bn"},
        {absl::GetFlag(FLAGS_uneven_shards),
         "--uneven_shards (a rank that ran out of data would have to shadow every unit's gathers)"},
        {ddp_options.find_unused_parameters || ddp_options.gradient_as_bucket_view || ddp_options.static_graph,
         "--find_unused_parameters, --gradient_as_bucket_view and --static_graph (DDP's; FSDP reduces unused "
         "parameters' zeros and keeps its gradients in flat buffers anyway)"},
        {config->device.is_cuda(), "--device=cuda (the nn front shards host memory; CUDA is not yet supported)"},
        {!config->freeze.empty(), "--freeze (frozen parameters inside a unit are not supported yet)"},
        {config->precision.compute_dtype == DType::kF16,
         "--amp=fp16 (loss scaling: GradScaler's Inf/NaN check would see only this rank's shards, where PyTorch's "
         "ShardedGradScaler agrees on it over the ranks; use --amp=bf16, which needs no scaler)"},
    };
    for (const auto& [set, what] : ddp_only) {
      if (set) {
        return UsageError(kProgram,
                          absl::InvalidArgumentError(absl::StrCat("--fsdp with ", what, ": use one of them")));
      }
    }
  } else if (!absl::GetFlag(FLAGS_fsdp_units).empty()) {
    return UsageError(kProgram, absl::InvalidArgumentError("--fsdp_units needs --fsdp"));
  }
  if (FaultTolerantRequested()) {
    const std::vector<std::pair<bool, const char*>> fixed_group_only = {
        {absl::GetFlag(FLAGS_fsdp), "--fsdp"},       {absl::GetFlag(FLAGS_zero), "--zero"},
        {comm_hook != "none", "--comm_hook"},        {local_sgd_period > 0, "--local_sgd_period"},
        {absl::GetFlag(FLAGS_sync_bn), "--sync_bn"}, {absl::GetFlag(FLAGS_uneven_shards), "--uneven_shards"},
    };
    for (const auto& [set, what] : fixed_group_only) {
      if (set) {
        return UsageError(kProgram, absl::InvalidArgumentError(absl::StrCat(
                                        "--fault_tolerant with ", what,
                                        ": not supported in a group whose membership changes (plain DDP only)")));
      }
    }
  }
  if (absl::Status ft = CheckFaultTolerantConfig(*config, kProgram); !ft.ok()) return UsageError(kProgram, ft);
  const std::string bind_to = absl::GetFlag(FLAGS_bind_to);
  if (bind_to != "core" && bind_to != "none") {
    return UsageError(kProgram,
                      absl::InvalidArgumentError(absl::StrCat("--bind_to=", bind_to, ": expected core or none")));
  }
  // Check --dataset before starting ranks, so a typo is one message, not N.
  absl::StatusOr<TrainerDatasets> data = LoadTrainerDatasets(*config);
  if (absl::IsNotFound(data.status())) return UsageError(kProgram, data.status());
  if (!HasRankEnvironment()) {
    const int nproc = absl::GetFlag(FLAGS_nproc);
    if (nproc < 1) return UsageError(kProgram, absl::InvalidArgumentError("--nproc must be >= 1"));
    if (!data.ok()) {
      std::fprintf(stderr, "%s: %s\n", kProgram, data.status().ToString().c_str());
      return 1;
    }
    data = absl::StatusOr<TrainerDatasets>();  // The ranks load their own copies.
    return RunLocalRanksOfSelf(kProgram, argc, argv, nproc, bind_to == "core");
  }
  absl::Status s = data.status();
  if (s.ok()) s = RunRank(*config, *data, ddp_options, comm_hook);
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, s.ToString().c_str());
    return 1;
  }
  return 0;
}
