// The lab's validity rule, alone and as StatsJson writes it.
#include "tools/scale_lab/forwarder.h"

#include <string>

#include "gtest/gtest.h"

namespace lockstep {
namespace scale_lab {
namespace {

TEST(KeepsItsDelay, P99WithinATenthOfTheDelay) {
  EXPECT_TRUE(KeepsItsDelay(100'000, 1'000'000));
  EXPECT_FALSE(KeepsItsDelay(100'001, 1'000'000));
  EXPECT_TRUE(KeepsItsDelay(0, 1'000'000));
}

TEST(KeepsItsDelay, NoDelayHasNothingToKeep) {
  // Links at the forwarder's own speed (D = 0): any lateness is the
  // forwarder's path, which the calibration measures, not a broken delay.
  EXPECT_TRUE(KeepsItsDelay(0, 0));
  EXPECT_TRUE(KeepsItsDelay(181, 0));
}

TEST(StatsJson, WritesTheVerdict) {
  ForwarderStats stats;
  for (int i = 0; i < 100; ++i) stats.lateness.Record(200'000);  // 200 us late, every packet
  ForwarderOptions options;
  options.delay_ns = 1'000'000;
  EXPECT_NE(StatsJson(stats, options, 2).find("\"valid\": false"), std::string::npos) << StatsJson(stats, options, 2);
  options.delay_ns = 0;
  EXPECT_NE(StatsJson(stats, options, 2).find("\"valid\": true"), std::string::npos) << StatsJson(stats, options, 2);
}

}  // namespace
}  // namespace scale_lab
}  // namespace lockstep
