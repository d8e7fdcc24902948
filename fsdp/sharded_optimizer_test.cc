// ShardedOptimizer: after FSDP training on 2 ranks the consolidated state is
// a plain Adam's after the same DDP training (names and bits); a checkpoint
// (FullStateDict + consolidated state) written on 3 ranks resumes on 2, and
// FSDP's resumed run equals DDP's resumed from the same files, step for
// step, bit for bit; a bad state is refused whole.
#include "fsdp/sharded_optimizer.h"

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
#include "nn/mlp.h"

namespace lockstep {
namespace {

std::unique_ptr<Sequential> Model() {
  Mt19937 gen(11);
  MlpOptions o;
  o.sizes = {30, 24, 17, 5};  // Odd sizes: shards split parameters.
  o.flatten = false;
  return *MakeMlp(o, gen);
}

// The global batch of a step: 12 examples, split evenly over the ranks, so
// every world size trains on the same data.
struct Batch {
  Tensor x, y;
};
Batch MakeBatch(int rank, int world, int step) {
  const int per = 12 / world;
  Batch b{*Tensor::Empty({per, 30}, DType::kF32), *Tensor::Empty({per}, DType::kI64)};
  for (int i = 0; i < per; ++i) {
    const int example = rank * per + i;
    Mt19937 gen(static_cast<uint64_t>(100 * step + example));
    for (int k = 0; k < 30; ++k) b.x.data<float>()[i * 30 + k] = static_cast<float>(gen.Next32() / 4294967296.0 - 0.5);
    b.y.data<int64_t>()[i] = static_cast<int64_t>(gen.Next32() % 5);
  }
  return b;
}

absl::StatusOr<std::unique_ptr<Optimizer>> MakeAdam(std::vector<NamedParameter> params) {
  AdamOptions o;
  o.lr = 0.02;
  o.weight_decay = 0.01;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Adam> adam, Adam::Create(std::move(params), o));
  return std::unique_ptr<Optimizer>(std::move(adam));
}

struct Checkpoint {
  std::vector<NamedTensor> model, optimizer;
};
using Trajectory = std::vector<std::map<std::string, std::vector<float>>>;

std::vector<NamedTensor> Copies(const std::vector<NamedTensor>& state) {
  std::vector<NamedTensor> out;
  for (const auto& [name, t] : state) out.emplace_back(name, *t.Clone());
  return out;
}

// Steps [first, first + steps) on this rank; `from` (if any) loaded first;
// the parameters after each step into `trajectory`, rank 0's checkpoint at
// the end into `out`.
absl::Status Train(Communicator& comm, bool fsdp_mode, int first, int steps, const Checkpoint* from,
                   Trajectory* trajectory, Checkpoint* out) {
  std::unique_ptr<Sequential> model = Model();
  std::unique_ptr<FullyShard> fsdp;
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<Optimizer> opt;
  if (fsdp_mode) {
    LOCKSTEP_ASSIGN_OR_RETURN(fsdp, FullyShard::Create(*model, comm));
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<ShardedOptimizer> sharded, ShardedOptimizer::Create(*fsdp, MakeAdam));
    opt = std::move(sharded);
    if (from != nullptr) LOCKSTEP_RETURN_IF_ERROR(fsdp->LoadFullStateDict(from->model));
  } else {
    if (from != nullptr) LOCKSTEP_RETURN_IF_ERROR(model->LoadStateDict(from->model));
    LOCKSTEP_ASSIGN_OR_RETURN(ddp, DistributedDataParallel::Create(*model, comm));
    LOCKSTEP_ASSIGN_OR_RETURN(opt, MakeAdam(model->NamedParameters()));
  }
  if (from != nullptr) LOCKSTEP_RETURN_IF_ERROR(opt->LoadStateTensors(from->optimizer));
  for (int step = first; step < first + steps; ++step) {
    const Batch b = MakeBatch(comm.rank(), comm.size(), step);
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, fsdp ? fsdp->Forward(b.x) : ddp->Forward(b.x));
    LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, b.y));
    LOCKSTEP_RETURN_IF_ERROR(fsdp ? fsdp->Backward(ce.grad_logits) : ddp->Backward(ce.grad_logits));
    LOCKSTEP_RETURN_IF_ERROR(opt->Step());
    LOCKSTEP_RETURN_IF_ERROR(opt->ZeroGrad(/*set_to_none=*/true));
    std::map<std::string, std::vector<float>> params;
    LOCKSTEP_ASSIGN_OR_RETURN(
        std::vector<NamedTensor> state,
        fsdp ? fsdp->FullStateDict() : absl::StatusOr<std::vector<NamedTensor>>(model->StateDict()));
    for (const auto& [name, t] : state) params[name] = *t.ToVector<float>();
    trajectory->push_back(std::move(params));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(
      std::vector<NamedTensor> model_state,
      fsdp ? fsdp->FullStateDict() : absl::StatusOr<std::vector<NamedTensor>>(model->StateDict()));
  LOCKSTEP_RETURN_IF_ERROR(opt->ConsolidateState(0));
  if (comm.rank() == 0 && out != nullptr) {
    out->model = Copies(model_state);
    out->optimizer = Copies(opt->StateTensors());
  }
  return absl::OkStatus();
}

void ExpectSameBits(const std::vector<NamedTensor>& got, const std::vector<NamedTensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    ASSERT_EQ(got[i].second.nbytes(), want[i].second.nbytes()) << want[i].first;
    EXPECT_EQ(0, std::memcmp(got[i].second.raw_data(), want[i].second.raw_data(), want[i].second.nbytes()))
        << want[i].first;
  }
}

TEST(ShardedOptimizerTest, TheConsolidatedStateIsAPlainAdamsAfterTheSameTraining) {
  Checkpoint fsdp, ddp;
  Trajectory unused[2];
  testing::ExpectAllOk(testing::RunThreads(
      2, [&](Communicator& comm) { return Train(comm, true, 0, 3, nullptr, &unused[comm.rank()], &fsdp); }));
  testing::ExpectAllOk(testing::RunThreads(
      2, [&](Communicator& comm) { return Train(comm, false, 0, 3, nullptr, &unused[comm.rank()], &ddp); }));
  ASSERT_EQ(ddp.optimizer.size(), 3u * 6u);  // step, exp_avg, exp_avg_sq of 6 parameters.
  ExpectSameBits(fsdp.optimizer, ddp.optimizer);
  ExpectSameBits(fsdp.model, ddp.model);
}

TEST(ShardedOptimizerTest, ACheckpointFromThreeRanksResumesOnTwoAsDdpResumesIt) {
  Checkpoint at3;
  Trajectory first[3];
  testing::ExpectAllOk(testing::RunThreads(
      3, [&](Communicator& comm) { return Train(comm, true, 0, 2, nullptr, &first[comm.rank()], &at3); }));
  ASSERT_FALSE(at3.optimizer.empty());
  Trajectory fsdp[2], ddp[2];
  testing::ExpectAllOk(testing::RunThreads(
      2, [&](Communicator& comm) { return Train(comm, true, 2, 3, &at3, &fsdp[comm.rank()], nullptr); }));
  testing::ExpectAllOk(testing::RunThreads(
      2, [&](Communicator& comm) { return Train(comm, false, 2, 3, &at3, &ddp[comm.rank()], nullptr); }));
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(fsdp[r].size(), 3u);
    for (size_t step = 0; step < 3; ++step) EXPECT_EQ(fsdp[r][step], ddp[r][step]) << "rank " << r << " step " << step;
  }
  EXPECT_NE(fsdp[0].back(), first[0].back());  // It trained on.
}

TEST(ShardedOptimizerTest, ABadStateIsRefusedWhole) {
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) -> absl::Status {
    Trajectory unused;
    Checkpoint good;
    std::unique_ptr<Sequential> model = Model();
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FullyShard> fsdp, FullyShard::Create(*model, comm));
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<ShardedOptimizer> opt, ShardedOptimizer::Create(*fsdp, MakeAdam));
    // A plain Adam's state after one step on one process, then broken.
    std::unique_ptr<Sequential> plain = Model();
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> adam, MakeAdam(plain->NamedParameters()));
    const Batch b = MakeBatch(0, 1, 0);
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, plain->Forward(b.x));
    LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, b.y));
    LOCKSTEP_RETURN_IF_ERROR(plain->Backward(ce.grad_logits).status());
    LOCKSTEP_RETURN_IF_ERROR(adam->Step());
    std::vector<NamedTensor> state = Copies(adam->StateTensors());
    LOCKSTEP_RETURN_IF_ERROR(opt->LoadStateTensors(state));  // The plain state loads.
    std::vector<NamedTensor> bad;
    for (const auto& [name, t] : state) {
      if (name == "state.0.exp_avg") continue;  // one of unit "0"'s parameters only
      if (name == "state.3.step")
        bad.emplace_back(name, *Tensor::FromVector<float>({7}));  // steps differ in unit "2"
      else
        bad.emplace_back(name, t);
    }
    bad.emplace_back("state.9.step", *Tensor::FromVector<float>({1}));
    absl::Status s = opt->LoadStateTensors(bad);
    for (const char* want : {"unit '0': 'exp_avg' is given for some of its parameters only",
                             "unit '2': 'step' must be one f32 scalar shared by all its parameters",
                             "unexpected 'state.9.step'", "nothing was loaded"}) {
      if (s.code() != absl::StatusCode::kInvalidArgument || s.message().find(want) == absl::string_view::npos) {
        return absl::InternalError(absl::StrCat("expected '", want, "', got ", s.ToString()));
      }
    }
    return absl::OkStatus();
  }));
}

}  // namespace
}  // namespace lockstep
