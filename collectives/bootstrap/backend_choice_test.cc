// ChooseBackend: the automatic rule, the flag over the environment, and
// forced NCCL where it cannot run.
#include "collectives/bootstrap/backend_choice.h"

#include <cstdlib>
#include <string>

#include "collectives/nccl/nccl_api.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

BackendChoiceInput OneRankPerGpu() {
  BackendChoiceInput in;
  in.device = Device::Cuda(1);
  in.nccl_version = NcclVersionCode(2, 28, 9);
  in.visible_gpus = 2;
  in.local_world_size = 2;
  return in;
}

BackendKind Kind(const BackendChoiceInput& in) {
  absl::StatusOr<BackendChoice> choice = ChooseBackend(in);
  EXPECT_TRUE(choice.ok()) << choice.status();
  return choice.ok() ? choice->kind : BackendKind::kHost;
}

TEST(BackendChoiceTest, AutoPicksNcclOnlyWithOneRankPerGpu) {
  BackendChoiceInput in = OneRankPerGpu();
  absl::StatusOr<BackendChoice> choice = ChooseBackend(in);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->kind, BackendKind::kNccl);
  EXPECT_THAT(choice->reason, HasSubstr("NCCL 2.28.9"));

  in.local_world_size = 3;  // Two ranks would share a GPU.
  choice = ChooseBackend(in);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->kind, BackendKind::kHost);
  EXPECT_THAT(choice->reason, HasSubstr("3 local ranks share 2 GPU(s)"));
}

TEST(BackendChoiceTest, AutoPicksHostForCpuTensorsAndWithoutNccl) {
  BackendChoiceInput cpu = OneRankPerGpu();
  cpu.device = Device::Cpu();
  EXPECT_EQ(Kind(cpu), BackendKind::kHost);
  BackendChoiceInput none = OneRankPerGpu();
  none.nccl_version = 0;
  EXPECT_EQ(Kind(none), BackendKind::kHost);
  BackendChoiceInput old = OneRankPerGpu();
  old.nccl_version = NcclVersionCode(2, 6, 4);
  EXPECT_EQ(Kind(old), BackendKind::kHost);
  BackendChoiceInput missing = OneRankPerGpu();
  missing.device = Device::Cuda(2);
  EXPECT_EQ(Kind(missing), BackendKind::kHost);
}

TEST(BackendChoiceTest, FlagWinsOverEnvironment) {
  BackendChoiceInput in = OneRankPerGpu();
  in.environment = "host";
  EXPECT_EQ(Kind(in), BackendKind::kHost);
  in.requested = "nccl";
  EXPECT_EQ(Kind(in), BackendKind::kNccl);
  in.requested = "auto";
  EXPECT_EQ(Kind(in), BackendKind::kHost);  // auto defers to the environment.
  in.environment = "NCCL";
  EXPECT_EQ(Kind(in), BackendKind::kNccl);
  in.requested = "host";
  EXPECT_EQ(Kind(in), BackendKind::kHost);
}

TEST(BackendChoiceTest, ForcedNcclWhereItCannotRunSaysWhy) {
  BackendChoiceInput in = OneRankPerGpu();
  in.local_world_size = 4;
  in.environment = "nccl";
  absl::StatusOr<BackendChoice> choice = ChooseBackend(in);
  EXPECT_EQ(choice.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(choice.status().message()), HasSubstr("LOCKSTEP_BACKEND asks for NCCL"));
  EXPECT_THAT(std::string(choice.status().message()), HasSubstr("several ranks on one GPU"));

  in = OneRankPerGpu();
  in.device = Device::Cpu();
  in.requested = "nccl";
  choice = ChooseBackend(in);
  EXPECT_EQ(choice.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(choice.status().message()), HasSubstr("--backend asks for NCCL"));
  EXPECT_THAT(std::string(choice.status().message()), HasSubstr("cpu:0"));
}

TEST(BackendChoiceTest, UnknownNamesAreRejected) {
  BackendChoiceInput in = OneRankPerGpu();
  in.environment = "mpi";
  EXPECT_EQ(ChooseBackend(in).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ChooseBackend(in).status().message()), HasSubstr("LOCKSTEP_BACKEND is \"mpi\""));
  in.environment = "";
  in.requested = "ucc";
  EXPECT_THAT(std::string(ChooseBackend(in).status().message()), HasSubstr("--backend is \"ucc\""));
}

TEST(BackendChoiceTest, ReadsLockstepBackend) {
  ASSERT_EQ(setenv("LOCKSTEP_BACKEND", "host", 1), 0);
  EXPECT_EQ(BackendFromEnvironment(), "host");
  ASSERT_EQ(unsetenv("LOCKSTEP_BACKEND"), 0);
  EXPECT_EQ(BackendFromEnvironment(), "");
}

}  // namespace
}  // namespace lockstep
