// ZeroRedundancyOptimizer: PyTorch's partition (ddp/testdata/zero_golden.json,
// from the real class), and on 2 and 3 ranks under DDP: ZeRO over Adam, AdamW
// and SGD with momentum ends bit for bit where the plain optimizer ends
// (make_zero_golden.py checks the same property on PyTorch's ZeRO, so with
// nn's Adam golden this ties lockstep's ZeRO to PyTorch's), each rank holds
// only its share's state, the consolidated state is the plain optimizer's
// (names and bits), and a consolidated checkpoint resumes on another number
// of ranks and into a plain optimizer, bit-identical to an uninterrupted run.
#include "ddp/zero_redundancy_optimizer.h"

#include <fstream>
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
#include "nlohmann/json.hpp"
#include "nn/adam.h"
#include "nn/cross_entropy.h"
#include "nn/mlp.h"
#include "nn/sgd.h"

namespace lockstep {
namespace {

nlohmann::json Golden() {
  std::ifstream in("ddp/testdata/zero_golden.json");
  EXPECT_TRUE(in.good()) << "ddp/testdata/zero_golden.json missing";
  return nlohmann::json::parse(in);
}

TEST(ZeroPartitionTest, MatchesPyTorchsPartition) {
  const nlohmann::json golden = Golden();
  int cases = 0;
  for (const nlohmann::json& c : golden["partitions"]) {
    const std::vector<int64_t> sizes = c["sizes"].get<std::vector<int64_t>>();
    const int world = c["world_size"].get<int>();
    const auto want = c["ranks"].get<std::vector<std::vector<size_t>>>();
    EXPECT_EQ(ZeroRedundancyOptimizer::Partition(sizes, world), want) << c.dump();
    ++cases;
  }
  EXPECT_EQ(cases, 25);
}

enum class Kind { kAdam, kAdamW, kSgd };

LocalOptimizerFactory Factory(Kind kind) {
  return [kind](std::vector<NamedParameter> shard) -> absl::StatusOr<std::unique_ptr<Optimizer>> {
    if (kind == Kind::kSgd) {
      SgdOptions o;
      o.lr = 0.05;
      o.momentum = 0.9;
      LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> sgd, Sgd::Create(std::move(shard), o));
      return std::unique_ptr<Optimizer>(std::move(sgd));
    }
    AdamOptions o = kind == Kind::kAdamW ? AdamWOptions() : AdamOptions();
    o.lr = 0.01;
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Adam> adam, Adam::Create(std::move(shard), o));
    return std::unique_ptr<Optimizer>(std::move(adam));
  };
}

std::unique_ptr<Sequential> Model(std::vector<int64_t> sizes = {20, 24, 16, 4}) {
  Mt19937 gen(0);
  MlpOptions o;
  o.sizes = std::move(sizes);
  o.flatten = false;
  return *MakeMlp(o, gen);
}

struct Batch {
  Tensor x, y;
};
Batch MakeBatch(int rank, int step) {
  Mt19937 gen(static_cast<uint64_t>(1000 + 10 * step + rank));
  Batch b{*Tensor::Empty({8, 20}, DType::kF32), *Tensor::Empty({8}, DType::kI64)};
  for (int64_t i = 0; i < 160; ++i) b.x.data<float>()[i] = static_cast<float>(gen.Next32() / 4294967296.0 * 2 - 1);
  for (int64_t i = 0; i < 8; ++i) b.y.data<int64_t>()[i] = static_cast<int64_t>(gen.Next32() % 4);
  return b;
}

std::vector<std::vector<float>> Params(Module& m) {
  std::vector<std::vector<float>> out;
  for (Parameter* p : m.Parameters()) out.push_back(*p->value.ToVector<float>());
  return out;
}

std::vector<std::pair<std::string, std::vector<float>>> Copy(const std::vector<NamedTensor>& state) {
  std::vector<std::pair<std::string, std::vector<float>>> out;
  for (const auto& [name, t] : state) out.emplace_back(name, *t.ToVector<float>());
  return out;
}

struct TrainRun {
  std::vector<std::vector<std::vector<float>>> params;            // Per step.
  std::vector<std::pair<std::string, std::vector<float>>> state;  // Rank 0's (consolidated) state at the end.
  int64_t local_state_elements = 0;
  std::vector<NamedTensor> state_handles;
};

// `steps` DDP steps from `start_state` (empty: fresh) and the model's own
// initial parameters or `start_params`.
absl::Status Train(Communicator& comm, Kind kind, bool zero, int first_step, int steps,
                   const std::vector<NamedTensor>& start_state, const std::vector<std::vector<float>>& start_params,
                   TrainRun* run, std::vector<int64_t> sizes = {20, 24, 16, 4}) {
  std::unique_ptr<Sequential> model = Model(std::move(sizes));
  std::vector<Parameter*> ps = model->Parameters();
  for (size_t i = 0; i < start_params.size(); ++i) {
    std::copy(start_params[i].begin(), start_params[i].end(), ps[i]->value.data<float>());
  }
  LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, comm));
  std::unique_ptr<Optimizer> opt;
  ZeroRedundancyOptimizer* z = nullptr;
  if (zero) {
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<ZeroRedundancyOptimizer> zo,
                              ZeroRedundancyOptimizer::Create(model->NamedParameters(), comm, Factory(kind)));
    z = zo.get();
    opt = std::move(zo);
  } else {
    LOCKSTEP_ASSIGN_OR_RETURN(opt, Factory(kind)(model->NamedParameters()));
  }
  if (!start_state.empty()) LOCKSTEP_RETURN_IF_ERROR(opt->LoadStateTensors(start_state));
  for (int s = first_step; s < first_step + steps; ++s) {
    LOCKSTEP_RETURN_IF_ERROR(model->ZeroGrad(true));
    const Batch b = MakeBatch(comm.rank(), s);
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, ddp->Forward(b.x));
    LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, b.y));
    LOCKSTEP_RETURN_IF_ERROR(ddp->Backward(ce.grad_logits));
    LOCKSTEP_RETURN_IF_ERROR(opt->Step());
    run->params.push_back(Params(*model));
  }
  if (z != nullptr) {
    for (const NamedTensor& t : z->local().StateTensors()) run->local_state_elements += t.second.numel();
  }
  LOCKSTEP_RETURN_IF_ERROR(opt->ConsolidateState(0));
  if (comm.rank() == 0) {
    run->state = Copy(opt->StateTensors());
    for (const NamedTensor& t : opt->StateTensors()) {
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor c, t.second.Clone());
      run->state_handles.emplace_back(t.first, c);
    }
  }
  return absl::OkStatus();
}

void ExpectZeroEqualsPlain(int world, Kind kind) {
  std::vector<TrainRun> plain(world), zero(world);
  testing::ExpectAllOk(testing::RunThreads(
      world, [&](Communicator& comm) { return Train(comm, kind, false, 0, 4, {}, {}, &plain[comm.rank()]); }));
  testing::ExpectAllOk(testing::RunThreads(
      world, [&](Communicator& comm) { return Train(comm, kind, true, 0, 4, {}, {}, &zero[comm.rank()]); }));
  // Each rank holds exactly the state of the parameters PyTorch's partition
  // gives it.
  std::vector<int64_t> numels;
  const std::unique_ptr<Sequential> shapes = Model();
  for (Parameter* p : shapes->Parameters()) numels.push_back(p->value.numel());
  const std::vector<std::vector<size_t>> partition = ZeroRedundancyOptimizer::Partition(numels, world);
  std::map<size_t, int64_t> state_of;  // Parameter index -> its state's elements.
  for (const auto& [name, v] : plain[0].state) state_of[std::stoul(name.substr(6))] += static_cast<int64_t>(v.size());
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(zero[r].params, plain[r].params) << "rank " << r;
    int64_t expected = 0;
    for (size_t i : partition[r]) expected += state_of[i];
    EXPECT_EQ(zero[r].local_state_elements, expected) << "rank " << r;
    EXPECT_GT(expected, 0) << "rank " << r << " owns nothing: the test would not show sharding";
  }
  // The consolidated state is the plain optimizer's, names and bits.
  EXPECT_EQ(zero[0].state, plain[0].state);
}

TEST(ZeroTest, AdamOnTwoRanksEqualsThePlainOptimizer) { ExpectZeroEqualsPlain(2, Kind::kAdam); }
TEST(ZeroTest, AdamWOnThreeRanksEqualsThePlainOptimizer) { ExpectZeroEqualsPlain(3, Kind::kAdamW); }
TEST(ZeroTest, SgdWithMomentumEqualsThePlainOptimizer) { ExpectZeroEqualsPlain(2, Kind::kSgd); }

TEST(ZeroTest, TheConsolidatedStateNamesMatchPyTorchsStateDict) {
  const nlohmann::json keys = Golden()["state_keys"]["adam"];
  std::vector<TrainRun> zero(2);
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) {
    // make_zero_golden.py's model: Linear(20, 16), ReLU, Linear(16, 4).
    return Train(comm, Kind::kAdam, true, 0, 1, {}, {}, &zero[comm.rank()], {20, 16, 4});
  }));
  std::map<std::string, std::vector<std::string>> ours;
  for (const auto& [name, v] : zero[0].state) {
    const size_t dot = name.find('.', 6);
    ours[name.substr(6, dot - 6)].push_back(name.substr(dot + 1));
  }
  for (auto& [index, k] : ours) std::sort(k.begin(), k.end());
  std::map<std::string, std::vector<std::string>> theirs;
  for (auto it = keys.begin(); it != keys.end(); ++it) theirs[it.key()] = it.value().get<std::vector<std::string>>();
  EXPECT_EQ(ours, theirs);
}

// 2 steps of ZeRO on 3 ranks, consolidated; then 3 more steps on 2 ranks,
// once with ZeRO loading that state and once with a plain optimizer loading
// it: the two continuations are bit-identical.
TEST(ZeroTest, AConsolidatedCheckpointResumesOnAnotherWorldSizeAndIntoAPlainOptimizer) {
  std::vector<TrainRun> first(3);
  testing::ExpectAllOk(testing::RunThreads(
      3, [&](Communicator& comm) { return Train(comm, Kind::kAdam, true, 0, 2, {}, {}, &first[comm.rank()]); }));
  const std::vector<NamedTensor> state = first[0].state_handles;
  const std::vector<std::vector<float>> params = first[0].params.back();
  ASSERT_FALSE(state.empty());
  std::vector<TrainRun> zero(2), plain(2);
  testing::ExpectAllOk(testing::RunThreads(
      2, [&](Communicator& comm) { return Train(comm, Kind::kAdam, true, 2, 3, state, params, &zero[comm.rank()]); }));
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) {
    return Train(comm, Kind::kAdam, false, 2, 3, state, params, &plain[comm.rank()]);
  }));
  for (int r = 0; r < 2; ++r) EXPECT_EQ(zero[r].params, plain[r].params) << "rank " << r;
  EXPECT_EQ(zero[0].state, plain[0].state);
}

TEST(ZeroTest, BadInputIsRefused) {
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) -> absl::Status {
    if (ZeroRedundancyOptimizer::Create({}, comm, Factory(Kind::kAdam)).ok()) {
      return absl::InternalError("an empty parameter list was accepted");
    }
    std::unique_ptr<Sequential> model = Model();
    LOCKSTEP_ASSIGN_OR_RETURN(auto zero,
                              ZeroRedundancyOptimizer::Create(model->NamedParameters(), comm, Factory(Kind::kAdam)));
    if (zero->ConsolidateState(5).ok()) return absl::InternalError("consolidating at rank 5 was accepted");
    Tensor bad = *Tensor::Zeros({3}, DType::kF32);
    absl::Status s = zero->LoadStateTensors({{"state.99.exp_avg", bad}});
    if (s.ok() || s.message().find("state.99.exp_avg") == std::string::npos) {
      return absl::InternalError(absl::StrCat("bad index: ", s.ToString()));
    }
    return absl::OkStatus();
  }));
}

}  // namespace
}  // namespace lockstep
