#include "trainers/evaluation.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "collectives/testing/group.h"
#include "core/mt19937.h"
#include "core/status.h"
#include "data/distributed_sampler.h"
#include "data/synthetic_dataset.h"
#include "gtest/gtest.h"
#include "nn/mlp.h"

namespace lockstep {
namespace {

std::shared_ptr<const Dataset> Data(int64_t n, uint64_t seed) {
  SyntheticOptions o;
  o.size = n;
  o.example_shape = {1, 4, 4};
  o.seed = seed;
  return *SyntheticDataset::Create(o);
}

std::unique_ptr<Sequential> Model() {
  Mt19937 gen(0);
  MlpOptions mlp;
  mlp.sizes = {16, 12, 10};
  return *MakeMlp(mlp, gen);
}

TEST(EvaluationTest, SimulatedRanksCountEachExampleOnce) {
  // 101 is not divisible by 2: DistributedSampler would pad to 102.
  auto test = Data(101, 4);
  std::unique_ptr<Sequential> model = Model();
  DistributedSamplerOptions padded;
  padded.num_replicas = 2;
  padded.shuffle = false;
  EXPECT_EQ((*DistributedSampler::Create(101, padded)).total_size(), 102);

  absl::StatusOr<EvalCounts> whole = EvaluateShard(*model, test, 0, 1, 16, 0, Device::Cpu());
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->count, 101);
  EvalCounts sum;
  for (int rank = 0; rank < 2; ++rank) {
    absl::StatusOr<EvalCounts> part = EvaluateShard(*model, test, rank, 2, 16, rank, Device::Cpu());
    ASSERT_TRUE(part.ok()) << part.status();
    EXPECT_EQ(part->count, rank == 0 ? 51 : 50);
    sum.loss_sum += part->loss_sum;
    sum.correct += part->correct;
    sum.count += part->count;
  }
  EXPECT_EQ(sum.count, 101);
  EXPECT_EQ(sum.correct, whole->correct);
  EXPECT_NEAR(sum.loss_sum, whole->loss_sum, 1e-9 * whole->loss_sum);
  EXPECT_TRUE(model->is_training());  // The mode is given back.
}

TEST(EvaluationTest, BadRanksAndEmptyShards) {
  auto test = Data(3, 4);
  std::unique_ptr<Sequential> model = Model();
  EXPECT_EQ(EvaluateShard(*model, test, 2, 2, 16, 0, Device::Cpu()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EvaluateShard(*model, test, 0, 0, 16, 0, Device::Cpu()).status().code(),
            absl::StatusCode::kInvalidArgument);
  // More ranks than examples: rank 3 of 4 has nothing to evaluate.
  absl::StatusOr<EvalCounts> none = EvaluateShard(*model, test, 3, 4, 16, 0, Device::Cpu());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->count, 0);
  EXPECT_EQ(none->loss(), 0.0);
  EXPECT_EQ(none->accuracy(), 0.0);
}

// The header's example on two ranks (threads over loopback TCP): both get
// the whole test set's counts.
absl::Status Example(Module& model, std::shared_ptr<const Dataset> test_set, int rank, int world_size, Device device,
                     Communicator* comm, EvalCounts& out) {
  LOCKSTEP_ASSIGN_OR_RETURN(EvalCounts mine, EvaluateShard(model, test_set, rank, world_size,
                                                           /*batch_size=*/64, /*num_workers=*/0, device));
  LOCKSTEP_ASSIGN_OR_RETURN(EvalCounts all, SumOverRanks(mine, comm));  // comm null: one process
  std::printf("test loss %.4f acc %.2f%%\n", all.loss(), 100 * all.accuracy());
  out = all;
  return absl::OkStatus();
}

TEST(EvaluationTest, HeaderExampleSumsOverRanks) {
  auto test = Data(37, 5);
  std::unique_ptr<Sequential> reference = Model();
  EvalCounts whole;
  ASSERT_TRUE(Example(*reference, test, 0, 1, Device::Cpu(), /*comm=*/nullptr, whole).ok());
  EXPECT_EQ(whole.count, 37);
  EXPECT_EQ(whole.examples, 37);
  std::vector<EvalCounts> summed(2);
  const std::vector<absl::Status> statuses = testing::RunThreads(2, [&](Communicator& comm) -> absl::Status {
    std::unique_ptr<Sequential> model = Model();  // The same parameters on every rank.
    return Example(*model, test, comm.rank(), comm.size(), Device::Cpu(), &comm, summed[comm.rank()]);
  });
  for (const absl::Status& s : statuses) ASSERT_TRUE(s.ok()) << s;
  for (const EvalCounts& c : summed) {
    EXPECT_EQ(c.count, 37);  // 19 + 18, no padding
    EXPECT_EQ(c.examples, 37);
    EXPECT_EQ(c.correct, whole.correct);
    EXPECT_NEAR(c.loss_sum, whole.loss_sum, 1e-9 * whole.loss_sum);
  }
}

}  // namespace
}  // namespace lockstep
