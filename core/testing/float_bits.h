// Bit patterns of floats, for tests that compare results exactly.
#ifndef LOCKSTEP_CORE_TESTING_FLOAT_BITS_H_
#define LOCKSTEP_CORE_TESTING_FLOAT_BITS_H_

#include <cstdint>
#include <cstring>

namespace lockstep {
namespace testing {

inline uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

inline float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
}

}  // namespace testing
}  // namespace lockstep

#endif  // LOCKSTEP_CORE_TESTING_FLOAT_BITS_H_
