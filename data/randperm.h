// torch.randperm(n, generator=g) on the CPU, for g.manual_seed(seed).
//
//   absl::StatusOr<std::vector<int64_t>> p = TorchRandperm(10, /*seed=*/0);
//
// PyTorch 1.13's algorithm for n < 2^32 / 20 (= 214,748,364): start from the
// identity and, for i in [0, n-1), swap r[i] with r[i + next32() % (n - i)].
// Larger n take another path in PyTorch, so they are refused here rather than
// silently differing.
#ifndef LOCKSTEP_DATA_RANDPERM_H_
#define LOCKSTEP_DATA_RANDPERM_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep {

inline constexpr int64_t kMaxTorchRandpermSize = 214748364;

absl::StatusOr<std::vector<int64_t>> TorchRandperm(int64_t n, uint64_t seed);

}  // namespace lockstep

#endif  // LOCKSTEP_DATA_RANDPERM_H_
