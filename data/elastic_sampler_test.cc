// ElasticSampler: while the world does not change it is DistributedSampler
// (PyTorch-exact) on every rank; when the world shrinks or grows in the
// middle of an epoch, the ranks' shares of what is left cover it exactly,
// every example of the epoch is read once plus fewer than W padding entries
// per world, and a newcomer given State() reads what a member would.
#include "data/elastic_sampler.h"

#include <map>
#include <vector>

#include "data/distributed_sampler.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

DistributedSamplerOptions Options(int64_t world, int64_t rank, bool shuffle = true, bool drop_last = false) {
  DistributedSamplerOptions o;
  o.num_replicas = world;
  o.rank = rank;
  o.shuffle = shuffle;
  o.drop_last = drop_last;
  o.seed = 11;
  return o;
}

TEST(ElasticSamplerTest, WithoutChangesItIsDistributedSampler) {
  for (int64_t n : {1, 7, 64, 103}) {
    for (int64_t world : {1, 3, 4, 8}) {
      for (bool shuffle : {false, true}) {
        for (bool drop_last : {false, true}) {
          for (int64_t rank = 0; rank < world; ++rank) {
            DistributedSampler plain = *DistributedSampler::Create(n, Options(world, rank, shuffle, drop_last));
            ElasticSampler elastic = *ElasticSampler::Create(n, Options(world, rank, shuffle, drop_last));
            plain.SetEpoch(2);
            elastic.SetEpoch(2);
            EXPECT_EQ(elastic.Indices(), plain.Indices()) << n << " " << world << " " << rank;
            EXPECT_EQ(elastic.size(), plain.size());
          }
        }
      }
    }
  }
}

// Every rank's sampler of a world, resharded alike.
struct World {
  std::vector<ElasticSampler> ranks;
};

TEST(ElasticSamplerTest, ShrinkAndGrowReadEveryExampleOncePlusPadding) {
  constexpr int64_t kN = 103, kBatch = 5;
  // 4 ranks read 2 steps; 3 ranks (one lost) read 3 steps; 5 ranks (two
  // admitted) read the rest.
  std::map<int64_t, int> reads;
  int64_t padding_bound = 0;
  ElasticSampler reference = *ElasticSampler::Create(kN, Options(4, 0));
  reference.SetEpoch(1);
  struct Phase {
    int64_t world, steps;  // steps < 0: to the end of the list
  };
  const std::vector<Phase> phases = {{4, 2}, {3, 3}, {5, -1}};
  for (size_t p = 0; p < phases.size(); ++p) {
    const int64_t world = phases[p].world;
    if (p > 0) {
      const int64_t consumed = phases[p - 1].steps * kBatch * phases[p - 1].world;
      ASSERT_TRUE(reference.Reshard(consumed, world, 0).ok());
    }
    padding_bound += world - 1;
    const int64_t length = reference.list_size();
    ASSERT_EQ(length % world, 0);
    const int64_t per_rank = phases[p].steps < 0 ? length / world : phases[p].steps * kBatch;
    // Every rank's share, from a sampler that took the same changes through State().
    std::vector<int64_t> covered;
    for (int64_t r = 0; r < world; ++r) {
      ElasticSampler rank_sampler = *ElasticSampler::Create(kN, Options(1, 0));
      ASSERT_TRUE(rank_sampler.SetState(reference.State(), r).ok()) << reference.State();
      const std::vector<int64_t> mine = rank_sampler.Indices();
      ASSERT_EQ(static_cast<int64_t>(mine.size()), length / world);
      for (int64_t i = 0; i < per_rank; ++i) ++reads[mine[static_cast<size_t>(i)]];
    }
  }
  // Every example at least once; the extra reads are padding only.
  int64_t total = 0;
  for (int64_t i = 0; i < kN; ++i) {
    EXPECT_GE(reads[i], 1) << "example " << i << " was never read";
    total += reads[i];
  }
  EXPECT_EQ(static_cast<int64_t>(reads.size()), kN);
  EXPECT_LE(total - kN, padding_bound);
  EXPECT_EQ(reference.State(), "1/4/40:3,45:5");
}

TEST(ElasticSamplerTest, EvenListsAreReadExactlyOnce) {
  // 120 = 4 x 30; after 2 steps of 5 on 4 ranks, 80 left, then 2 ranks.
  ElasticSampler s = *ElasticSampler::Create(120, Options(4, 1));
  ASSERT_TRUE(s.Reshard(40, 2, 1).ok());
  ElasticSampler other = *ElasticSampler::Create(120, Options(4, 0));
  ASSERT_TRUE(other.Reshard(40, 2, 0).ok());
  std::map<int64_t, int> reads;
  for (int64_t r = 0; r < 4; ++r) {
    DistributedSampler plain = *DistributedSampler::Create(120, Options(4, r));
    const std::vector<int64_t> all = plain.Indices();
    for (int i = 0; i < 10; ++i) ++reads[all[static_cast<size_t>(i)]];
  }
  for (int64_t i : s.Indices()) ++reads[i];
  for (int64_t i : other.Indices()) ++reads[i];
  ASSERT_EQ(reads.size(), 120u);
  for (const auto& [index, count] : reads) EXPECT_EQ(count, 1) << index;
}

TEST(ElasticSamplerTest, BadChangesAndStatesAreNamedAndChangeNothing) {
  ElasticSampler s = *ElasticSampler::Create(100, Options(4, 0));
  const std::vector<int64_t> before = s.Indices();
  EXPECT_TRUE(absl::IsInvalidArgument(s.Reshard(6, 3, 0)));    // not a multiple of 4
  EXPECT_TRUE(absl::IsInvalidArgument(s.Reshard(104, 3, 0)));  // past the list
  EXPECT_TRUE(absl::IsInvalidArgument(s.Reshard(8, 3, 3)));    // no rank 3 of 3
  for (const char* bad : {"", "1/4", "x/4/", "1/0/", "1/4/8:3,5", "1/4/6:3", "1/4/8:2"}) {
    absl::Status st = s.SetState(bad, 2);
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << bad << ": " << st;
  }
  EXPECT_EQ(s.Indices(), before);
  EXPECT_TRUE(absl::IsInvalidArgument(ElasticSampler::Create(100,
                                                             [] {
                                                               DistributedSamplerOptions o = Options(2, 0);
                                                               o.uneven = true;
                                                               return o;
                                                             }())
                                          .status()));
}

}  // namespace
}  // namespace lockstep
