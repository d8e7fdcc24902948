// Picks the CPU kernels compiled for the best instruction set this CPU has.
#include "core/cpu_kernels.h"

#include "core/internal/cpu_kernels_isa.h"

namespace lockstep {
namespace cpu {
namespace {

bool HasAvx2() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

bool UseAvx2() {
  static const bool use = HasAvx2();  // Immutable after the first call.
  return use;
}

}  // namespace

const char* KernelIsa() { return UseAvx2() ? "avx2" : "baseline"; }

void Reduce(ReduceOp op, DType dtype, absl::Span<const void* const> inputs, void* out, int64_t count) {
  if (UseAvx2()) return avx2::Reduce(op, dtype, inputs, out, count);
  baseline::Reduce(op, dtype, inputs, out, count);
}

void Scale(DType dtype, void* data, int64_t count, double factor) {
  if (UseAvx2()) return avx2::Scale(dtype, data, count, factor);
  baseline::Scale(dtype, data, count, factor);
}

void Divide(DType dtype, void* data, int64_t count, int divisor) {
  if (UseAvx2()) return avx2::Divide(dtype, data, count, divisor);
  baseline::Divide(dtype, data, count, divisor);
}

void Cast(DType from, const void* src, DType to, void* dst, int64_t count) {
  if (UseAvx2()) return avx2::Cast(from, src, to, dst, count);
  baseline::Cast(from, src, to, dst, count);
}

bool AllFinite(DType dtype, const void* data, int64_t count) {
  return UseAvx2() ? avx2::AllFinite(dtype, data, count) : baseline::AllFinite(dtype, data, count);
}

}  // namespace cpu
}  // namespace lockstep
