// Gradient accumulation in the training loop (train_loop.h): N micro-batches
// under DDP's no_sync and a loss scaled by 1/N make one optimizer step that
// equals one step over the concatenated batch, within the rounding that the
// different summation order may legitimately change; the group's last,
// partial batch of r micro-batches is scaled by 1/r; only the group's last
// micro-batch communicates; and bad options are refused.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "collectives/testing/group.h"
#include "core/mt19937.h"
#include "core/status.h"
#include "data/synthetic_dataset.h"
#include "ddp/distributed_data_parallel.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "nn/mlp.h"
#include "nn/sgd.h"
#include "nn/testing/error_bound.h"
#include "trainers/ddp_stepper.h"
#include "trainers/train_loop.h"

namespace lockstep {
namespace {

constexpr int kWorld = 2;
constexpr double kLr = 0.1;

std::shared_ptr<const Dataset> Data(int64_t n) {
  SyntheticOptions o;
  o.size = n;
  o.example_shape = {1, 4, 4};
  o.seed = 3;
  return *SyntheticDataset::Create(o);
}

// The largest |x[k]| over the dataset, per feature: what bounds each
// weight's per-example gradient term.
std::vector<double> MaxAbsFeature(const Dataset& data) {
  std::vector<double> most(static_cast<size_t>(data.example_numel()), 0.0);
  std::vector<float> x(most.size());
  for (int64_t i = 0; i < data.size(); ++i) {
    int64_t label = 0;
    EXPECT_TRUE(data.Get(i, absl::MakeSpan(x), &label).ok());
    for (size_t k = 0; k < x.size(); ++k) most[k] = std::max(most[k], std::fabs(static_cast<double>(x[k])));
  }
  return most;
}

struct Trained {
  TrainResult result;
  std::vector<std::vector<float>> params;  // rank 0's, after training
  uint64_t bytes = 0;                      // rank 0's, over the gradients' group, while training
};

// Multinomial logistic regression (Flatten, Linear 16 -> 10) under DDP on
// kWorld thread ranks, SGD with momentum, one epoch over `examples`.
Trained Train(int64_t examples, int64_t batch_size, int64_t grad_accum_steps, int64_t max_steps = 0) {
  Trained run;
  const std::vector<absl::Status> statuses = testing::RunThreads(kWorld, [&](Communicator& comm) -> absl::Status {
    Mt19937 gen(0);
    MlpOptions mlp;
    mlp.sizes = {16, 10};
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> model, MakeMlp(mlp, gen));
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<DdpStepper> stepper, DdpStepper::Create(*model, comm, {}, nullptr));
    SgdOptions sgd_options;
    sgd_options.lr = kLr;
    sgd_options.momentum = 0.9;
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> sgd, Sgd::Create(model->NamedParameters(), sgd_options));
    TrainLoopOptions o;
    o.epochs = 1;
    o.batch_size = batch_size;
    o.grad_accum_steps = grad_accum_steps;
    o.max_steps = max_steps;
    o.rank = comm.rank();
    o.world_size = comm.size();
    o.progress = ProgressMode::kNone;
    TrainParts parts;
    parts.stepper = stepper.get();
    parts.optimizer = sgd.get();
    parts.train = Data(examples);
    parts.test = Data(10);
    parts.comm = &comm;
    LOCKSTEP_ASSIGN_OR_RETURN(TrainResult result, RunTraining(o, parts));
    if (comm.rank() == 0) {
      run.result = result;
      run.bytes = result.breakdown.bytes_sent;
      for (const NamedParameter& p : model->NamedParameters()) {
        const Tensor& v = p.parameter->value;
        run.params.emplace_back(v.data<float>(), v.data<float>() + v.numel());
      }
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : statuses) EXPECT_TRUE(s.ok()) << s;
  return run;
}

// One optimizer step over groups of N micro-batches against one step over
// their concatenation. The loss gradients are the same bits on both sides
// ((softmax - onehot) x scale / rows, rounded once; 1/N / B and 1/(N B) are
// the same double when N is a power of two or the group is one batch, and
// scaling by a power of two is exact otherwise), so the weight gradients
// differ only in the order a rank sums its n examples' terms g_i[c] x_i[k]
// (|g_i[c]| <= 1/n): each side is within gamma(n + N + 1) sum |terms| <=
// gamma(n + N + 1) max_i |x_i[k]| of the exact sum. DDP halves (exactly)
// and adds the two ranks' (one rounding each side), SGD with an empty
// momentum buffer takes lr x g (a rounding) from the weight (another):
//   |a - b| <= lr (2 gamma(n + N + 1) + 4u) max|x[k]| + 2u max(|a|, |b|)
// (the bias: max|x| = 1).
void ExpectOneStepEqualsTheConcatenatedBatch(int64_t per_rank, int64_t micro_batch, int64_t grad_accum_steps) {
  SCOPED_TRACE(::testing::Message() << per_rank << " examples per rank, micro-batches of " << micro_batch
                                    << ", N = " << grad_accum_steps);
  const Trained accumulated = Train(per_rank * kWorld, micro_batch, grad_accum_steps);
  const Trained concatenated = Train(per_rank * kWorld, per_rank, 1);
  ASSERT_EQ(accumulated.result.steps, 1);
  ASSERT_EQ(concatenated.result.steps, 1);
  ASSERT_EQ(accumulated.params.size(), 2u);  // weight [10, 16], bias [10]
  const std::vector<double> max_x = MaxAbsFeature(*Data(per_rank * kWorld));
  const double u = error_bound::kUnit;
  const double gamma = error_bound::Gamma(per_rank + grad_accum_steps + 1);
  int64_t checked = 0;
  for (size_t p = 0; p < 2; ++p) {
    const std::vector<float>& a = accumulated.params[p];
    const std::vector<float>& b = concatenated.params[p];
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      const double x = p == 0 ? max_x[i % 16] : 1.0;
      const double bound = kLr * (2 * gamma + 4 * u) * x + 2 * u * std::max(std::fabs(a[i]), std::fabs(b[i]));
      EXPECT_LE(std::fabs(static_cast<double>(a[i]) - b[i]), bound) << "parameter " << p << " element " << i;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 170);
}

TEST(GradAccumTest, FullGroupEqualsOneStepOverTheConcatenatedBatch) {
  ExpectOneStepEqualsTheConcatenatedBatch(/*per_rank=*/32, /*micro_batch=*/8, /*grad_accum_steps=*/4);
}

// 24 examples a rank in micro-batches of 8 with N = 4: the epoch's one
// group is partial, 3 micro-batches, each loss scaled by 1/3: the step is
// the mean over the 24 examples, as one batch of 24 gives.
TEST(GradAccumTest, PartialLastGroupIsScaledByItsOwnSize) {
  ExpectOneStepEqualsTheConcatenatedBatch(/*per_rank=*/24, /*micro_batch=*/8, /*grad_accum_steps=*/4);
}

// Only the group's last micro-batch synchronizes: the gradients' bytes fall
// with the number of synchronizations, each one all-reduce of the 170
// gradients (680 bytes; a 2-rank all-reduce sends each rank's n bytes once,
// by recursive doubling or the ring's two halves). 56 examples a rank in
// micro-batches of 8: 7 micro-batches, so 7 synchronizations with N = 1, 4
// with N = 2 (groups of 2, 2, 2, 1), 2 with N = 4 (4, 3). Besides them the
// group sends the same few bytes in every run (DDP's first iteration).
TEST(GradAccumTest, OnlyTheLastMicroBatchOfAGroupCommunicates) {
  const Trained every = Train(112, 8, 1);
  const Trained pairs = Train(112, 8, 2);
  const Trained fours = Train(112, 8, 4);
  EXPECT_EQ(every.result.steps, 7);
  EXPECT_EQ(pairs.result.steps, 4);
  EXPECT_EQ(fours.result.steps, 2);
  constexpr uint64_t kPerSync = 170 * sizeof(float);
  EXPECT_EQ(every.bytes - fours.bytes, 5 * kPerSync) << every.bytes << " vs " << fours.bytes;
  EXPECT_EQ(pairs.bytes - fours.bytes, 2 * kPerSync) << pairs.bytes << " vs " << fours.bytes;
  EXPECT_LT(fours.bytes - 2 * kPerSync, kPerSync);  // what else the group sent: less than one synchronization
  // The same examples either way; bytes per example follow.
  EXPECT_EQ(fours.result.breakdown.examples, every.result.breakdown.examples);
  EXPECT_EQ(fours.result.breakdown.examples, 56);
}

TEST(GradAccumTest, BadOptionsAreErrors) {
  TrainLoopOptions o;
  o.progress = ProgressMode::kNone;
  o.grad_accum_steps = 0;
  Mt19937 gen(0);
  MlpOptions mlp;
  mlp.sizes = {16, 10};
  std::unique_ptr<Sequential> model = *MakeMlp(mlp, gen);
  LocalStepper stepper(*model);
  std::unique_ptr<Sgd> sgd = *Sgd::Create(model->NamedParameters(), SgdOptions{});
  TrainParts parts;
  parts.stepper = &stepper;
  parts.optimizer = sgd.get();
  parts.train = Data(16);
  absl::StatusOr<TrainResult> r = RunTraining(o, parts);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("grad_accum_steps (0) must be >= 1"), absl::string_view::npos) << r.status();
  o.grad_accum_steps = 2;
  o.uneven_shards = true;
  r = RunTraining(o, parts);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("uneven shards"), absl::string_view::npos) << r.status();
}

}  // namespace
}  // namespace lockstep
