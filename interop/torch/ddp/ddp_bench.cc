// Training throughput of a libtorch model, 2 ranks, one thread each, data
// already in memory, in the shape of tools/bench/peers/torch_ddp_mlp.py:
// --model=mlp (default; the reference MLP 784-512-256-10, SGD lr 0.1
// momentum 0.9, 64 per rank), resnet18 or char_transformer
// (interop/torch/models, SGD lr 0.1 / 0.01 momentum 0.9, --batch per rank;
// tools/bench/peers/torch_models_ddp_peer.py is their Python peer):
//
//   ddp_bench --nproc=2 --mode=lockstep       lockstep's DDP for libtorch
//   ddp_bench --nproc=2 --mode=c10d_recipe    what C++ users write today
//       (pytorch/examples' cpp/distributed/dist-mnist.cpp): after backward,
//       each parameter's gradient all-reduced on its own through libtorch's
//       c10d ProcessGroupGloo, then divided by the world size.
//   ddp_bench --nproc=2 --mode=local          no communication at all: each
//       rank trains alone, the bound any DDP approaches.
//   ddp_bench --nproc=2 --mode=fsdp           lockstep's FSDP for libtorch
//       (interop/torch/fsdp): each block of ResNet-18 or the Transformer a
//       unit (the MLP: one unit), the SGD over the shards.
//
// A step is zero_grad + forward + backward (+ the reduction) + SGD step.
// Prints one JSON line: {"tool", "ranks", "global_batch", "step_ms_median",
// "samples_per_s", "wall_samples_per_s", "peak_rss_mb" (per rank),
// "bytes_sent_per_step" (rank 0's, over lockstep's communicator)} with the
// slowest rank's times, as the Python peer does.
// tools/bench/compare_libtorch_ddp.sh runs all three for the MLP,
// tools/bench/compare_torch_models.sh for the two models.
#include <ATen/Parallel.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "collectives/bootstrap/init_from_env.h"
#include "collectives/bootstrap/local_launch.h"
#include "core/status.h"
#include "interop/torch/ddp/distributed_data_parallel.h"
#include "interop/torch/fsdp/fully_shard.h"
#include "interop/torch/models/char_transformer.h"
#include "interop/torch/models/resnet18.h"

#include <sys/resource.h>

ABSL_FLAG(int, nproc, 0, "start this many local ranks (0: join the group in the environment)");
ABSL_FLAG(std::string, mode, "lockstep", "lockstep, fsdp, c10d_recipe or local (no communication)");
ABSL_FLAG(int, steps, 300, "timed steps");
ABSL_FLAG(int, warmup, 30, "untimed steps first");
ABSL_FLAG(double, bucket_cap_mb, 25, "--mode=lockstep: DdpOptions::bucket_cap_mb");
ABSL_FLAG(bool, gradient_as_bucket_view, false, "--mode=lockstep: DdpOptions::gradient_as_bucket_view");
ABSL_FLAG(std::string, model, "mlp", "mlp, resnet18 or char_transformer");
ABSL_FLAG(int64_t, batch, 64, "examples per rank per step");

namespace lockstep {
namespace {

struct Mlp : torch::nn::Module {
  torch::nn::Linear fc1{register_module("fc1", torch::nn::Linear(784, 512))};
  torch::nn::Linear fc2{register_module("fc2", torch::nn::Linear(512, 256))};
  torch::nn::Linear fc3{register_module("fc3", torch::nn::Linear(256, 10))};
  torch::Tensor forward(torch::Tensor x) { return fc3(torch::relu(fc2(torch::relu(fc1(x.flatten(1)))))); }
};

// One of the models behind a uniform forward and loss.
struct Model : torch::nn::Module {
  // `shard`: the blocks built as FSDP units.
  Model(const std::string& name, bool shard) {
    if (name == "resnet18") {
      interop::ResNet18Options options;
      options.shard_blocks = shard;
      resnet = register_module("m", interop::ResNet18(options));
    } else if (name == "char_transformer") {
      interop::CharTransformerOptions options;
      options.shard_blocks = shard;
      transformer = register_module("m", interop::CharTransformer(options));
    } else {
      mlp = register_module("m", std::make_shared<Mlp>());
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    if (resnet) return resnet->forward(x);
    if (transformer) return transformer->forward(x);
    return mlp->forward(x);
  }
  torch::Tensor Loss(const torch::Tensor& out, const torch::Tensor& y) const {
    return transformer ? interop::CharTransformerLoss(out, y) : torch::nn::functional::cross_entropy(out, y);
  }
  std::shared_ptr<Mlp> mlp;
  interop::ResNet18 resnet{nullptr};
  interop::CharTransformer transformer{nullptr};
};

absl::Status Run() {
  at::set_num_threads(1);
  LOCKSTEP_ASSIGN_OR_RETURN(ProcessGroup group, InitFromEnv());
  Communicator& comm = *group.comm;
  const int rank = comm.rank(), world = comm.size();
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode != "lockstep" && mode != "fsdp" && mode != "c10d_recipe" && mode != "local") {
    return absl::InvalidArgumentError(absl::StrCat("--mode=", mode, ": expected lockstep, fsdp, c10d_recipe or local"));
  }
  const std::string name = absl::GetFlag(FLAGS_model);
  if (name != "mlp" && name != "resnet18" && name != "char_transformer") {
    return absl::InvalidArgumentError(absl::StrCat("--model=", name, ": expected mlp, resnet18 or char_transformer"));
  }
  const int64_t batch = absl::GetFlag(FLAGS_batch);
  if (batch < 1) return absl::InvalidArgumentError("--batch must be >= 1");
  torch::manual_seed(0);
  auto model = std::make_shared<Model>(name, mode == "fsdp");
  const double lr = name == "char_transformer" ? 0.01 : 0.1;
  std::unique_ptr<interop::FullyShard<Model>> fsdp;
  if (mode == "fsdp") {
    LOCKSTEP_ASSIGN_OR_RETURN(fsdp, interop::FullyShard<Model>::Create(model, comm));
  }
  torch::optim::SGD sgd(fsdp != nullptr ? fsdp->shard_parameters() : model->parameters(),
                        torch::optim::SGDOptions(lr).momentum(0.9));
  torch::manual_seed(100 + rank);
  std::vector<std::pair<torch::Tensor, torch::Tensor>> batches;
  for (int i = 0; i < 4; ++i) {
    if (name == "char_transformer") {
      batches.emplace_back(torch::randint(0, 114, {batch, 128}, torch::kLong),
                           torch::randint(0, 114, {batch, 128}, torch::kLong));
    } else {
      batches.emplace_back(torch::rand({batch, 1, 28, 28}) * 2 - 1, torch::randint(0, 10, {batch}, torch::kLong));
    }
  }

  std::unique_ptr<interop::DistributedDataParallel<Model>> ddp;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
  if (mode == "lockstep") {
    DdpOptions options;
    options.bucket_cap_mb = absl::GetFlag(FLAGS_bucket_cap_mb);
    options.gradient_as_bucket_view = absl::GetFlag(FLAGS_gradient_as_bucket_view);
    LOCKSTEP_ASSIGN_OR_RETURN(ddp, interop::DistributedDataParallel<Model>::Create(model, comm, options));
  } else if (mode == "c10d_recipe") {
    // A FileStore whose path rank 0 chooses and shares through lockstep's store.
    const std::string key = "ddp_bench/c10d_file_store";
    if (rank == 0) {
      LOCKSTEP_RETURN_IF_ERROR(group.store->Set(
          key, absl::StrCat(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp", "/ddp_bench_", ::getpid())));
    }
    LOCKSTEP_ASSIGN_OR_RETURN(std::string path, group.store->Get(key, Milliseconds(60000)));
    try {
      auto store = c10::make_intrusive<c10d::FileStore>(path, world);
      auto options = c10d::ProcessGroupGloo::Options::create();
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, options);
      // Start from rank 0's parameters, as the recipe's broadcast does.
      for (auto& p : model->parameters()) {
        std::vector<at::Tensor> t{p.detach()};
        gloo->broadcast(t)->wait();
      }
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("c10d ProcessGroupGloo: ", e.what()));
    }
  }

  auto step = [&](int i) -> absl::Status {
    const auto& [x, y] = batches[static_cast<size_t>(i) % batches.size()];
    sgd.zero_grad();
    torch::Tensor out;
    if (ddp != nullptr) {
      LOCKSTEP_ASSIGN_OR_RETURN(out, ddp->Forward(x));
    } else if (fsdp != nullptr) {
      LOCKSTEP_ASSIGN_OR_RETURN(out, fsdp->Forward(x));
    } else {
      out = model->forward(x);
    }
    model->Loss(out, y).backward();
    if (gloo) {
      // dist-mnist.cpp: every gradient on its own, after backward.
      for (auto& p : model->parameters()) {
        std::vector<at::Tensor> t{p.grad()};
        gloo->allreduce(t)->wait();
        p.grad().div_(world);
      }
    }
    sgd.step();
    return absl::OkStatus();
  };

  const int steps = absl::GetFlag(FLAGS_steps), warmup = absl::GetFlag(FLAGS_warmup);
  try {
    for (int i = 0; i < warmup; ++i) LOCKSTEP_RETURN_IF_ERROR(step(i));
    LOCKSTEP_RETURN_IF_ERROR(comm.Barrier()->Wait());
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor times, Tensor::Zeros({steps + 1}, DType::kF64));
    auto sent = [&comm] {
      uint64_t total = 0;
      for (uint64_t b : comm.Traffic().bytes_sent) total += b;
      return total;
    };
    const uint64_t sent_before = sent();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      LOCKSTEP_RETURN_IF_ERROR(step(i));
      times.data<double>()[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    times.data<double>()[steps] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double bytes_per_step = static_cast<double>(sent() - sent_before) / steps;
    LOCKSTEP_RETURN_IF_ERROR(comm.AllReduce(times, ReduceOp::kMax)->Wait());
    // Every rank's peak resident set, in its own slot of a sum.
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor rss, Tensor::Zeros({world}, DType::kF64));
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    rss.data<double>()[rank] = usage.ru_maxrss / 1024.0;  // KiB -> MiB
    LOCKSTEP_RETURN_IF_ERROR(comm.AllReduce(rss, ReduceOp::kSum)->Wait());
    if (rank == 0) {
      std::string peaks;
      for (int r = 0; r < world; ++r)
        absl::StrAppend(&peaks, r ? ", " : "", static_cast<int64_t>(rss.data<double>()[r]));
      std::vector<double> ms(times.data<double>(), times.data<double>() + steps);
      for (double& v : ms) v *= 1e3;
      std::sort(ms.begin(), ms.end());
      const double median = ms[ms.size() / 2];
      const int64_t global = batch * world;
      std::printf(
          "{\"tool\": \"%s\", \"model\": \"%s\", \"ranks\": %d, \"global_batch\": %lld, "
          "\"step_ms_median\": %.4f, \"samples_per_s\": %.1f, \"wall_samples_per_s\": %.1f, "
          "\"peak_rss_mb\": [%s], \"bytes_sent_per_step\": %.0f}\n",
          mode == "lockstep" ? "lockstep_libtorch_ddp"
          : mode == "fsdp"   ? "lockstep_libtorch_fsdp"
                             : mode.c_str(),
          name.c_str(), world, static_cast<long long>(global), median, global / (median / 1e3),
          steps * global / times.data<double>()[steps], peaks.c_str(), bytes_per_step);
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("libtorch raised: ", e.what()));
  }
  return comm.Barrier()->Wait();
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (const int nproc = absl::GetFlag(FLAGS_nproc); nproc > 0) {
    lockstep::LocalLaunchOptions options;
    options.nproc = nproc;
    options.name = "ddp_bench";
    options.argv = {"/proc/self/exe"};
    for (char** a = argv + 1; *a != nullptr; ++a) {
      if (std::string(*a).rfind("--nproc", 0) != 0) options.argv.push_back(*a);
    }
    options.argv.push_back("--nproc=0");
    const absl::Status s = lockstep::RunLocalRanks(options);
    if (!s.ok()) std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return s.ok() ? 0 : 1;
  }
  const absl::Status s = lockstep::Run();
  if (!s.ok()) std::fprintf(stderr, "ddp_bench: %s\n", s.ToString().c_str());
  return s.ok() ? 0 : 1;
}
