#include "data/distributed_sampler.h"

#include <algorithm>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "data/randperm.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

struct GoldenCase {
  int64_t n, r, rank, seed, epoch;
  bool shuffle, drop_last;
  std::vector<int64_t> indices;  // All of them, or the first 64.
  int64_t count = -1;            // Set when only the first 64 are listed.
  std::string line;
};

std::vector<GoldenCase> LoadGolden() {
  std::ifstream in("data/testdata/distributed_sampler_golden.txt");
  EXPECT_TRUE(in.good()) << "golden file missing";
  std::vector<GoldenCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    GoldenCase c;
    int shuffle, drop_last;
    std::string colon;
    s >> c.n >> c.r >> c.rank >> c.seed >> c.epoch >> shuffle >> drop_last >> colon;
    c.shuffle = shuffle;
    c.drop_last = drop_last;
    std::string token;
    while (s >> token) {
      if (token == "...") {
        s >> c.count;
        break;
      }
      c.indices.push_back(std::stoll(token));
    }
    c.line = line.substr(0, 60);
    cases.push_back(std::move(c));
  }
  return cases;
}

TEST(DistributedSamplerTest, MatchesPyTorchGoldenSequences) {
  const std::vector<GoldenCase> cases = LoadGolden();
  ASSERT_GT(cases.size(), 1000u);
  for (const GoldenCase& c : cases) {
    DistributedSamplerOptions o;
    o.num_replicas = c.r;
    o.rank = c.rank;
    o.shuffle = c.shuffle;
    o.seed = c.seed;
    o.drop_last = c.drop_last;
    absl::StatusOr<DistributedSampler> sampler = DistributedSampler::Create(c.n, o);
    ASSERT_TRUE(sampler.ok()) << c.line << ": " << sampler.status();
    sampler->SetEpoch(c.epoch);
    std::vector<int64_t> got = sampler->Indices();
    ASSERT_EQ(static_cast<int64_t>(got.size()), sampler->size()) << c.line;
    if (c.count >= 0) {
      ASSERT_EQ(static_cast<int64_t>(got.size()), c.count) << c.line;
      got.resize(c.indices.size());
    }
    ASSERT_EQ(got, c.indices) << c.line;
  }
}

// Independently of PyTorch: together the ranks cover every index; without
// drop_last all ranks have the same count and the padding repeats the start.
TEST(DistributedSamplerTest, RanksPartitionTheDataset) {
  for (int64_t n : {1, 2, 5, 9, 10, 11, 64, 97}) {
    for (int64_t r : {1, 2, 3, 4, 7, 16}) {
      for (bool shuffle : {false, true}) {
        for (bool drop_last : {false, true}) {
          std::multiset<int64_t> seen;
          int64_t per_rank = -1;
          for (int64_t rank = 0; rank < r; ++rank) {
            DistributedSamplerOptions o{r, rank, shuffle, 5, drop_last};
            DistributedSampler s = *DistributedSampler::Create(n, o);
            s.SetEpoch(2);
            const std::vector<int64_t> idx = s.Indices();
            if (per_rank < 0) per_rank = static_cast<int64_t>(idx.size());
            ASSERT_EQ(static_cast<int64_t>(idx.size()), per_rank);
            seen.insert(idx.begin(), idx.end());
          }
          const std::string what = "n=" + std::to_string(n) + " r=" + std::to_string(r);
          for (int64_t v : seen) ASSERT_TRUE(v >= 0 && v < n) << what;
          if (drop_last) {
            ASSERT_EQ(per_rank, n / r) << what;
            ASSERT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size()) << what;
          } else {
            ASSERT_EQ(per_rank, (n + r - 1) / r) << what;
            for (int64_t i = 0; i < n; ++i) ASSERT_GE(seen.count(i), 1u) << what << " index " << i;
          }
        }
      }
    }
  }
}

TEST(DistributedSamplerTest, EpochChangesTheOrderAndIsReproducible) {
  DistributedSamplerOptions o{2, 0, true, 0, false};
  DistributedSampler a = *DistributedSampler::Create(1000, o);
  DistributedSampler b = *DistributedSampler::Create(1000, o);
  a.SetEpoch(1);
  b.SetEpoch(1);
  EXPECT_EQ(a.Indices(), b.Indices());
  b.SetEpoch(2);
  EXPECT_NE(a.Indices(), b.Indices());
}

TEST(DistributedSamplerTest, BadArgumentsAreClearErrors) {
  const auto rank = DistributedSampler::Create(10, {4, 4, true, 0, false});
  ASSERT_FALSE(rank.ok());
  EXPECT_NE(rank.status().message().find("invalid rank 4, rank should be in the interval [0, 3]"),
            absl::string_view::npos)
      << rank.status();
  EXPECT_FALSE(DistributedSampler::Create(10, {4, -1, true, 0, false}).ok());
  const auto replicas = DistributedSampler::Create(10, {0, 0, true, 0, false});
  EXPECT_NE(replicas.status().message().find("num_replicas = 0"), absl::string_view::npos);
  const auto empty = DistributedSampler::Create(0, {2, 0, true, 0, false});
  EXPECT_NE(empty.status().message().find("0 samples"), absl::string_view::npos);
}

// Uneven shares (for Join): the same order as the padded sampler's, rank r
// taking r, r + R, ... below N: disjoint, covering [0, N) once, sizes
// differing by at most one; contradicting drop_last is refused.
TEST(DistributedSamplerTest, UnevenSharesCoverTheDatasetOnceWithoutPadding) {
  for (const int64_t n : {1, 7, 10, 257}) {
    for (const int64_t replicas : {1, 2, 3, 4}) {
      std::vector<int64_t> seen;
      for (int64_t r = 0; r < replicas; ++r) {
        DistributedSamplerOptions o;
        o.num_replicas = replicas;
        o.rank = r;
        o.seed = 5;
        o.uneven = true;
        DistributedSampler uneven = *DistributedSampler::Create(n, o);
        uneven.SetEpoch(2);
        o.uneven = false;
        DistributedSampler padded = *DistributedSampler::Create(n, o);
        padded.SetEpoch(2);
        const std::vector<int64_t> mine = uneven.Indices(), theirs = padded.Indices();
        EXPECT_EQ(uneven.size(), static_cast<int64_t>(mine.size()));
        EXPECT_EQ(static_cast<int64_t>(mine.size()), (n - r + replicas - 1) / replicas)
            << n << " " << replicas << " " << r;
        // The padded share starts with the uneven one (padding only appends).
        ASSERT_LE(mine.size(), theirs.size());
        EXPECT_TRUE(std::equal(mine.begin(), mine.end(), theirs.begin()));
        seen.insert(seen.end(), mine.begin(), mine.end());
      }
      std::sort(seen.begin(), seen.end());
      std::vector<int64_t> all(static_cast<size_t>(n));
      std::iota(all.begin(), all.end(), int64_t{0});
      EXPECT_EQ(seen, all) << n << " examples over " << replicas;
    }
  }
  DistributedSamplerOptions both;
  both.num_replicas = 2;
  both.uneven = both.drop_last = true;
  EXPECT_EQ(DistributedSampler::Create(10, both).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RandpermTest, SmallCasesAndLimits) {
  EXPECT_TRUE(TorchRandperm(0, 0)->empty());
  EXPECT_EQ(*TorchRandperm(1, 0), std::vector<int64_t>{0});
  std::vector<int64_t> p = *TorchRandperm(1000, 3);
  std::sort(p.begin(), p.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(p[i], i);
  EXPECT_FALSE(TorchRandperm(-1, 0).ok());
  EXPECT_FALSE(TorchRandperm(kMaxTorchRandpermSize, 0).ok());
}

TEST(SamplerTest, SequentialAndRandom) {
  EXPECT_EQ(SequentialSampler(4).Indices(), (std::vector<int64_t>{0, 1, 2, 3}));
  RandomSampler r(50, 9);
  r.SetEpoch(1);
  std::vector<int64_t> a = r.Indices();
  EXPECT_EQ(a, *TorchRandperm(50, 10));
  std::sort(a.begin(), a.end());
  EXPECT_EQ(a, SequentialSampler(50).Indices());
}

}  // namespace
}  // namespace lockstep
