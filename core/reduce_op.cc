#include "core/reduce_op.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace lockstep {

absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "SUM";
    case ReduceOp::kAvg:
      return "AVG";
    case ReduceOp::kProd:
      return "PROD";
    case ReduceOp::kMin:
      return "MIN";
    case ReduceOp::kMax:
      return "MAX";
    case ReduceOp::kBand:
      return "BAND";
    case ReduceOp::kBor:
      return "BOR";
    case ReduceOp::kBxor:
      return "BXOR";
  }
  return "INVALID";
}

bool IsValidReduceOp(uint8_t value) { return value <= static_cast<uint8_t>(ReduceOp::kBxor); }

absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name) {
  const std::string n = absl::AsciiStrToUpper(name);
  for (ReduceOp op : kAllReduceOps) {
    if (n == ReduceOpName(op)) return op;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "ParseReduceOp: '", name, "' is not a reduce op; expected SUM, AVG, PROD, MIN, MAX, BAND, BOR or BXOR"));
}

}  // namespace lockstep
