// LOCKSTEP_DEBUG as TORCH_DISTRIBUTED_DEBUG: INFO says when each rank's
// communicator is created and, at the end, how many operations of each kind
// it ran; DETAIL also compares fingerprints (a mismatch names both ranks'
// views); OFF and unset say nothing; any other value is refused naming the
// levels. Ranks are threads over TCP; the variable is this test process's.
#include <cstdlib>
#include <string>

#include "collectives/communicator.h"
#include "collectives/testing/group.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

class DebugLevelTest : public ::testing::Test {
 protected:
  void TearDown() override { ::unsetenv("LOCKSTEP_DEBUG"); }
};

absl::Status ThreeOps(Communicator& comm) {
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({8}, DType::kF32));
  LOCKSTEP_RETURN_IF_ERROR(comm.AllReduce(t, ReduceOp::kSum)->Wait());
  LOCKSTEP_RETURN_IF_ERROR(comm.AllReduce(t, ReduceOp::kMax)->Wait());
  return comm.Broadcast(t, 0)->Wait();
}

TEST_F(DebugLevelTest, InfoSaysCreationAndCountsOperations) {
  ::setenv("LOCKSTEP_DEBUG", "INFO", 1);
  ::testing::internal::CaptureStderr();
  const auto results = testing::RunThreads(2, ThreeOps);
  const std::string err = ::testing::internal::GetCapturedStderr();
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  for (const char* rank : {"rank 0 of 2", "rank 1 of 2"}) {
    EXPECT_NE(err.find(absl::StrCat("[lockstep] ", rank, ": communicator created: backend ")), std::string::npos)
        << err;
    EXPECT_NE(err.find(absl::StrCat("[lockstep] ", rank,
                                    ": communicator destroyed after 3 operations: AllReduce 2, Broadcast 1")),
              std::string::npos)
        << err;
  }
  EXPECT_NE(err.find("checks off"), std::string::npos) << err;
}

TEST_F(DebugLevelTest, DetailAlsoComparesFingerprints) {
  ::setenv("LOCKSTEP_DEBUG", "detail", 1);  // Any case, as the levels are words.
  ::testing::internal::CaptureStderr();
  const auto results = testing::RunThreads(2, [](Communicator& comm) -> absl::Status {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros({comm.rank() == 0 ? 8 : 9}, DType::kF32));
    return comm.AllReduce(t, ReduceOp::kSum)->Wait();
  });
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("checks DETAIL (fingerprints compared)"), std::string::npos) << err;
  for (const absl::Status& s : results) {
    EXPECT_NE(s.message().find("collective mismatch (LOCKSTEP_DEBUG=DETAIL)"), absl::string_view::npos) << s;
  }
}

TEST_F(DebugLevelTest, OffSaysNothing) {
  for (const char* level : {"OFF", ""}) {
    ::setenv("LOCKSTEP_DEBUG", level, 1);
    ::testing::internal::CaptureStderr();
    const auto results = testing::RunThreads(2, ThreeOps);
    const std::string err = ::testing::internal::GetCapturedStderr();
    for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(err.find("[lockstep] rank"), std::string::npos) << level << ": " << err;
  }
}

TEST_F(DebugLevelTest, AnUnknownLevelIsRefusedNamingTheLevels) {
  ::setenv("LOCKSTEP_DEBUG", "VERBOSE", 1);
  const auto results = testing::RunThreads(2, ThreeOps);
  for (const absl::Status& s : results) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("LOCKSTEP_DEBUG='VERBOSE' is not a debug level; use OFF, INFO"), absl::string_view::npos)
        << s;
  }
}

}  // namespace
}  // namespace lockstep
