// lockstep without libtorch, from an installed package: lockstep's own MLP
// under its DDP, fed by the DistributedSampler, stepped through a GradScaler
// (core, collectives, data, nn, amp and ddp in one program). Built by CMake
// against the static archives and by a plain compiler line against
// pkg-config's flags (cmake_consumer_test.sh). Under any launcher:
//   lockstep-run --standalone --nproc_per_node 2 build/plain_ddp
#include <cstdio>
#include <memory>
#include <vector>

#include "amp/grad_scaler.h"
#include "collectives/bootstrap/init_from_env.h"
#include "collectives/tcp_store.h"  // an old include path: it still works
#include "core/mt19937.h"
#include "core/status.h"
#include "data/distributed_sampler.h"
#include "ddp/distributed_data_parallel.h"
#include "nn/cross_entropy.h"
#include "nn/mlp.h"
#include "nn/sgd.h"

namespace {

using namespace lockstep;

// Example i: four features from i alone; its class is whether the first is
// positive, so every rank can build any example.
void Example(int64_t i, float* x, int64_t* label) {
  for (int k = 0; k < 4; ++k) x[k] = static_cast<float>(((i * 7 + k * 3) % 11) - 5);
  *label = x[0] > 0 ? 1 : 0;
}

absl::Status Train() {
  LOCKSTEP_ASSIGN_OR_RETURN(ProcessGroup group, InitFromEnv());
  const int rank = group.env.rank, world = group.env.world_size;
  Mt19937 gen(rank);  // different initial weights: DDP broadcasts rank 0's
  MlpOptions mlp;
  mlp.sizes = {4, 16, 2};
  mlp.flatten = false;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> model, MakeMlp(mlp, gen));
  LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, *group.comm));
  SgdOptions sgd;
  sgd.lr = 0.1;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> optimizer, Sgd::Create(model->NamedParameters(), sgd));
  GradScalerOptions scaling;
  scaling.enabled = false;  // f32
  LOCKSTEP_ASSIGN_OR_RETURN(GradScaler scaler, GradScaler::Create(scaling));
  DistributedSamplerOptions sampling;
  sampling.num_replicas = world;
  sampling.rank = rank;
  LOCKSTEP_ASSIGN_OR_RETURN(DistributedSampler sampler, DistributedSampler::Create(64, sampling));
  double first = 0, last = 0;
  int64_t seen = 0;
  for (int64_t epoch = 0; epoch < 10; ++epoch) {
    sampler.SetEpoch(epoch);
    const std::vector<int64_t> indices = sampler.Indices();
    seen += static_cast<int64_t>(indices.size());
    std::vector<float> x(indices.size() * 4);
    std::vector<int64_t> y(indices.size());
    for (size_t j = 0; j < indices.size(); ++j) Example(indices[j], &x[j * 4], &y[j]);
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor batch, Tensor::FromVector<float>(x, {static_cast<int64_t>(indices.size()), 4}));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor labels, Tensor::FromVector<int64_t>(y));
    LOCKSTEP_RETURN_IF_ERROR(optimizer->ZeroGrad());
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, ddp->Forward(batch));
    LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult loss, CrossEntropy(logits, labels));
    LOCKSTEP_RETURN_IF_ERROR(ddp->Backward(loss.grad_logits));
    std::vector<Tensor> grads;
    for (Parameter* p : model->Parameters()) grads.push_back(p->grad);
    LOCKSTEP_ASSIGN_OR_RETURN(bool stepped, scaler.Step(grads, [&] { return optimizer->Step(); }));
    if (!stepped) return absl::InternalError("plain_ddp: the scaler skipped an f32 step");
    (epoch == 0 ? first : last) = loss.loss;
  }
  double checksum = 0;
  for (Parameter* p : model->Parameters()) {
    const float* v = p->value.data<float>();
    for (int64_t k = 0; k < p->value.numel(); ++k) checksum += v[k];
  }
  std::printf("rank %d examples %lld loss %.4f -> %.4f checksum %.9g\n", rank, static_cast<long long>(seen), first,
              last, checksum);
  return absl::OkStatus();
}

}  // namespace

int main() {
  const absl::Status status = Train();
  if (!status.ok()) std::fprintf(stderr, "plain_ddp: %s\n", status.ToString().c_str());
  return status.ok() ? 0 : 1;
}
