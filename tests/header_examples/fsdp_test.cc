// The usage examples of fsdp's public headers, compiled and run on two ranks
// (threads over loopback TCP, collectives/testing/group.h). Each example's
// lines appear below exactly as in its header (checked by
// //tests:header_examples_check); lines in between set up its inputs or check
// its results.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "collectives/testing/group.h"
#include "core/mt19937.h"
#include "core/status.h"
#include "core/tensor.h"
#include "fsdp/clip_grad.h"
#include "fsdp/flat_shard.h"
#include "fsdp/flat_unit.h"
#include "fsdp/fully_shard.h"
#include "fsdp/shard_view.h"
#include "fsdp/sharded_checkpoint.h"
#include "fsdp/sharded_optimizer.h"
#include "nn/adam.h"
#include "gtest/gtest.h"
#include "nn/cross_entropy.h"
#include "nn/mlp.h"
#include "nn/module.h"
#include "nn/sequential.h"
#include "nn/sgd.h"

namespace lockstep {
namespace {

// fsdp/flat_shard.h
TEST(FsdpExamplesTest, FlatShardLayout) {
  FlatShardLayout layout = FlatShardLayout::Make({6, 3}, /*world=*/2);
  // total 9, padded 10, shard 5: rank 0 holds elements 0-4, rank 1 5-9;
  // parameter 1 lies at offset 6, all of it in rank 1's shard.
  EXPECT_EQ(layout.total, 9);
  EXPECT_EQ(layout.padded, 10);
  EXPECT_EQ(layout.shard, 5);
  EXPECT_EQ(layout.offsets[1], 6);
  EXPECT_EQ(layout.ParameterRange(1, 1), (std::pair<int64_t, int64_t>{0, 3}));
}

// fsdp/flat_unit.h: two parameters of 6 and 3 elements, gathered back and
// their gradients averaged.
absl::Status FlatUnitExample(Communicator* comm, std::vector<float>* gathered, std::vector<float>* grad) {
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor weight, Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor bias, Tensor::FromVector<float>({7, 8, 9}));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor weight_grad, Tensor::FromVector<float>({1, 1, 1, 1, 1, static_cast<float>(comm->rank())}));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FlatUnit> unit, FlatUnit::Create("layer1", {6, 3}, *comm));
  LOCKSTEP_RETURN_IF_ERROR(unit->SetShardFrom(0, weight));          // this rank's elements of each parameter
  LOCKSTEP_RETURN_IF_ERROR(unit->SetShardFrom(1, bias));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor full, Tensor::Empty({unit->layout().padded}, DType::kF32));
  LOCKSTEP_RETURN_IF_ERROR(unit->IssueGather(full));                 // full: [padded] in the gathering dtype
  LOCKSTEP_RETURN_IF_ERROR(unit->WaitGather());                      // full now holds every parameter
  LOCKSTEP_ASSIGN_OR_RETURN(*gathered, full.ToVector<float>());
  LOCKSTEP_RETURN_IF_ERROR(unit->BeginGrads());
  LOCKSTEP_RETURN_IF_ERROR(unit->AddGrad(0, weight_grad));           // times float(1 / world)
  LOCKSTEP_RETURN_IF_ERROR(unit->IssueReduce());
  LOCKSTEP_RETURN_IF_ERROR(unit->FinishReduce());                    // unit->shard().grad: the average
  LOCKSTEP_ASSIGN_OR_RETURN(*grad, unit->shard().grad.ToVector<float>());
  return absl::OkStatus();
}

TEST(FsdpExamplesTest, FlatUnitGathersAndAverages) {
  std::vector<std::vector<float>> gathered(2), grads(2);
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) {
    return FlatUnitExample(&comm, &gathered[comm.rank()], &grads[comm.rank()]);
  }));
  for (int r = 0; r < 2; ++r) EXPECT_EQ(gathered[r], (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 0}));
  // Shards of 5: rank 0 averages weight elements 0-4, rank 1 element 5
  // ((0 + 1) / 2) and the bias (no gradient: zeros) and the padding.
  EXPECT_EQ(grads[0], (std::vector<float>{1, 1, 1, 1, 1}));
  EXPECT_EQ(grads[1], (std::vector<float>{0.5f, 0, 0, 0, 0}));
}

// fsdp/fully_shard.h: an MLP (Flatten, Linear, ReLU, Linear, ReLU, Linear)
// with the three Linear layers as units, given by path.
absl::Status FullyShardExample(Communicator* comm, std::vector<NamedTensor>* trained) {
  Mt19937 gen(0);
  MlpOptions mlp;
  mlp.sizes = {784, 32, 16, 10};
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> model, MakeMlp(mlp, gen));
  Mt19937 noise(7 + comm->rank());
  std::vector<float> pixels(4 * 784);
  for (float& p : pixels) p = static_cast<float>(noise.Next32() % 256) / 255.0f;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor images, Tensor::FromVector<float>(pixels, {4, 1, 28, 28}));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor labels, Tensor::FromVector<int64_t>({3, 1, 4, comm->rank()}));
  FullyShardOptions options;
  options.units = {"1", "3", "5"};   // module paths; empty: each child of the root with parameters
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FullyShard> fsdp, FullyShard::Create(*model, *comm, options));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> sgd, Sgd::Create(fsdp->ShardParameters(), SgdOptions{0.1}));
  for (int step = 0; step < 2; ++step) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, fsdp->Forward(images));
    LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult loss, CrossEntropy(logits, labels));
    LOCKSTEP_RETURN_IF_ERROR(fsdp->Backward(loss.grad_logits));   // shard gradients now averaged
    LOCKSTEP_RETURN_IF_ERROR(sgd->Step());                        // steps this rank's shards
    LOCKSTEP_RETURN_IF_ERROR(sgd->ZeroGrad(/*set_to_none=*/true));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(*trained, fsdp->FullStateDict());
  return absl::OkStatus();
}

TEST(FsdpExamplesTest, FullyShardTrainsOneModelOnBothRanks) {
  std::vector<std::vector<NamedTensor>> trained(2);
  testing::ExpectAllOk(
      testing::RunThreads(2, [&](Communicator& comm) { return FullyShardExample(&comm, &trained[comm.rank()]); }));
  ASSERT_EQ(trained[0].size(), 6u);  // 1.weight, 1.bias, 3.weight, ... as the plain MLP's state dict.
  EXPECT_EQ(trained[0][0].first, "1.weight");
  for (size_t i = 0; i < trained[0].size(); ++i) {
    EXPECT_EQ(*trained[0][i].second.ToVector<float>(), *trained[1][i].second.ToVector<float>());
  }
}

// fsdp/clip_grad.h and fsdp/shard_view.h: one step clipped to a norm over
// both ranks' shards, and the units' layouts.
absl::Status ClipExample(Communicator* comm, double* norm_out, int64_t* padded) {
  Mt19937 gen(0);
  MlpOptions mlp;
  mlp.sizes = {784, 32, 10};
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> model, MakeMlp(mlp, gen));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FullyShard> fsdp, FullyShard::Create(*model, *comm));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> optimizer, Sgd::Create(fsdp->ShardParameters(), SgdOptions{0.1}));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor images, Tensor::Zeros({2, 1, 28, 28}, DType::kF32));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor labels, Tensor::FromVector<int64_t>({3, 1}));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, fsdp->Forward(images));
  LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, labels));
  LOCKSTEP_RETURN_IF_ERROR(fsdp->Backward(ce.grad_logits));
  LOCKSTEP_ASSIGN_OR_RETURN(double norm, ClipShardedGradNorm(*fsdp, /*max_norm=*/1.0));
  LOCKSTEP_RETURN_IF_ERROR(optimizer->Step());
  *norm_out = norm;
  ShardView& view = *fsdp;                       // a FullyShard is one
  for (size_t u = 0; u < view.num_units(); ++u) {
    const FlatShardLayout& layout = view.layout(u);  // where unit u's parameters lie
    *padded += layout.padded;
  }
  return absl::OkStatus();
}

TEST(FsdpExamplesTest, ClippingSeesBothRanksShards) {
  std::vector<double> norms(2);
  std::vector<int64_t> padded(2);
  testing::ExpectAllOk(testing::RunThreads(
      2, [&](Communicator& comm) { return ClipExample(&comm, &norms[comm.rank()], &padded[comm.rank()]); }));
  EXPECT_GT(norms[0], 0);
  EXPECT_EQ(norms[0], norms[1]);                    // one norm over the whole gradient
  EXPECT_EQ(padded[0], 784 * 32 + 32 + 32 * 10 + 10);  // even totals: no padding
}

// fsdp/sharded_optimizer.h: Adam over the shards, consolidated as a plain
// Adam's state.
absl::StatusOr<std::unique_ptr<Optimizer>> MakeAdam(std::vector<NamedParameter> params) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Adam> adam, Adam::Create(std::move(params), AdamOptions()));
  return std::unique_ptr<Optimizer>(std::move(adam));
}

absl::Status ShardedOptimizerExample(Communicator* comm, std::vector<std::string>* names) {
  Mt19937 gen(0);
  MlpOptions mlp;
  mlp.sizes = {784, 32, 10};
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> model, MakeMlp(mlp, gen));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FullyShard> fsdp, FullyShard::Create(*model, *comm));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor images, Tensor::Zeros({2, 1, 28, 28}, DType::kF32));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor labels, Tensor::FromVector<int64_t>({3, 1}));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, fsdp->Forward(images));
  LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult loss, CrossEntropy(logits, labels));
  LOCKSTEP_RETURN_IF_ERROR(fsdp->Backward(loss.grad_logits));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<ShardedOptimizer> adam, ShardedOptimizer::Create(*fsdp,
      [](std::vector<NamedParameter> shards) { return MakeAdam(std::move(shards)); }));
  LOCKSTEP_RETURN_IF_ERROR(adam->Step());                   // steps this rank's shards
  LOCKSTEP_RETURN_IF_ERROR(adam->ConsolidateState(0));      // every rank, before a checkpoint
  std::vector<NamedTensor> full = adam->StateTensors();     // on rank 0: as a plain Adam's
  for (const NamedTensor& t : full) names->push_back(t.first);
  return absl::OkStatus();
}

// fsdp/sharded_checkpoint.h: saved by two ranks, loaded back by them.
absl::Status ShardedCheckpointExample(Communicator* comm, const std::string& dir, int* world, std::string* step) {
  Mt19937 gen(0);
  MlpOptions mlp;
  mlp.sizes = {784, 32, 10};
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> model, MakeMlp(mlp, gen));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FullyShard> fsdp, FullyShard::Create(*model, *comm));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<ShardedOptimizer> adam, ShardedOptimizer::Create(*fsdp,
      [](std::vector<NamedParameter> shards) { return MakeAdam(std::move(shards)); }));
  LOCKSTEP_RETURN_IF_ERROR(SaveShardedCheckpoint(dir, *fsdp, adam.get(), model->NamedBuffers(),
                                                 {{"step", "1200"}}));  // every rank: one file each
  LOCKSTEP_ASSIGN_OR_RETURN(ShardedCheckpointInfo info,
                            LoadShardedCheckpoint(dir, *fsdp, adam.get(), model->NamedBuffers()));
  info.metadata["step"];  // "1200"; info.world_size: the ranks that wrote it
  *world = info.world_size;
  *step = info.metadata["step"];
  return absl::OkStatus();
}

TEST(FsdpExamplesTest, ShardedCheckpointRoundTrips) {
  const std::string dir = ::testing::TempDir() + "/sharded";
  std::vector<int> world(2);
  std::vector<std::string> step(2);
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) {
    return ShardedCheckpointExample(&comm, dir, &world[comm.rank()], &step[comm.rank()]);
  }));
  EXPECT_EQ(world, (std::vector<int>{2, 2}));
  EXPECT_EQ(step, (std::vector<std::string>{"1200", "1200"}));
}

TEST(FsdpExamplesTest, ShardedOptimizerConsolidatesAsAPlainAdam) {
  std::vector<std::vector<std::string>> names(2);
  testing::ExpectAllOk(
      testing::RunThreads(2, [&](Communicator& comm) { return ShardedOptimizerExample(&comm, &names[comm.rank()]); }));
  // 4 parameters (1.weight, 1.bias, 3.weight, 3.bias) x (step, exp_avg, exp_avg_sq).
  ASSERT_EQ(names[0].size(), 12u);
  EXPECT_EQ(names[0][0], "state.0.step");
  EXPECT_EQ(names[0][11], "state.3.exp_avg_sq");
}

}  // namespace
}  // namespace lockstep
