#include "core/mt19937.h"

namespace lockstep {
namespace {

constexpr int kM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfu;
constexpr uint32_t kUpperMask = 0x80000000u;
constexpr uint32_t kLowerMask = 0x7fffffffu;

}  // namespace

Mt19937::Mt19937(uint64_t seed) {
  state_[0] = static_cast<uint32_t>(seed & 0xffffffffu);
  for (int i = 1; i < kN; ++i) {
    state_[i] = 1812433253u * (state_[i - 1] ^ (state_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  }
}

void Mt19937::Twist() {
  for (int i = 0; i < kN; ++i) {
    const uint32_t y = (state_[i] & kUpperMask) | (state_[(i + 1) % kN] & kLowerMask);
    state_[i] = state_[(i + kM) % kN] ^ (y >> 1) ^ ((y & 1) ? kMatrixA : 0u);
  }
  next_ = 0;
}

uint32_t Mt19937::Next32() {
  if (next_ >= kN) Twist();
  uint32_t y = state_[next_++];
  // Tempering.
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

}  // namespace lockstep
