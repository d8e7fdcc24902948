// HealFromPeer on three ranks (threads over TCP): rank 0 is one step ahead
// (it stepped a reduction the others lost), rank 1 is a newcomer with a
// fresh model and no optimizer state, rank 2 is a survivor one step behind.
// Afterwards every rank has rank 0's parameters, momentum and strings bit
// for bit, at rank 0's step; when all are there nothing is sent; a member
// whose model does not fit is told which entries, and keeps its own.
#include "ddp/heal.h"

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/testing/group.h"
#include "core/mt19937.h"
#include "core/status.h"
#include "gtest/gtest.h"
#include "nn/cross_entropy.h"
#include "nn/mlp.h"
#include "nn/sgd.h"
#include "nn/testing/same_bits.h"

namespace lockstep {
namespace {

using testing::ExpectSameBits;

std::unique_ptr<Module> MakeModel(uint64_t seed, int64_t hidden = 16) {
  Mt19937 gen(seed);
  MlpOptions o;
  o.sizes = {12, hidden, 4};
  return std::unique_ptr<Module>(*MakeMlp(o, gen));
}

absl::StatusOr<std::unique_ptr<Optimizer>> MakeSgd(Module& model) {
  SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> sgd, Sgd::Create(model.NamedParameters(), o));
  return std::unique_ptr<Optimizer>(std::move(sgd));
}

// One local step on a batch of its own.
absl::Status LocalStep(Module& model, Optimizer& opt, uint64_t seed) {
  Mt19937 gen(seed);
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor x, Tensor::Empty({3, 12}, DType::kF32));
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(gen.Next32() / 4294967296.0);
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor y, Tensor::FromVector<int64_t>({0, 1, 3}));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, model.Forward(x));
  LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, y));
  LOCKSTEP_RETURN_IF_ERROR(model.Backward(ce.grad_logits, false).status());
  LOCKSTEP_RETURN_IF_ERROR(opt.Step());
  return opt.ZeroGrad();
}

struct Snapshot {
  std::vector<NamedTensor> model, optimizer;
  std::map<std::string, std::string> state;
  HealResult result;
};

std::vector<NamedTensor> Copies(const std::vector<NamedTensor>& in) {
  std::vector<NamedTensor> out;
  for (const auto& [name, t] : in) out.emplace_back(name, *t.Clone());
  return out;
}

TEST(HealFromPeerTest, EveryMemberTakesTheNewestCommittedState) {
  std::vector<Snapshot> snaps(3), again(3);
  testing::ExpectAllOk(testing::RunThreads(3, [&](Communicator& comm) -> absl::Status {
    const int r = comm.rank();
    // Ranks 0 and 2 trained the same two steps; rank 1 is new.
    std::unique_ptr<Module> model = MakeModel(r == 1 ? 99 : 3);
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, MakeSgd(*model));
    int64_t step = 0;
    if (r != 1) {
      for (; step < 2; ++step) LOCKSTEP_RETURN_IF_ERROR(LocalStep(*model, *opt, 10 + step));
    }
    if (r == 0) {
      LOCKSTEP_RETURN_IF_ERROR(LocalStep(*model, *opt, 12));
      ++step;
    }
    std::map<std::string, std::string> state = {{"scaler.scale", absl::StrCat(1024 >> r)}, {"rank", absl::StrCat(r)}};
    LOCKSTEP_ASSIGN_OR_RETURN(snaps[r].result, HealFromPeer(comm, step, *model, opt.get(), &state));
    snaps[r].model = Copies(model->StateDict());
    snaps[r].optimizer = Copies(opt->StateTensors());
    snaps[r].state = state;
    // All at step 3 now: nothing to send.
    LOCKSTEP_ASSIGN_OR_RETURN(again[r].result, HealFromPeer(comm, snaps[r].result.step, *model, opt.get(), &state));
    return absl::OkStatus();
  }));
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(snaps[r].result.step, 3);
    EXPECT_EQ(snaps[r].result.source, 0);
    EXPECT_EQ(snaps[r].result.healed, r != 0);
    ExpectSameBits(snaps[0].model, snaps[r].model, "model");
    ExpectSameBits(snaps[0].optimizer, snaps[r].optimizer, "optimizer");
    EXPECT_EQ(snaps[r].state, (std::map<std::string, std::string>{{"rank", "0"}, {"scaler.scale", "1024"}}));
    EXPECT_EQ(again[r].result.source, -1);
    EXPECT_FALSE(again[r].result.healed);
  }
  EXPECT_FALSE(snaps[0].optimizer.empty());  // Momentum went across.
  // The newcomer's model changed (from seed 99's).
  EXPECT_NE(0, std::memcmp(snaps[1].model[0].second.raw_data(), MakeModel(99)->StateDict()[0].second.raw_data(),
                           snaps[1].model[0].second.nbytes()));
}

TEST(HealFromPeerTest, AMemberWhoseModelDoesNotFitKeepsItsOwn) {
  std::vector<absl::Status> healed(2);
  std::vector<int> unchanged(2, 0);  // Not vector<bool>: its bits share a word across threads.
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) -> absl::Status {
    const int r = comm.rank();
    std::unique_ptr<Module> model = MakeModel(3, r == 1 ? 8 : 16);
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, MakeSgd(*model));
    const std::vector<NamedTensor> before = Copies(model->StateDict());
    healed[r] = HealFromPeer(comm, r == 0 ? 5 : 0, *model, opt.get(), nullptr).status();
    const std::vector<NamedTensor> after = model->StateDict();
    bool same = before.size() == after.size();
    for (size_t i = 0; same && i < before.size(); ++i) {
      same = std::memcmp(before[i].second.raw_data(), after[i].second.raw_data(), before[i].second.nbytes()) == 0;
    }
    unchanged[r] = same;
    return absl::OkStatus();
  }));
  EXPECT_TRUE(healed[0].ok()) << healed[0];
  EXPECT_FALSE(healed[1].ok());
  EXPECT_NE(healed[1].message().find("the model of rank 0 does not load here"), std::string::npos) << healed[1];
  EXPECT_TRUE(unchanged[1]);
}

}  // namespace
}  // namespace lockstep
