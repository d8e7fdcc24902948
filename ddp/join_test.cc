// Join (uneven inputs) against PyTorch 1.13's Join with DDP
// (ddp/testdata/make_join_golden.py): Linear(4, 3) trained by ranks with
// different numbers of batches, each rank's parameters after every step and
// after Join compared bit for bit. The golden numbers are exact (the script
// proves that no operation rounds), so equality is the right check on every
// CPU. Beside it: throw_on_early_termination's errors on every rank, the
// buffers and the final model coming from the last joiner, shadowing under
// a comm hook, find_unused_parameters and NoSync, enable = false, misuse.
#include "ddp/join.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/testing/group.h"
#include "core/status.h"
#include "ddp/comm_hook.h"
#include "ddp/distributed_data_parallel.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "nn/relu.h"
#include "nn/sequential.h"
#include "nn/sgd.h"
#include "nn/testing/golden_file.h"

namespace lockstep {
namespace {

const GoldenFile& Golden() { return GoldenFile::Get("ddp/testdata/join_golden.safetensors"); }

Tensor G(const std::string& key) { return Golden().at(key); }

std::vector<float> Values(const Tensor& t) { return *t.ToVector<float>(); }

// y - t: the gradient of 0.5 * sum((y - t)^2).
Tensor Residual(const Tensor& y, const Tensor& t) {
  Tensor g = *Tensor::Empty(y.shape(), DType::kF32);
  for (int64_t i = 0; i < y.numel(); ++i) g.data<float>()[i] = y.data<float>()[i] - t.data<float>()[i];
  return g;
}

struct RankResult {
  std::vector<std::vector<float>> weights, biases;  // After each step.
  std::vector<float> final_weight, final_bias;
  int authoritative = -1;
  int64_t shadowed = -1;
};

void RunGoldenCase(const std::string& c) {
  const int world = std::stoi(Golden().meta(c + ".world"));
  const std::vector<int> batches = nlohmann::json::parse(Golden().meta(c + ".batches")).get<std::vector<int>>();
  JoinOptions join_options;
  join_options.divide_by_initial_world_size =
      nlohmann::json::parse(Golden().meta(c + ".divide_by_initial_world_size")).get<bool>();
  DdpOptions ddp_options;
  ddp_options.bucket_cap_mb = std::stod(Golden().meta(c + ".bucket_cap_mb"));
  ddp_options.first_bucket_bytes = std::stoull(Golden().meta(c + ".first_bucket_bytes"));
  std::vector<RankResult> got(world);
  const std::vector<absl::Status> results = testing::RunThreads(world, [&](Communicator& comm) -> absl::Status {
    const int r = comm.rank();
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Linear> model, Linear::Create({4, 3}));
    LOCKSTEP_RETURN_IF_ERROR(model->weight().value.CopyFrom(G(c + ".weight")));
    LOCKSTEP_RETURN_IF_ERROR(model->bias().value.CopyFrom(G(c + ".bias")));
    LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, comm, ddp_options));
    SgdOptions sgd_options;
    sgd_options.lr = 0.25;
    LOCKSTEP_ASSIGN_OR_RETURN(auto sgd, Sgd::Create(model->NamedParameters(), sgd_options));
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Join> join, Join::Create(*ddp, join_options));
    for (int i = 0; i < batches[r]; ++i) {
      LOCKSTEP_RETURN_IF_ERROR(model->ZeroGrad(/*set_to_none=*/true));
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor y, ddp->Forward(G(absl::StrCat(c, ".x.", r, ".", i))));
      LOCKSTEP_RETURN_IF_ERROR(ddp->Backward(Residual(y, G(absl::StrCat(c, ".t.", r, ".", i)))));
      LOCKSTEP_RETURN_IF_ERROR(sgd->Step());
      got[r].weights.push_back(Values(model->weight().value));
      got[r].biases.push_back(Values(model->bias().value));
    }
    LOCKSTEP_RETURN_IF_ERROR(join->Finish());
    got[r].final_weight = Values(model->weight().value);
    got[r].final_bias = Values(model->bias().value);
    got[r].authoritative = join->authoritative_rank();
    got[r].shadowed = join->shadowed_iterations();
    return absl::OkStatus();
  });
  testing::ExpectAllOk(results);
  const int most = *std::max_element(batches.begin(), batches.end());
  int last_joiner = -1;
  for (int r = 0; r < world; ++r) last_joiner = batches[r] == most ? r : last_joiner;
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(got[r].weights.size(), static_cast<size_t>(batches[r])) << c << " rank " << r;
    for (int i = 0; i < batches[r]; ++i) {
      EXPECT_EQ(got[r].weights[i], Values(G(absl::StrCat(c, ".step.", r, ".", i, ".weight"))))
          << c << " rank " << r << " step " << i;
      EXPECT_EQ(got[r].biases[i], Values(G(absl::StrCat(c, ".step.", r, ".", i, ".bias"))))
          << c << " rank " << r << " step " << i;
    }
    EXPECT_EQ(got[r].final_weight, Values(G(absl::StrCat(c, ".final.", r, ".weight")))) << c << " rank " << r;
    EXPECT_EQ(got[r].final_bias, Values(G(absl::StrCat(c, ".final.", r, ".bias")))) << c << " rank " << r;
    EXPECT_EQ(got[r].authoritative, last_joiner) << c << " rank " << r;
    EXPECT_EQ(got[r].shadowed, most - batches[r]) << c << " rank " << r;
  }
}

TEST(JoinGoldenTest, TwoRanksDivideByTheInitialWorldSize) { RunGoldenCase("w2_initial"); }
TEST(JoinGoldenTest, TwoRanksDivideByTheRanksStillActive) { RunGoldenCase("w2_active"); }
TEST(JoinGoldenTest, FourRanksJoiningAtThreeTimes) { RunGoldenCase("w4_initial"); }
TEST(JoinGoldenTest, AJoinedRankShadowsTheBucketRebuild) { RunGoldenCase("w2_buckets"); }

TEST(JoinGoldenTest, TheDivisorModesDiffer) {
  // Else the two cases above would not tell them apart.
  EXPECT_NE(Values(G("w2_initial.final.0.weight")), Values(G("w2_active.final.0.weight")));
}

// A small model with BatchNorm (buffers) and an unused branch.
std::unique_ptr<Sequential> MakeNet() {
  auto net = std::make_unique<Sequential>();
  EXPECT_TRUE(net->Add("fc1", *Linear::Create({4, 6})).ok());
  BatchNormOptions bn;
  bn.num_features = 6;
  EXPECT_TRUE(net->Add("bn", *BatchNorm1d::Create(bn)).ok());
  EXPECT_TRUE(net->Add("relu", std::make_unique<ReLU>()).ok());
  EXPECT_TRUE(net->Add("fc2", *Linear::Create({6, 2})).ok());
  int k = 0;
  for (Parameter* p : net->Parameters()) {
    for (int64_t i = 0; i < p->value.numel(); ++i)
      p->value.data<float>()[i] = 0.05f * static_cast<float>((k++ % 13) - 6);
  }
  return net;
}

Tensor Batch(int rank, int i, float scale = 1.0f) {
  Tensor x = *Tensor::Empty({4, 4}, DType::kF32);
  for (int64_t j = 0; j < 16; ++j)
    x.data<float>()[j] = scale * static_cast<float>(((rank * 7 + i * 5 + j * 3) % 11) - 5);
  return x;
}

struct Snapshot {
  std::vector<std::vector<float>> state;   // Parameters, then f32 buffers.
  std::vector<std::vector<float>> params;  // Parameters only.
};

Snapshot Snap(Module& m) {
  Snapshot s;
  for (Parameter* p : m.Parameters()) s.params.push_back(Values(p->value));
  s.state = s.params;
  for (const NamedTensor& t : m.NamedBuffers()) {
    if (t.second.dtype() == DType::kF32) s.state.push_back(Values(t.second));
  }
  return s;
}

// Trains MakeNet on `batches[r]` batches per rank under a Join; returns each
// rank's state before Finish and after.
struct Trained {
  std::vector<Snapshot> before, after;
  std::vector<absl::Status> results;
};

Trained Train(int world, const std::vector<int>& batches, const DdpOptions& ddp_options, JoinOptions join_options,
              const std::function<std::unique_ptr<CommHook>()>& hook = nullptr, bool first_step_no_sync = false) {
  Trained t;
  t.before.resize(world);
  t.after.resize(world);
  t.results = testing::RunThreads(world, [&](Communicator& comm) -> absl::Status {
    const int r = comm.rank();
    std::unique_ptr<Sequential> net = MakeNet();
    LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*net, comm, ddp_options));
    if (hook) LOCKSTEP_RETURN_IF_ERROR(ddp->RegisterCommHook(hook()));
    SgdOptions sgd_options;
    sgd_options.lr = 0.1;
    sgd_options.momentum = 0.9;
    LOCKSTEP_ASSIGN_OR_RETURN(auto sgd, Sgd::Create(net->NamedParameters(), sgd_options));
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Join> join, Join::Create(*ddp, join_options));
    for (int i = 0; i < batches[r]; ++i) {
      LOCKSTEP_RETURN_IF_ERROR(net->ZeroGrad());
      const auto step = [&]() -> absl::Status {
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor y, ddp->Forward(Batch(r, i)));
        return ddp->Backward(Residual(y, *Tensor::Zeros(y.shape(), DType::kF32)));
      };
      if (first_step_no_sync && i == 0) {
        DistributedDataParallel::NoSyncScope scope = ddp->NoSync();
        LOCKSTEP_RETURN_IF_ERROR(step());
      }
      LOCKSTEP_RETURN_IF_ERROR(step());
      LOCKSTEP_RETURN_IF_ERROR(sgd->Step());
    }
    t.before[r] = Snap(*net);
    LOCKSTEP_RETURN_IF_ERROR(join->Finish());
    t.after[r] = Snap(*net);
    return absl::OkStatus();
  });
  return t;
}

TEST(JoinTest, EveryRankEndsWithTheModelAndBuffersOfTheLargestLastJoiner) {
  // Ranks 1 and 3 join last; rank 3 is the largest of them.
  const Trained t = Train(4, {1, 3, 2, 3}, {}, {});
  testing::ExpectAllOk(t.results);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(t.after[r].state, t.before[3].state) << "rank " << r;
  }
  // Ranks 1 and 3 trained on different data: the choice is visible.
  EXPECT_NE(t.before[1].state, t.before[3].state);
}

TEST(JoinTest, ShadowingWorksWithACommHookUnusedParametersAndNoSync) {
  DdpOptions unused;
  unused.find_unused_parameters = true;
  const struct {
    const char* name;
    DdpOptions options;
    std::function<std::unique_ptr<CommHook>()> hook;
    bool no_sync;
  } cases[] = {
      {"fp16 hook", {}, [] { return MakeFp16CompressHook(); }, false},
      {"find_unused_parameters", unused, nullptr, false},
      {"no_sync first", {}, nullptr, true},
  };
  for (const auto& c : cases) {
    const Trained t = Train(3, {2, 4, 1}, c.options, {}, c.hook, c.no_sync);
    testing::ExpectAllOk(t.results);
    for (int r = 0; r < 3; ++r) EXPECT_EQ(t.after[r].state, t.before[1].state) << c.name << " rank " << r;
  }
}

TEST(JoinTest, DisabledJoinIssuesNothingWithEvenInputs) {
  JoinOptions off;
  off.enable = false;
  const Trained with_join = Train(2, {3, 3}, {}, off);
  testing::ExpectAllOk(with_join.results);
  EXPECT_EQ(with_join.after[0].state, with_join.before[0].state);   // No final sync:
  EXPECT_NE(with_join.after[0].state, with_join.after[1].state);    // the last batch's running stats stay each rank's,
  EXPECT_EQ(with_join.after[0].params, with_join.after[1].params);  // the parameters DDP keeps equal.
}

TEST(JoinTest, ThrowOnEarlyTerminationFailsEveryRankInPyTorchsWords) {
  JoinOptions throwing;
  throwing.throw_on_early_termination = true;
  const Trained t = Train(3, {1, 3, 3}, {}, throwing);
  ASSERT_EQ(t.results.size(), 3u);
  EXPECT_NE(t.results[0].message().find("Rank 0 exhausted all inputs."), std::string::npos) << t.results[0];
  for (int r : {1, 2}) {
    EXPECT_NE(
        t.results[r].message().find("Detected at least one rank that exhausted inputs. Throwing across all ranks."),
        std::string::npos)
        << "rank " << r << ": " << t.results[r];
  }
}

TEST(JoinTest, MisuseIsRefused) {
  const std::vector<absl::Status> results = testing::RunThreads(1, [&](Communicator& comm) -> absl::Status {
    std::unique_ptr<Sequential> net = MakeNet();
    LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*net, comm));
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Join> join, Join::Create(*ddp));
    if (Join::Create(*ddp).ok()) return absl::InternalError("a second open Join was accepted");
    LOCKSTEP_RETURN_IF_ERROR(join->Finish());
    if (join->Finish().ok()) return absl::InternalError("Finish twice was accepted");
    // After Finish the DDP is outside the Join: a new one may start.
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Join> again, Join::Create(*ddp));
    return again->Finish();
  });
  testing::ExpectAllOk(results);
}

}  // namespace
}  // namespace lockstep
