// HostBlockCache: reuse by exact size, most recent first; the cap, oldest
// freed first; and Storage's large host blocks going through it.
#include "core/internal/host_block_cache.h"

#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "core/storage.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace core_internal {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

void* Block(size_t bytes) { return std::aligned_alloc(2 * kMiB, bytes); }

TEST(HostBlockCacheTest, HandsBackABlockOfTheSameSizeOnly) {
  HostBlockCache cache(16 * kMiB);
  EXPECT_EQ(cache.Take(2 * kMiB), nullptr);
  void* a = Block(2 * kMiB);
  void* b = Block(4 * kMiB);
  cache.Give(a, 2 * kMiB);
  cache.Give(b, 4 * kMiB);
  EXPECT_EQ(cache.cached_bytes(), 6 * kMiB);
  EXPECT_EQ(cache.Take(6 * kMiB), nullptr);
  EXPECT_EQ(cache.Take(4 * kMiB), b);
  EXPECT_EQ(cache.Take(4 * kMiB), nullptr);
  EXPECT_EQ(cache.Take(2 * kMiB), a);
  EXPECT_EQ(cache.cached_bytes(), 0u);
  std::free(a);
  std::free(b);
}

TEST(HostBlockCacheTest, KeepsAtMostItsCapFreeingTheOldestFirst) {
  HostBlockCache cache(6 * kMiB);
  void* first = Block(2 * kMiB);
  void* second = Block(2 * kMiB);
  void* third = Block(2 * kMiB);
  cache.Give(first, 2 * kMiB);
  cache.Give(second, 2 * kMiB);
  cache.Give(third, 2 * kMiB);
  cache.Give(Block(4 * kMiB), 4 * kMiB);  // evicts first and second
  EXPECT_EQ(cache.cached_bytes(), 6 * kMiB);
  EXPECT_EQ(cache.Take(2 * kMiB), third);
  EXPECT_EQ(cache.Take(2 * kMiB), nullptr);
  cache.Give(Block(8 * kMiB), 8 * kMiB);  // larger than the cap: freed at once
  EXPECT_EQ(cache.cached_bytes(), 4 * kMiB);
  std::free(third);
  HostBlockCache off(0);
  off.Give(Block(2 * kMiB), 2 * kMiB);
  EXPECT_EQ(off.cached_bytes(), 0u);
}

TEST(HostBlockCacheTest, ThreadsGiveAndTakeConcurrently) {
  HostBlockCache cache(64 * kMiB);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&cache, t] {
      const size_t bytes = (2 + 2 * (t % 2)) * kMiB;
      for (int i = 0; i < 200; ++i) {
        void* p = cache.Take(bytes);
        if (p == nullptr) p = Block(bytes);
        static_cast<char*>(p)[0] = static_cast<char>(i);
        cache.Give(p, bytes);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(cache.cached_bytes(), 64 * kMiB);
}

// A freed large Storage's block is the next one of its size; small ones do
// not go through the cache.
TEST(HostBlockCacheTest, StorageReusesLargeHostBlocks) {
  if (std::getenv("LOCKSTEP_NO_HUGE_PAGES") != nullptr) GTEST_SKIP() << "LOCKSTEP_NO_HUGE_PAGES is set";
  void* first = nullptr;
  {
    absl::StatusOr<std::shared_ptr<Storage>> s = Storage::Allocate(3 * kMiB + 5, Device::Cpu());
    ASSERT_TRUE(s.ok()) << s.status();
    first = (*s)->data();
  }
  absl::StatusOr<std::shared_ptr<Storage>> again = Storage::Allocate(4 * kMiB, Device::Cpu());  // same 4 MiB block
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->data(), first);
  absl::StatusOr<std::shared_ptr<Storage>> other = Storage::Allocate(4 * kMiB, Device::Cpu());
  ASSERT_TRUE(other.ok());
  EXPECT_NE((*other)->data(), first);
  const size_t before = HostBlockCache::Default().cached_bytes();
  { ASSERT_TRUE(Storage::Allocate(64 * 1024, Device::Cpu()).ok()); }
  EXPECT_EQ(HostBlockCache::Default().cached_bytes(), before);
}

}  // namespace
}  // namespace core_internal
}  // namespace lockstep
