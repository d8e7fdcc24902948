// Reduction operators shared by the kernels and the collectives.
#ifndef LOCKSTEP_CORE_REDUCE_OP_H_
#define LOCKSTEP_CORE_REDUCE_OP_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {

// The numeric values travel in collective fingerprints: append only.
enum class ReduceOp : uint8_t {
  kSum = 0,
  kAvg = 1,  // Sum, then divide by the number of contributions.
  kProd = 2,
  kMin = 3,  // NaN-propagating, like torch.minimum.
  kMax = 4,  // NaN-propagating, like torch.maximum.
  // Bitwise and, or, exclusive or: integer and bool dtypes only (as gloo's).
  kBand = 5,
  kBor = 6,
  kBxor = 7,
};

inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kAvg,  ReduceOp::kProd, ReduceOp::kMin,
                                             ReduceOp::kMax, ReduceOp::kBand, ReduceOp::kBor,  ReduceOp::kBxor};

// "SUM", "AVG", "PROD", "MIN", "MAX", "BAND", "BOR", "BXOR".
absl::string_view ReduceOpName(ReduceOp op);

// Accepts the names above in any case.
absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name);

bool IsValidReduceOp(uint8_t value);

// BAND, BOR and BXOR.
inline bool IsBitwise(ReduceOp op) { return op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor; }

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_REDUCE_OP_H_
