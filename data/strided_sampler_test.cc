#include "data/strided_sampler.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(StridedSamplerTest, TakesEveryWorldSizeThIndexFromItsRank) {
  StridedSampler shard(/*n=*/10, /*rank=*/1, /*world_size=*/3);
  std::vector<int64_t> mine = shard.Indices();  // 1, 4, 7
  EXPECT_EQ(mine, (std::vector<int64_t>{1, 4, 7}));
  EXPECT_EQ(shard.size(), 3);
  // The same for every epoch: no shuffling.
  shard.SetEpoch(5);
  EXPECT_EQ(shard.Indices(), mine);
}

TEST(StridedSamplerTest, SharesCoverEveryIndexOnce) {
  for (int64_t n : {1, 2, 7, 100, 101}) {
    for (int world : {1, 2, 3, 8}) {
      std::vector<int> seen(n, 0);
      int64_t total = 0;
      for (int rank = 0; rank < world; ++rank) {
        StridedSampler s(n, rank, world);
        const std::vector<int64_t> indices = s.Indices();
        EXPECT_EQ(static_cast<int64_t>(indices.size()), s.size());
        for (int64_t i : indices) ++seen[i];
        total += s.size();
      }
      EXPECT_EQ(total, n);
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seen[i], 1) << "n=" << n << " world=" << world;
    }
  }
}

TEST(StridedSamplerTest, MoreRanksThanExamplesLeavesSomeEmpty) {
  EXPECT_EQ(StridedSampler(2, 1, 4).Indices(), (std::vector<int64_t>{1}));
  EXPECT_EQ(StridedSampler(2, 3, 4).size(), 0);
  EXPECT_TRUE(StridedSampler(2, 3, 4).Indices().empty());
  EXPECT_EQ(StridedSampler(-5, 0, 1).size(), 0);
  EXPECT_EQ(StridedSampler(3, 0, 0).Indices(), (std::vector<int64_t>{0, 1, 2}));  // world 0 as 1
}

}  // namespace
}  // namespace lockstep
