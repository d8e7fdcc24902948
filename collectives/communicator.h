// Communicator: a group of `size` ranks that run collectives together, as a
// c10d ProcessGroup.
//
//   auto store = std::shared_ptr<Store>(*TcpStore::Create(store_options));
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
//                             Communicator::Create(store, rank, world_size, {}));
//   std::shared_ptr<Work> w = comm->AllReduce(grads, ReduceOp::kAvg);
//   ...
//   LOCKSTEP_RETURN_IF_ERROR(w->Wait());
//
// Every operation is validated when called (wrong sizes, dtypes, roots or
// peers come back at once as a failed Work, nothing sent), then queued in
// call order and run on the communicator's own thread. All ranks must call
// the same collectives in the same order; with `debug_checks` (or the
// environment variable LOCKSTEP_DEBUG=DETAIL) each operation first compares
// a fingerprint (sequence number, op, dtype, count, root, reduce op) across
// ranks and fails on every rank with all views when they differ.
//
// Every operation has a deadline (options.timeout). When a peer dies or a
// deadline passes, the operation fails naming the rank and its address, the
// communicator closes its connections (so the other ranks fail at once too)
// and every later operation fails with the same cause: create a new
// communicator to continue. Each failing rank also posts its error in the
// store and, for up to `failure_report_window`, collects the others', so a
// rank that only saw a neighbour hang up still learns which rank died first.
//
// Tensors may be on the CPU or on a CUDA device (staged through pinned host
// memory). Any dtype; reduce ops SUM, AVG, PROD, MIN, MAX (AVG: sum, then
// exact division by the world size). f16/bf16 reduce in f32 at each step and
// round once per step.
#ifndef LOCKSTEP_COLLECTIVES_COMMUNICATOR_H_
#define LOCKSTEP_COLLECTIVES_COMMUNICATOR_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/algorithm.h"
#include "collectives/store.h"
#include "collectives/transport.h"
#include "collectives/work.h"
#include "core/reduce_op.h"
#include "core/tensor.h"

namespace lockstep {

struct CommunicatorOptions {
  // Deadline of each operation, from when it starts running.
  Milliseconds timeout = Milliseconds(300000);
  // The address other ranks reach this rank at (its interface toward them).
  std::string host = "127.0.0.1";
  // Namespace of this group's keys in the store (several groups, restarts).
  std::string store_prefix = "comm";
  // All-reduce uses recursive doubling below this many bytes, the ring above.
  size_t small_message_bytes = 256 << 10;
  // Ring pipelining: reduce received data in segments of this size.
  size_t segment_bytes = 256 << 10;
  int socket_buffer_bytes = 256 << 10;  // Measured best on loopback (docs/PERFORMANCE.md).
  // How long the transport polls (yielding) for a peer's data before it
  // sleeps in poll(); see TcpTransportOptions::spin_microseconds.
  int transport_spin_microseconds = 200;
  // TCP congestion control ("" keeps the system's); see TcpTransportOptions.
  std::string tcp_congestion_control = "cubic";
  // (0 leaves the kernel's autotuning on.)
  // Work::Wait first checks for completion this long, yielding the core
  // between checks, before it sleeps: waking a sleeping thread on these VMs
  // costs tens of microseconds, more than a small all-reduce (4 KiB: 13-29
  // µs sleeping at once, 11-13 µs with 100 µs here; no change at 1 MiB).
  int wait_spin_microseconds = 100;
  // Compare every operation's fingerprint across ranks first (costs one small
  // exchange per operation). Also on with LOCKSTEP_DEBUG=DETAIL.
  bool debug_checks = false;
  // After a failure, how long to wait for the other ranks' failure reports.
  Milliseconds failure_report_window = Milliseconds(1000);
};

class Communicator {
 public:
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(std::shared_ptr<Store> store, int rank,
                                                              int size, CommunicatorOptions options);
  // Builds on an existing transport (tests, other transports).
  // `store`, if given, is used to share failure reports (see below).
  static std::unique_ptr<Communicator> FromTransport(std::unique_ptr<Transport> transport,
                                                     CommunicatorOptions options,
                                                     std::shared_ptr<Store> store = nullptr);
  ~Communicator();  // Finishes queued operations, then stops the thread.
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const CommunicatorOptions& options() const { return options_; }

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
  // Point to point. Pairs match in call order per (peer, tag).
  std::shared_ptr<Work> Send(const Tensor& tensor, int dst, uint32_t tag = 0);
  std::shared_ptr<Work> Recv(const Tensor& tensor, int src, uint32_t tag = 0);

  // The first error that broke the communicator (OK while healthy).
  absl::Status broken_status();

 private:
  enum class OpType : uint8_t {
    kAllReduce = 1, kReduce, kBroadcast, kAllGather, kGather, kScatter, kReduceScatter, kBarrier,
    kSend, kRecv,
  };
  struct Fingerprint {
    uint64_t seq;
    uint8_t op;
    uint8_t dtype;
    uint8_t reduce_op;
    uint8_t reserved;
    int32_t root;
    int64_t count;
  };
  using Task = std::function<absl::Status(uint64_t seq, Deadline deadline)>;

  Communicator(std::unique_ptr<Transport> transport, CommunicatorOptions options, std::shared_ptr<Store> store);
  // Posts this rank's failure and appends what the other ranks reported.
  absl::Status ShareFailure(absl::Status status);

  std::shared_ptr<Work> Failed(absl::Status status);
  // Queues a collective (numbered in call order) with its fingerprint.
  std::shared_ptr<Work> Enqueue(Fingerprint fingerprint, Task task);
  std::shared_ptr<Work> EnqueuePointToPoint(int peer, uint32_t tag, bool send, const Tensor& tensor);
  absl::Status CheckFingerprints(const Fingerprint& mine, Deadline deadline);
  void WorkerLoop();
  static std::string Describe(const Fingerprint& f);

  std::unique_ptr<Transport> transport_;
  std::shared_ptr<Store> store_;  // Prefixed; may be null.
  Scratch scratch_;  // Used only by the worker thread.
  const CommunicatorOptions options_;
  const int rank_, size_;

  std::mutex mu_;  // Guards everything below.
  std::condition_variable work_cv_;
  struct Item {
    std::shared_ptr<Work> work;
    Task task;
    Fingerprint fingerprint;
    bool collective;
  };
  std::deque<Item> queue_;
  uint64_t next_seq_ = 0;
  std::vector<uint64_t> send_seq_, recv_seq_;  // Per peer, point to point.
  bool stopping_ = false;
  absl::Status broken_;
  // Mirrors of queue_.size() and stopping_ for the worker's lock-free spin.
  std::atomic<size_t> queue_size_{0};
  std::atomic<bool> stopping_flag_{false};
  std::thread worker_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_COMMUNICATOR_H_
