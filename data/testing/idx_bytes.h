// Builds IDX headers for tests (data/idx.h describes the format).
#ifndef LOCKSTEP_DATA_TESTING_IDX_BYTES_H_
#define LOCKSTEP_DATA_TESTING_IDX_BYTES_H_

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep {
namespace testing {

// Magic (two zero bytes, type code, dimension count) and big-endian dims.
inline std::string IdxHeader(uint8_t type, const std::vector<uint32_t>& dims) {
  std::string h = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) h.push_back(static_cast<char>((d >> s) & 0xff));
  }
  return h;
}

}  // namespace testing
}  // namespace lockstep

#endif  // LOCKSTEP_DATA_TESTING_IDX_BYTES_H_
