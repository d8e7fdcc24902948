// DistributedDataParallel against single-process training: 2 ranks x batch b
// must equal one process on batch 2b after 5 SGD steps (|d| <= 1e-5|x| +
// 1e-7 per element), for one bucket, many buckets, gradient_as_bucket_view,
// no_sync over 2 micro-batches, find_unused_parameters with an unused branch,
// static_graph and the comm hooks; models of different shapes fail on every
// rank naming the mismatch; a parameter without a gradient fails the next
// forward as in PyTorch. Ranks are threads with real TCP connections.
#include "ddp/distributed_data_parallel.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/testing/group.h"
#include "core/half.h"
#include "core/kernels.h"
#include "core/mt19937.h"
#include "core/status.h"
#include "gtest/gtest.h"
#include "nn/batch_norm.h"
#include "nn/cross_entropy.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "nn/relu.h"
#include "nn/sequential.h"
#include "nn/sgd.h"

namespace lockstep {
namespace {

constexpr int kRanks = 2;
constexpr int kSteps = 5;
constexpr int64_t kBatch = 8;  // Per rank.
constexpr int64_t kFeatures = 20;
constexpr int64_t kClasses = 4;

// A model whose second head is never used (find_unused_parameters).
class WithUnusedBranch : public Module {
 public:
  static std::unique_ptr<WithUnusedBranch> Make(Mt19937& gen) {
    auto m = std::unique_ptr<WithUnusedBranch>(new WithUnusedBranch());
    MlpOptions mlp;
    mlp.sizes = {kFeatures, 16, kClasses};
    mlp.flatten = false;
    m->body_ = m->RegisterModule("body", *MakeMlp(mlp, gen));
    m->unused_ = m->RegisterModule("unused", *Linear::Create({kFeatures, 3}, gen));
    return m;
  }
  absl::string_view type_name() const override { return "WithUnusedBranch"; }
  absl::StatusOr<Tensor> Forward(const Tensor& input) override { return body_->Forward(input); }

 protected:
  absl::StatusOr<Tensor> BackwardImpl(const Tensor& grad_output, bool input_grad,
                                      const ParameterReadyFn& hook) override {
    return ChildBackward(*body_, grad_output, input_grad, hook);
  }
  absl::StatusOr<std::unique_ptr<Module>> NewLike(Device device) const override {
    return absl::UnimplementedError("test module");
  }

 private:
  WithUnusedBranch() = default;
  Module* body_ = nullptr;
  Module* unused_ = nullptr;
};

enum class ModelKind { kMlp, kUnusedBranch, kBatchNorm };

std::unique_ptr<Module> MakeModel(ModelKind kind, int64_t hidden = 32) {
  Mt19937 gen(1234);
  if (kind == ModelKind::kUnusedBranch) return WithUnusedBranch::Make(gen);
  if (kind == ModelKind::kBatchNorm) {
    auto model = std::make_unique<Sequential>();
    EXPECT_TRUE(model->Add("fc1", *Linear::Create({kFeatures, hidden}, gen)).ok());
    BatchNormOptions bn;
    bn.num_features = hidden;
    EXPECT_TRUE(model->Add("bn", *BatchNorm1d::Create(bn)).ok());
    EXPECT_TRUE(model->Add("relu", std::make_unique<ReLU>()).ok());
    EXPECT_TRUE(model->Add("fc2", *Linear::Create({hidden, kClasses}, gen)).ok());
    return model;
  }
  MlpOptions mlp;
  mlp.sizes = {kFeatures, hidden, 16, kClasses};
  mlp.flatten = false;
  return std::move(*MakeMlp(mlp, gen));
}

// Inputs and labels of rank r's micro-batch m at step s.
struct Batch {
  Tensor x, y;
};
Batch MakeBatch(int step, int micro, int rank, int64_t rows = kBatch) {
  Mt19937 gen(static_cast<uint64_t>(1000 + step * 100 + micro * 10 + rank));
  Batch b{*Tensor::Empty({rows, kFeatures}, DType::kF32), *Tensor::Empty({rows}, DType::kI64)};
  for (int64_t i = 0; i < rows * kFeatures; ++i) {
    b.x.data<float>()[i] = static_cast<float>(gen.Next32() / 4294967296.0 * 2 - 1);
  }
  for (int64_t i = 0; i < rows; ++i) b.y.data<int64_t>()[i] = static_cast<int64_t>(gen.Next32() % kClasses);
  return b;
}

// Rows of rank 0's batch then rank 1's: the single process's batch of 2b.
Batch Concat(const Batch& a, const Batch& b) {
  Batch c{*Tensor::Empty({2 * kBatch, kFeatures}, DType::kF32), *Tensor::Empty({2 * kBatch}, DType::kI64)};
  EXPECT_TRUE(c.x.Flat(0, kBatch * kFeatures)->CopyFrom(*a.x.Flat(0, kBatch * kFeatures)).ok());
  EXPECT_TRUE(c.x.Flat(kBatch * kFeatures, kBatch * kFeatures)->CopyFrom(*b.x.Flat(0, kBatch * kFeatures)).ok());
  EXPECT_TRUE(c.y.Flat(0, kBatch)->CopyFrom(a.y).ok());
  EXPECT_TRUE(c.y.Flat(kBatch, kBatch)->CopyFrom(b.y).ok());
  return c;
}

std::unique_ptr<Sgd> MakeSgd(Module& model) {
  SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  return *Sgd::Create(model.NamedParameters(), o);
}

std::vector<std::vector<float>> Snapshot(Module& model) {
  std::vector<std::vector<float>> out;
  for (const NamedParameter& p : model.NamedParameters()) out.push_back(*p.parameter->value.ToVector<float>());
  return out;
}

struct Case {
  std::string name;
  DdpOptions options;
  ModelKind model = ModelKind::kMlp;
  int micro_batches = 1;  // > 1: all but the last under NoSync.
  std::string comm_hook;
  std::function<std::unique_ptr<CommHook>()> make_hook;  // Instead of comm_hook.
  double tolerance = 1e-5;
  double abs_tolerance = 1e-7;
};

// All parameters, then the f32 buffers, for the BatchNorm case.
std::vector<std::vector<float>> SnapshotState(Module& model) {
  std::vector<std::vector<float>> out = Snapshot(model);
  for (const NamedTensor& e : model.NamedBuffers()) {
    if (e.second.dtype() == DType::kF32) out.push_back(*e.second.ToVector<float>());
  }
  return out;
}

// BatchNorm normalizes each rank's batch with its own statistics, and
// broadcast_buffers makes every rank start each forward from rank 0's
// running statistics. One process reproduces that exactly: rank 0's half,
// then rank 1's half, each backward with the loss gradient halved (the
// average over ranks), and rank 1's running-statistics update undone.
std::vector<std::vector<float>> TrainSingleWithBatchNorm() {
  std::unique_ptr<Module> model = MakeModel(ModelKind::kBatchNorm);
  std::unique_ptr<Sgd> sgd = MakeSgd(*model);
  for (int s = 0; s < kSteps; ++s) {
    std::vector<std::vector<float>> after_rank0;
    for (int r = 0; r < kRanks; ++r) {
      Batch b = MakeBatch(s, 0, r);
      Tensor logits = *model->Forward(b.x);
      if (r == 0) {
        after_rank0.resize(model->NamedBuffers().size());
        size_t k = 0;
        for (const NamedTensor& e : model->NamedBuffers()) {
          if (e.second.dtype() == DType::kF32) after_rank0[k] = *e.second.ToVector<float>();
          ++k;
        }
      } else {
        size_t k = 0;
        for (const NamedTensor& e : model->NamedBuffers()) {
          if (e.second.dtype() == DType::kF32) {
            EXPECT_TRUE(e.second.CopyFrom(*Tensor::FromVector<float>(after_rank0[k])).ok());
          } else {
            // num_batches_tracked: rank 0 counted this batch once.
            e.second.data<int64_t>()[0] -= 1;
          }
          ++k;
        }
      }
      CrossEntropyResult ce = *CrossEntropy(logits, b.y);
      EXPECT_TRUE(Scale(ce.grad_logits, 1.0 / kRanks).ok());
      EXPECT_TRUE(model->Backward(ce.grad_logits, false).ok());
    }
    EXPECT_TRUE(sgd->Step().ok());
    EXPECT_TRUE(model->ZeroGrad().ok());
  }
  return SnapshotState(*model);
}

// One process on the concatenated batches (micro-batches accumulated).
std::vector<std::vector<float>> TrainSingle(const Case& c) {
  if (c.model == ModelKind::kBatchNorm) return TrainSingleWithBatchNorm();
  std::unique_ptr<Module> model = MakeModel(c.model);
  std::unique_ptr<Sgd> sgd = MakeSgd(*model);
  for (int s = 0; s < kSteps; ++s) {
    for (int m = 0; m < c.micro_batches; ++m) {
      Batch b = Concat(MakeBatch(s, m, 0), MakeBatch(s, m, 1));
      Tensor logits = *model->Forward(b.x);
      CrossEntropyResult ce = *CrossEntropy(logits, b.y);
      EXPECT_TRUE(model->Backward(ce.grad_logits, false).ok());
    }
    EXPECT_TRUE(sgd->Step().ok());
    EXPECT_TRUE(model->ZeroGrad().ok());
  }
  return Snapshot(*model);
}

absl::Status TrainRank(const Case& c, Communicator& comm, std::vector<std::vector<float>>* result) {
  std::unique_ptr<Module> model = MakeModel(c.model);
  LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, comm, c.options));
  if (c.make_hook) {
    LOCKSTEP_RETURN_IF_ERROR(ddp->RegisterCommHook(c.make_hook()));
  } else if (!c.comm_hook.empty()) {
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<CommHook> hook, MakeCommHook(c.comm_hook));
    LOCKSTEP_RETURN_IF_ERROR(ddp->RegisterCommHook(std::move(hook)));
  }
  std::unique_ptr<Sgd> sgd = MakeSgd(*model);
  for (int s = 0; s < kSteps; ++s) {
    for (int m = 0; m < c.micro_batches; ++m) {
      Batch b = MakeBatch(s, m, comm.rank());
      auto step = [&]() -> absl::Status {
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, ddp->Forward(b.x));
        LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, b.y));
        return ddp->Backward(ce.grad_logits);
      };
      if (m + 1 < c.micro_batches) {
        DistributedDataParallel::NoSyncScope no_sync = ddp->NoSync();
        LOCKSTEP_RETURN_IF_ERROR(step());
      } else {
        LOCKSTEP_RETURN_IF_ERROR(step());
      }
    }
    LOCKSTEP_RETURN_IF_ERROR(sgd->Step());
    LOCKSTEP_RETURN_IF_ERROR(model->ZeroGrad());
  }
  // With BatchNorm, rank 1's buffers are its own last update: compare rank
  // 0's state and the other ranks' parameters.
  if (c.model == ModelKind::kBatchNorm && comm.rank() != 0) {
    *result = SnapshotState(*model);
    const size_t n_params = model->NamedParameters().size();
    result->resize(n_params);
    return absl::OkStatus();
  }
  *result = c.model == ModelKind::kBatchNorm ? SnapshotState(*model) : Snapshot(*model);
  return absl::OkStatus();
}

void ExpectEquivalent(const Case& c) {
  const std::vector<std::vector<float>> expected = TrainSingle(c);
  std::vector<std::vector<std::vector<float>>> got(kRanks);
  const std::vector<absl::Status> results =
      testing::RunThreads(kRanks, [&](Communicator& comm) { return TrainRank(c, comm, &got[comm.rank()]); });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(results[r].ok()) << c.name << ", rank " << r << ": " << results[r];
    ASSERT_LE(got[r].size(), expected.size());
    if (r == 0) ASSERT_EQ(got[r].size(), expected.size());
    for (size_t p = 0; p < got[r].size(); ++p) {
      for (size_t i = 0; i < expected[p].size(); ++i) {
        const double x = expected[p][i], y = got[r][p][i];
        ASSERT_LE(std::fabs(x - y), c.tolerance * std::fabs(x) + c.abs_tolerance)
            << c.name << ": rank " << r << ", parameter " << p << ", element " << i << ": " << y << " vs " << x;
      }
    }
  }
  // Every rank ends with bit-identical parameters.
  const size_t common = std::min(got[0].size(), got[1].size());
  for (size_t p = 0; p < common; ++p) EXPECT_EQ(got[0][p], got[1][p]) << c.name << ", parameter " << p;
}

TEST(DdpEquivalenceTest, OneBucket) { ExpectEquivalent({"one bucket", {}}); }

TEST(DdpEquivalenceTest, ManyBuckets) {
  Case c{"many buckets", {}};
  c.options.bucket_cap_mb = 0.0005;  // ~500 bytes: about one parameter each.
  ExpectEquivalent(c);
}

TEST(DdpEquivalenceTest, ManyBucketsFindUnused) {
  Case c{"many buckets, find_unused", {}};
  c.options.bucket_cap_mb = 0.0005;
  c.options.find_unused_parameters = true;
  ExpectEquivalent(c);
}

TEST(DdpEquivalenceTest, GradientAsBucketView) {
  Case c{"gradient_as_bucket_view", {}};
  c.options.gradient_as_bucket_view = true;
  c.options.bucket_cap_mb = 0.002;
  ExpectEquivalent(c);
}

TEST(DdpEquivalenceTest, NoSyncOverTwoMicroBatches) {
  Case c{"no_sync", {}};
  c.micro_batches = 2;
  ExpectEquivalent(c);
  c.name = "no_sync, gradient_as_bucket_view";
  c.options.gradient_as_bucket_view = true;
  ExpectEquivalent(c);
}

TEST(DdpEquivalenceTest, FindUnusedParametersWithAnUnusedBranch) {
  Case c{"find_unused", {}};
  c.options.find_unused_parameters = true;
  c.model = ModelKind::kUnusedBranch;
  ExpectEquivalent(c);
}

TEST(DdpEquivalenceTest, StaticGraph) {
  Case c{"static_graph", {}};
  c.options.static_graph = true;
  c.model = ModelKind::kUnusedBranch;
  ExpectEquivalent(c);
}

TEST(DdpEquivalenceTest, BatchNormBuffersFollowRankZero) {
  Case c{"batch norm", {}};
  c.model = ModelKind::kBatchNorm;
  ExpectEquivalent(c);
}

TEST(DdpEquivalenceTest, AllReduceCommHook) {
  Case c{"allreduce hook", {}};
  c.comm_hook = "allreduce";
  ExpectEquivalent(c);
}

// A hook of two rounds with a computation between, as PowerSGD's: first an
// all-reduce of this rank's count of contributors (1), then, in a
// continuation chained with ThenWork on whichever thread completed the
// first round (never blocking it: it returns the second round's Work), the
// bucket divided by the summed count and all-reduced. Equal to the default
// averaging (dividing by 2 is exact).
class TwoRoundHook : public CommHook {
 public:
  explicit TwoRoundHook(std::atomic<int>* second_rounds) : second_rounds_(second_rounds) {}
  std::string name() const override { return "two_round_test"; }
  std::shared_ptr<Work> Run(Communicator& comm, GradBucket& bucket) override {
    absl::StatusOr<Tensor> count = Tensor::FromVector<float>({1.0f});
    if (!count.ok()) return comm.AllReduce(Tensor(), ReduceOp::kSum);  // Fails, naming the tensor.
    Tensor buffer = bucket.buffer(), contributors = *count;
    std::atomic<int>* second_rounds = second_rounds_;
    return comm.AllReduce(contributors, ReduceOp::kSum)
        ->ThenWork([&comm, buffer, contributors, second_rounds]() -> absl::StatusOr<std::shared_ptr<Work>> {
          const float n = contributors.data<float>()[0];
          if (n != static_cast<float>(comm.size())) {
            return absl::InternalError(absl::StrCat("the first round summed ", n, " contributors"));
          }
          LOCKSTEP_RETURN_IF_ERROR(Divide(buffer, static_cast<int64_t>(n)));
          second_rounds->fetch_add(1);
          return comm.AllReduce(buffer, ReduceOp::kSum);
        });
  }

 private:
  std::atomic<int>* second_rounds_;
};

TEST(DdpEquivalenceTest, ATwoRoundHookOnChainedWork) {
  std::atomic<int> second_rounds{0};
  Case c{"two-round hook", {}};
  c.options.bucket_cap_mb = 0.0005;  // About one parameter a bucket, each with its own chain.
  c.options.first_bucket_bytes = 500;
  c.make_hook = [&second_rounds] { return std::make_unique<TwoRoundHook>(&second_rounds); };
  ExpectEquivalent(c);
  EXPECT_GT(second_rounds.load(), kRanks * kSteps);  // Every bucket of every step, on every rank.
}

TEST(DdpEquivalenceTest, CompressionHooksStayClose) {
  // f16/bf16 rounding of the averaged gradient (2^-11 and 2^-8 relative):
  // close, not exact; golden_test checks the exact semantics.
  Case c{"fp16_compress", {}};
  c.comm_hook = "fp16_compress";
  c.tolerance = 2e-3;
  c.abs_tolerance = 2e-5;
  ExpectEquivalent(c);
  c.name = "bf16_compress";
  c.comm_hook = "bf16_compress";
  c.tolerance = 2e-2;
  c.abs_tolerance = 2e-4;
  ExpectEquivalent(c);
}

// The compression hooks' arithmetic, element by element, from each rank's
// own local gradient (scalar conversions of core/half.h, independent of the
// kernels the hooks use): x = round(round(g0) / 2) + round(round(g1) / 2),
// rounded, widened (PyTorch's cast, div_, all-reduce SUM, copy_).
TEST(DdpTest, CompressionHooksCastAsPyTorch) {
  for (const std::string hook : {"fp16_compress", "bf16_compress"}) {
    auto round = [&](float x) {
      return hook == "fp16_compress" ? HalfToFloat(FloatToHalf(x)) : BFloat16ToFloat(FloatToBFloat16(x));
    };
    const auto results = testing::RunThreads(kRanks, [&](Communicator& comm) -> absl::Status {
      Batch b = MakeBatch(0, 0, comm.rank());
      // This rank's local gradient, without DDP.
      std::unique_ptr<Module> local = MakeModel(ModelKind::kMlp);
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor local_logits, local->Forward(b.x));
      LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult local_ce, CrossEntropy(local_logits, b.y));
      LOCKSTEP_RETURN_IF_ERROR(local->Backward(local_ce.grad_logits, false).status());
      std::vector<float> mine;
      for (Parameter* p : local->Parameters()) {
        const std::vector<float> g = *p->grad.ToVector<float>();
        mine.insert(mine.end(), g.begin(), g.end());
      }
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine_t, Tensor::FromVector<float>(mine));
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor all, Tensor::Empty({kRanks * static_cast<int64_t>(mine.size())}, DType::kF32));
      LOCKSTEP_RETURN_IF_ERROR(comm.AllGather(mine_t, all)->Wait());
      // DDP with the hook on the same model and data.
      std::unique_ptr<Module> model = MakeModel(ModelKind::kMlp);
      LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, comm, {}));
      LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<CommHook> h, MakeCommHook(hook));
      LOCKSTEP_RETURN_IF_ERROR(ddp->RegisterCommHook(std::move(h)));
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, ddp->Forward(b.x));
      LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, b.y));
      LOCKSTEP_RETURN_IF_ERROR(ddp->Backward(ce.grad_logits));
      size_t k = 0;
      const float* g = all.data<float>();
      for (Parameter* p : model->Parameters()) {
        const std::vector<float> got = *p->grad.ToVector<float>();
        for (size_t i = 0; i < got.size(); ++i, ++k) {
          const float a = round(round(g[k]) / kRanks), c = round(round(g[mine.size() + k]) / kRanks);
          const float want = round(a + c);
          if (got[i] != want) {
            return absl::InternalError(absl::StrCat(hook, ": element ", k, " is ", got[i], ", expected ", want));
          }
        }
      }
      return absl::OkStatus();
    });
    for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
  }
}

TEST(DdpTest, CompressionHooksHalveTheTraffic) {
  // Payload bytes rank 0 sends in one step, per hook.
  std::map<std::string, uint64_t> sent;
  for (const std::string hook : {"", "allreduce", "fp16_compress", "bf16_compress"}) {
    const auto results = testing::RunThreads(kRanks, [&](Communicator& comm) -> absl::Status {
      std::unique_ptr<Module> model = MakeModel(ModelKind::kMlp);
      LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, comm, {}));
      LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<CommHook> h, MakeCommHook(hook));
      if (h != nullptr) LOCKSTEP_RETURN_IF_ERROR(ddp->RegisterCommHook(std::move(h)));
      const uint64_t before = comm.Traffic().bytes_sent[1 - comm.rank()];
      Batch b = MakeBatch(0, 0, comm.rank());
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, ddp->Forward(b.x));
      LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, b.y));
      LOCKSTEP_RETURN_IF_ERROR(ddp->Backward(ce.grad_logits));
      if (comm.rank() == 0) sent[hook] = comm.Traffic().bytes_sent[1] - before;
      return absl::OkStatus();
    });
    for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << hook << ": " << s;
  }
  ASSERT_GT(sent[""], 0u);
  EXPECT_EQ(sent["allreduce"], sent[""]);
  EXPECT_EQ(sent["fp16_compress"] * 2, sent[""]);
  EXPECT_EQ(sent["bf16_compress"] * 2, sent[""]);
}

TEST(DdpTest, BucketsAreRebuiltInReadyOrderAfterTheFirstIteration) {
  std::vector<std::vector<std::vector<size_t>>> before(kRanks), after(kRanks);
  const auto results = testing::RunThreads(kRanks, [&](Communicator& comm) -> absl::Status {
    // 0.weight 1.6 MB, 0.bias 80 KB, 2.weight 1.28 MB, small last layer.
    std::unique_ptr<Module> model = MakeModel(ModelKind::kMlp, /*hidden=*/20000);
    DdpOptions options;
    options.bucket_cap_mb = 0.01;  // 10 KiB
    LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, comm, options));
    before[comm.rank()] = ddp->bucket_indices();
    for (int s = 0; s < 2; ++s) {
      Batch b = MakeBatch(s, 0, comm.rank());
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, ddp->Forward(b.x));
      LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, b.y));
      LOCKSTEP_RETURN_IF_ERROR(ddp->Backward(ce.grad_logits));
    }
    after[comm.rank()] = ddp->bucket_indices();
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  // First iteration: everything in one bucket, registration order.
  EXPECT_EQ(before[0], (std::vector<std::vector<size_t>>{{0, 1, 2, 3, 4, 5}}));
  // Then ready order (last layer first, bias before weight) with limits
  // [1 MiB, 10 KiB]: the first bucket closes once 2.weight takes it past
  // 1 MiB, then each of the big ones is over 10 KiB alone.
  EXPECT_EQ(after[0], (std::vector<std::vector<size_t>>{{5, 4, 3, 2}, {1}, {0}}));
  EXPECT_EQ(after[0], after[1]);
}

TEST(DdpTest, DifferentModelsFailOnEveryRankNamingTheMismatch) {
  const auto results = testing::RunThreads(kRanks, [&](Communicator& comm) -> absl::Status {
    std::unique_ptr<Module> model = MakeModel(ModelKind::kMlp, comm.rank() == 0 ? 32 : 33);
    return DistributedDataParallel::Create(*model, comm, {}).status();
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(results[r].code(), absl::StatusCode::kInvalidArgument) << results[r];
    const std::string m(results[r].message());
    EXPECT_NE(m.find("0.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("[32, 20]"), std::string::npos) << m;
    EXPECT_NE(m.find("[33, 20]"), std::string::npos) << m;
  }
}

TEST(DdpTest, AnUnusedParameterWithoutDetectionFailsTheNextForward) {
  const auto results = testing::RunThreads(kRanks, [&](Communicator& comm) -> absl::Status {
    std::unique_ptr<Module> model = MakeModel(ModelKind::kUnusedBranch);
    LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, comm, {}));
    Batch b = MakeBatch(0, 0, comm.rank());
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, ddp->Forward(b.x));
    LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, b.y));
    LOCKSTEP_RETURN_IF_ERROR(ddp->Backward(ce.grad_logits));
    absl::Status next = ddp->Forward(b.x).status();
    const std::string m(next.message());
    if (m.find("Expected to have finished reduction in the prior iteration") == std::string::npos ||
        m.find("unused.weight") == std::string::npos || m.find("find_unused_parameters") == std::string::npos) {
      return absl::InternalError(absl::StrCat("unexpected: ", next.ToString()));
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
}

// Frozen parameters (requires_grad false), as PyTorch's
// _build_params_for_reducer: broadcast at construction, then no gradient,
// no bucket, no update; the other parameters' averaged gradients are those
// of the unfrozen model, bit for bit; still in the state dict.
TEST(DdpTest, FrozenParametersAreBroadcastButNeitherReducedNorUpdated) {
  std::vector<std::vector<float>> unfrozen_grads[kRanks], frozen_grads[kRanks], frozen_before[kRanks], after[kRanks];
  std::vector<std::vector<size_t>> buckets[kRanks];
  bool frozen_grad_defined[kRanks] = {true, true};
  bool in_state_dict[kRanks] = {false, false};
  for (bool freeze : {false, true}) {
    const auto results = testing::RunThreads(kRanks, [&](Communicator& comm) -> absl::Status {
      const int r = comm.rank();
      std::unique_ptr<Module> model = MakeModel(ModelKind::kMlp);
      if (freeze) {
        LOCKSTEP_ASSIGN_OR_RETURN(int64_t n, model->SetRequiresGrad("0", false));
        if (n != 2) return absl::InternalError(absl::StrCat("froze ", n, " parameters"));
        // Rank 1 starts elsewhere: DDP's broadcast must cover frozen ones too.
        if (r == 1) LOCKSTEP_RETURN_IF_ERROR(Scale(model->NamedParameters()[0].parameter->value, 3.0));
      }
      LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, comm, {}));
      std::unique_ptr<Sgd> sgd = MakeSgd(*model);
      Batch b = MakeBatch(0, 0, r);
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, ddp->Forward(b.x));
      LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, b.y));
      LOCKSTEP_RETURN_IF_ERROR(ddp->Backward(ce.grad_logits));
      auto& grads = freeze ? frozen_grads[r] : unfrozen_grads[r];
      std::vector<NamedParameter> named = model->NamedParameters();
      for (size_t i = 2; i < named.size(); ++i) grads.push_back(*named[i].parameter->grad.ToVector<float>());
      if (freeze) {
        frozen_grad_defined[r] = named[0].parameter->grad.defined() || named[1].parameter->grad.defined();
        frozen_before[r] = Snapshot(*model);
        buckets[r] = ddp->bucket_indices();
        LOCKSTEP_RETURN_IF_ERROR(sgd->Step());
        after[r] = Snapshot(*model);
        for (const NamedTensor& t : model->StateDict()) in_state_dict[r] = in_state_dict[r] || t.first == "0.weight";
      }
      return absl::OkStatus();
    });
    for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  }
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(frozen_grads[r], unfrozen_grads[r]) << "rank " << r;
    EXPECT_FALSE(frozen_grad_defined[r]) << "rank " << r;
    EXPECT_TRUE(in_state_dict[r]);
    for (const auto& bucket : buckets[r]) {
      for (size_t i : bucket) EXPECT_GE(i, 2u) << "frozen parameter " << i << " in a bucket";
    }
    EXPECT_EQ(frozen_before[r][0], frozen_before[0][0]) << "rank " << r << " was not broadcast";
    EXPECT_EQ(after[r][0], frozen_before[r][0]) << "rank " << r << ": a frozen parameter changed";
    EXPECT_EQ(after[r][1], frozen_before[r][1]);
    EXPECT_NE(after[r][2], frozen_before[r][2]) << "the trainable ones moved";
  }
}

TEST(DdpTest, AModuleWithNothingToTrainIsRefusedInPyTorchsWords) {
  const auto results = testing::RunThreads(kRanks, [&](Communicator& comm) -> absl::Status {
    std::unique_ptr<Module> model = MakeModel(ModelKind::kMlp);
    for (Parameter* p : model->Parameters()) p->requires_grad = false;
    return DistributedDataParallel::Create(*model, comm, {}).status();
  });
  for (const absl::Status& s : results) {
    EXPECT_EQ(s.message(),
              "DistributedDataParallel is not needed when a module doesn't have any parameter that requires a "
              "gradient.");
  }
}

}  // namespace
}  // namespace lockstep
