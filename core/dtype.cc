#include "core/dtype.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace lockstep {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF64:
      return 8;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kU8:
      return 1;
    case DType::kI8:
      return 1;
    case DType::kBool:
      return 1;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kU8:
      return "u8";
    case DType::kI8:
      return "i8";
    case DType::kBool:
      return "bool";
  }
  return "invalid";
}

bool IsFloatingPoint(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF64 || dtype == DType::kF16 || dtype == DType::kBF16;
}

bool IsIntegral(DType dtype) {
  return dtype == DType::kI32 || dtype == DType::kI64 || dtype == DType::kU8 || dtype == DType::kI8 ||
         dtype == DType::kBool;
}

bool IsValidDType(uint8_t value) { return value <= static_cast<uint8_t>(DType::kBool); }

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "f32" || n == "float32" || n == "float") return DType::kF32;
  if (n == "f64" || n == "float64" || n == "double") return DType::kF64;
  if (n == "f16" || n == "float16" || n == "half") return DType::kF16;
  if (n == "bf16" || n == "bfloat16") return DType::kBF16;
  if (n == "i32" || n == "int32" || n == "int") return DType::kI32;
  if (n == "i64" || n == "int64" || n == "long") return DType::kI64;
  if (n == "u8" || n == "uint8") return DType::kU8;
  if (n == "i8" || n == "int8" || n == "char") return DType::kI8;
  if (n == "bool") return DType::kBool;
  return absl::InvalidArgumentError(
      absl::StrCat("ParseDType: '", name,
                   "' is not a dtype; expected one of f32, f64, f16, bf16, i32, i64, u8, i8, bool "
                   "(or PyTorch's names such as float32, bfloat16, int64)"));
}

}  // namespace lockstep
