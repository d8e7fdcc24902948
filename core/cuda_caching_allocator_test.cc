// CudaCachingAllocator: size classes, reuse, stats and the out-of-memory
// retry over a fake source (no GPU); the same over cudaMalloc on cuda:0
// when a device is visible (skipped otherwise).
#include "core/cuda_caching_allocator.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "core/cuda_runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

// Host memory standing in for a device, with a capacity per device.
class FakeSource final : public DeviceMemorySource {
 public:
  explicit FakeSource(size_t capacity) : capacity_(capacity) {}
  ~FakeSource() override { EXPECT_TRUE(live_.empty()) << live_.size() << " blocks never returned"; }
  absl::StatusOr<void*> Allocate(size_t bytes, int device) override {
    if (used_[device] + bytes > capacity_) return absl::ResourceExhaustedError("fake out of memory");
    void* p = std::malloc(bytes);
    live_[p] = {bytes, device};
    used_[device] += bytes;
    ++allocs_;
    return p;
  }
  void Free(void* ptr, int device) override {
    auto it = live_.find(ptr);
    ASSERT_NE(it, live_.end());
    ASSERT_EQ(it->second.second, device);
    used_[device] -= it->second.first;
    live_.erase(it);
    std::free(ptr);
  }
  size_t used(int device) { return used_[device]; }
  int allocs() const { return allocs_; }

 private:
  const size_t capacity_;
  std::map<void*, std::pair<size_t, int>> live_;
  std::map<int, size_t> used_;
  int allocs_ = 0;
};

TEST(CudaCachingAllocatorTest, SizeClasses) {
  using A = CudaCachingAllocator;
  EXPECT_EQ(A::RoundSize(0), 0u);
  EXPECT_EQ(A::RoundSize(1), 512u);
  EXPECT_EQ(A::RoundSize(512), 512u);
  EXPECT_EQ(A::RoundSize(513), 1024u);
  EXPECT_EQ(A::RoundSize(1 << 20), size_t{1} << 20);
  EXPECT_EQ(A::RoundSize((1 << 20) + 1), size_t{2} << 20);
  EXPECT_EQ(A::RoundSize((2 << 20) + 1), size_t{4} << 20);
  EXPECT_EQ(A::RoundSize(size_t{100} << 20), size_t{100} << 20);
}

TEST(CudaCachingAllocatorTest, FreedBlocksAreReusedForTheirClassOnly) {
  auto source = std::make_unique<FakeSource>(size_t{1} << 30);
  FakeSource* fake = source.get();
  CudaCachingAllocator allocator(std::move(source));
  void* a = *allocator.Allocate(1000, 0);
  ASSERT_TRUE(allocator.Free(a).ok());
  EXPECT_EQ(*allocator.Allocate(700, 0), a);  // Same class (1024): reused.
  void* b = *allocator.Allocate(2000, 0);     // Another class: fresh.
  EXPECT_NE(b, a);
  void* c = *allocator.Allocate(1000, 1);     // Another device: fresh.
  EXPECT_EQ(fake->allocs(), 3);
  const DeviceMemoryStats s = allocator.Stats(0);
  EXPECT_EQ(s.allocated_bytes, 1024u + 2048u);
  EXPECT_EQ(s.reserved_bytes, 1024u + 2048u);
  EXPECT_EQ(s.allocations, 3u);
  EXPECT_EQ(s.cache_hits, 1u);
  EXPECT_EQ(allocator.Stats(1).allocated_bytes, 1024u);
  EXPECT_EQ(*allocator.Allocate(0, 0), nullptr);
  ASSERT_TRUE(allocator.Free(b).ok());
  ASSERT_TRUE(allocator.Free(c).ok());
}

TEST(CudaCachingAllocatorTest, PeakAndEmptyCache) {
  auto source = std::make_unique<FakeSource>(size_t{1} << 30);
  FakeSource* fake = source.get();
  CudaCachingAllocator allocator(std::move(source));
  void* big = *allocator.Allocate(3 << 20, 0);  // 4 MiB class.
  void* small = *allocator.Allocate(100, 0);
  ASSERT_TRUE(allocator.Free(big).ok());
  DeviceMemoryStats s = allocator.Stats(0);
  EXPECT_EQ(s.allocated_bytes, 512u);
  EXPECT_EQ(s.peak_allocated_bytes, (size_t{4} << 20) + 512);
  EXPECT_EQ(s.reserved_bytes, (size_t{4} << 20) + 512);  // The 4 MiB block is cached.
  allocator.EmptyCache();
  s = allocator.Stats(0);
  EXPECT_EQ(s.reserved_bytes, 512u);
  EXPECT_EQ(fake->used(0), 512u);
  allocator.ResetPeak(0);
  EXPECT_EQ(allocator.Stats(0).peak_allocated_bytes, 512u);
  ASSERT_TRUE(allocator.Free(small).ok());
}

TEST(CudaCachingAllocatorTest, OutOfMemoryEmptiesTheCacheAndRetriesOnce) {
  CudaCachingAllocator allocator(std::make_unique<FakeSource>(size_t{8} << 20));
  void* a = *allocator.Allocate(6 << 20, 0);
  ASSERT_TRUE(allocator.Free(a).ok());  // 6 MiB cached, 2 MiB left at the source.
  absl::StatusOr<void*> b = allocator.Allocate(4 << 20, 0);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(allocator.Stats(0).reserved_bytes, size_t{4} << 20);
  absl::StatusOr<void*> c = allocator.Allocate(6 << 20, 0);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("on cuda:0"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("fake out of memory"));
  ASSERT_TRUE(allocator.Free(*b).ok());
}

TEST(CudaCachingAllocatorTest, UnknownOrDoubleFreeIsAnError) {
  CudaCachingAllocator allocator(std::make_unique<FakeSource>(size_t{1} << 20));
  void* a = *allocator.Allocate(10, 0);
  ASSERT_TRUE(allocator.Free(a).ok());
  EXPECT_EQ(allocator.Free(a).code(), absl::StatusCode::kInvalidArgument);
  int not_a_block = 0;
  EXPECT_EQ(allocator.Free(&not_a_block).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(allocator.Free(nullptr).ok());
}

TEST(CudaCachingAllocatorTest, ThreadsShareTheCache) {
  CudaCachingAllocator allocator(std::make_unique<FakeSource>(size_t{1} << 30));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&allocator, t] {
      for (int i = 0; i < 200; ++i) {
        absl::StatusOr<void*> p = allocator.Allocate(512 * (1 + (i + t) % 5), t % 2);
        ASSERT_TRUE(p.ok());
        ASSERT_TRUE(allocator.Free(*p).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(allocator.Stats(0).allocated_bytes, 0u);
  EXPECT_EQ(allocator.Stats(0).allocations + allocator.Stats(1).allocations, 800u);
}

TEST(CudaCachingAllocatorGpuTest, ReusesDeviceMemoryOnCuda0) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  CudaCachingAllocator allocator;
  void* a = *allocator.Allocate(size_t{64} << 20, 0);
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(cuda::Zero(a, size_t{64} << 20, 0, nullptr).ok());  // Really device memory.
  ASSERT_TRUE(allocator.Free(a).ok());
  EXPECT_EQ(*allocator.Allocate(size_t{63} << 20, 0), a);
  const DeviceMemoryStats s = allocator.Stats(0);
  EXPECT_EQ(s.cache_hits, 1u);
  EXPECT_EQ(s.peak_allocated_bytes, size_t{64} << 20);
  ASSERT_TRUE(allocator.Free(a).ok());
  allocator.EmptyCache(0);
  EXPECT_EQ(allocator.Stats(0).reserved_bytes, 0u);
}

}  // namespace
}  // namespace lockstep
