#include "data/randperm.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/mt19937.h"

namespace lockstep {

absl::StatusOr<std::vector<int64_t>> TorchRandperm(int64_t n, uint64_t seed) {
  if (n < 0 || n >= kMaxTorchRandpermSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("TorchRandperm: n = ", n, " is outside [0, ", kMaxTorchRandpermSize,
                     "), the range where PyTorch's CPU randperm uses the algorithm reproduced here"));
  }
  std::vector<int64_t> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) r[i] = i;
  Mt19937 gen(seed);
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t z = static_cast<int64_t>(gen.Next32() % static_cast<uint64_t>(n - i));
    std::swap(r[i], r[i + z]);
  }
  return r;
}

}  // namespace lockstep
