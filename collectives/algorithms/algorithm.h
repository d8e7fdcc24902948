// What every collective algorithm gets, and the vocabulary they share.
//
// Terms used in the algorithm files:
//   * buffer: the 1-D CPU tensor an algorithm works on (a view of the
//     caller's data or a staging copy);
//   * chunk: one of n near-equal contiguous parts of the buffer, one per rank
//     (chunk i = elements [i*count/n, (i+1)*count/n));
//   * step: one round of simultaneous transfers; each step uses its own tag;
//   * segment: a piece of a received chunk that is reduced while the rest of
//     the chunk is still arriving (AlgorithmContext::segment_bytes).
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_ALGORITHM_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_ALGORITHM_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "collectives/transport/transport.h"
#include "core/reduce_op.h"
#include "core/tensor.h"

namespace lockstep {

// Scratch memory reused across operations, so that large collectives do not
// allocate (and page-fault) fresh buffers every time. One tensor per slot at
// a time; contents are undefined. `pinned`: page-locked host memory, for
// staging CUDA tensors (allocated once, not per operation).
class Scratch {
 public:
  explicit Scratch(bool pinned = false) : pinned_(pinned) {}
  absl::StatusOr<Tensor> Get(int slot, int64_t count, DType dtype);

 private:
  bool pinned_;
  std::vector<Tensor> bytes_;  // u8 buffers, one per slot, grown on demand.
};

// The all-reduce algorithms (collectives/algorithms/all_reduce.h chooses
// among them; LOCKSTEP_ALGO forces one, as NCCL_ALGO).
enum class AllReduceAlgorithm {
  kAuto,               // Chosen per call from the size and the world (ChooseAllReduce).
  kRing,               // collectives/algorithms/ring_all_reduce.h
  kRecursiveDoubling,  // collectives/algorithms/recursive_doubling_all_reduce.h
  kRabenseifner,       // collectives/algorithms/rabenseifner_all_reduce.h
  kTree,               // collectives/algorithms/tree_all_reduce.h (forced only)
};

// "auto", "ring", "recursive_doubling", "rabenseifner", "tree".
const char* AllReduceAlgorithmName(AllReduceAlgorithm algorithm);

// The inverse of AllReduceAlgorithmName, or InvalidArgument listing the
// names.
absl::StatusOr<AllReduceAlgorithm> ParseAllReduceAlgorithm(absl::string_view name);

// The α-β-γ constants that ChooseAllReduce (collectives/algorithms/all_reduce.h)
// weighs the algorithms with, for the links of one group; the terms are
// collectives/cost_model/cost_model.h's, and `tools/scale_lab` calibrates
// them for a cluster. The defaults: a 10 Gbit/s network with 50 µs a step.
struct LinkConstants {
  double latency_us = 50;                   // α: one step's fixed time.
  double us_per_byte = 1.0 / 1250;          // β: each byte's.
  double reduce_us_per_byte = 1.0 / 10000;  // γ: reducing (or copying) a byte (f32 sum).
  // o: the CPU time one message costs at each end (system calls, a
  // wake-up), which messages sent at once do not overlap: half a loopback
  // TCP message's ~8 µs (docs/PERFORMANCE.md). Weighs the pairwise
  // all-to-all's p − 1 messages against Bruck's log2 p.
  double message_us = 4;
};

// The constants for a transport's links when AlgorithmOptions::link is
// unset: "shm" ~1 µs, ~8 GB/s and 0.5 µs a message; anything else the
// network's defaults.
LinkConstants LinkConstantsFor(absl::string_view transport_name);

// How the algorithms run; the defaults suit TCP on loopback and LANs
// (docs/PERFORMANCE.md has the measurements behind them).
struct AlgorithmOptions {
  // All-reduce takes recursive doubling below this many bytes (latency
  // bound), the ring from here on (bandwidth bound).
  size_t small_message_bytes = 256 << 10;
  // Ring pipelining: received data is reduced in pieces of this many bytes
  // while the rest is still arriving. > 0.
  size_t segment_bytes = 256 << 10;
  // Point to point: bytes of messages that arrived before their Recv was
  // posted that a rank keeps (collectives/point_to_point.h); beyond it such
  // a message is an error.
  size_t unexpected_bytes_limit = 64 << 20;
  // The all-reduce algorithm: kAuto chooses per call; any other is used at
  // every size (except where it cannot run: see ChooseAllReduce).
  AllReduceAlgorithm all_reduce = AllReduceAlgorithm::kAuto;
  // The links' constants for the automatic choice; unset: the transport's
  // (LinkConstantsFor).
  std::optional<LinkConstants> link;
  // Ranks that share one host's network link (the most on any host; set by
  // CreateCommunicator from the host layout). A logarithmic algorithm's far
  // steps send from all of them at once over that link, the ring's from
  // one: the automatic choice weighs that. >= 1.
  int ranks_per_host = 1;
  // A host's CPU cores; 0: this machine's (CreateCommunicator fills it in,
  // and every rank takes rank 0's).
  int cores_per_host = 0;
  // Ranks that share one core on the most crowded host, at least 1 (set by
  // CreateCommunicator from the host layout and cores_per_host). Where
  // ranks outnumber cores, every message's CPU time (LinkConstants::
  // message_us) is spent in turn: the all-to-all's choice weighs that.
  double ranks_per_core = 1;
};

// InvalidArgument naming the bad field and the accepted range.
absl::Status ValidateAlgorithmOptions(const AlgorithmOptions& options);

struct AlgorithmContext {
  Transport& transport;
  uint64_t seq = 0;       // The operation's sequence number.
  uint32_t next_tag = 0;  // Incremented by each step.
  Deadline deadline;
  size_t segment_bytes = AlgorithmOptions().segment_bytes;
  Scratch* scratch = nullptr;  // Optional: without it, algorithms allocate.
  size_t small_message_bytes = AlgorithmOptions().small_message_bytes;
  // The buffer's element type in messages (MessageTag::element); 0: untyped.
  uint8_t element = 0;
  AllReduceAlgorithm all_reduce = AllReduceAlgorithm::kAuto;
  LinkConstants link;
  int ranks_per_host = 1;
  double ranks_per_core = 1;

  // A scratch tensor from `scratch`, or a fresh one.
  absl::StatusOr<Tensor> ScratchTensor(int slot, int64_t count, DType dtype) {
    if (scratch != nullptr) return scratch->Get(slot, count, dtype);
    return Tensor::Empty({count}, dtype);
  }

  int rank() const { return transport.rank(); }
  int size() const { return transport.size(); }
  MessageTag NextTag() { return MessageTag{seq, next_tag++, element}; }
};

struct Chunk {
  int64_t offset = 0;
  int64_t count = 0;
};

// Chunk i of `count` elements split n ways.
inline Chunk ChunkOf(int64_t count, int n, int i) {
  const int64_t begin = count * i / n;
  const int64_t end = count * (i + 1) / n;
  return Chunk{begin, end - begin};
}

// MPICH's rule for running a power-of-two algorithm on n ranks: p is the
// largest power of two <= n; the first 2*(n - p) ranks fold in pairs (the
// even one hands its data to the odd one, which takes part as virtual rank
// r/2, and gets the result back at the end); the others are virtual rank
// r - (n - p).
struct PowerOfTwoFold {
  PowerOfTwoFold(int n, int rank) : rank(rank) {
    while (p * 2 <= n) p *= 2;
    extra = n - p;
    vrank = rank < 2 * extra ? (rank % 2 == 1 ? rank / 2 : -1) : rank - extra;
  }
  // The real rank of virtual rank v.
  int RealRank(int v) const { return v < extra ? 2 * v + 1 : v + extra; }
  // This rank is one of a folding pair.
  bool paired() const { return rank < 2 * extra; }
  // This rank handed its data over and waits for the result.
  bool folded_away() const { return vrank < 0; }

  int rank;
  int p = 1;
  int extra = 0;
  int vrank = 0;
};

// The fold's step on every rank (one tag): the even rank of each pair sends
// its whole `buffer` to the odd one, which reduces it in as op(even, odd)
// through scratch slot 0; other ranks only take the tag.
absl::Status FoldPairs(AlgorithmContext& ctx, const PowerOfTwoFold& fold, const Tensor& buffer, ReduceOp op);

// The blocks of an uneven collective ("V" operations, as MPI's
// MPI_Allgatherv): block i holds counts[i] elements, the blocks laid out
// one after another in rank order. Counts must be >= 0 (the Communicator
// checks them).
std::vector<Chunk> BlocksOf(absl::Span<const int64_t> counts);

// The sum of `blocks`' counts.
int64_t TotalOf(absl::Span<const Chunk> blocks);

// The reduction applied at each step: AVG sums, and divides once at the end.
inline ReduceOp StepOp(ReduceOp op) { return op == ReduceOp::kAvg ? ReduceOp::kSum : op; }

// mine = op(lower rank's data, higher rank's data): op(mine, theirs) when
// `mine_first`, op(theirs, mine) otherwise (with AVG's sum). A pairwise
// step computed this way gives the same bits whichever side computes it.
absl::Status ReduceOrdered(ReduceOp op, const Tensor& mine, const Tensor& theirs, bool mine_first);

// For AVG: divides `t` by the world size (exact division, as PyTorch's
// grad.div_(world_size)); nothing for other ops.
absl::Status FinishAverage(ReduceOp op, const Tensor& t, int world_size);

// dst = op(dst, src) for `count` elements at element `offset` of both.
absl::Status ReduceRange(ReduceOp op, const Tensor& src, int64_t src_offset, const Tensor& dst, int64_t dst_offset,
                         int64_t count);

inline char* BytePtr(const Tensor& t, int64_t element) {
  return static_cast<char*>(t.raw_data()) + element * static_cast<int64_t>(t.element_size());
}

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_ALGORITHM_H_
