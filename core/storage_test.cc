// Storage: host alignment and the pinned fallback everywhere; on a GPU,
// CUDA and pinned storage come from the process's caching allocators and
// their blocks are reused (those cases skip without a device).
#include "core/storage.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda/cuda_caching_allocator.h"
#include "core/cuda/cuda_runtime.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(StorageTest, HostMemoryIsAlignedAndSized) {
  std::shared_ptr<Storage> s = *Storage::Allocate(100, Device::Cpu());
  ASSERT_NE(s->data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s->data()) % kHostAlignment, 0u);
  EXPECT_EQ(s->nbytes(), 100u);
  EXPECT_EQ(s->device(), Device::Cpu());
  EXPECT_FALSE(s->pinned());
  std::memset(s->data(), 1, s->nbytes());  // Really ours (ASan checks).
  EXPECT_EQ((*Storage::Allocate(0, Device::Cpu()))->data(), nullptr);
}

TEST(StorageTest, LargeHostMemoryIsOnHugePageBoundaries) {
  constexpr size_t kHuge = size_t{2} << 20;
  for (size_t bytes : {kHuge, kHuge + 1, size_t{5} << 20}) {
    std::shared_ptr<Storage> s = *Storage::Allocate(bytes, Device::Cpu());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s->data()) % kHuge, 0u) << bytes;
    EXPECT_EQ(s->nbytes(), bytes);
    std::memset(s->data(), 2, s->nbytes());  // The whole size is ours (ASan checks).
  }
}

TEST(StorageTest, PinnedFallsBackToPageableWithoutAGpu) {
  if (cuda::DeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  std::shared_ptr<Storage> s = *Storage::Allocate(4096, Device::Cpu(), /*pinned=*/true);
  EXPECT_FALSE(s->pinned());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s->data()) % kHostAlignment, 0u);
  EXPECT_EQ(DefaultPinnedHostAllocator().Stats(kHostDevice).allocations, 0u);
}

TEST(StorageTest, CudaWithoutADeviceIsAnErrorThatSaysWhy) {
  if (cuda::DeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  absl::StatusOr<std::shared_ptr<Storage>> s = Storage::Allocate(64, Device::Cuda(0));
  ASSERT_FALSE(s.ok());
  // The runtime's own error (no device / not built), not an out-of-memory one.
  EXPECT_NE(s.status().code(), absl::StatusCode::kResourceExhausted) << s.status();
  EXPECT_EQ(DefaultCudaAllocator().Stats(0).reserved_bytes, 0u);
}

TEST(StorageGpuTest, CudaStorageIsCachedAndCounted) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  CudaCachingAllocator& allocator = DefaultCudaAllocator();
  const DeviceMemoryStats before = allocator.Stats(0);
  void* first = nullptr;
  {
    std::shared_ptr<Storage> s = *Storage::Allocate(size_t{3} << 20, Device::Cuda(0));
    first = s->data();
    ASSERT_TRUE(cuda::Zero(s->data(), s->nbytes(), 0, nullptr).ok());
    EXPECT_EQ(allocator.Stats(0).allocated_bytes, before.allocated_bytes + (size_t{4} << 20));
    EXPECT_GE(allocator.Stats(0).peak_allocated_bytes, before.allocated_bytes + (size_t{4} << 20));
  }
  EXPECT_EQ(allocator.Stats(0).allocated_bytes, before.allocated_bytes);
  std::shared_ptr<Storage> again = *Storage::Allocate(size_t{4} << 20, Device::Cuda(0));
  EXPECT_EQ(again->data(), first);  // Same class, reused at once.
  EXPECT_GT(allocator.Stats(0).cache_hits, before.cache_hits);
}

TEST(StorageTest, ReleaseFreesTheBytesAndRestoreRefillsTheSameStorage) {
  for (size_t nbytes : {size_t{256}, size_t{4} << 20}) {  // Plain and huge-page blocks.
    std::shared_ptr<Storage> s = *Storage::Allocate(nbytes, Device::Cpu());
    std::shared_ptr<Storage> view = s;  // What a layer's saved tensor holds.
    std::memset(s->data(), 7, nbytes);
    ASSERT_TRUE(s->Release().ok());
    EXPECT_TRUE(s->released());
    EXPECT_EQ(view->data(), nullptr);
    EXPECT_EQ(view->nbytes(), nbytes);
    ASSERT_TRUE(s->Release().ok());  // Twice is once.
    ASSERT_TRUE(s->Restore().ok());
    EXPECT_FALSE(view->released());
    ASSERT_NE(view->data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(view->data()) % kHostAlignment, 0u);
    std::memset(view->data(), 1, nbytes);  // Writable, all of it (ASan checks).
    ASSERT_TRUE(s->Restore().ok());        // Restoring live memory changes nothing.
    EXPECT_EQ(static_cast<unsigned char*>(view->data())[nbytes - 1], 1);
  }
}

TEST(StorageTest, AHugePageBehindTheLastByteIsNotResident) {
  // 8 MiB and one page: 4 huge pages advised, the last 4 KiB on an ordinary
  // page. Advising the rounded 10 MiB made the touched tail cost a whole
  // 2 MiB huge page. mincore says, page by page, what is resident in the
  // block's own rounded-up range behind the request: none of it may be.
  constexpr size_t kBytes = (size_t{8} << 20) + 4096;
  constexpr size_t kRounded = size_t{10} << 20;  // Storage rounds to whole huge pages.
  std::shared_ptr<Storage> s = *Storage::Allocate(kBytes, Device::Cpu());
  ASSERT_EQ(reinterpret_cast<uintptr_t>(s->data()) % (size_t{2} << 20), 0u);
  std::memset(s->data(), 1, kBytes);
  // Where THP is "always" the kernel backs any aligned 2 MiB of the mapping,
  // advised or not; "never" has no huge pages at all.
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(thp, mode);
  if (mode.find("[always]") != std::string::npos) return;
  const long page = sysconf(_SC_PAGESIZE);
  char* tail = static_cast<char*>(s->data()) + kBytes;
  const size_t pages = (kRounded - kBytes) / page;
  std::vector<unsigned char> resident(pages);
  ASSERT_EQ(mincore(tail, pages * page, resident.data()), 0) << std::strerror(errno);
  size_t count = 0;
  for (unsigned char r : resident) count += r & 1;
  EXPECT_EQ(count, 0u) << count << " of the " << pages << " pages behind the request are resident (THP mode: " << mode
                       << ")";
}

TEST(StorageTest, WrappedMemoryCannotBeReleased) {
  static char owned[64];
  std::shared_ptr<Storage> s = *Storage::Wrap(owned, sizeof(owned), Device::Cpu(), std::make_shared<int>(0));
  absl::Status status = s->Release();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_EQ(s->data(), owned);
}

TEST(StorageGpuTest, PinnedStorageIsReusedOnceItsCopiesAreDone) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  // The pool fences on the devices the process uses.
  std::shared_ptr<Storage> device = *Storage::Allocate(1 << 20, Device::Cuda(0));
  CudaCachingAllocator& pool = DefaultPinnedHostAllocator();
  void* first = nullptr;
  {
    std::shared_ptr<Storage> s = *Storage::Allocate(1 << 20, Device::Cpu(), /*pinned=*/true);
    ASSERT_TRUE(s->pinned());
    first = s->data();
    ASSERT_TRUE(cuda::Copy(device->data(), s->data(), 1 << 20, 0, nullptr).ok());
  }
  ASSERT_TRUE(cuda::DeviceSynchronize(0).ok());  // The fence's event has completed.
  std::shared_ptr<Storage> again = *Storage::Allocate(1 << 20, Device::Cpu(), /*pinned=*/true);
  EXPECT_EQ(again->data(), first);
  EXPECT_GE(pool.Stats(kHostDevice).cache_hits, 1u);
}

}  // namespace
}  // namespace lockstep
