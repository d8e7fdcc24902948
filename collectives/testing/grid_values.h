// The values of the collectives' grid tests (collectives/communicator_test.cc,
// collectives/collectives_v_test.cc): rank r's input element i is a small
// integer, so every result is exact in every dtype and is computed here
// from the definitions, sharing nothing with the kernels. For tests only.
#ifndef LOCKSTEP_COLLECTIVES_TESTING_GRID_VALUES_H_
#define LOCKSTEP_COLLECTIVES_TESTING_GRID_VALUES_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/reduce_op.h"
#include "core/tensor.h"

namespace lockstep {
namespace testing {

// Whether `op` applies to T: bitwise ops to integers and bool only, AVG to
// everything but bool.
template <typename T>
bool ReduceOpApplies(ReduceOp op) {
  if (IsBitwise(op)) return std::is_integral_v<T>;
  return !(op == ReduceOp::kAvg && std::is_same_v<T, bool>);
}

// Input of `rank`, element i, as an integer; exact in every dtype (bool: 0
// or 1; PROD: factors whose products over 5 ranks fit an int8).
inline int64_t GridValue(ReduceOp rop, DType dtype, int rank, int64_t i) {
  if (dtype == DType::kBool) return ((i * 7 + rank * 3) % 11 + i / 3) % 2;
  const bool is_unsigned = dtype == DType::kU8;
  if (rop == ReduceOp::kProd) {
    static const int64_t kSigned[] = {1, -1, 2, 1, -1, 1, 2};
    static const int64_t kUnsigned[] = {1, 3, 2, 1, 2, 1, 3};
    const int64_t k = (i * 5 + rank * 3) % 7;
    return is_unsigned ? kUnsigned[k] : kSigned[k];
  }
  const int64_t v = (i * 7 + rank * 3) % 11;
  return is_unsigned ? v : v - 5;
}

template <typename T>
T FromDouble(double v) {
  if constexpr (std::is_same_v<T, Half>) {
    return FloatToHalf(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return FloatToBFloat16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else {
    return static_cast<T>(v);
  }
}

template <typename T>
double ToDouble(T v) {
  if constexpr (std::is_same_v<T, Half>) {
    return HalfToFloat(v);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16ToFloat(v);
  } else {
    return static_cast<double>(v);
  }
}

// The expected reduction of ranks 0..n-1's inputs at element i, from the
// definitions: integers wrap to the dtype and AVG truncates; floats divide
// once in their accumulator (f32 for f16/bf16); bool is logic.
template <typename T>
T ExpectedReduce(ReduceOp rop, int n, int64_t i) {
  constexpr DType dtype = DTypeOf<T>::value;
  int64_t acc = GridValue(rop, dtype, 0, i);
  for (int r = 1; r < n; ++r) {
    const int64_t v = GridValue(rop, dtype, r, i);
    switch (rop) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc = std::is_same_v<T, bool> ? (acc | v) : acc + v;
        break;
      case ReduceOp::kProd:
        acc = std::is_same_v<T, bool> ? (acc & v) : acc * v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kBand:
        acc &= v;
        break;
      case ReduceOp::kBor:
        acc |= v;
        break;
      case ReduceOp::kBxor:
        acc ^= v;
        break;
    }
  }
  if constexpr (std::is_same_v<T, bool>) {
    return acc != 0;
  } else if constexpr (std::is_integral_v<T>) {
    const T wrapped = static_cast<T>(acc);
    return rop == ReduceOp::kAvg ? static_cast<T>(static_cast<int64_t>(wrapped) / n) : wrapped;
  } else {
    if (rop != ReduceOp::kAvg) return FromDouble<T>(static_cast<double>(acc));
    if constexpr (std::is_same_v<T, double>) return static_cast<double>(acc) / n;
    return FromDouble<T>(static_cast<float>(acc) / static_cast<float>(n));
  }
}

// Rank `rank`'s inputs at elements offset .. offset + count - 1.
template <typename T>
Tensor Filled(int64_t count, ReduceOp rop, int rank, int64_t offset = 0) {
  Tensor t = *Tensor::Empty({count}, DTypeOf<T>::value);
  T* p = t.data<T>();
  for (int64_t i = 0; i < count; ++i) {
    p[i] = FromDouble<T>(static_cast<double>(GridValue(rop, DTypeOf<T>::value, rank, offset + i)));
  }
  return t;
}

// OK, or an error naming the first element of `got` (bitwise) unlike
// `expected`.
template <typename T>
absl::Status Compare(const Tensor& got, const std::vector<T>& expected, const std::string& what) {
  if (got.numel() != static_cast<int64_t>(expected.size())) {
    return absl::InternalError(absl::StrCat(what, ": ", got.numel(), " elements, expected ", expected.size()));
  }
  const T* p = got.data<T>();
  for (size_t i = 0; i < expected.size(); ++i) {
    bool same;
    if constexpr (std::is_same_v<T, bool>) {
      same = p[i] == expected[i];
    } else {
      same = std::memcmp(&p[i], &expected[i], sizeof(T)) == 0;
    }
    if (!same) {
      return absl::InternalError(
          absl::StrCat(what, ": element ", i, " is ", ToDouble<T>(p[i]), ", expected ", ToDouble<T>(expected[i])));
    }
  }
  return absl::OkStatus();
}

// Every grid case, in one order that is the same on every rank: for each
// dtype, op, reduce op that applies to the dtype (only kSum for an op that
// `reduces` says does not reduce) and count, run_case(tag, op, reduce_op,
// count) with VisitDType's tag; after each dtype, after_dtype() (a
// barrier). Stops at the first error.
template <typename Op, size_t N, typename Reduces, typename RunCase, typename AfterDType>
absl::Status RunGridCases(const std::vector<DType>& dtypes, const Op (&ops)[N], const std::vector<int64_t>& counts,
                          Reduces reduces, RunCase run_case, AfterDType after_dtype) {
  for (DType dtype : dtypes) {
    absl::Status s = VisitDType(dtype, [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      for (Op op : ops) {
        for (ReduceOp rop : kAllReduceOps) {
          if (!reduces(op) && rop != ReduceOp::kSum) continue;
          if (reduces(op) && !ReduceOpApplies<T>(rop)) continue;
          for (int64_t count : counts) {
            if (absl::Status c = run_case(tag, op, rop, count); !c.ok()) return c;
          }
        }
      }
      return after_dtype();
    });
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace testing
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_TESTING_GRID_VALUES_H_
