#include "tools/scale_lab/lateness_histogram.h"

#include <gtest/gtest.h>

namespace lockstep {
namespace scale_lab {
namespace {

TEST(LatenessHistogram, EmptyIsZero) {
  LatenessHistogram h;
  EXPECT_EQ(h.count(), 0);
  EXPECT_EQ(h.Quantile(0.5), 0);
  EXPECT_EQ(h.Quantile(0.99), 0);
  EXPECT_EQ(h.max_ns(), 0);
}

TEST(LatenessHistogram, SmallValuesAreExact) {
  LatenessHistogram h;
  for (int v = 0; v < 64; ++v) h.Record(v);
  EXPECT_EQ(h.Quantile(0.5), 31);
  EXPECT_EQ(h.Quantile(1.0), 63);
  EXPECT_EQ(h.Quantile(0.0), 0);
}

TEST(LatenessHistogram, NegativeCountsAsZero) {
  LatenessHistogram h;
  h.Record(-5);
  EXPECT_EQ(h.count(), 1);
  EXPECT_EQ(h.max_ns(), 0);
  EXPECT_EQ(h.Quantile(0.5), 0);
}

TEST(LatenessHistogram, QuantilesWithinOneSixtyFourthAbove) {
  LatenessHistogram h;
  // 1..100000 ns: p50 = 50000, p99 = 99000.
  for (int v = 1; v <= 100000; ++v) h.Record(v);
  EXPECT_GE(h.Quantile(0.5), 50000);
  EXPECT_LE(h.Quantile(0.5), 50000 + 50000 / 64 + 1);
  EXPECT_GE(h.Quantile(0.99), 99000);
  EXPECT_LE(h.Quantile(0.99), 99000 + 99000 / 64 + 1);
  EXPECT_EQ(h.Quantile(1.0), 100000);
  EXPECT_EQ(h.max_ns(), 100000);
}

TEST(LatenessHistogram, OutlierOnlyMovesTheMax) {
  LatenessHistogram h;
  for (int i = 0; i < 1000; ++i) h.Record(1000);
  h.Record(int64_t{5} * 1000 * 1000 * 1000);
  EXPECT_LE(h.Quantile(0.99), 1000 + 1000 / 64 + 1);
  EXPECT_EQ(h.max_ns(), int64_t{5} * 1000 * 1000 * 1000);
  EXPECT_EQ(h.Quantile(1.0), h.max_ns());
}

TEST(LatenessHistogram, HugeValuesDoNotOverflow) {
  LatenessHistogram h;
  h.Record(INT64_MAX);
  EXPECT_EQ(h.Quantile(0.5), INT64_MAX);
}

}  // namespace
}  // namespace scale_lab
}  // namespace lockstep
