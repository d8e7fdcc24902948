// The balance warning follows PyTorch's rule: memory first, then cores; 75%.
#include "dp/balance.h"

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(BalanceTest, BalancedDevicesGetNoWarning) {
  EXPECT_EQ(ImbalanceWarning({0, 1}, {{80, 132}, {80, 132}}), "");
  EXPECT_EQ(ImbalanceWarning({0, 1}, {{80, 132}, {60, 99}}), "");  // Exactly 75%: no warning.
  EXPECT_EQ(ImbalanceWarning({0}, {{1, 1}}), "");
}

TEST(BalanceTest, LessMemoryNamesTheWeakestAndStrongest) {
  const std::string w = ImbalanceWarning({2, 5, 7}, {{80, 132}, {40, 132}, {80, 132}});
  EXPECT_NE(w.find("exclude GPU 5 which has less than 75% of the memory or cores of GPU 2"), std::string::npos) << w;
}

TEST(BalanceTest, FewerCoresWhenMemoryIsEven) {
  const std::string w = ImbalanceWarning({0, 1}, {{80, 132}, {80, 66}});
  EXPECT_NE(w.find("exclude GPU 1"), std::string::npos) << w;
}

}  // namespace
}  // namespace lockstep
