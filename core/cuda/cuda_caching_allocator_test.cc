// CudaCachingAllocator: size classes, reuse, stats, the out-of-memory
// retry and fenced (pinned-pool) reuse over a fake source (no GPU); the same
// over cudaMalloc and cudaHostAlloc on cuda:0 when a device is visible
// (skipped otherwise).
#include "core/cuda/cuda_caching_allocator.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/cuda/cuda_runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

// A fence the test completes by hand, as a CUDA event that has not been reached yet.
class FakeFence final : public ReuseFence {
 public:
  explicit FakeFence(std::shared_ptr<bool> done) : done_(std::move(done)) {}
  bool Done() override { return *done_; }

 private:
  std::shared_ptr<bool> done_;
};

// Host memory standing in for a device, with a capacity per device. With
// `fenced`, every free gets a FakeFence (as PinnedHostMemory's events).
class FakeSource final : public DeviceMemorySource {
 public:
  explicit FakeSource(size_t capacity, bool fenced = false) : capacity_(capacity), fenced_(fenced) {}
  ~FakeSource() override { EXPECT_TRUE(live_.empty()) << live_.size() << " blocks never returned"; }
  absl::StatusOr<void*> Allocate(size_t bytes, int device) override {
    if (device == kBadDevice) return absl::InvalidArgumentError("fake: no such device");
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
  std::unique_ptr<ReuseFence> OnFree(void* ptr, int device) override {
    if (!fenced_) return nullptr;
    auto done = std::make_shared<bool>(false);
    fences_[ptr] = done;
    return std::make_unique<FakeFence>(done);
  }
  // Completes the fence of the last free of `ptr`.
  void Complete(void* ptr) { *fences_.at(ptr) = true; }
  size_t used(int device) { return used_[device]; }
  int allocs() const { return allocs_; }

  static constexpr int kBadDevice = 7;

 private:
  const size_t capacity_;
  const bool fenced_;
  std::map<void*, std::pair<size_t, int>> live_;
  std::map<int, size_t> used_;
  std::map<void*, std::shared_ptr<bool>> fences_;
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
  void* c = *allocator.Allocate(1000, 1);  // Another device: fresh.
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

TEST(CudaCachingAllocatorTest, FencedBlockIsReusedOnlyOnceItsFenceIsDone) {
  auto source = std::make_unique<FakeSource>(size_t{1} << 30, /*fenced=*/true);
  FakeSource* fake = source.get();
  CudaCachingAllocator pool(std::move(source));
  void* a = *pool.Allocate(1000, kHostDevice);
  ASSERT_TRUE(pool.Free(a).ok());
  // A copy may still read `a`: the same class gets a new block.
  void* b = *pool.Allocate(1000, kHostDevice);
  EXPECT_NE(b, a);
  EXPECT_EQ(fake->allocs(), 2);
  ASSERT_TRUE(pool.Free(b).ok());
  fake->Complete(a);
  EXPECT_EQ(*pool.Allocate(700, kHostDevice), a);  // b's fence is still pending.
  DeviceMemoryStats s = pool.Stats(kHostDevice);
  EXPECT_EQ(s.allocated_bytes, 1024u);
  EXPECT_EQ(s.reserved_bytes, 2048u);  // b waits in the cache.
  EXPECT_EQ(s.cache_hits, 1u);
  EXPECT_EQ(fake->allocs(), 2);
  // b stays pending: the destructor must still return it to the source
  // (FakeSource checks), as a itself.
  ASSERT_TRUE(pool.Free(a).ok());
}

TEST(CudaCachingAllocatorTest, EmptyCacheKeepsBlocksWhoseFenceIsPending) {
  auto source = std::make_unique<FakeSource>(size_t{1} << 30, /*fenced=*/true);
  FakeSource* fake = source.get();
  CudaCachingAllocator pool(std::move(source));
  void* a = *pool.Allocate(3 << 20, kHostDevice);
  void* b = *pool.Allocate(100, kHostDevice);
  ASSERT_TRUE(pool.Free(a).ok());
  ASSERT_TRUE(pool.Free(b).ok());
  fake->Complete(b);
  pool.EmptyCache();
  EXPECT_EQ(pool.Stats(kHostDevice).reserved_bytes, size_t{4} << 20);  // a only.
  EXPECT_EQ(fake->used(kHostDevice), size_t{4} << 20);
  fake->Complete(a);
  pool.EmptyCache(kHostDevice);
  EXPECT_EQ(pool.Stats(kHostDevice).reserved_bytes, 0u);
  EXPECT_EQ(fake->used(kHostDevice), 0u);
}

TEST(CudaCachingAllocatorTest, OtherSourceErrorsComeBackUnchanged) {
  auto source = std::make_unique<FakeSource>(size_t{1} << 20);
  FakeSource* fake = source.get();
  CudaCachingAllocator allocator(std::move(source));
  absl::StatusOr<void*> p = allocator.Allocate(10, FakeSource::kBadDevice);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.status().message(), "fake: no such device");
  EXPECT_EQ(fake->allocs(), 0);
  EXPECT_TRUE(allocator.UsedDevices().empty());
  absl::StatusOr<void*> huge = allocator.Allocate(size_t{2} << 20, kHostDevice);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(huge.status().message()), HasSubstr("on pinned host memory"));
}

TEST(CudaCachingAllocatorTest, UsedDevicesAreThoseWithAllocations) {
  CudaCachingAllocator allocator(std::make_unique<FakeSource>(size_t{1} << 20));
  allocator.ResetPeak(5);  // Stats alone do not make a device used.
  void* a = *allocator.Allocate(10, 2);
  void* b = *allocator.Allocate(10, 0);
  ASSERT_TRUE(allocator.Free(a).ok());
  EXPECT_EQ(allocator.UsedDevices(), (std::vector<int>{0, 2}));
  ASSERT_TRUE(allocator.Free(b).ok());
}

TEST(CudaCachingAllocatorTest, DefaultAllocatorsAreOnePerProcess) {
  EXPECT_EQ(&DefaultCudaAllocator(), &DefaultCudaAllocator());
  EXPECT_EQ(&DefaultPinnedHostAllocator(), &DefaultPinnedHostAllocator());
  EXPECT_NE(&DefaultCudaAllocator(), &DefaultPinnedHostAllocator());
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

TEST(CudaCachingAllocatorGpuTest, PinnedBlockWaitsForItsCopy) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  constexpr size_t kBytes = size_t{64} << 20;
  CudaCachingAllocator device_memory;
  CudaCachingAllocator pool(PinnedHostMemory([] { return std::vector<int>{0}; }));
  void* gpu = *device_memory.Allocate(kBytes, 0);
  void* host = *pool.Allocate(kBytes, kHostDevice);
  // The Event calls the fence is made of, around a copy from the block.
  absl::StatusOr<cuda::Event> event = cuda::Event::Create(0);
  ASSERT_TRUE(event.ok()) << event.status();
  ASSERT_TRUE(cuda::Copy(gpu, host, kBytes, 0, nullptr).ok());
  ASSERT_TRUE(event->Record(nullptr).ok());
  ASSERT_TRUE(event->Synchronize().ok());
  EXPECT_TRUE(*event->Query());
  ASSERT_TRUE(pool.Free(host).ok());
  ASSERT_TRUE(cuda::DeviceSynchronize(0).ok());
  EXPECT_EQ(*pool.Allocate(kBytes, kHostDevice), host);  // The fence is done.
  EXPECT_EQ(pool.Stats(kHostDevice).cache_hits, 1u);
  ASSERT_TRUE(pool.Free(host).ok());
  ASSERT_TRUE(device_memory.Free(gpu).ok());
}

}  // namespace
}  // namespace lockstep
