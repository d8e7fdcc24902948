// fsdp_memory_bench: the peak resident memory of one rank training one model
// under DDP, ZeRO-1 (DDP with ZeroRedundancyOptimizer) and FSDP
// (fsdp/fully_shard.h), beside the memory model of each:
//
//   bazel build -c opt //fsdp:fsdp_memory_bench //tools/launch:lockstep-run
//   bazel-bin/tools/launch/lockstep-run --standalone --nproc_per_node 4 \
//       bazel-bin/fsdp/fsdp_memory_bench --mode=fsdp
//
// The model is an MLP of --layers Linear(--width, --width) layers with ReLU
// between them (48 x 2048: 201.4M parameters), trained --steps steps of Adam
// on random batches; every Linear is an FSDP unit. Each rank prints one line:
//
//   rank 0 mode fsdp world 4: baseline 0.137 GiB, setup peak 0.95 GiB,
//       training peak 0.93 GiB; model 0.93 GiB (...)
//
// baseline: the resident memory after the group formed (libraries, the
// communicator), before the model exists. training peak: the high-water mark
// of the training steps alone (reset once the model, wrapper and optimizer
// are built: /proc/self/clear_refs); setup peak: that of building them.
// The model, in bytes, with Psi parameters of 4 bytes, N ranks:
//   ddp:   baseline + 16 Psi + 4 Psi          (parameters, gradients, Adam's two moments;
//                                              DDP's buckets, a second copy of the gradients)
//   zero1: baseline + 12 Psi + 8 Psi / N      (the moments sharded)
//   fsdp:  baseline + 16 Psi / N + 2 U        (U: the largest unit's gathered parameters)
// each plus the activations (two [batch, width] tensors a layer).
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "collectives/bootstrap/init_from_env.h"
#include "core/mt19937.h"
#include "core/status.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/zero_redundancy_optimizer.h"
#include "fsdp/fully_shard.h"
#include "nn/adam.h"
#include "nn/cross_entropy.h"
#include "nn/mlp.h"

ABSL_FLAG(std::string, mode, "fsdp", "ddp, zero1 or fsdp");
ABSL_FLAG(int, layers, 48, "Linear layers");
ABSL_FLAG(int, width, 2048, "features of every layer");
ABSL_FLAG(int, batch, 16, "examples per rank and step");
ABSL_FLAG(int, steps, 3, "Adam steps");
ABSL_FLAG(int64_t, mmap_threshold, int64_t{2} << 20,
          "glibc's M_MMAP_THRESHOLD, bytes: blocks from this size on are mapped and unmapped, so freed memory "
          "leaves the process (0: glibc's adaptive default, which keeps freed blocks of up to 32 MiB in its heap "
          "once one was freed, and the resident set then counts them)");
ABSL_FLAG(bool, phases, false, "rank 0 also prints its resident memory after each phase of every step");

namespace lockstep {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// VmRSS or VmHWM of this process, bytes.
int64_t StatusBytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size() + 1, key + ":") == 0) return std::stoll(line.substr(key.size() + 1)) * 1024;
  }
  return -1;
}

// Resets VmHWM to the current VmRSS (Linux 4.0+, clear_refs "5").
absl::Status ResetPeak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.close();
  if (!out) return absl::InternalError("fsdp_memory_bench: cannot reset the peak through /proc/self/clear_refs");
  return absl::OkStatus();
}

absl::Status Run() {
  const std::string mode = absl::GetFlag(FLAGS_mode);
  const int layers = absl::GetFlag(FLAGS_layers), width = absl::GetFlag(FLAGS_width);
  const int batch = absl::GetFlag(FLAGS_batch), steps = absl::GetFlag(FLAGS_steps);
  if (mode != "ddp" && mode != "zero1" && mode != "fsdp") {
    return absl::InvalidArgumentError(absl::StrCat("--mode=", mode, ": expected ddp, zero1 or fsdp"));
  }
  if (layers < 1 || width < 2 || batch < 1 || steps < 1) {
    return absl::InvalidArgumentError("--layers, --batch and --steps must be >= 1, --width >= 2");
  }
  LOCKSTEP_ASSIGN_OR_RETURN(ProcessGroup group, InitFromEnv());
  Communicator& comm = *group.comm;
  const int rank = comm.rank(), world = comm.size();
  LOCKSTEP_RETURN_IF_ERROR(comm.Barrier()->Wait());
  const int64_t baseline = StatusBytes("VmRSS");
  LOCKSTEP_RETURN_IF_ERROR(ResetPeak());

  Mt19937 gen(7);
  MlpOptions o;
  o.flatten = false;
  o.sizes.assign(layers + 1, width);
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> model, MakeMlp(o, gen));
  const int64_t psi = model->NumParameterElements();
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<FullyShard> fsdp;
  std::unique_ptr<Optimizer> adam;
  AdamOptions adam_options;
  adam_options.lr = 1e-4;
  if (mode == "fsdp") {
    LOCKSTEP_ASSIGN_OR_RETURN(fsdp, FullyShard::Create(*model, comm));
    LOCKSTEP_ASSIGN_OR_RETURN(adam, Adam::Create(fsdp->ShardParameters(), adam_options));
  } else {
    LOCKSTEP_ASSIGN_OR_RETURN(ddp, DistributedDataParallel::Create(*model, comm));
    if (mode == "zero1") {
      LOCKSTEP_ASSIGN_OR_RETURN(
          adam, ZeroRedundancyOptimizer::Create(
                    model->NamedParameters(), comm,
                    [&](std::vector<NamedParameter> shard) -> absl::StatusOr<std::unique_ptr<Optimizer>> {
                      LOCKSTEP_ASSIGN_OR_RETURN(auto a, Adam::Create(std::move(shard), adam_options));
                      return std::unique_ptr<Optimizer>(std::move(a));
                    }));
    } else {
      LOCKSTEP_ASSIGN_OR_RETURN(adam, Adam::Create(model->NamedParameters(), adam_options));
    }
  }
  const int64_t setup_peak = StatusBytes("VmHWM");
  LOCKSTEP_RETURN_IF_ERROR(ResetPeak());
  if (rank == 0 && absl::GetFlag(FLAGS_phases)) {
    std::printf("rank 0 after setup: resident %.3f GiB\n", StatusBytes("VmRSS") / kGiB);
  }

  Mt19937 data(1000 + rank);
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor x, Tensor::Empty({batch, width}, DType::kF32));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor y, Tensor::Empty({batch}, DType::kI64));
  float loss = 0;
  for (int step = 0; step < steps; ++step) {
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(data.Next32() / 4294967296.0 - 0.5);
    for (int64_t i = 0; i < batch; ++i) y.data<int64_t>()[i] = static_cast<int64_t>(data.Next32() % width);
    auto phase = [&](const char* name) {
      if (rank == 0 && absl::GetFlag(FLAGS_phases)) {
        std::printf("rank 0 step %d after %s: resident %.3f GiB, peak %.3f GiB\n", step, name,
                    StatusBytes("VmRSS") / kGiB, StatusBytes("VmHWM") / kGiB);
      }
    };
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, fsdp != nullptr ? fsdp->Forward(x) : ddp->Forward(x));
    phase("forward");
    LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, y));
    LOCKSTEP_RETURN_IF_ERROR(fsdp != nullptr ? fsdp->Backward(ce.grad_logits) : ddp->Backward(ce.grad_logits));
    phase("backward");
    LOCKSTEP_RETURN_IF_ERROR(adam->Step());
    phase("step");
    LOCKSTEP_RETURN_IF_ERROR(adam->ZeroGrad(/*set_to_none=*/true));
    phase("zero_grad");
    loss = ce.loss;
  }
  const int64_t train_peak = StatusBytes("VmHWM");

  const double unit = 4.0 * (static_cast<double>(width) * width + width);
  const double activations = 2.0 * layers * batch * width * 4;
  double model_bytes = baseline + activations;
  std::string formula;
  if (mode == "ddp") {
    model_bytes += 20.0 * psi;
    formula = "baseline + 16 Psi + 4 Psi buckets + activations";
  } else if (mode == "zero1") {
    model_bytes += 12.0 * psi + 8.0 * psi / world;
    formula = "baseline + 8 Psi + 4 Psi buckets + 8 Psi / N + activations";
  } else {
    model_bytes += 16.0 * psi / world + 2 * unit;
    formula = "baseline + 16 Psi / N + 2 U + activations";
  }
  std::printf(
      "rank %d mode %s world %d: baseline %.3f GiB, setup peak %.3f GiB, training peak %.3f GiB; model %.3f GiB "
      "(%s; Psi %lld, U %.3f GiB, activations %.3f GiB); training peak / model %.3f; last loss %.4f\n",
      rank, mode.c_str(), world, baseline / kGiB, setup_peak / kGiB, train_peak / kGiB, model_bytes / kGiB,
      formula.c_str(), static_cast<long long>(psi), unit / kGiB, activations / kGiB, train_peak / model_bytes, loss);
  std::fflush(stdout);
  return comm.Barrier()->Wait();
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (const int64_t threshold = absl::GetFlag(FLAGS_mmap_threshold); threshold > 0) {
    if (mallopt(M_MMAP_THRESHOLD, static_cast<int>(threshold)) != 1) {
      std::fprintf(stderr, "fsdp_memory_bench: mallopt(M_MMAP_THRESHOLD, %lld) failed\n",
                   static_cast<long long>(threshold));
      return 1;
    }
  }
  const absl::Status status = lockstep::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "fsdp_memory_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
