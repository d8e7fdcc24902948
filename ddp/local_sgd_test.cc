// Post-local SGD against PyTorch 1.13's post_localSGD_hook and
// PeriodicModelAverager (ddp/testdata/make_local_sgd_golden.py: 4 ranks,
// subgroups {0, 1} and {2, 3}, the local phase from iteration 2, parameters
// averaged over all ranks every 2 steps after it): every rank's parameters
// after every step bit for bit (the script proves that its numbers never
// round, so equality holds on any CPU), with gradients all-reduced in the
// subgroup and with purely local ones; the averager's arguments checked in
// PyTorch's words.
#include "ddp/local_sgd.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/testing/group.h"
#include "core/status.h"
#include "ddp/distributed_data_parallel.h"
#include "gtest/gtest.h"
#include "nn/linear.h"
#include "nn/sgd.h"
#include "nn/testing/golden_file.h"

namespace lockstep {
namespace {

const GoldenFile& Golden() { return GoldenFile::Get("ddp/testdata/local_sgd_golden.safetensors"); }

Tensor G(const std::string& key) { return Golden().at(key); }

std::vector<float> Values(const Tensor& t) { return *t.ToVector<float>(); }

constexpr int kWorld = 4, kSteps = 6, kStart = 2, kPeriod = 2;

void RunCase(const std::string& c, bool allreduce) {
  std::vector<std::vector<std::pair<std::vector<float>, std::vector<float>>>> got(kWorld);
  testing::ExpectAllOk(testing::RunThreads(kWorld, [&](Communicator& comm) -> absl::Status {
    const int r = comm.rank();
    // {0, 1} and {2, 3}: MPI_Comm_split by r / 2.
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> local, comm.Split(r / 2, r));
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Linear> model, Linear::Create({4, 3}));
    LOCKSTEP_RETURN_IF_ERROR(model->weight().value.CopyFrom(G("weight")));
    LOCKSTEP_RETURN_IF_ERROR(model->bias().value.CopyFrom(G("bias")));
    LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, comm));
    LocalSgdOptions options;
    options.start_local_sgd_iter = kStart;
    options.post_local_gradient_allreduce = allreduce;
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<CommHook> hook, MakePostLocalSgdHook(options, local.get()));
    LOCKSTEP_RETURN_IF_ERROR(ddp->RegisterCommHook(std::move(hook)));
    LOCKSTEP_ASSIGN_OR_RETURN(PeriodicModelAverager averager, PeriodicModelAverager::Create(kPeriod, kStart, &comm));
    SgdOptions sgd;
    sgd.lr = 0.25;
    LOCKSTEP_ASSIGN_OR_RETURN(auto opt, Sgd::Create(model->NamedParameters(), sgd));
    for (int i = 0; i < kSteps; ++i) {
      LOCKSTEP_RETURN_IF_ERROR(model->ZeroGrad(true));
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor y, ddp->Forward(G(absl::StrCat("x.", r, ".", i))));
      const Tensor t = G(absl::StrCat("t.", r, ".", i));
      Tensor g = *Tensor::Empty(y.shape(), DType::kF32);
      for (int64_t k = 0; k < y.numel(); ++k) g.data<float>()[k] = y.data<float>()[k] - t.data<float>()[k];
      LOCKSTEP_RETURN_IF_ERROR(ddp->Backward(g));
      LOCKSTEP_RETURN_IF_ERROR(opt->Step());
      LOCKSTEP_RETURN_IF_ERROR(averager.AverageParameters(model->Parameters()));
      got[r].push_back({Values(model->weight().value), Values(model->bias().value)});
    }
    return absl::OkStatus();
  }));
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_EQ(got[r].size(), static_cast<size_t>(kSteps));
    for (int i = 0; i < kSteps; ++i) {
      EXPECT_EQ(got[r][i].first, Values(G(absl::StrCat(c, ".step.", r, ".", i, ".weight"))))
          << c << " rank " << r << " step " << i;
      EXPECT_EQ(got[r][i].second, Values(G(absl::StrCat(c, ".step.", r, ".", i, ".bias"))))
          << c << " rank " << r << " step " << i;
    }
  }
  // The local phase is visible: the subgroups differ after step 3 (not
  // averaged) and agree after step 4 (averaged).
  EXPECT_NE(got[0][3].first, got[2][3].first);
  EXPECT_EQ(got[0][4].first, got[2][4].first);
}

TEST(LocalSgdGoldenTest, GradientsAveragedInTheSubgroup) { RunCase("allreduce", true); }
TEST(LocalSgdGoldenTest, LocalGradientsOnly) { RunCase("local", false); }

TEST(LocalSgdTest, ArgumentsAreCheckedInPyTorchsWords) {
  testing::ExpectAllOk(testing::RunThreads(1, [&](Communicator& comm) -> absl::Status {
    absl::StatusOr<PeriodicModelAverager> a = PeriodicModelAverager::Create(2, -1, &comm);
    if (a.ok() || a.status().message() != "Arg ``warmup_steps`` must be a non-negative number.") {
      return absl::InternalError(absl::StrCat("warmup: ", a.status().ToString()));
    }
    a = PeriodicModelAverager::Create(0, 0, &comm);
    if (a.ok() || a.status().message() != "Arg ``period`` must be a positive value.") {
      return absl::InternalError(absl::StrCat("period: ", a.status().ToString()));
    }
    LocalSgdOptions o;
    if (MakePostLocalSgdHook(o, nullptr).ok()) return absl::InternalError("no subgroup was accepted");
    o.post_local_gradient_allreduce = false;
    return MakePostLocalSgdHook(o, nullptr).status();
  }));
}

}  // namespace
}  // namespace lockstep
