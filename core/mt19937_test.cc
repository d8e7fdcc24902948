#include "core/mt19937.h"

#include <random>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

// The published check value: the 10,000th output of the default seed 5489
// (also required of std::mt19937 by the C++ standard).
TEST(Mt19937Test, PublishedTestVector) {
  Mt19937 gen;
  uint32_t value = 0;
  for (int i = 0; i < 10000; ++i) value = gen.Next32();
  EXPECT_EQ(value, 4123659995u);
}

// mt19937ar.c's init_genrand(5489) then the first outputs.
TEST(Mt19937Test, FirstOutputsOfTheReferenceImplementation) {
  Mt19937 gen(5489);
  EXPECT_EQ(gen.Next32(), 3499211612u);
  EXPECT_EQ(gen.Next32(), 581869302u);
  EXPECT_EQ(gen.Next32(), 3890346734u);
}

TEST(Mt19937Test, MatchesStdMt19937ForManySeeds) {
  for (uint32_t seed : {0u, 1u, 42u, 0xffffffffu, 123456789u}) {
    Mt19937 gen(seed);
    std::mt19937 reference(seed);
    for (int i = 0; i < 2000; ++i) ASSERT_EQ(gen.Next32(), reference()) << seed << " " << i;
  }
}

TEST(Mt19937Test, OnlyTheLow32BitsOfTheSeedMatter) {
  Mt19937 a(7), b((uint64_t{5} << 32) | 7);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.Next32(), b.Next32());
}

}  // namespace
}  // namespace lockstep
