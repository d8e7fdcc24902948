// Argument checks shared by the Communicator's operation files
// (collectives/communicator*.cc). Internal to //collectives:communicator.
#ifndef LOCKSTEP_COLLECTIVES_INTERNAL_COMMUNICATOR_CHECKS_H_
#define LOCKSTEP_COLLECTIVES_INTERNAL_COMMUNICATOR_CHECKS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace lockstep {
namespace communicator_internal {

inline absl::Status CheckTensor(const Tensor& t, const char* op, const char* what) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " is undefined"));
  return absl::OkStatus();
}

// a and b: the same dtype and device, and b has b_factor times a's elements.
inline absl::Status CheckSame(const Tensor& a, const Tensor& b, const char* op, int64_t b_factor, const char* a_name,
                              const char* b_name) {
  if (a.dtype() != b.dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", a_name, " is ", DTypeName(a.dtype()), " but ", b_name, " is ", DTypeName(b.dtype())));
  }
  if (a.numel() * b_factor != b.numel()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", b_name, " has ", b.numel(), " elements, expected ", a.numel() * b_factor,
        b_factor == 1 ? std::string(" (as many as the ") + a_name + ")"
                      : absl::StrCat(" (world size ", b_factor, " x ", a.numel(), " of the ", a_name, ")")));
  }
  if (a.device() != b.device()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", a_name, " is on ", a.device().ToString(), " but ", b_name,
                                                   " on ", b.device().ToString()));
  }
  return absl::OkStatus();
}

// a and b: the same dtype and device (element counts checked elsewhere).
inline absl::Status CheckKin(const Tensor& a, const Tensor& b, const char* op, const char* a_name, const char* b_name) {
  if (a.dtype() != b.dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", a_name, " is ", DTypeName(a.dtype()), " but ", b_name, " is ", DTypeName(b.dtype())));
  }
  if (a.device() != b.device()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", a_name, " is on ", a.device().ToString(), " but ", b_name,
                                                   " on ", b.device().ToString()));
  }
  return absl::OkStatus();
}

// `t` has `expected` elements; `why` says where that number comes from.
inline absl::Status CheckNumel(const Tensor& t, int64_t expected, const char* op, const char* what,
                               const std::string& why) {
  if (t.numel() == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": ", what, " has ", t.numel(), " elements, expected ", expected, " (", why, ")"));
}

// FNV-1a over the counts, folded to 32 bits: the fingerprints' `layout`.
inline uint32_t LayoutHash(absl::Span<const int64_t> counts) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t c : counts) {
    for (int byte = 0; byte < 8; ++byte) {
      h ^= static_cast<uint64_t>(c >> (8 * byte)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return static_cast<uint32_t>(h ^ (h >> 32));
}

inline int64_t SumOf(absl::Span<const int64_t> counts) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  return total;
}

}  // namespace communicator_internal
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_INTERNAL_COMMUNICATOR_CHECKS_H_
