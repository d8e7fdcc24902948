#include "tools/bench/collective_descriptor.h"

#include <algorithm>
#include <type_traits>

#include "core/half.h"
#include "core/status.h"

namespace lockstep {
namespace bench {

int64_t WholeBufferCount(int64_t bytes, int64_t element_bytes, int n) { return bytes / element_bytes; }
int64_t WholeBufferBytes(int64_t count, int64_t element_bytes, int n) { return count * element_bytes; }
int64_t PerRankCount(int64_t bytes, int64_t element_bytes, int n) { return bytes / (element_bytes * n); }
int64_t PerRankBytes(int64_t count, int64_t element_bytes, int n) { return count * element_bytes * n; }

BufferShape SameShape(int64_t count, int n, int rank) { return {count, count, {}}; }
BufferShape WideOutputShape(int64_t count, int n, int rank) { return {count, count * n, {}}; }
BufferShape WideInputShape(int64_t count, int n, int rank) { return {count * n, count, {}}; }

double AllReduceBusFactor(int n) { return 2.0 * (n - 1) / n; }
double ShareBusFactor(int n) { return static_cast<double>(n - 1) / n; }
double UnitBusFactor(int n) { return 1.0; }

double InputValue(int rank, int64_t i) { return static_cast<double>((i * 3 + rank) % 7); }

double ReducedValue(ReduceOp op, int n, int64_t i) {
  double acc = InputValue(0, i);
  for (int r = 1; r < n; ++r) {
    const double v = InputValue(r, i);
    if (op == ReduceOp::kSum || op == ReduceOp::kAvg) acc += v;
    if (op == ReduceOp::kProd) acc *= v;
    if (op == ReduceOp::kMin) acc = std::min(acc, v);
    if (op == ReduceOp::kMax) acc = std::max(acc, v);
  }
  return op == ReduceOp::kAvg ? acc / n : acc;
}

double ValueAt(const Tensor& t, int64_t i) {
  return VisitDType(t.dtype(), [&](auto tag) -> double {
    using T = typename decltype(tag)::type;
    const T v = t.data<T>()[i];
    if constexpr (std::is_same_v<T, Half>)
      return HalfToFloat(v);
    else if constexpr (std::is_same_v<T, BFloat16>)
      return BFloat16ToFloat(v);
    else
      return static_cast<double>(v);
  });
}

namespace {

// `t` on the host: rank `rank`'s known values.
void FillHost(const Tensor& t, int rank) {
  VisitDType(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double v = InputValue(rank, i);
      if constexpr (std::is_same_v<T, Half>)
        p[i] = FloatToHalf(static_cast<float>(v));
      else if constexpr (std::is_same_v<T, BFloat16>)
        p[i] = FloatToBFloat16(static_cast<float>(v));
      else if constexpr (std::is_same_v<T, bool>)
        p[i] = static_cast<int>(v) % 2 == 1;
      else
        p[i] = static_cast<T>(v);
    }
  });
}

}  // namespace

absl::Status FillKnownValues(const Tensor& t, int rank) {
  if (!t.device().is_cuda()) {
    FillHost(t, rank);
    return absl::OkStatus();
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor host, Tensor::Zeros(t.shape(), t.dtype()));
  FillHost(host, rank);
  return t.CopyFrom(host);
}

absl::Status FillInput(const Buffers& buffers, int rank) { return FillKnownValues(buffers.input, rank); }

absl::StatusOr<Tensor> OnHost(const Tensor& t) {
  if (!t.device().is_cuda()) return t;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor host, Tensor::Zeros(t.shape(), t.dtype()));
  LOCKSTEP_RETURN_IF_ERROR(host.CopyFrom(t));
  return host;
}

}  // namespace bench
}  // namespace lockstep
