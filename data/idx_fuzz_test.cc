// Runs the IDX fuzz target over a seed corpus and a bounded number of random
// mutations (bit flips, byte sets, truncations, extensions, header splices).
// Any crash, sanitizer report or inconsistent success fails the test.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "data/idx.h"
#include "data/testing/idx_bytes.h"
#include "gtest/gtest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace lockstep {
namespace {

using testing::IdxHeader;

std::vector<std::string> Corpus() {
  return {
      IdxHeader(0x08, {3, 2, 2}) + std::string(12, '\x07'),
      IdxHeader(0x08, {5}) + "\x01\x02\x03\x04\x05",
      IdxHeader(0x0C, {2}) + std::string("\x00\x00\x00\x01\xff\xff\xff\xff", 8),
      IdxHeader(0x0D, {1, 1}) + std::string("\x3f\x80\x00\x00", 4),
      IdxHeader(0x0E, {0}),
      IdxHeader(0x0B, {2, 1}) + "abcd",
      IdxHeader(0x09, {1, 1, 1, 1, 1, 1, 1, 1}) + "z",
  };
}

TEST(IdxFuzzTest, SeedCorpusParses) {
  for (const std::string& input : Corpus()) {
    EXPECT_TRUE(ParseIdx(input, "seed").ok()) << ParseIdx(input, "seed").status();
  }
}

TEST(IdxFuzzTest, RandomMutationsNeverCrash) {
  std::mt19937 rng(20261129);
  const std::vector<std::string> corpus = Corpus();
  int accepted = 0;
  constexpr int kRuns = 200000;
  for (int run = 0; run < kRuns; ++run) {
    std::string input = corpus[rng() % corpus.size()];
    const int mutations = 1 + rng() % 4;
    for (int m = 0; m < mutations; ++m) {
      switch (rng() % 6) {
        case 0:  // Flip a bit.
          if (!input.empty()) input[rng() % input.size()] ^= static_cast<char>(1 << (rng() % 8));
          break;
        case 1:  // Set a byte, biased to the header.
          if (!input.empty()) input[rng() % std::min<size_t>(input.size(), 12)] = static_cast<char>(rng());
          break;
        case 2:  // Truncate.
          input.resize(rng() % (input.size() + 1));
          break;
        case 3:  // Extend with random bytes.
          for (int k = rng() % 16; k > 0; --k) input.push_back(static_cast<char>(rng()));
          break;
        case 4:  // Huge dimension.
          if (input.size() >= 8) input.replace(4, 4, "\xff\xff\xff\xff");
          break;
        case 5:  // Splice the header of another seed.
          input = corpus[rng() % corpus.size()].substr(0, 8) + input.substr(std::min<size_t>(8, input.size()));
          break;
      }
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    accepted += ParseIdx(input, "mutant", 1 << 20).ok();
  }
  // Most mutants are invalid, but some (payload-only changes) stay valid.
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, kRuns);
}

}  // namespace
}  // namespace lockstep
