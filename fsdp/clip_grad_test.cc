// ClipShardedGradNorm against ClipGradNorm under DDP on the same model and
// batches (the reference CNN at world 2, where the gradients before clipping
// are bit-identical): the totals and every clipped gradient element lie
// within the bound derived in fsdp/clip_grad.h; every rank returns the same
// total; a NaN on one rank's shard is every rank's error.
#include "fsdp/clip_grad.h"

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collectives/testing/group.h"
#include "core/mt19937.h"
#include "core/status.h"
#include "ddp/distributed_data_parallel.h"
#include "fsdp/fully_shard.h"
#include "gtest/gtest.h"
#include "nn/cross_entropy.h"
#include "trainers/trainer_models.h"

namespace lockstep {
namespace {

constexpr double kU = 0x1p-24;  // f32's unit roundoff.

// Rank r's batch: images [4, 1, 28, 28] and labels.
std::pair<Tensor, Tensor> MakeBatch(int rank) {
  Mt19937 gen(static_cast<uint64_t>(9100 + rank));
  Tensor x = *Tensor::Empty({4, 1, 28, 28}, DType::kF32);
  Tensor y = *Tensor::Empty({4}, DType::kI64);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(gen.Next32() / 4294967296.0);
  for (int64_t i = 0; i < 4; ++i) y.data<int64_t>()[i] = static_cast<int64_t>(gen.Next32() % 10);
  return {x, y};
}

struct Clipped {
  double total = 0;
  // Parameter name -> this rank's clipped gradient elements, by their flat
  // index in the parameter.
  std::map<std::string, std::map<int64_t, float>> grads;
};

absl::Status RunDdp(Communicator& comm, double max_norm, Clipped* out) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Module> model, MakeModel("cnn", 7, DType::kF32, Device::Cpu()));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<DistributedDataParallel> ddp,
                            DistributedDataParallel::Create(*model, comm));
  auto [x, y] = MakeBatch(comm.rank());
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, ddp->Forward(x));
  LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, y));
  LOCKSTEP_RETURN_IF_ERROR(ddp->Backward(ce.grad_logits));
  LOCKSTEP_ASSIGN_OR_RETURN(out->total, ClipGradNorm(model->Parameters(), max_norm));
  for (const NamedParameter& np : model->NamedParameters()) {
    LOCKSTEP_ASSIGN_OR_RETURN(std::vector<float> g, np.parameter->grad.ToVector<float>());
    for (size_t j = 0; j < g.size(); ++j) out->grads[np.name][static_cast<int64_t>(j)] = g[j];
  }
  return absl::OkStatus();
}

absl::Status RunFsdp(Communicator& comm, double max_norm, bool poison, Clipped* out) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Module> model, MakeModel("cnn", 7, DType::kF32, Device::Cpu()));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FullyShard> fsdp, FullyShard::Create(*model, comm));
  auto [x, y] = MakeBatch(comm.rank());
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, fsdp->Forward(x));
  LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, y));
  LOCKSTEP_RETURN_IF_ERROR(fsdp->Backward(ce.grad_logits));
  std::vector<NamedParameter> shards = fsdp->ShardParameters();
  if (poison && comm.rank() == 1) shards.back().parameter->grad.data<float>()[0] = std::nanf("");
  ClipGradNormOptions options;
  options.error_if_nonfinite = poison;
  LOCKSTEP_ASSIGN_OR_RETURN(out->total, ClipShardedGradNorm(*fsdp, max_norm, options));
  for (size_t u = 0; u < shards.size(); ++u) {
    LOCKSTEP_ASSIGN_OR_RETURN(std::vector<float> g, shards[u].parameter->grad.ToVector<float>());
    const FlatShardLayout& layout = fsdp->layout(u);
    const auto params = fsdp->unit_parameters(u);
    for (size_t i = 0; i < params.size(); ++i) {
      const auto [begin, end] = layout.ParameterRange(i, comm.rank());
      const int64_t start = layout.offsets[i] + begin - comm.rank() * layout.shard;
      for (int64_t j = begin; j < end; ++j) out->grads[params[i].first][j] = g[start + (j - begin)];
    }
  }
  return absl::OkStatus();
}

TEST(ClipShardedGradNormTest, AgreesWithDdpsClippingWithinTheDerivedBound) {
  // Small enough that the gradients are clipped (checked below).
  constexpr double kMaxNorm = 0.05;
  std::vector<Clipped> ddp(2), fsdp(2);
  testing::ExpectAllOk(
      testing::RunThreads(2, [&](Communicator& comm) { return RunDdp(comm, kMaxNorm, &ddp[comm.rank()]); }));
  testing::ExpectAllOk(testing::RunThreads(
      2, [&](Communicator& comm) { return RunFsdp(comm, kMaxNorm, /*poison=*/false, &fsdp[comm.rank()]); }));
  const double t = ddp[0].total;
  ASSERT_GT(t, 2 * kMaxNorm) << "the test needs gradients that are clipped";
  EXPECT_EQ(fsdp[0].total, fsdp[1].total) << "every rank must clip by the same total";
  EXPECT_LE(std::abs(fsdp[0].total - t), 3 * kU * t) << "FSDP " << fsdp[0].total << " DDP " << t;
  int64_t compared = 0;
  for (int r = 0; r < 2; ++r) {
    for (const auto& [name, elements] : fsdp[r].grads) {
      for (const auto& [j, f] : elements) {
        const float d = ddp[r].grads.at(name).at(j);
        // min(max_norm / T, 1) scaled |g| = |d|: 11 roundings of it (clip_grad.h).
        EXPECT_LE(std::abs(static_cast<double>(f) - d), 11 * kU * std::abs(d))
            << "rank " << r << " " << name << "[" << j << "]: FSDP " << f << " DDP " << d;
        ++compared;
      }
    }
  }
  // Every element of every parameter is some rank's.
  int64_t numel = 0;
  for (const auto& [name, elements] : ddp[0].grads) numel += static_cast<int64_t>(elements.size());
  EXPECT_EQ(compared, numel);
}

TEST(ClipShardedGradNormTest, ANanOnOneRanksShardIsEveryRanksError) {
  std::vector<Clipped> out(2);
  const std::vector<absl::Status> results = testing::RunThreads(
      2, [&](Communicator& comm) { return RunFsdp(comm, 1.0, /*poison=*/true, &out[comm.rank()]); });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(absl::IsInvalidArgument(results[r])) << "rank " << r << ": " << results[r];
    EXPECT_NE(results[r].message().find("non-finite"), std::string::npos) << results[r];
  }
}

}  // namespace
}  // namespace lockstep
