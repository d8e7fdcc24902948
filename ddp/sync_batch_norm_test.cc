// SyncBatchNorm (ConvertSyncBatchNorm) on 3 ranks against PyTorch 1.13's
// BatchNorm on the concatenation of the ranks' batches
// (ddp/testdata/make_sync_batch_norm_golden.py: CPU PyTorch has no
// SyncBatchNorm, and that is its definition): each rank's output and input
// gradient is its slice of the concatenated ones, its weight and bias
// gradients its slice's sums, and the running statistics the global ones,
// on every rank. Batches are uneven, one rank's empty, and in the BatchNorm1d
// case every rank holds one value per channel (a local BatchNorm refuses
// that). Tolerance: the radius nn/testing/batch_norm_reference.h derives
// around an f64 reference of the concatenated batch (ours and PyTorch's
// both); each step starts from PyTorch's running statistics.
#include "ddp/sync_batch_norm.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/testing/group.h"
#include "core/status.h"
#include "gtest/gtest.h"
#include "nn/batch_norm.h"
#include "nn/testing/batch_norm_reference.h"
#include "nn/testing/error_bound.h"
#include "nn/testing/golden_file.h"

namespace lockstep {
namespace {

namespace eb = error_bound;
constexpr int kRanks = 3;

const GoldenFile& Golden() { return GoldenFile::Get("ddp/testdata/sync_batch_norm_golden.safetensors"); }

Tensor G(const std::string& key) { return Golden().at(key); }

// The ranks' tensors one after another along dim 0.
Tensor Concat(const std::vector<Tensor>& parts) {
  Shape shape = parts[0].shape();
  shape[0] = 0;
  for (const Tensor& t : parts) shape[0] += t.shape()[0];
  Tensor out = *Tensor::Empty(shape, DType::kF32);
  int64_t at = 0;
  for (const Tensor& t : parts) {
    if (t.numel() == 0) continue;
    EXPECT_TRUE(out.Flat(at, t.numel())->CopyFrom(*t.Reshape({t.numel()})).ok());
    at += t.numel();
  }
  return out;
}

eb::Matrix Slice(const eb::Matrix& m, int64_t begin, int64_t count) {
  eb::Matrix out(1, count);
  for (int64_t i = 0; i < count; ++i) out.x[static_cast<size_t>(i)] = m.x[static_cast<size_t>(begin + i)];
  return out;
}

void CheckWithin(const Tensor& t, const eb::Matrix& want, const std::string& what) {
  const absl::Status s = eb::ExpectWithin(t, want, what);
  EXPECT_TRUE(s.ok()) << s;
}

// What a rank computed in one step.
struct RankStep {
  Tensor y, grad_input, grad_weight, grad_bias, running_mean, running_var;
  int64_t num_batches_tracked = 0;
};

std::unique_ptr<BatchNorm> MakeBn(const std::string& name) {
  BatchNormOptions o;
  if (name == "bn2d_uneven") {
    o.num_features = 3;
    return *BatchNorm2d::Create(o);
  }
  o.num_features = 4;
  o.momentum = std::nullopt;
  return *BatchNorm1d::Create(o);
}

void RunCase(const std::string& name) {
  const std::vector<std::string> steps = {"train0", "train1", "train2", "eval"};
  std::vector<std::vector<RankStep>> got(kRanks, std::vector<RankStep>(steps.size()));
  const std::vector<absl::Status> results = testing::RunThreads(kRanks, [&](Communicator& comm) -> absl::Status {
    const int r = comm.rank();
    std::unique_ptr<BatchNorm> bn = MakeBn(name);
    LOCKSTEP_RETURN_IF_ERROR(bn->weight().value.CopyFrom(G(name + ".weight")));
    LOCKSTEP_RETURN_IF_ERROR(bn->bias().value.CopyFrom(G(name + ".bias")));
    LOCKSTEP_ASSIGN_OR_RETURN(int converted, ConvertSyncBatchNorm(*bn, comm));
    if (converted != 1) return absl::InternalError(absl::StrCat("converted ", converted));
    for (size_t k = 0; k < steps.size(); ++k) {
      const std::string p = absl::StrCat(name, ".", steps[k], ".");
      if (steps[k] == "eval") bn->Eval();
      if (k > 0) {  // From PyTorch's statistics after the step before.
        const std::string before = absl::StrCat(name, ".", steps[k - 1], ".");
        LOCKSTEP_RETURN_IF_ERROR(bn->running_mean().CopyFrom(G(before + "running_mean")));
        LOCKSTEP_RETURN_IF_ERROR(bn->running_var().CopyFrom(G(before + "running_var")));
      }
      LOCKSTEP_RETURN_IF_ERROR(bn->ZeroGrad(/*set_to_none=*/true));
      RankStep& out = got[r][k];
      LOCKSTEP_ASSIGN_OR_RETURN(out.y, bn->Forward(G(absl::StrCat(p, "x", r))));
      LOCKSTEP_ASSIGN_OR_RETURN(out.grad_input, bn->Backward(G(absl::StrCat(p, "g", r))));
      out.grad_weight = bn->weight().grad;
      out.grad_bias = bn->bias().grad;
      LOCKSTEP_ASSIGN_OR_RETURN(out.running_mean, bn->running_mean().Clone());
      LOCKSTEP_ASSIGN_OR_RETURN(out.running_var, bn->running_var().Clone());
      out.num_batches_tracked = bn->num_batches_tracked().data<int64_t>()[0];
    }
    return absl::OkStatus();
  });
  testing::ExpectAllOk(results);
  if (::testing::Test::HasFailure()) return;

  for (size_t k = 0; k < steps.size(); ++k) {
    const std::string p = absl::StrCat(name, ".", steps[k], ".");
    const bool training = steps[k] != "eval";
    std::vector<Tensor> xs, gs;
    for (int r = 0; r < kRanks; ++r) xs.push_back(G(absl::StrCat(p, "x", r))), gs.push_back(G(absl::StrCat(p, "g", r)));
    const Tensor x = Concat(xs), g = Concat(gs);
    const std::string before = k == 0 ? "" : absl::StrCat(name, ".", steps[k - 1], ".");
    const Tensor mean_prev =
        k == 0 ? *Tensor::Zeros({G(name + ".weight").numel()}, DType::kF32) : G(before + "running_mean");
    const Tensor var_prev = k == 0 ? *Tensor::FromVector<float>(std::vector<float>(G(name + ".weight").numel(), 1.0f))
                                   : G(before + "running_var");
    const double factor = name == "bn1d_single" ? 1.0 / static_cast<double>(std::min<size_t>(k, 2) + 1) : 0.1;
    const BatchNormReference ref =
        BatchNormStep(x, g, G(name + ".weight"), G(name + ".bias"), mean_prev, var_prev, training, factor);
    CheckWithin(G(p + "y"), ref.y, "PyTorch's " + p + "y");
    CheckWithin(G(p + "grad_input"), ref.grad_input, "PyTorch's " + p + "grad_input");
    CheckWithin(G(p + "grad_weight"), ref.grad_weight, "PyTorch's " + p + "grad_weight");
    int64_t offset = 0;
    for (int r = 0; r < kRanks; ++r) {
      const std::string what = absl::StrCat("rank ", r, "'s ", p);
      const RankStep& mine = got[r][k];
      const int64_t n = xs[r].numel();
      CheckWithin(mine.y, Slice(ref.y, offset, n), what + "y");
      CheckWithin(mine.grad_input, Slice(ref.grad_input, offset, n), what + "grad_input");
      offset += n;
      // This rank's own share of the parameter gradients: the reference
      // with the other ranks' upstream gradients zeroed.
      std::vector<Tensor> masked;
      for (int i = 0; i < kRanks; ++i) masked.push_back(i == r ? gs[i] : *Tensor::Zeros(gs[i].shape(), DType::kF32));
      const BatchNormReference share = BatchNormStep(x, Concat(masked), G(name + ".weight"), G(name + ".bias"),
                                                     mean_prev, var_prev, training, factor);
      CheckWithin(mine.grad_weight, share.grad_weight, what + "grad_weight");
      CheckWithin(mine.grad_bias, share.grad_bias, what + "grad_bias");
      CheckWithin(G(absl::StrCat(p, "grad_weight", r)), share.grad_weight, "PyTorch's " + what + "grad_weight");
      if (training) {
        CheckWithin(mine.running_mean, ref.running_mean, what + "running_mean");
        CheckWithin(mine.running_var, ref.running_var, what + "running_var");
        CheckWithin(G(p + "running_mean"), ref.running_mean, "PyTorch's " + p + "running_mean");
        CheckWithin(G(p + "running_var"), ref.running_var, "PyTorch's " + p + "running_var");
        EXPECT_EQ(mine.num_batches_tracked, G(p + "num_batches_tracked").data<int64_t>()[0]) << what;
      }
    }
  }
}

TEST(SyncBatchNormTest, UnevenBatchesAndAnEmptyRankMatchBatchNormOnTheWholeBatch) { RunCase("bn2d_uneven"); }

TEST(SyncBatchNormTest, OneValuePerChannelPerRankWithTheCumulativeAverage) { RunCase("bn1d_single"); }

// One value per channel on a rank is refused by a local BatchNorm in
// training (PyTorch's check) and accepted once it is synchronized; a group
// that has too few values in all is refused on every rank.
TEST(SyncBatchNormTest, TheBatchSizeCheckCountsTheGroup) {
  const std::vector<absl::Status> results = testing::RunThreads(2, [&](Communicator& comm) -> absl::Status {
    BatchNormOptions o;
    o.num_features = 2;
    std::unique_ptr<BatchNorm1d> bn = *BatchNorm1d::Create(o);
    Tensor one = *Tensor::FromVector<float>({1.0f + comm.rank(), 2.0f}, {1, 2});
    if (bn->Forward(one).ok()) return absl::InternalError("a local BatchNorm accepted one value per channel");
    LOCKSTEP_RETURN_IF_ERROR(ConvertSyncBatchNorm(*bn, comm).status());
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor y, bn->Forward(one));
    // Two values per channel in the group: -1 and +1 (normalized) in channel 0.
    const float expected = comm.rank() == 0 ? -1.0f : 1.0f;
    if (std::abs(y.data<float>()[0] - expected) > 1e-4f) {
      return absl::InternalError(absl::StrCat("rank ", comm.rank(), " got ", y.data<float>()[0]));
    }
    LOCKSTEP_RETURN_IF_ERROR(bn->Backward(*Tensor::Zeros({1, 2}, DType::kF32)).status());
    Tensor none = *Tensor::Zeros({comm.rank() == 0 ? 1 : 0, 2}, DType::kF32);
    absl::StatusOr<Tensor> refused = bn->Forward(none);
    if (refused.ok() || refused.status().message().find("1 over the group") == std::string::npos) {
      return absl::InternalError(
          absl::StrCat("expected the group's count in the error, got ", refused.status().ToString()));
    }
    if (RevertSyncBatchNorm(*bn) != 1) return absl::InternalError("nothing to revert");
    return absl::OkStatus();
  });
  testing::ExpectAllOk(results);
}

}  // namespace
}  // namespace lockstep
