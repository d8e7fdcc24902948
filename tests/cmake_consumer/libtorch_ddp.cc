// Your libtorch model with lockstep's DDP: the README's example, built from
// outside the lockstep repository, by CMake on the installed package
// (CMakeLists.txt here) and by Bazel in tests/consumer. Run it under any
// launcher:
//   lockstep-run --standalone --nproc_per_node 2 build/libtorch_ddp
#include <torch/torch.h>

#include <cstdio>

#include "collectives/bootstrap/init_from_env.h"
#include "interop/torch/ddp/distributed_data_parallel.h"

struct Net : torch::nn::Module {
  torch::nn::Linear fc1{register_module("fc1", torch::nn::Linear(20, 32))};
  torch::nn::Linear fc2{register_module("fc2", torch::nn::Linear(32, 4))};
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x))); }
};

absl::Status Train() {
  LOCKSTEP_ASSIGN_OR_RETURN(lockstep::ProcessGroup group, lockstep::InitFromEnv());
  const int rank = group.env.rank;
  torch::manual_seed(0);  // a reproducible run (DDP gives every rank rank 0's weights)
  auto model = std::make_shared<Net>();
  LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, lockstep::interop::DistributedDataParallel<Net>::Create(model, *group.comm));
  torch::optim::SGD optimizer(model->parameters(), /*lr=*/0.1);
  // A held-out batch, the same on every rank: its loss before and after
  // training tells whether the model learned (one training batch's loss is
  // too noisy to).
  torch::manual_seed(1000);
  const torch::Tensor held_x = torch::randn({512, 20}), held_y = held_x.slice(1, 0, 4).argmax(1);
  auto held_out_loss = [&] {
    torch::NoGradGuard no_grad;
    return torch::nn::functional::cross_entropy(model->forward(held_x), held_y).item<float>();
  };
  const float before = held_out_loss();
  torch::manual_seed(rank);  // each rank its own shard of data
  for (int step = 0; step < 20; ++step) {
    torch::Tensor x = torch::randn({16, 20}), y = x.slice(1, 0, 4).argmax(1);
    LOCKSTEP_ASSIGN_OR_RETURN(torch::Tensor out, ddp->Forward(x));
    torch::Tensor loss = torch::nn::functional::cross_entropy(out, y);
    loss.backward();  // gradients averaged across the ranks here
    optimizer.step();
    optimizer.zero_grad();
    if (step % 19 == 0) std::printf("rank %d step %d loss %.4f\n", rank, step, loss.item<float>());
  }
  std::printf("rank %d held-out loss %.4f -> %.4f\n", rank, before, held_out_loss());
  // Every rank holds the same model.
  std::printf("rank %d checksum %.9g\n", rank, model->fc1->weight.sum().item<double>());
  return absl::OkStatus();
}

int main() {
  const absl::Status status = Train();
  if (!status.ok()) std::fprintf(stderr, "%s\n", status.ToString().c_str());
  return status.ok() ? 0 : 1;
}
