// FlatShardLayout: the example in the header, and for many parameter lists
// and world sizes every element of every parameter lies in exactly one
// rank's shard, at the offset the layout says.
#include "fsdp/flat_shard.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(FlatShardLayoutTest, TheHeadersExample) {
  FlatShardLayout layout = FlatShardLayout::Make({6, 3}, /*world=*/2);
  EXPECT_EQ(layout.total, 9);
  EXPECT_EQ(layout.padded, 10);
  EXPECT_EQ(layout.shard, 5);
  EXPECT_EQ(layout.offsets, (std::vector<int64_t>{0, 6}));
  EXPECT_EQ(layout.ParameterRange(0, 0), (std::pair<int64_t, int64_t>{0, 5}));
  EXPECT_EQ(layout.ParameterRange(0, 1), (std::pair<int64_t, int64_t>{5, 6}));
  EXPECT_EQ(layout.ParameterRange(1, 0), (std::pair<int64_t, int64_t>{0, 0}));
  EXPECT_EQ(layout.ParameterRange(1, 1), (std::pair<int64_t, int64_t>{0, 3}));
}

TEST(FlatShardLayoutTest, EveryElementLiesInExactlyOneShard) {
  const std::vector<std::vector<int64_t>> lists = {{1}, {0, 5, 0}, {7, 1, 13}, {64, 64}, {3, 3, 3, 3, 3}, {1000, 1}};
  for (const std::vector<int64_t>& numels : lists) {
    for (int world = 1; world <= 9; ++world) {
      const FlatShardLayout layout = FlatShardLayout::Make(numels, world);
      EXPECT_EQ(layout.padded % world, 0);
      EXPECT_GE(layout.padded, layout.total);
      EXPECT_LT(layout.padded - layout.total, world);
      for (size_t i = 0; i < numels.size(); ++i) {
        std::vector<int> owners(numels[i], 0);
        for (int r = 0; r < world; ++r) {
          const auto [begin, end] = layout.ParameterRange(i, r);
          for (int64_t k = begin; k < end; ++k) {
            ++owners[k];
            const int64_t flat = layout.offsets[i] + k;  // Inside rank r's shard.
            EXPECT_GE(flat, r * layout.shard);
            EXPECT_LT(flat, (r + 1) * layout.shard);
          }
        }
        for (int64_t k = 0; k < numels[i]; ++k) EXPECT_EQ(owners[k], 1) << "parameter " << i << " element " << k;
      }
    }
  }
}

}  // namespace
}  // namespace lockstep
