// One collective of //tools/bench:collectives, described as nccl-tests
// describes each of its tests (its `struct testColl`): the driver
// (tools/bench/driver.h) knows nothing about any collective; it asks the
// descriptor how many elements a row of `bytes` moves, how big each rank's
// buffers are, the busbw factor, how to fill the inputs with known values,
// how to launch the operation, and how many elements of a checked result
// are wrong. Each collective's descriptor lives in tools/bench/ops/, one per
// file, and tools/bench/ops/registry.h lists them by their --op spelling.
//
// Terms: a rank's "count" is the row's count column: the elements the row
// is named by (a whole buffer for all_reduce, one rank's block for
// all_gather; nccl-tests' `count`). "bytes" is the row's bytes column, the
// whole buffer (count x element size, or x n for the gathered and scattered
// ops). The busbw factor turns algbw = bytes / time into the bandwidth each
// link needs (nccl-tests' doc/PERFORMANCE.md): all_reduce 2(n-1)/n;
// all_gather, all_gather_v, reduce_scatter, gather, scatter, all_to_all
// (n-1)/n; broadcast, reduce and send_recv 1.
//
//   absl::StatusOr<const CollectiveDescriptor*> op = FindCollective("all_gather");
//   const int64_t count = (*op)->count(bytes, DTypeSize(dtype), n);
//   const BufferShape shape = (*op)->shape(count, n, rank);
//   ... allocate shape.input and shape.output elements, then
//   LOCKSTEP_RETURN_IF_ERROR((*op)->launch(comm, buffers, args)->Wait());
#ifndef LOCKSTEP_TOOLS_BENCH_COLLECTIVE_DESCRIPTOR_H_
#define LOCKSTEP_TOOLS_BENCH_COLLECTIVE_DESCRIPTOR_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "core/dtype.h"
#include "core/reduce_op.h"
#include "core/tensor.h"

namespace lockstep {
namespace bench {

// What an operation needs besides its buffers (--reduce_op, --root).
struct OpArgs {
  ReduceOp reduce_op = ReduceOp::kSum;
  int root = 0;
};

// Elements of one rank's input and output for a row's count, and the
// uneven ops' per-rank blocks (empty for the others).
struct BufferShape {
  int64_t input = 0;
  int64_t output = 0;
  std::vector<int64_t> counts;
};

// One rank's buffers for one row (on the benchmark's device).
struct Buffers {
  Tensor input, output;
  std::vector<int64_t> counts;  // As BufferShape::counts.
};

// A checked run's result on the host, and who this rank is.
struct CheckInput {
  const Buffers& host;
  int64_t count = 0;  // The row's count.
  int n = 1;
  int rank = 0;
  OpArgs args;
};

struct CollectiveDescriptor {
  std::string name;  // The --op spelling and the JSON "op" field.
  // The row's count for a size in bytes, and the row's bytes for a count.
  int64_t (*count)(int64_t bytes, int64_t element_bytes, int n) = nullptr;
  int64_t (*bytes)(int64_t count, int64_t element_bytes, int n) = nullptr;
  BufferShape (*shape)(int64_t count, int n, int rank) = nullptr;
  double (*bus_factor)(int n) = nullptr;
  // Refuses what the op cannot run (a dtype, too few ranks); may be null.
  absl::Status (*validate)(DType dtype, int n) = nullptr;
  // Writes this rank's known input (InputValue) before a checked run.
  absl::Status (*fill)(const Buffers& buffers, int rank) = nullptr;
  // Starts the operation; null when this rank takes no part (send_recv's
  // idle ranks).
  std::shared_ptr<Work> (*launch)(Communicator& comm, const Buffers& buffers, const OpArgs& args) = nullptr;
  // This rank's wrong elements after a checked run.
  int64_t (*count_wrong)(const CheckInput& in) = nullptr;
};

// Sizing. Whole buffer: count = bytes / element (all_reduce, broadcast,
// reduce, send_recv, all_gather_v's total). Per rank: count = bytes / (n x
// element), the buffer n blocks of count (all_gather, gather,
// reduce_scatter, scatter).
int64_t WholeBufferCount(int64_t bytes, int64_t element_bytes, int n);
int64_t WholeBufferBytes(int64_t count, int64_t element_bytes, int n);
int64_t PerRankCount(int64_t bytes, int64_t element_bytes, int n);
int64_t PerRankBytes(int64_t count, int64_t element_bytes, int n);

// Shapes: input and output of `count` elements; or n blocks of `count` on
// one side (the gathered output, the scattered input).
BufferShape SameShape(int64_t count, int n, int rank);
BufferShape WideOutputShape(int64_t count, int n, int rank);
BufferShape WideInputShape(int64_t count, int n, int rank);

// nccl-tests' busbw factors.
double AllReduceBusFactor(int n);  // 2(n-1)/n
double ShareBusFactor(int n);      // (n-1)/n: each rank's share crosses a link
double UnitBusFactor(int n);       // 1

// Element i of rank r's input: a small integer, exact in every dtype.
double InputValue(int rank, int64_t i);
// Element i of the reduction of every rank's input by `op`.
double ReducedValue(ReduceOp op, int n, int64_t i);
// InputValue repeats every kInputPeriod elements, and so does ReducedValue.
inline constexpr int kInputPeriod = 7;
// ReducedValue(op, n, i) for every i, from one period computed once: a check
// of 64 MiB over 64 ranks costs a lookup per element, not 63 operations.
class ReducedValues {
 public:
  ReducedValues(ReduceOp op, int n) {
    for (int k = 0; k < kInputPeriod; ++k) period_[k] = ReducedValue(op, n, k);
  }
  double operator()(int64_t i) const { return period_[i % kInputPeriod]; }

 private:
  std::array<double, kInputPeriod> period_;
};
// Element i of `t` (on the host) as a double.
double ValueAt(const Tensor& t, int64_t i);

// Fills `t` (on any device) with rank `rank`'s known values.
absl::Status FillKnownValues(const Tensor& t, int rank);
// The usual fill: the input holds the rank's known values.
absl::Status FillInput(const Buffers& buffers, int rank);
// `t` itself on the CPU, or a host copy of a CUDA tensor.
absl::StatusOr<Tensor> OnHost(const Tensor& t);

// The elements at..at+length-1 of `t` that differ from expected(i), i
// counted from 0.
template <typename Expected>
int64_t CountWrongIn(const Tensor& t, int64_t at, int64_t length, const Expected& expected) {
  int64_t wrong = 0;
  for (int64_t i = 0; i < length; ++i) wrong += ValueAt(t, at + i) != expected(i);
  return wrong;
}

}  // namespace bench
}  // namespace lockstep

#endif  // LOCKSTEP_TOOLS_BENCH_COLLECTIVE_DESCRIPTOR_H_
