// Communicator: a group of `size` ranks that run collectives together, as a
// c10d ProcessGroup.
//
//   // Over TCP (collectives/bootstrap/tcp_communicator.h), or from the environment
//   // that torchrun, mpirun or srun set (collectives/bootstrap/init_from_env.h):
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
//                             CreateTcpCommunicator(store, rank, world_size, {}));
//   std::shared_ptr<Work> w = comm->AllReduce(grads, ReduceOp::kAvg);
//   ...
//   LOCKSTEP_RETURN_IF_ERROR(w->Wait());
//   // Block j of `send` to rank j, block i of `recv` from rank i:
//   LOCKSTEP_RETURN_IF_ERROR(comm->AllToAll(send, recv)->Wait());
//   // Even and odd ranks, each their own group (ranks renumbered from 0):
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> half,
//                             comm->Split(/*color=*/comm->rank() % 2, /*key=*/comm->rank()));
//   LOCKSTEP_RETURN_IF_ERROR(half->AllReduce(grads, ReduceOp::kSum)->Wait());
//
// The Communicator is the front: it validates every operation when called
// (wrong sizes, dtypes, devices, roots or peers come back at once as a
// failed Work, nothing sent), queues it in call order (a collective that a
// ThenWork continuation starts goes right after that continuation: see
// work.h), numbers it as it runs, and runs it on its own thread through a
// Backend (collectives/backend.h: the host
// algorithms over a Transport, or NCCL), completing its Work. An operation
// a device backend queued (NCCL on CUDA tensors) is completed by a second
// thread once its CUDA event fired, in order, while the next ones are
// queued on the device behind it. All ranks must
// call the same collectives in the same order; with `debug_checks` (or the
// environment variable LOCKSTEP_DEBUG=DETAIL) each operation first compares
// a fingerprint (sequence number, op, dtype, count, root, reduce op) across
// ranks and fails on every rank with all views when they differ.
//
// Point to point (Send/Recv, as isend/irecv) run concurrently: operations
// posted one after another, up to the next collective, progress together,
// so two ranks may each Send and then Recv any amount without deadlock.
// The k-th Recv from a peer with a tag gets the k-th Send from that peer
// with that tag; a message that comes before its Recv is kept, within a
// limit (collectives/point_to_point.h).
//
// Every operation has a deadline (options.timeout). When a peer dies or a
// deadline passes, the operation fails naming the rank and its address, the
// communicator aborts its backend (so the other ranks fail at once too)
// and every later operation fails with the same cause: create a new
// communicator to continue. Each failing rank also posts its error in the
// store and, for up to `failure_report_window`, collects the others', so a
// rank that only saw a neighbour hang up still learns which rank died first.
//
// Tensors may be on the CPU or on a CUDA device, as the backend's
// capabilities allow (the host backend stages CUDA tensors through pinned
// host memory). Any dtype; reduce ops SUM, AVG, PROD, MIN, MAX (AVG: sum,
// then exact division by the world size), and BAND, BOR, BXOR on integer
// and bool tensors where the backend has them (not NCCL). f16/bf16 reduce
// in f32 at each step and round once per step; bool is logic (SUM and MAX:
// or, PROD and MIN: and; no AVG).
//
// Beyond c10d's basic set: uneven blocks (AllGatherV, ReduceScatterV,
// GatherV, ScatterV, AllToAllV: per-rank element counts, as MPI's "v"
// collectives and PyTorch's list and split-size forms), all-to-all,
// several tensors in one operation (AllReduceCoalesced, BroadcastCoalesced:
// one message per peer), byte strings of any length (AllGatherBytes and
// friends: PyTorch's *_object collectives; the sizes go first, then the
// payloads, and a size over `max_object_bytes` is an error on every rank,
// never an allocation), receives from any rank (RecvAnySource), and
// subgroups (Split with MPI_Comm_split's semantics, NewGroup with
// dist.new_group's), each a Communicator of its own (the example above).
#ifndef LOCKSTEP_COLLECTIVES_COMMUNICATOR_H_
#define LOCKSTEP_COLLECTIVES_COMMUNICATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/backend.h"
#include "collectives/store/store.h"
#include "collectives/work.h"
#include "core/deadline.h"
#include "core/reduce_op.h"
#include "core/tensor.h"

namespace lockstep {

namespace communicator_internal {
class CommunicatorState;
}  // namespace communicator_internal

struct CommunicatorOptions {
  // Deadline of each operation, from when it starts running (read on the
  // kernel's coarse clock, so up to one tick, 4 ms at HZ=250, later; never
  // earlier). > 0.
  Milliseconds timeout = Milliseconds(300000);
  // Work::Wait first checks for completion this long, yielding the core
  // between checks, before it sleeps (a sleeping thread can take tens of
  // microseconds to wake on a virtual machine). 0..1000000.
  int wait_spin_microseconds = 100;
  // After an operation, how long the communicator's thread keeps looking for
  // the next one (yielding) before it sleeps. 0..1000000.
  int worker_spin_microseconds = 50;
  // Compare every operation's fingerprint across ranks first (costs one
  // small exchange per operation). Also on with LOCKSTEP_DEBUG=DETAIL.
  bool debug_checks = false;
  // Say on stderr when the communicator is created and, when it is
  // destroyed, how many operations of each kind it ran (as
  // TORCH_DISTRIBUTED_DEBUG=INFO). Also on with LOCKSTEP_DEBUG=INFO or
  // DETAIL; LOCKSTEP_DEBUG=OFF (or unset) leaves both options as given, and
  // any other value is refused by Create.
  bool log_summary = false;
  // After a failure, how long to wait for the other ranks' failure reports
  // (a bound: a hung store does not delay the error further).
  Milliseconds failure_report_window = Milliseconds(1000);
  // The byte-string collectives (AllGatherBytes, ...): the largest string a
  // rank may send. A larger one, or a size announced beyond it (a corrupt
  // or hostile peer), fails the operation on every rank before anything is
  // allocated. 1..2^40.
  int64_t max_object_bytes = int64_t{1} << 30;
  // The flight recorder (collectives/flight_recorder.h): how many of its
  // newest operations this rank keeps (0: none). On a failure every rank
  // publishes its newest ones through the store and each error says what
  // every rank was doing and which rank is behind. 0..2^20.
  int flight_recorder_entries = 64;
  // When not empty, a failed rank also writes its whole flight recorder,
  // and the reports of the ranks it heard from, as JSON to
  // <dump_on_failure>/flight_recorder_rank<rank>.json (a directory that
  // exists). LOCKSTEP_DUMP_ON_FAILURE sets it when it is empty.
  std::string dump_on_failure;
};

// InvalidArgument naming the bad field and the accepted range.
absl::Status ValidateCommunicatorOptions(const CommunicatorOptions& options);

class Communicator {
 public:
  // `failure_store`, if given, is where ranks share failure reports (a store
  // prefix of this group). Fails on bad options or a null backend.
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(std::unique_ptr<Backend> backend,
                                                              CommunicatorOptions options,
                                                              std::shared_ptr<Store> failure_store = nullptr);
  ~Communicator();  // Finishes queued operations, then stops the thread.
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  const CommunicatorOptions& options() const;
  const BackendCapabilities& capabilities() const;

  // In place: every rank's `tensor` becomes op over all ranks' tensors.
  std::shared_ptr<Work> AllReduce(const Tensor& tensor, ReduceOp op);
  // Out of place: `output` (same dtype, element count, device) gets the result.
  std::shared_ptr<Work> AllReduce(const Tensor& input, const Tensor& output, ReduceOp op);
  // The root's `output` gets op over all `input`s (output may be input);
  // other ranks' output is ignored (may be undefined) and input unchanged.
  std::shared_ptr<Work> Reduce(const Tensor& input, const Tensor& output, ReduceOp op, int root);
  std::shared_ptr<Work> Broadcast(const Tensor& tensor, int root);
  // output: size * input.numel() elements, rank-major.
  std::shared_ptr<Work> AllGather(const Tensor& input, const Tensor& output);
  // The root's output: size * input.numel() elements; others' output ignored.
  std::shared_ptr<Work> Gather(const Tensor& input, const Tensor& output, int root);
  // The root's input: size * output.numel() elements; others' input ignored.
  std::shared_ptr<Work> Scatter(const Tensor& input, const Tensor& output, int root);
  // input: size * output.numel() elements; rank r gets the reduced block r.
  std::shared_ptr<Work> ReduceScatter(const Tensor& input, const Tensor& output, ReduceOp op);
  std::shared_ptr<Work> Barrier();

  // Uneven blocks. `counts` has one entry per rank, >= 0, the same on every
  // rank: block r holds counts[r] elements and the blocks lie one after
  // another in rank order in the tensor that holds them all.
  // output: sum(counts) elements; input: counts[rank] elements.
  std::shared_ptr<Work> AllGatherV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts);
  // input: sum(counts) elements; output: counts[rank] elements, block rank
  // reduced over all ranks.
  std::shared_ptr<Work> ReduceScatterV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts,
                                       ReduceOp op);
  // The root's output: sum(counts) elements (others' ignored); input:
  // counts[rank] elements.
  std::shared_ptr<Work> GatherV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts, int root);
  // The root's input: sum(counts) elements (others' ignored); output:
  // counts[rank] elements.
  std::shared_ptr<Work> ScatterV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts, int root);
  // input and output: size() equal blocks each (same element count, not
  // overlapping); block j of input goes to rank j, block i of output comes
  // from rank i (torch's all_to_all_single).
  std::shared_ptr<Work> AllToAll(const Tensor& input, const Tensor& output);
  // send_counts[j] elements of input (blocks in rank order) go to rank j;
  // recv_counts[i] elements come from rank i (all_to_all_single with split
  // sizes). Rank i's send_counts[j] must equal rank j's recv_counts[i].
  std::shared_ptr<Work> AllToAllV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> send_counts,
                                  absl::Span<const int64_t> recv_counts);

  // Several tensors in one operation: packed into one buffer when called,
  // one message per peer, unpacked when done (PyTorch's
  // allreduce_coalesced; DDP's buffer broadcast). AllReduceCoalesced: one
  // dtype and device for all; BroadcastCoalesced: any dtypes, one device.
  std::shared_ptr<Work> AllReduceCoalesced(std::vector<Tensor> tensors, ReduceOp op);
  std::shared_ptr<Work> BroadcastCoalesced(std::vector<Tensor> tensors, int root);

  // Byte strings (pickled objects, configs, vocabularies) of any length up
  // to options().max_object_bytes, sizes first, then payloads. The output
  // pointers must stay valid until the Work completed; they are written
  // only on success.
  // *all gets every rank's `mine`, by rank.
  std::shared_ptr<Work> AllGatherBytes(std::string mine, std::vector<std::string>* all);
  // The root's *data to every rank's *data.
  std::shared_ptr<Work> BroadcastBytes(std::string* data, int root);
  // The root's *all gets every rank's `mine`, by rank (others' untouched).
  std::shared_ptr<Work> GatherBytes(std::string mine, std::vector<std::string>* all, int root);
  // Rank r's *mine gets the root's parts[r] (size() parts, at the root).
  std::shared_ptr<Work> ScatterBytes(std::vector<std::string> parts, std::string* mine, int root);

  // Point to point (isend/irecv). Tags below 2^31 - 256.
  std::shared_ptr<Work> Send(const Tensor& tensor, int dst, uint32_t tag = 0);
  std::shared_ptr<Work> Recv(const Tensor& tensor, int src, uint32_t tag = 0);
  // The next message with `tag` from whichever rank sends one first
  // (c10d's recvAnysource); Work::source_rank() then names the sender.
  // Receives match sends in the order they were posted, as MPI's: a
  // message goes to the earliest posted receive that accepts it, from its
  // rank or from any.
  std::shared_ptr<Work> RecvAnySource(const Tensor& tensor, uint32_t tag = 0);

  // Subgroups: every rank of this communicator calls these in the same
  // order (they are collective here, and block until the subgroup is
  // built). A member gets a Communicator of its own (own ranks, sequence
  // numbers, fingerprints, failure sharing and transport: shared memory,
  // TCP or hierarchical, chosen for its members); a non-member gets
  // nullptr. The subgroup lives independently of this one.
  //
  // MPI_Comm_split: ranks with the same color >= 0 form a group, ordered by
  // key, then by rank here; kNoColor: no group for this rank.
  static constexpr int kNoColor = -1;
  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key);
  // dist.new_group: the listed ranks (distinct, any order) form a group,
  // renumbered in ascending order of their rank here. Every rank passes the
  // same list (checked).
  absl::StatusOr<std::unique_ptr<Communicator>> NewGroup(absl::Span<const int> ranks);

  // What builds a subgroup's communicator for its members: `rank` of
  // `size`, `members` its ranks here in new rank order, `name` unique among
  // this communicator's subgroups and the same on every member. The
  // bootstrap functions (collectives/bootstrap/) set one that rendezvous
  // through their store; a communicator without one refuses Split.
  struct SubgroupSpec {
    int rank = 0;
    int size = 0;
    std::vector<int> members;
    std::string name;
  };
  using SubgroupFactory = std::function<absl::StatusOr<std::unique_ptr<Communicator>>(const SubgroupSpec& spec)>;
  // Set before the communicator is shared.
  void set_subgroup_factory(SubgroupFactory factory);

  // The first error that broke the communicator (OK while healthy).
  absl::Status broken_status();

  // Payload bytes this rank sent to and received from each peer.
  TrafficCounters Traffic() const;

  // The algorithm AllReduce runs on `count` elements of `dtype` (the
  // flight recorder's "algorithm"; "" where the backend does not say).
  const char* AllReduceAlgorithm(int64_t count, DType dtype) const;

 private:
  // Everything else (the backend, the operation queue and its threads, the
  // flight recorder) lives in collectives/internal/: this header is the API.
  explicit Communicator(std::unique_ptr<communicator_internal::CommunicatorState> state);

  std::unique_ptr<communicator_internal::CommunicatorState> state_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_COMMUNICATOR_H_
