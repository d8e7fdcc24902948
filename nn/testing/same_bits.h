// Whole states (state dicts, optimizer states) compared bit for bit, for
// tests of code that must reproduce a state exactly (FSDP checkpoints,
// healing from a peer).
#ifndef LOCKSTEP_NN_TESTING_SAME_BITS_H_
#define LOCKSTEP_NN_TESTING_SAME_BITS_H_

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nn/module.h"

namespace lockstep {
namespace testing {

// The same names in the same order, and every tensor's bytes equal;
// failures name `what` and the entry.
inline void ExpectSameBits(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b,
                           const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first) << what;
    ASSERT_EQ(a[i].second.nbytes(), b[i].second.nbytes()) << what << " " << a[i].first;
    EXPECT_EQ(0, std::memcmp(a[i].second.raw_data(), b[i].second.raw_data(), a[i].second.nbytes()))
        << what << " " << a[i].first;
  }
}

}  // namespace testing
}  // namespace lockstep

#endif  // LOCKSTEP_NN_TESTING_SAME_BITS_H_
