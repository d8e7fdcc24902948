// Element types of lockstep tensors.
//
//   DType t = DType::kBF16;
//   DTypeSize(t);            // 2
//   DTypeName(t);            // "bf16"
//   ParseDType("float16");   // DType::kF16 (also accepts "f16", "half")
//
// `VisitDType` calls a generic lambda with the C++ type of a runtime dtype, so
// code that must work for every dtype is written once:
//
//   VisitDType(t.dtype(), [&](auto tag) {
//     using T = typename decltype(tag)::type;
//     Fill(t.data<T>(), ...);
//   });
#ifndef LOCKSTEP_CORE_DTYPE_H_
#define LOCKSTEP_CORE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/half.h"

namespace lockstep {

// The numeric values are part of wire formats (collective fingerprints,
// checkpoints): append only.
enum class DType : uint8_t {
  kF32 = 0,
  kF64 = 1,
  kF16 = 2,
  kBF16 = 3,
  kI32 = 4,
  kI64 = 5,
  kU8 = 6,
  kI8 = 7,
  // One byte holding 0 or 1, as PyTorch's torch.bool; reductions treat it
  // as logic (SUM and MAX: or; PROD and MIN: and).
  kBool = 8,
};

inline constexpr DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI32,
                                       DType::kI64, DType::kU8,  DType::kI8,  DType::kBool};

// Bytes per element.
size_t DTypeSize(DType dtype);

// Short name: "f32", "f64", "f16", "bf16", "i32", "i64", "u8", "i8", "bool".
absl::string_view DTypeName(DType dtype);

// f32, f64, f16 and bf16.
bool IsFloatingPoint(DType dtype);

// i32, i64, u8, i8 and bool: the dtypes the bitwise reductions apply to.
bool IsIntegral(DType dtype);

// Accepts the short names and PyTorch's ("float32", "float", "float64",
// "double", "float16", "half", "bfloat16", "int32", "int", "int64", "long",
// "uint8", "int8", "char", "bool").
absl::StatusOr<DType> ParseDType(absl::string_view name);

// True when `value` is one of the enumerators (for validating wire input).
bool IsValidDType(uint8_t value);

// Maps a C++ element type to its DType.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kF64;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::kF16;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::kBF16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kI64;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kU8;
};
template <>
struct DTypeOf<int8_t> {
  static constexpr DType value = DType::kI8;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::kBool;
};

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls `fn(TypeTag<T>{})` with the C++ type of `dtype` and returns its result.
template <typename Fn>
decltype(auto) VisitDType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF64:
      return fn(TypeTag<double>{});
    case DType::kF16:
      return fn(TypeTag<Half>{});
    case DType::kBF16:
      return fn(TypeTag<BFloat16>{});
    case DType::kI32:
      return fn(TypeTag<int32_t>{});
    case DType::kI64:
      return fn(TypeTag<int64_t>{});
    case DType::kU8:
      return fn(TypeTag<uint8_t>{});
    case DType::kI8:
      return fn(TypeTag<int8_t>{});
    case DType::kBool:
      return fn(TypeTag<bool>{});
    case DType::kF32:
      break;
  }
  return fn(TypeTag<float>{});
}

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DTYPE_H_
