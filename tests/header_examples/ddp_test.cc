// The usage examples of ddp's public headers, compiled and run on two ranks
// (threads over loopback TCP, collectives/testing/group.h). Each example's
// lines appear below exactly as in its header (checked by
// //tests:header_examples_check); lines in between set up its inputs or check
// its results.
#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "collectives/testing/group.h"
#include "core/mt19937.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ddp/comm_hook.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/heal.h"
#include "collectives/elastic/elastic_group.h"
#include "collectives/store/hash_store.h"
#include <map>
#include <string>
#include <thread>
#include "ddp/join.h"
#include "ddp/local_sgd.h"
#include "ddp/powersgd_hook.h"
#include "ddp/zero_redundancy_optimizer.h"
#include "nn/adam.h"
#include "ddp/sync_batch_norm.h"
#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "gtest/gtest.h"
#include "nn/cross_entropy.h"
#include "nn/mlp.h"
#include "nn/module.h"
#include "nn/sequential.h"
#include "nn/sgd.h"

namespace lockstep {
namespace {

// A batch of 4 images [4, 1, 28, 28] and their labels; `rank` varies them.
struct Batch {
  Tensor images, labels;
};

Batch MakeBatch(int rank) {
  Mt19937 noise(7 + rank);
  std::vector<float> pixels(4 * 784);
  for (float& p : pixels) p = static_cast<float>(noise.Next32() % 256) / 255.0f;
  return {*Tensor::FromVector<float>(pixels, {4, 1, 28, 28}),
          *Tensor::FromVector<int64_t>({3, 1, 4, static_cast<int64_t>(rank)})};
}

std::vector<float> Values(const Tensor& t) { return *t.ToVector<float>(); }

absl::StatusOr<std::unique_ptr<Sequential>> MakeModel() {
  Mt19937 gen(0);
  MlpOptions options;
  options.sizes = {784, 32, 10};
  return MakeMlp(options, gen);
}

// ddp/distributed_data_parallel.h. `hook` (for ddp/comm_hook.h) replaces the
// default all-reduce when set.
absl::Status DdpExample(Communicator* comm, const Tensor& images, const Tensor& labels, int steps, bool fp16_hook,
                        std::vector<NamedTensor>* trained) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> model, MakeModel());
  SgdOptions sgd;
  sgd.lr = 0.1;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> optimizer, Sgd::Create(model->NamedParameters(), sgd));
  DdpOptions options;                       // PyTorch's names and defaults
  LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, *comm, options));
  if (fp16_hook) {
    // ddp/comm_hook.h
    LOCKSTEP_RETURN_IF_ERROR(ddp->RegisterCommHook(MakeFp16CompressHook()));   // half the traffic
  }
  for (int step = 0; step < steps; ++step) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, ddp->Forward(images));
    LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult loss, CrossEntropy(logits, labels));
    LOCKSTEP_RETURN_IF_ERROR(ddp->Backward(loss.grad_logits));  // grads now averaged
    LOCKSTEP_RETURN_IF_ERROR(optimizer->Step());
    LOCKSTEP_RETURN_IF_ERROR(model->ZeroGrad());
  }
  for (NamedTensor& t : model->StateDict()) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor copy, t.second.Clone());
    trained->push_back({t.first, copy});
  }
  return absl::OkStatus();
}

// What DDP must compute: SGD on the mean of the two ranks' gradients (each
// rank's loss is a mean over its own batch).
std::vector<NamedTensor> Reference(int steps) {
  std::unique_ptr<Sequential> model = *MakeModel();
  std::unique_ptr<Sgd> sgd = *Sgd::Create(model->NamedParameters(), SgdOptions{0.1});
  std::vector<Parameter*> params = model->Parameters();
  for (int step = 0; step < steps; ++step) {
    std::vector<std::vector<float>> sum(params.size());
    for (int rank = 0; rank < 2; ++rank) {
      const Batch b = MakeBatch(rank);
      CrossEntropyResult loss = *CrossEntropy(*model->Forward(b.images), b.labels);
      EXPECT_TRUE(model->Backward(loss.grad_logits).ok());
      for (size_t i = 0; i < params.size(); ++i) {
        std::vector<float> g = Values(params[i]->grad);
        if (sum[i].empty()) sum[i].assign(g.size(), 0.0f);
        for (size_t k = 0; k < g.size(); ++k) sum[i][k] += g[k] / 2;
      }
      EXPECT_TRUE(model->ZeroGrad().ok());
    }
    for (size_t i = 0; i < params.size(); ++i) {
      std::copy(sum[i].begin(), sum[i].end(), params[i]->grad.data<float>());
    }
    EXPECT_TRUE(sgd->Step().ok());
    EXPECT_TRUE(model->ZeroGrad().ok());
  }
  return model->StateDict();
}

void ExpectTrainedLike(const std::vector<NamedTensor>& got, const std::vector<NamedTensor>& want, float tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const std::vector<float> g = Values(got[i].second), w = Values(want[i].second);
    ASSERT_EQ(g.size(), w.size());
    for (size_t k = 0; k < w.size(); ++k) ASSERT_NEAR(g[k], w[k], tolerance) << want[i].first << "[" << k << "]";
  }
}

void RunDdp(bool fp16_hook, float tolerance) {
  std::vector<std::vector<NamedTensor>> trained(2);
  const std::vector<absl::Status> results = testing::RunThreads(2, [&](Communicator& comm) {
    const Batch b = MakeBatch(comm.rank());
    return DdpExample(&comm, b.images, b.labels, 2, fp16_hook, &trained[comm.rank()]);
  });
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  // Both replicas stay equal, and equal the averaged-gradient reference.
  ExpectTrainedLike(trained[1], trained[0], 0.0f);
  ExpectTrainedLike(trained[0], Reference(2), tolerance);
}

TEST(DdpExamplesTest, DdpAveragesGradientsOverRanks) { RunDdp(/*fp16_hook=*/false, 1e-6f); }

TEST(DdpExamplesTest, Fp16CompressHookAveragesInHalfPrecision) { RunDdp(/*fp16_hook=*/true, 1e-3f); }


// ddp/heal.h: two members of an elastic group; member 1 is new (step 0,
// a model of another seed) and takes member 0's state at step 7.
absl::Status HealExample(std::shared_ptr<Store> store, int rank, std::vector<float>* weights, int64_t* step_out) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<ElasticGroup> group, ElasticGroup::Create(store, rank, 2, {}));
  Mt19937 gen(rank);
  MlpOptions mlp;
  mlp.sizes = {784, 32, 10};
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> model, MakeMlp(mlp, gen));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> optimizer, Sgd::Create(model->NamedParameters(), SgdOptions{0.1}));
  int64_t step = rank == 0 ? 7 : 0;
  std::map<std::string, std::string> state = {{"sampler.position", rank == 0 ? "448" : "0"}};
  LOCKSTEP_ASSIGN_OR_RETURN(HealResult healed,
                            HealFromPeer(group->comm(), step, *model, optimizer.get(), &state));
  step = healed.step;  // every member's now, with the same parameters
  *weights = Values(model->NamedParameters()[0].parameter->value);
  *step_out = step;
  if (state.at("sampler.position") != "448") return absl::InternalError("the state did not come across");
  return absl::OkStatus();
}

TEST(DdpExamplesTest, HealFromPeerGivesTheNewcomerTheState) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::vector<float>> weights(2);
  std::vector<int64_t> steps(2, -1);
  std::vector<absl::Status> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] { results[r] = HealExample(store, r, &weights[r], &steps[r]); });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(results[r].ok()) << r << ": " << results[r];
  EXPECT_EQ(steps, (std::vector<int64_t>{7, 7}));
  EXPECT_EQ(weights[0], weights[1]);
}

// ddp/join.h: rank r has r + 1 batches; the model ends as the last
// joiner's on every rank.
absl::Status JoinExample(Communicator* comm, std::vector<float>* final_weight) {
  struct Example {
    Tensor x, y;
  };
  std::vector<Example> my_batches;
  for (int i = 0; i <= comm->rank(); ++i) {
    const Batch b = MakeBatch(comm->rank() + i);
    my_batches.push_back({b.images, b.labels});
  }
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> model, MakeModel());
  LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, *comm));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> optimizer, Sgd::Create(model->NamedParameters(), SgdOptions{0.1}));
  using Batch = Example;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Join> join, Join::Create(*ddp));   // `with Join([ddp]):`
  for (const Batch& batch : my_batches) {              // a different count on each rank
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor out, ddp->Forward(batch.x));
    LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult loss, CrossEntropy(out, batch.y));
    const Tensor& grad = loss.grad_logits;
    LOCKSTEP_RETURN_IF_ERROR(ddp->Backward(grad));
    LOCKSTEP_RETURN_IF_ERROR(optimizer->Step());
    LOCKSTEP_RETURN_IF_ERROR(model->ZeroGrad());
  }
  LOCKSTEP_RETURN_IF_ERROR(join->Finish());            // the end of the `with` block
  *final_weight = Values(model->NamedParameters()[0].parameter->value);
  return absl::OkStatus();
}

TEST(DdpExamplesTest, JoinLetsRanksWithFewerBatchesFinish) {
  std::vector<float> weights[2];
  const std::vector<absl::Status> results = testing::RunThreads(2, [&](Communicator& comm) {
    return JoinExample(&comm, &weights[comm.rank()]);
  });
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(weights[0], weights[1]);
}

// ddp/sync_batch_norm.h: the statistics of both ranks' batches together.
absl::Status SyncBatchNormExample(Communicator* comm, float* normalized) {
  auto model = std::make_unique<Sequential>();
  LOCKSTEP_RETURN_IF_ERROR(model->Add("fc", *Linear::Create({2, 2})).status());
  BatchNormOptions bn;
  bn.num_features = 2;
  LOCKSTEP_RETURN_IF_ERROR(model->Add("bn", *BatchNorm1d::Create(bn)).status());
  for (Parameter* p : model->Parameters()) {  // fc: the identity.
    if (p->value.dim() == 2) {
      p->value.data<float>()[0] = p->value.data<float>()[3] = 1.0f;
      p->value.data<float>()[1] = p->value.data<float>()[2] = 0.0f;
    }
  }
  LOCKSTEP_ASSIGN_OR_RETURN(int converted, ConvertSyncBatchNorm(*model, *comm));  // before DDP
  LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, *comm));
  if (converted != 1) return absl::InternalError("expected one BatchNorm");
  // One row per rank: channel 0 holds 0 on rank 0 and 2 on rank 1.
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor x, Tensor::FromVector<float>({2.0f * comm->rank(), 1.0f}, {1, 2}));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor y, ddp->Forward(x));
  *normalized = y.data<float>()[0];
  return absl::OkStatus();
}

TEST(DdpExamplesTest, SyncBatchNormUsesTheGroupsStatistics) {
  float y[2] = {0, 0};
  const std::vector<absl::Status> results =
      testing::RunThreads(2, [&](Communicator& comm) { return SyncBatchNormExample(&comm, &y[comm.rank()]); });
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  // Mean 1, biased variance 1: -1 and +1 (up to eps).
  EXPECT_NEAR(y[0], -1.0f, 1e-4f);
  EXPECT_NEAR(y[1], 1.0f, 1e-4f);
}


// One DDP step of `model` on rank `comm->rank()`'s batch.
absl::Status DdpStep(DistributedDataParallel& ddp, Communicator* comm) {
  const Batch b = MakeBatch(comm->rank());
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, ddp.Forward(b.images));
  LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult loss, CrossEntropy(logits, b.labels));
  return ddp.Backward(loss.grad_logits);
}

// ddp/zero_redundancy_optimizer.h: 3 steps; rank 0 gets the whole state.
absl::Status ZeroExample(Communicator* comm, std::vector<float>* weight, size_t* state_entries) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> model, MakeModel());
  LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, *comm));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<ZeroRedundancyOptimizer> zero,
      ZeroRedundancyOptimizer::Create(model->NamedParameters(), *comm,
          [](std::vector<NamedParameter> shard) { return Adam::Create(std::move(shard), AdamOptions()); }));
  for (int step = 0; step < 3; ++step) {
    LOCKSTEP_RETURN_IF_ERROR(model->ZeroGrad());
    LOCKSTEP_RETURN_IF_ERROR(DdpStep(*ddp, comm));
    LOCKSTEP_RETURN_IF_ERROR(zero->Step());                 // every rank, every step
  }
  LOCKSTEP_RETURN_IF_ERROR(zero->ConsolidateState(0));    // every rank, before a checkpoint
  std::vector<NamedTensor> full = zero->StateTensors();   // on rank 0: as a plain Adam's
  *state_entries = full.size();
  *weight = Values(model->NamedParameters()[0].parameter->value);
  return absl::OkStatus();
}

TEST(DdpExamplesTest, ZeroShardsTheOptimizerState) {
  std::vector<float> weights[2];
  size_t entries[2] = {0, 0};
  const std::vector<absl::Status> results = testing::RunThreads(
      2, [&](Communicator& comm) { return ZeroExample(&comm, &weights[comm.rank()], &entries[comm.rank()]); });
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(weights[0], weights[1]);
  EXPECT_EQ(entries[0], 4u * 3u);  // 4 parameters x (step, exp_avg, exp_avg_sq).
  EXPECT_LT(entries[1], entries[0]);  // Rank 1 holds only its share.
}

// ddp/powersgd_hook.h: compression from the 3rd iteration.
absl::Status PowerSgdExample(Communicator* comm, std::vector<float>* weight, int64_t* before, int64_t* compressed) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> model, MakeModel());
  LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, *comm));
  PowerSgdOptions options;
  options.matrix_approximation_rank = 4;
  options.start_powersgd_iter = 10;     // plain all-reduce before, while DDP rebuilds its buckets
  options.start_powersgd_iter = 2;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<PowerSgdHook> hook, PowerSgdHook::Create(options));
  PowerSgdHook* h = hook.get();
  LOCKSTEP_RETURN_IF_ERROR(ddp->RegisterCommHook(std::move(hook)));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> optimizer, Sgd::Create(model->NamedParameters(), SgdOptions{0.1}));
  for (int step = 0; step < 4; ++step) {
    LOCKSTEP_RETURN_IF_ERROR(model->ZeroGrad());
    LOCKSTEP_RETURN_IF_ERROR(DdpStep(*ddp, comm));
    LOCKSTEP_RETURN_IF_ERROR(optimizer->Step());
  }
  *before = h->numel_before_compression();
  *compressed = h->numel_after_compression();
  *weight = Values(model->NamedParameters()[0].parameter->value);
  return absl::OkStatus();
}

TEST(DdpExamplesTest, PowerSgdCompressesTheGradients) {
  std::vector<float> weights[2];
  int64_t before[2] = {0, 0}, after[2] = {0, 0};
  const std::vector<absl::Status> results = testing::RunThreads(2, [&](Communicator& comm) {
    return PowerSgdExample(&comm, &weights[comm.rank()], &before[comm.rank()], &after[comm.rank()]);
  });
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(weights[0], weights[1]);
  // Two compressed iterations of the 784-32-10 MLP: the 32 x 784 weight as
  // (32 + 784) x 4, the rest whole.
  EXPECT_EQ(before[0], 2 * (32 * 784 + 32 + 10 * 32 + 10));
  EXPECT_EQ(after[0], 2 * ((32 + 784) * 4 + 32 + 10 * 32 + 10));
}

// ddp/local_sgd.h: 4 ranks, two "hosts" of 2.
absl::Status LocalSgdExample(Communicator* comm, std::vector<float>* weight) {
  const int host_index = comm->rank() / 2;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> model, MakeModel());
  LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, *comm));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> optimizer, Sgd::Create(model->NamedParameters(), SgdOptions{0.1}));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> local,
                            comm->Split(host_index, comm->rank()));  // this host's ranks
  LocalSgdOptions options;
  options.start_local_sgd_iter = 100;
  options.start_local_sgd_iter = 1;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<CommHook> hook, MakePostLocalSgdHook(options, local.get()));
  LOCKSTEP_RETURN_IF_ERROR(ddp->RegisterCommHook(std::move(hook)));
  LOCKSTEP_ASSIGN_OR_RETURN(PeriodicModelAverager averager,
                            PeriodicModelAverager::Create(/*period=*/4, /*warmup_steps=*/100, comm));
  LOCKSTEP_ASSIGN_OR_RETURN(averager, PeriodicModelAverager::Create(/*period=*/2, /*warmup_steps=*/1, comm));
  for (int step = 0; step < 5; ++step) {
    LOCKSTEP_RETURN_IF_ERROR(model->ZeroGrad());
    LOCKSTEP_RETURN_IF_ERROR(DdpStep(*ddp, comm));
    LOCKSTEP_RETURN_IF_ERROR(optimizer->Step());
    LOCKSTEP_RETURN_IF_ERROR(averager.AverageParameters(model->Parameters()));
  }
  *weight = Values(model->NamedParameters()[0].parameter->value);
  return absl::OkStatus();
}

TEST(DdpExamplesTest, PostLocalSgdAveragesLocallyThenGlobally) {
  std::vector<float> weights[4];
  const std::vector<absl::Status> results =
      testing::RunThreads(4, [&](Communicator& comm) { return LocalSgdExample(&comm, &weights[comm.rank()]); });
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  // Step 0 is plain DDP, the later ones local; the parameters are averaged
  // over all 4 after steps 1 and 3, not after the last (4): each host's
  // pair agrees, the hosts differ.
  EXPECT_EQ(weights[0], weights[1]);
  EXPECT_EQ(weights[2], weights[3]);
  EXPECT_NE(weights[0], weights[2]);
}

}  // namespace
}  // namespace lockstep
