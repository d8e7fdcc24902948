// FullyShard against DistributedDataParallel on the same model, data and
// optimizer: at world 2 the parameters are bit-identical at every step (the
// reference CNN with BatchNorm and the MLP, SGD with momentum and Adam, with
// and without prefetch, with NoSync accumulation); at world 3 every shard
// gradient lies within the rounding bound of an average recomputed here
// from each rank's local gradient. Also: between units only the running
// and the prefetched unit hold gathered parameters, the full state dict is
// the plain module's (names, order, bits) and loads at another world size,
// and bad units, frozen parameters and bad state dicts are named.
#include "fsdp/fully_shard.h"

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/testing/group.h"
#include "core/mt19937.h"
#include "core/status.h"
#include "ddp/distributed_data_parallel.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/cross_entropy.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "nn/sequential.h"
#include "nn/sgd.h"
#include "trainers/trainer_models.h"

namespace lockstep {
namespace {

enum class Model { kCnn, kMlp };
enum class Opt { kSgd, kAdam };

std::unique_ptr<Module> MakeTestModel(Model kind) {
  if (kind == Model::kCnn) return *MakeModel("cnn", 7, DType::kF32, Device::Cpu());
  Mt19937 gen(3);
  MlpOptions o;
  o.sizes = {784, 40, 24, 10};
  return std::unique_ptr<Module>(*MakeMlp(o, gen));
}

struct Batch {
  Tensor x, y;
};
// Rank r's batch of step s (images [4, 1, 28, 28]); micro-batch m for NoSync.
Batch MakeBatch(int rank, int step, int micro = 0) {
  Mt19937 gen(static_cast<uint64_t>(5000 + 100 * step + 10 * micro + rank));
  Batch b{*Tensor::Empty({4, 1, 28, 28}, DType::kF32), *Tensor::Empty({4}, DType::kI64)};
  for (int64_t i = 0; i < b.x.numel(); ++i) b.x.data<float>()[i] = static_cast<float>(gen.Next32() / 4294967296.0);
  for (int64_t i = 0; i < 4; ++i) b.y.data<int64_t>()[i] = static_cast<int64_t>(gen.Next32() % 10);
  return b;
}

absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(Opt kind, std::vector<NamedParameter> params) {
  if (kind == Opt::kSgd) {
    SgdOptions o;
    o.lr = 0.05;
    o.momentum = 0.9;
    o.weight_decay = 1e-4;
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> sgd, Sgd::Create(std::move(params), o));
    return std::unique_ptr<Optimizer>(std::move(sgd));
  }
  AdamOptions o;
  o.lr = 0.01;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Adam> adam, Adam::Create(std::move(params), o));
  return std::unique_ptr<Optimizer>(std::move(adam));
}

using Params = std::map<std::string, std::vector<float>>;

struct Run {
  std::vector<Params> per_step;  // Every parameter, after each step.
};

struct Setup {
  Model model = Model::kCnn;
  Opt opt = Opt::kSgd;
  bool fsdp = true;
  bool prefetch = true;
  int steps = 3;
  int micro = 1;  // Micro-batches per step: the first micro - 1 under NoSync.
};

absl::Status Train(Communicator& comm, const Setup& s, Run* run) {
  std::unique_ptr<Module> model = MakeTestModel(s.model);
  std::unique_ptr<FullyShard> fsdp;
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<Optimizer> opt;
  if (s.fsdp) {
    FullyShardOptions options;
    options.prefetch = s.prefetch;
    LOCKSTEP_ASSIGN_OR_RETURN(fsdp, FullyShard::Create(*model, comm, options));
    LOCKSTEP_ASSIGN_OR_RETURN(opt, MakeOptimizer(s.opt, fsdp->ShardParameters()));
  } else {
    LOCKSTEP_ASSIGN_OR_RETURN(ddp, DistributedDataParallel::Create(*model, comm));
    LOCKSTEP_ASSIGN_OR_RETURN(opt, MakeOptimizer(s.opt, model->NamedParameters()));
  }
  for (int step = 0; step < s.steps; ++step) {
    for (int m = 0; m < s.micro; ++m) {
      const Batch b = MakeBatch(comm.rank(), step, m);
      const bool last = m + 1 == s.micro;
      if (s.fsdp) {
        std::unique_ptr<FullyShard::NoSyncScope> scope;
        if (!last) scope = std::make_unique<FullyShard::NoSyncScope>(fsdp->NoSync());
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, fsdp->Forward(b.x));
        LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, b.y));
        LOCKSTEP_RETURN_IF_ERROR(fsdp->Backward(ce.grad_logits));
      } else {
        std::unique_ptr<DistributedDataParallel::NoSyncScope> scope;
        if (!last) scope = std::make_unique<DistributedDataParallel::NoSyncScope>(ddp->NoSync());
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, ddp->Forward(b.x));
        LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, b.y));
        LOCKSTEP_RETURN_IF_ERROR(ddp->Backward(ce.grad_logits));
      }
    }
    LOCKSTEP_RETURN_IF_ERROR(opt->Step());
    LOCKSTEP_RETURN_IF_ERROR(opt->ZeroGrad(/*set_to_none=*/true));
    Params params;
    if (s.fsdp) {
      LOCKSTEP_ASSIGN_OR_RETURN(std::vector<NamedTensor> state, fsdp->FullStateDict());
      std::map<std::string, bool> is_param;
      for (const NamedParameter& p : model->NamedParameters()) is_param[p.name] = true;
      for (const auto& [name, t] : state) {
        if (is_param.count(name)) params[name] = *t.ToVector<float>();
      }
    } else {
      for (const NamedParameter& p : model->NamedParameters()) params[p.name] = *p.parameter->value.ToVector<float>();
    }
    run->per_step.push_back(std::move(params));
  }
  return absl::OkStatus();
}

void ExpectBitIdentical(Setup s) {
  std::vector<Run> fsdp(2), ddp(2);
  s.fsdp = true;
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) { return Train(comm, s, &fsdp[comm.rank()]); }));
  s.fsdp = false;
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) { return Train(comm, s, &ddp[comm.rank()]); }));
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(fsdp[r].per_step.size(), static_cast<size_t>(s.steps));
    ASSERT_EQ(ddp[r].per_step.size(), static_cast<size_t>(s.steps));
    for (int step = 0; step < s.steps; ++step) {
      const Params& f = fsdp[r].per_step[step];
      const Params& d = ddp[r].per_step[step];
      ASSERT_EQ(f.size(), d.size());
      for (const auto& [name, want] : d) {
        // Bits, not values: memcmp-equal vectors of floats.
        ASSERT_EQ(f.at(name).size(), want.size());
        EXPECT_EQ(0, std::memcmp(f.at(name).data(), want.data(), want.size() * sizeof(float)))
            << "rank " << r << " step " << step << " parameter " << name;
      }
    }
  }
  // And training moved them (a test that cannot fail otherwise).
  EXPECT_NE(fsdp[0].per_step.front(), fsdp[0].per_step.back());
}

TEST(FullyShardTest, CnnWithSgdIsBitIdenticalToDdpAtWorldTwo) { ExpectBitIdentical({Model::kCnn, Opt::kSgd}); }
TEST(FullyShardTest, CnnWithAdamIsBitIdenticalToDdpAtWorldTwo) { ExpectBitIdentical({Model::kCnn, Opt::kAdam}); }
TEST(FullyShardTest, MlpWithoutPrefetchIsBitIdenticalToDdpAtWorldTwo) {
  ExpectBitIdentical({Model::kMlp, Opt::kAdam, true, /*prefetch=*/false});
}
TEST(FullyShardTest, NoSyncAccumulationIsBitIdenticalToDdpsAtWorldTwo) {
  ExpectBitIdentical({Model::kMlp, Opt::kSgd, true, true, /*steps=*/2, /*micro=*/3});
}

// World 3: each shard gradient element g against the average recomputed
// here in double from the three local gradients t_r = float(grad_r *
// float(1/3)) (exact in double): adding three floats rounds twice, so
// |g - sum t_r| <= 2u(1 + u) sum |t_r| with u = 2^-24, in any order.
TEST(FullyShardTest, ShardGradientsAtWorldThreeLieWithinTheRoundingBound) {
  constexpr int kWorld = 3;
  // Each rank's local gradients, from a plain model (no communication).
  std::vector<Params> local(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    std::unique_ptr<Module> model = MakeTestModel(Model::kCnn);
    const Batch b = MakeBatch(r, 0);
    absl::StatusOr<Tensor> logits = model->Forward(b.x);
    ASSERT_TRUE(logits.ok()) << logits.status();
    absl::StatusOr<CrossEntropyResult> ce = CrossEntropy(*logits, b.y);
    ASSERT_TRUE(model->Backward(ce->grad_logits).ok());
    for (const NamedParameter& p : model->NamedParameters()) local[r][p.name] = *p.parameter->grad.ToVector<float>();
  }
  // FSDP's reduced gradients, each rank filling its own elements.
  Params reduced;
  for (const auto& [name, v] : local[0]) reduced[name].assign(v.size(), std::nanf(""));
  std::vector<std::string> names;
  for (const NamedParameter& p : MakeTestModel(Model::kCnn)->NamedParameters()) names.push_back(p.name);
  testing::ExpectAllOk(testing::RunThreads(kWorld, [&](Communicator& comm) -> absl::Status {
    std::unique_ptr<Module> model = MakeTestModel(Model::kCnn);
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FullyShard> fsdp, FullyShard::Create(*model, comm));
    const Batch b = MakeBatch(comm.rank(), 0);
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, fsdp->Forward(b.x));
    LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, b.y));
    LOCKSTEP_RETURN_IF_ERROR(fsdp->Backward(ce.grad_logits));
    std::vector<NamedParameter> shards = fsdp->ShardParameters();
    // Parameters in each unit come in NamedParameters order.
    std::map<std::string, std::vector<std::string>> unit_params;
    for (const std::string& name : names) {
      std::string unit;
      for (const std::string& path : fsdp->unit_paths()) {
        if (!path.empty() && name.compare(0, path.size() + 1, path + ".") == 0) unit = path;
      }
      unit_params[unit].push_back(name);
    }
    const std::vector<std::string> paths = fsdp->unit_paths();
    for (size_t u = 0; u < paths.size(); ++u) {
      const FlatShardLayout& layout = fsdp->layout(u);
      LOCKSTEP_ASSIGN_OR_RETURN(std::vector<float> g, shards[u].parameter->grad.ToVector<float>());
      const std::vector<std::string>& in_unit = unit_params[paths[u]];
      for (size_t i = 0; i < in_unit.size(); ++i) {
        const auto [begin, end] = layout.ParameterRange(i, comm.rank());
        for (int64_t k = begin; k < end; ++k) {
          reduced[in_unit[i]][k] = g[layout.offsets[i] + k - comm.rank() * layout.shard];
        }
      }
    }
    return absl::OkStatus();
  }));
  const double u = std::ldexp(1.0, -24);
  const float third = static_cast<float>(1.0 / kWorld);
  int64_t checked = 0;
  for (const auto& [name, got] : reduced) {
    for (size_t k = 0; k < got.size(); ++k) {
      double sum = 0, abs_sum = 0;
      for (int r = 0; r < kWorld; ++r) {
        const double t = static_cast<float>(local[r][name][k] * third);
        sum += t;
        abs_sum += std::fabs(t);
      }
      ASSERT_LE(std::fabs(got[k] - sum), 2 * u * (1 + u) * abs_sum) << name << "[" << k << "]: got " << got[k];
      ++checked;
    }
  }
  EXPECT_GT(checked, 400000);  // Every element of the CNN.
}

// A layer without parameters that records how many units hold gathered
// parameters whenever it runs (placed between the units).
class Probe : public Module {
 public:
  explicit Probe(const FullyShard** fsdp, std::vector<int>* seen) : fsdp_(fsdp), seen_(seen) {}
  absl::string_view type_name() const override { return "Probe"; }
  absl::StatusOr<Tensor> Forward(const Tensor& input) override {
    seen_->push_back((*fsdp_)->gathered_units());
    return input;
  }

 protected:
  absl::StatusOr<Tensor> BackwardImpl(const Tensor& g, bool, const ParameterReadyFn&) override {
    seen_->push_back((*fsdp_)->gathered_units());
    return g;
  }
  absl::StatusOr<std::unique_ptr<Module>> NewLike(Device) const override {
    return std::unique_ptr<Module>(new Probe(fsdp_, seen_));
  }

 private:
  const FullyShard** fsdp_;
  std::vector<int>* seen_;
};

TEST(FullyShardTest, OnlyTheRunningAndThePrefetchedUnitsAreGathered) {
  std::vector<std::vector<int>> seen(2);
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) -> absl::Status {
    // Six Linear units with probes between them, the root holding none.
    const FullyShard* handle = nullptr;
    auto model = std::make_unique<Sequential>();
    Mt19937 gen(1);
    std::vector<std::string> units;
    for (int i = 0; i < 6; ++i) {
      LinearOptions o;
      o.in_features = i == 0 ? 784 : 16;
      o.out_features = i == 5 ? 10 : 16;
      LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Linear> fc, Linear::Create(o, gen));
      units.push_back(std::to_string(model->size()));
      model->Add(std::move(fc));
      model->Add(std::make_unique<Probe>(&handle, &seen[comm.rank()]));
    }
    FullyShardOptions options;
    options.units = units;
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FullyShard> fsdp, FullyShard::Create(*model, comm, options));
    handle = fsdp.get();
    Tensor x = *Tensor::Zeros({2, 784}, DType::kF32);
    Tensor y = *Tensor::FromVector<int64_t>({1, 2});
    for (int step = 0; step < 2; ++step) {
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, fsdp->Forward(x));
      LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, y));
      LOCKSTEP_RETURN_IF_ERROR(fsdp->Backward(ce.grad_logits));
      if (fsdp->gathered_units() != 0) return absl::InternalError("units still gathered after Backward");
      for (Parameter* p : model->Parameters()) {
        if (p->value.defined() || p->grad.defined()) {
          return absl::InternalError("a module parameter or gradient outlived Backward");
        }
      }
    }
    return absl::OkStatus();
  }));
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(seen[r].size(), 24u);  // 2 steps x 6 probes x (forward, backward).
    // Step 1 (order not known yet): after each unit's forward it is freed, so
    // a probe sees the root only; later a probe sees at most the root and the
    // prefetched unit (between units: the one just run is freed).
    for (int v : seen[r]) EXPECT_LE(v, 2) << "rank " << r;
    // Step 2's forward probes 0-4 see the next unit's prefetch in flight.
    EXPECT_EQ(seen[r][12], 2) << "rank " << r;
  }
}

TEST(FullyShardTest, TheFullStateDictIsThePlainModulesAndLoadsAtAnotherWorldSize) {
  std::vector<NamedTensor> plain = MakeTestModel(Model::kCnn)->StateDict();
  std::vector<std::vector<NamedTensor>> at2(2), at3(3);
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) -> absl::Status {
    std::unique_ptr<Module> model = MakeTestModel(Model::kCnn);
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FullyShard> fsdp, FullyShard::Create(*model, comm));
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, MakeOptimizer(Opt::kSgd, fsdp->ShardParameters()));
    const Batch b = MakeBatch(comm.rank(), 0);
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, fsdp->Forward(b.x));
    LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, b.y));
    LOCKSTEP_RETURN_IF_ERROR(fsdp->Backward(ce.grad_logits));
    LOCKSTEP_RETURN_IF_ERROR(opt->Step());
    LOCKSTEP_ASSIGN_OR_RETURN(at2[comm.rank()], fsdp->FullStateDict());
    return absl::OkStatus();
  }));
  testing::ExpectAllOk(testing::RunThreads(3, [&](Communicator& comm) -> absl::Status {
    std::unique_ptr<Module> model = MakeTestModel(Model::kCnn);
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FullyShard> fsdp, FullyShard::Create(*model, comm));
    LOCKSTEP_RETURN_IF_ERROR(fsdp->LoadFullStateDict(at2[0]));
    LOCKSTEP_ASSIGN_OR_RETURN(at3[comm.rank()], fsdp->FullStateDict());
    return absl::OkStatus();
  }));
  ASSERT_EQ(at2[0].size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(at2[0][i].first, plain[i].first);
    EXPECT_EQ(at2[0][i].second.shape(), plain[i].second.shape()) << plain[i].first;
  }
  EXPECT_NE(*at2[0][0].second.ToVector<float>(), *plain[0].second.ToVector<float>());  // It trained.
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(at3[r].size(), at2[0].size());
    for (size_t i = 0; i < at2[0].size(); ++i) {
      EXPECT_EQ(at3[r][i].first, at2[0][i].first);
      EXPECT_EQ(0, std::memcmp(at3[r][i].second.raw_data(), at2[0][i].second.raw_data(), at2[0][i].second.nbytes()))
          << "rank " << r << " " << at2[0][i].first;
    }
  }
}

// Summoned, the plain module runs without collectives (ranks evaluate
// different numbers of batches), holds the full state's bits, and a change
// to it goes back into every rank's shards.
TEST(FullyShardTest, SummonedParametersAreThePlainModulesAndWriteBack) {
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) -> absl::Status {
    std::unique_ptr<Module> model = MakeTestModel(Model::kMlp);
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FullyShard> fsdp, FullyShard::Create(*model, comm));
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, MakeOptimizer(Opt::kSgd, fsdp->ShardParameters()));
    const Batch b = MakeBatch(comm.rank(), 0);
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, fsdp->Forward(b.x));
    LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, b.y));
    LOCKSTEP_RETURN_IF_ERROR(fsdp->Backward(ce.grad_logits));
    LOCKSTEP_RETURN_IF_ERROR(opt->Step());
    LOCKSTEP_ASSIGN_OR_RETURN(std::vector<NamedTensor> full, fsdp->FullStateDict());
    std::map<std::string, Tensor> want(full.begin(), full.end());

    LOCKSTEP_RETURN_IF_ERROR(fsdp->SummonFullParameters());
    EXPECT_TRUE(fsdp->summoned());
    for (const NamedParameter& p : model->NamedParameters()) {
      EXPECT_EQ(0, std::memcmp(p.parameter->value.raw_data(), want.at(p.name).raw_data(), want.at(p.name).nbytes()))
          << p.name;
    }
    EXPECT_TRUE(absl::IsFailedPrecondition(fsdp->Forward(b.x).status()));
    EXPECT_TRUE(absl::IsFailedPrecondition(fsdp->FullStateDict().status()));
    // Rank 0 evaluates three batches, rank 1 one: no collective may run.
    model->Eval();
    for (int i = 0; i < (comm.rank() == 0 ? 3 : 1); ++i) {
      LOCKSTEP_RETURN_IF_ERROR(model->Forward(MakeBatch(comm.rank(), 10 + i).x).status());
    }
    model->Train();
    EXPECT_EQ(fsdp->gathered_units(), 0);
    // Every rank changes the first parameter alike, as a checkpoint load would.
    const std::string first_name = model->NamedParameters().front().name;
    Parameter& first = *model->NamedParameters().front().parameter;
    for (int64_t i = 0; i < first.value.numel(); ++i) first.value.data<float>()[i] = 0.25f * static_cast<float>(i);
    LOCKSTEP_RETURN_IF_ERROR(fsdp->ReleaseFullParameters(/*write_back=*/true));
    EXPECT_FALSE(first.value.defined());
    LOCKSTEP_ASSIGN_OR_RETURN(std::vector<NamedTensor> after, fsdp->FullStateDict());
    std::map<std::string, Tensor> now(after.begin(), after.end());
    LOCKSTEP_ASSIGN_OR_RETURN(std::vector<float> changed, now.at(first_name).ToVector<float>());
    EXPECT_EQ(changed.size(), static_cast<size_t>(want.at(first_name).numel()));
    for (size_t i = 0; i < changed.size(); ++i) EXPECT_EQ(changed[i], 0.25f * static_cast<float>(i)) << i;
    EXPECT_TRUE(absl::IsFailedPrecondition(fsdp->ReleaseFullParameters(false)));
    // And training goes on.
    LOCKSTEP_ASSIGN_OR_RETURN(logits, fsdp->Forward(b.x));
    LOCKSTEP_ASSIGN_OR_RETURN(ce, CrossEntropy(logits, b.y));
    return fsdp->Backward(ce.grad_logits);
  }));
}

TEST(FullyShardTest, BadStateDictsAreListedAndNothingIsLoaded) {
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) -> absl::Status {
    std::unique_ptr<Module> model = MakeTestModel(Model::kMlp);
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FullyShard> fsdp, FullyShard::Create(*model, comm));
    LOCKSTEP_ASSIGN_OR_RETURN(std::vector<NamedTensor> before, fsdp->FullStateDict());
    std::vector<NamedTensor> bad;
    for (const auto& [name, t] : before) bad.emplace_back(name, *Tensor::Zeros(t.shape(), t.dtype()));
    bad.erase(bad.begin());                                          // missing "1.weight"
    bad[0].second = *Tensor::Zeros({3}, DType::kF32);                // "1.bias" of the wrong shape
    bad.emplace_back("9.weight", *Tensor::Zeros({1}, DType::kF32));  // unexpected
    absl::Status s = fsdp->LoadFullStateDict(bad);
    for (const char* want : {"missing '1.weight'", "'1.bias' is", "expected f32 of shape [40]", "unexpected '9.weight'",
                             "nothing was loaded"}) {
      if (s.code() != absl::StatusCode::kInvalidArgument || s.message().find(want) == absl::string_view::npos) {
        return absl::InternalError(absl::StrCat("expected InvalidArgument with '", want, "', got ", s.ToString()));
      }
    }
    LOCKSTEP_ASSIGN_OR_RETURN(std::vector<NamedTensor> after, fsdp->FullStateDict());
    for (size_t i = 0; i < before.size(); ++i) {
      if (*after[i].second.ToVector<float>() != *before[i].second.ToVector<float>()) {
        return absl::InternalError("a refused load changed " + before[i].first);
      }
    }
    return absl::OkStatus();
  }));
}

TEST(FullyShardTest, BadUnitsAndFrozenParametersAreNamed) {
  testing::ExpectAllOk(testing::RunThreads(1, [&](Communicator& comm) -> absl::Status {
    std::unique_ptr<Module> model = MakeTestModel(Model::kMlp);  // 0 Flatten, 1 Linear, 2 ReLU, ...
    FullyShardOptions options;
    options.units = {"1", "7", "2", "1", ""};
    absl::StatusOr<std::unique_ptr<FullyShard>> f = FullyShard::Create(*model, comm, options);
    for (const char* want : {"'7' is not a module path", "'2' has no parameters", "'1' is named twice",
                             "\"\" is the root", "The module paths are: 0, 1, 2, 3, 4, 5"}) {
      if (f.ok() || f.status().code() != absl::StatusCode::kInvalidArgument ||
          f.status().message().find(want) == absl::string_view::npos) {
        return absl::InternalError(absl::StrCat("expected '", want, "', got ", f.status().ToString()));
      }
    }
    // Nothing was taken from the module.
    for (Parameter* p : model->Parameters()) {
      if (!p->value.defined()) return absl::InternalError("a refused Create dropped a parameter");
    }
    LOCKSTEP_ASSIGN_OR_RETURN(int64_t n, model->SetRequiresGrad("3", false));
    (void)n;
    f = FullyShard::Create(*model, comm);
    if (f.ok() || f.status().code() != absl::StatusCode::kUnimplemented ||
        f.status().message().find("parameter '3.weight' is frozen") == absl::string_view::npos) {
      return absl::InternalError("expected the frozen parameter named, got " + f.status().ToString());
    }
    return absl::OkStatus();
  }));
}

}  // namespace
}  // namespace lockstep
