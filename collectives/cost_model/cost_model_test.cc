#include "collectives/cost_model/cost_model.h"

#include "gtest/gtest.h"

namespace lockstep {
namespace cost_model {
namespace {

TEST(TransferTime, AlphaBetaWithoutAWindow) {
  EXPECT_DOUBLE_EQ(TransferTime(LinkCost{10, 0.5}, 8), 14);
  EXPECT_DOUBLE_EQ(TransferTime(LinkCost{10, 0.5}, 8, 3), 22);  // three flows share the link
}

TEST(TransferTime, EachWindowBeyondTheFirstWaitsARoundTripLessItsTransfer) {
  LinkCost link{100, 0.01, 1000};                                     // RTT 200; a window transfers in 10
  EXPECT_DOUBLE_EQ(TransferTime(link, 1000), 100 + 10);               // one window: no wait
  EXPECT_DOUBLE_EQ(TransferTime(link, 1001), 100 + 10.01 + 190);      // two windows
  EXPECT_DOUBLE_EQ(TransferTime(link, 4000), 100 + 40 + 3 * 190);     // four
  EXPECT_DOUBLE_EQ(TransferTime(link, 4000, 2), 100 + 80 + 3 * 180);  // two flows: a window takes 20
  // Bandwidth-bound: a window takes longer than a round trip, no wait.
  EXPECT_DOUBLE_EQ(TransferTime(LinkCost{100, 1, 1000}, 4000), 100 + 4000);
}

TEST(ValidateCostModel, RefusesANegativeWindow) {
  CostModel model = DefaultCostModel();
  EXPECT_TRUE(ValidateCostModel(model).ok());
  model.link(LinkKind::kTcpRemote).window_bytes = -1;
  absl::Status s = ValidateCostModel(model);
  EXPECT_NE(s.message().find("links.tcp_remote.window_bytes"), std::string::npos) << s;
}

}  // namespace
}  // namespace cost_model
}  // namespace lockstep
