#include "core/peak_rss.h"

#include <cstdint>
#include <memory>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(PeakRssTest, IsAHighWaterMarkInBytes) {
  const int64_t peak = PeakRssBytes();  // bytes; 0 if getrusage fails
  EXPECT_GT(peak, 0);
  // Touching 32 MiB makes them resident: the peak is at least that (in
  // bytes, not KiB) and never below the earlier reading.
  constexpr size_t kBytes = size_t{32} << 20;
  std::unique_ptr<char[]> block(new char[kBytes]);
  volatile char* bytes = block.get();  // Writes the compiler must keep.
  for (size_t i = 0; i < kBytes; i += 4096) bytes[i] = 1;
  const int64_t after = PeakRssBytes();
  EXPECT_GE(after, peak);
  EXPECT_GE(after, static_cast<int64_t>(kBytes));
  block.reset();
  EXPECT_GE(PeakRssBytes(), after);  // Freed memory still counts.
}

}  // namespace
}  // namespace lockstep
