#include "collectives/algorithms/all_reduce.h"

#include <cmath>
#include <cstdint>

#include "collectives/algorithms/pipelined_tree.h"
#include "collectives/algorithms/rabenseifner_all_reduce.h"
#include "collectives/algorithms/recursive_doubling_all_reduce.h"
#include "collectives/algorithms/ring_all_reduce.h"
#include "collectives/algorithms/tree_all_reduce.h"

namespace lockstep {

double AllReduceTime(AllReduceAlgorithm algorithm, double bytes, int p, const LinkConstants& link) {
  if (p <= 1) return 0;
  const PowerOfTwoFold shape(p, 0);
  const double a = link.latency_us, b = link.us_per_byte, g = link.reduce_us_per_byte;
  const double log_p = std::log2(static_cast<double>(shape.p));
  // A fold costs two more steps of the whole buffer and one more reduction.
  const double fold = shape.extra > 0 ? 2 * (a + bytes * b) + bytes * g : 0;
  switch (algorithm) {
    case AllReduceAlgorithm::kRing:
      return 2 * (p - 1) * (a + bytes / p * b);
    case AllReduceAlgorithm::kRecursiveDoubling:
      return log_p * (a + bytes * (b + g)) + fold;
    case AllReduceAlgorithm::kRabenseifner: {
      const double part = (shape.p - 1) / static_cast<double>(shape.p) * bytes;
      return 2 * log_p * a + part * (2 * b + g) + fold;
    }
    case AllReduceAlgorithm::kTree:
      return PipelinedTreeTime(link, bytes, p, PipelinedTreeChunks(link, bytes, p, INT64_MAX, true), true) +
             PipelinedTreeTime(link, bytes, p, PipelinedTreeChunks(link, bytes, p, INT64_MAX, false), false);
    case AllReduceAlgorithm::kAuto:
      break;
  }
  return HUGE_VAL;
}

AllReduceAlgorithm ChooseAllReduce(AllReduceAlgorithm forced, size_t small_message_bytes, const LinkConstants& link,
                                   size_t bytes, int64_t count, int p) {
  // The ring needs an element per rank; recursive doubling runs anything.
  if (count < p) return AllReduceAlgorithm::kRecursiveDoubling;
  if (forced != AllReduceAlgorithm::kAuto) return forced;
  if (bytes < small_message_bytes) return AllReduceAlgorithm::kRecursiveDoubling;
  const double b = static_cast<double>(bytes);
  // Ties go to the ring (2 ranks: the same transfers, the ring pipelined).
  return AllReduceTime(AllReduceAlgorithm::kRabenseifner, b, p, link) <
                 AllReduceTime(AllReduceAlgorithm::kRing, b, p, link)
             ? AllReduceAlgorithm::kRabenseifner
             : AllReduceAlgorithm::kRing;
}

absl::Status AllReduce(AlgorithmContext& ctx, const Tensor& buffer, ReduceOp op) {
  switch (
      ChooseAllReduce(ctx.all_reduce, ctx.small_message_bytes, ctx.link, buffer.nbytes(), buffer.numel(), ctx.size())) {
    case AllReduceAlgorithm::kRing:
      return RingAllReduce(ctx, buffer, op);
    case AllReduceAlgorithm::kRabenseifner:
      return RabenseifnerAllReduce(ctx, buffer, op);
    case AllReduceAlgorithm::kTree:
      return TreeAllReduce(ctx, buffer, op);
    default:
      return RecursiveDoublingAllReduce(ctx, buffer, op);
  }
}

}  // namespace lockstep
