// Your libtorch model with lockstep's FSDP: the README's example, built from
// outside the lockstep repository, by CMake on the installed package
// (CMakeLists.txt here) and by Bazel in tests/consumer. Run it under any
// launcher:
//   lockstep-run --standalone --nproc_per_node 2 build/libtorch_fsdp
#include <torch/torch.h>

#include <cstdio>

#include "collectives/bootstrap/init_from_env.h"
#include "interop/torch/fsdp/fully_shard.h"

using lockstep::interop::Sharded;

struct Net : torch::nn::Module {  // each Sharded block is a unit: gathered only while it runs
  torch::nn::Sequential body{register_module(
      "body", torch::nn::Sequential(Sharded(torch::nn::Linear(20, 256)), torch::nn::Functional(torch::relu),
                                    Sharded(torch::nn::Linear(256, 256)), torch::nn::Functional(torch::relu)))};
  torch::nn::Linear head{register_module("head", torch::nn::Linear(256, 4))};
  torch::Tensor forward(torch::Tensor x) { return head(body->forward(x)); }
};

absl::Status Train() {
  LOCKSTEP_ASSIGN_OR_RETURN(lockstep::ProcessGroup group, lockstep::InitFromEnv());
  const int rank = group.env.rank;
  torch::manual_seed(rank);  // any weights: FullyShard starts every rank from rank 0's
  auto model = std::make_shared<Net>();
  LOCKSTEP_ASSIGN_OR_RETURN(auto fsdp, lockstep::interop::FullyShard<Net>::Create(model, *group.comm));
  torch::optim::Adam optimizer(fsdp->shard_parameters(), /*lr=*/1e-3);  // this rank's shards only
  // A held-out batch, the same on every rank: its loss before and after
  // training tells whether the model learned.
  torch::manual_seed(1000);
  const torch::Tensor held_x = torch::randn({512, 20}), held_y = held_x.slice(1, 0, 4).argmax(1);
  auto held_out_loss = [&]() -> absl::StatusOr<float> {
    torch::NoGradGuard no_grad;
    LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor out, fsdp->Forward(held_x));
    return torch::nn::functional::cross_entropy(out, held_y).item<float>();
  };
  LOCKSTEP_ASSIGN_OR_RETURN(const float before, held_out_loss());
  torch::manual_seed(rank);  // each rank its own shard of data
  for (int step = 0; step < 20; ++step) {
    torch::Tensor x = torch::randn({16, 20}), y = x.slice(1, 0, 4).argmax(1);
    LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor out, fsdp->Forward(x));
    torch::nn::functional::cross_entropy(out, y).backward();  // shard gradients averaged here
    optimizer.step();
    optimizer.zero_grad();
  }
  LOCKSTEP_ASSIGN_OR_RETURN(const float after, held_out_loss());
  std::printf("rank %d held-out loss %.4f -> %.4f\n", rank, before, after);
  // The whole model, the plain module's names: the same on every rank.
  LOCKSTEP_ASSIGN_OR_RETURN(auto state, fsdp->FullStateDict());
  double sum = 0;
  for (const auto& [name, t] : state) sum += t.to(torch::kDouble).sum().item<double>();
  std::printf("rank %d checksum %.12g over %zu tensors\n", rank, sum, state.size());
  return absl::OkStatus();
}

int main() {
  const absl::Status status = Train();
  if (!status.ok()) std::fprintf(stderr, "%s\n", status.ToString().c_str());
  return status.ok() ? 0 : 1;
}
