#include "collectives/nccl/nccl_backend.h"

#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace lockstep {
namespace {

bool IsFloating(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF64 || dtype == DType::kF16 || dtype == DType::kBF16;
}

char* Bytes(const Tensor& t) { return static_cast<char*>(t.raw_data()); }

// bool as NCCL's uint8: or and and are MAX and MIN there.
ReduceOp ForNccl(ReduceOp op, DType dtype) {
  if (dtype != DType::kBool) return op;
  if (op == ReduceOp::kSum) return ReduceOp::kMax;
  if (op == ReduceOp::kProd) return ReduceOp::kMin;
  return op;
}

// Byte offsets of blocks laid out one after another in rank order.
std::vector<size_t> ByteOffsets(absl::Span<const int64_t> counts, size_t element) {
  std::vector<size_t> offsets;
  size_t at = 0;
  for (int64_t c : counts) {
    offsets.push_back(at);
    at += static_cast<size_t>(c) * element;
  }
  return offsets;
}

// Removes the registration of an operation however Run leaves.
class InFlight {
 public:
  InFlight(NcclWatchdog& dog, std::string fingerprint, Deadline deadline)
      : dog_(dog), id_(dog.Begin(std::move(fingerprint), deadline)) {}
  ~InFlight() { dog_.End(id_); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  NcclWatchdog& dog_;
  const uint64_t id_;
};

// Device addresses for an operation's tensors. CUDA tensors are used in
// place; CPU tensors (small host-side collectives: DDP's signature check,
// the trainer's metrics) are copied into the communicator's scratch memory
// before the NCCL call and back after it, all on the communicator's stream.
class Stager {
 public:
  Stager(NcclComm& comm, bool stage_cpu) : comm_(comm), stage_cpu_(stage_cpu) {}

  // Registers `t` (undefined: slot -1, address nullptr). `read`: its data
  // goes in; `write`: results come out. The same tensor twice is one slot.
  int Add(const Tensor& t, bool read, bool write) {
    if (!t.defined()) return -1;
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i].data == t.raw_data() && entries_[i].bytes == t.nbytes()) {
        entries_[i].read |= read;
        entries_[i].write |= write;
        return static_cast<int>(i);
      }
    }
    entries_.push_back(Entry{Bytes(t), t.nbytes(), stage_cpu_ && t.device().is_cpu(), read, write, 0});
    return static_cast<int>(entries_.size() - 1);
  }

  // Gets the scratch memory and queues the copies in.
  absl::Status CopyIn() {
    size_t total = 0;
    for (Entry& e : entries_) {
      if (!e.staged) continue;
      e.offset = total;
      total += (e.bytes + 255) / 256 * 256;  // NCCL and the kernels like aligned buffers.
    }
    if (total == 0) return absl::OkStatus();
    LOCKSTEP_ASSIGN_OR_RETURN(void* base, comm_.Scratch(total));
    base_ = static_cast<char*>(base);
    for (const Entry& e : entries_) {
      if (e.staged && e.read && e.bytes > 0) LOCKSTEP_RETURN_IF_ERROR(comm_.Copy(base_ + e.offset, e.data, e.bytes));
    }
    return absl::OkStatus();
  }

  char* Ptr(int slot) const {
    if (slot < 0) return nullptr;
    const Entry& e = entries_[slot];
    return e.staged ? base_ + e.offset : e.data;
  }

  // Queues the copies out.
  absl::Status CopyOut() {
    for (const Entry& e : entries_) {
      if (e.staged && e.write && e.bytes > 0) LOCKSTEP_RETURN_IF_ERROR(comm_.Copy(e.data, base_ + e.offset, e.bytes));
    }
    return absl::OkStatus();
  }

 private:
  struct Entry {
    char* data;
    size_t bytes;
    bool staged;
    bool read, write;
    size_t offset;
  };
  NcclComm& comm_;
  const bool stage_cpu_;
  std::vector<Entry> entries_;
  char* base_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<NcclBackend>> NcclBackend::Create(std::unique_ptr<NcclComm> comm, int rank, int size,
                                                                 Device device, int nccl_version,
                                                                 NcclBackendOptions options) {
  if (comm == nullptr) return absl::InvalidArgumentError("NcclBackend::Create: no NCCL communicator");
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("NcclBackend::Create: rank ", rank, " is not in [0, ", size, ") (world size ", size, ")"));
  }
  if (!device.is_cuda()) {
    return absl::InvalidArgumentError(absl::StrCat("NcclBackend::Create on rank ", rank, ": device ", device.ToString(),
                                                   " is not a CUDA device; NCCL runs on GPUs, use "
                                                   "the host backend (LOCKSTEP_BACKEND=host) for CPU tensors"));
  }
  if (nccl_version < kNcclMinimumVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("NcclBackend::Create on rank ", rank, ": the linked NCCL is ", NcclVersionString(nccl_version),
                     ", older than ", NcclVersionString(kNcclMinimumVersion),
                     " (send/recv); put a newer libnccl.so.2 on LD_LIBRARY_PATH or use the host backend"));
  }
  if (options.watchdog_interval <= std::chrono::milliseconds(0)) {
    return absl::InvalidArgumentError(absl::StrCat("NcclBackendOptions.watchdog_interval is ",
                                                   options.watchdog_interval.count(), " ms; it must be > 0"));
  }
  return std::unique_ptr<NcclBackend>(new NcclBackend(std::move(comm), rank, size, device, nccl_version, options));
}

NcclBackend::NcclBackend(std::unique_ptr<NcclComm> comm, int rank, int size, Device device, int nccl_version,
                         NcclBackendOptions options)
    : comm_(std::move(comm)),
      rank_(rank),
      size_(size),
      device_(device),
      nccl_version_(nccl_version),
      options_(options) {
  NcclComm* raw = comm_.get();
  NcclWatchdog::Hooks hooks;
  hooks.async_error = [raw] { return raw->AsyncError(); };
  hooks.abort = [this, raw](const absl::Status&) {
    aborted_.store(true);
    raw->Abort();
  };
  watchdog_ = std::make_unique<NcclWatchdog>(std::move(hooks), options_.watchdog_interval,
                                             absl::StrCat("rank ", rank_, " on ", device_.ToString()));
}

NcclBackend::~NcclBackend() {
  // The watchdog's thread uses comm_: stop it first.
  watchdog_.reset();
}

BackendCapabilities NcclBackend::capabilities() const {
  BackendCapabilities caps;
  caps.name = absl::StrCat("nccl ", NcclVersionString(nccl_version_), " on ", device_.ToString());
  caps.cpu_tensors = options_.cpu_tensors;
  caps.cuda_tensors = true;
  caps.point_to_point = true;
  caps.native_split = nccl_version_ >= kNcclSplitVersion;
  return caps;
}

std::string NcclBackend::PeerName(int peer) const { return absl::StrCat("rank ", peer, " (NCCL)"); }

bool NcclBackend::UsesNcclAvg(DType dtype) const { return IsFloating(dtype) && nccl_version_ >= kNcclAvgVersion; }

std::string NcclBackend::Fingerprint(absl::string_view op, uint64_t seq, const Tensor& t, absl::string_view reduce_op,
                                     int root) const {
  std::string out = absl::StrCat(op, " seq ", seq, " (", DTypeName(t.dtype()), ", ", t.numel(), " elements");
  if (!reduce_op.empty()) absl::StrAppend(&out, ", ", reduce_op);
  if (root >= 0) absl::StrAppend(&out, ", root ", root);
  out += ")";
  return out;
}

absl::Status NcclBackend::NotRun(const std::string& fingerprint) {
  // The failure is reported once the abort it triggered has returned (it
  // runs on the thread that found the failure; nothing it waits for waits
  // on this one), bounded in case an abort never returns.
  watchdog_->AwaitAbort(DeadlineIn(std::chrono::seconds(60)));
  absl::Status cause = watchdog_->status();
  // The watchdog's message names the operations that were in flight; one
  // that had not started yet gets its own name in front.
  if (absl::StrContains(cause.message(), fingerprint)) return cause;
  return absl::Status(cause.code(), absl::StrCat("NCCL ", fingerprint, " on rank ", rank_,
                                                 " did not complete: the communicator failed: ", cause.message()));
}

NcclBackend::QueuedFn NcclBackend::QueuedIfOnDevice(const OpContext& op_ctx,
                                                    std::initializer_list<const Tensor*> tensors) const {
  for (const Tensor* t : tensors) {
    if (t->defined() && options_.cpu_tensors && t->device().is_cpu()) return nullptr;
  }
  return op_ctx.queued;
}

absl::Status NcclBackend::Run(const std::string& fingerprint, Deadline deadline, const QueuedFn& queued,
                              const std::function<absl::Status()>& enqueue) {
  if (watchdog_->failed()) return NotRun(fingerprint);
  // Watched until the operation finished: held by `finish` below.
  auto in_flight = std::make_shared<InFlight>(*watchdog_, fingerprint, deadline);
  absl::Status enqueued = comm_->WaitFor(options_.caller_stream);
  if (enqueued.ok()) enqueued = enqueue();
  absl::StatusOr<std::unique_ptr<NcclEvent>> event =
      enqueued.ok() ? comm_->Record() : absl::StatusOr<std::unique_ptr<NcclEvent>>(enqueued);
  if (!event.ok()) {
    // An abort makes a running NCCL call fail: report why it was aborted.
    if (watchdog_->failed()) return NotRun(fingerprint);
    absl::Status error = absl::InternalError(absl::StrCat("NCCL ", fingerprint, " on rank ", rank_, " (",
                                                          device_.ToString(), ") failed: ", event.status().message()));
    watchdog_->Fail(error);
    return error;
  }
  std::shared_ptr<NcclEvent> marker = *std::move(event);
  std::function<absl::Status()> finish = [this, fingerprint, marker, in_flight] {
    return AwaitEvent(fingerprint, *marker);
  };
  if (queued) {
    queued(marker, std::move(finish));
    return absl::OkStatus();
  }
  return finish();
}

absl::Status NcclBackend::AwaitEvent(const std::string& fingerprint, NcclEvent& event) {
  // Yield first (small operations finish within microseconds), then sleep
  // briefly so that a long one does not hold a core.
  for (int polls = 0;; ++polls) {
    absl::StatusOr<bool> done = event.Query();
    if (watchdog_->failed()) return NotRun(fingerprint);
    if (!done.ok()) {
      absl::Status error = absl::InternalError(absl::StrCat("NCCL ", fingerprint, " on rank ", rank_, " (",
                                                            device_.ToString(), "): ", done.status().message()));
      watchdog_->Fail(error);
      return error;
    }
    if (*done) return absl::OkStatus();
    if (polls < 2000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

absl::Status NcclBackend::AllReduce(const Tensor& input, const Tensor& output, ReduceOp given,
                                    const OpContext& op_ctx) {
  const ReduceOp op = ForNccl(given, input.dtype());
  const size_t n = static_cast<size_t>(input.numel());
  const DType dtype = input.dtype();
  const bool divide = op == ReduceOp::kAvg && !UsesNcclAvg(dtype);
  return Run(Fingerprint("AllReduce", op_ctx.seq, input, ReduceOpName(op)), op_ctx.deadline,
             QueuedIfOnDevice(op_ctx, {&input, &output}), [&]() -> absl::Status {
               Stager stage(*comm_, options_.cpu_tensors);
               const int in = stage.Add(input, true, false);
               const int out = stage.Add(output, false, true);
               LOCKSTEP_RETURN_IF_ERROR(stage.CopyIn());
               LOCKSTEP_RETURN_IF_ERROR(comm_->AllReduce(stage.Ptr(in), stage.Ptr(out), n, dtype,
                                                         divide ? ReduceOp::kSum : OneRankAvgAsSum(op)));
               if (divide) LOCKSTEP_RETURN_IF_ERROR(comm_->Divide(stage.Ptr(out), n, dtype, size_));
               return stage.CopyOut();
             });
}

absl::Status NcclBackend::Reduce(const Tensor& input, const Tensor& output, ReduceOp given, int root,
                                 const OpContext& op_ctx) {
  const ReduceOp op = ForNccl(given, input.dtype());
  const size_t n = static_cast<size_t>(input.numel());
  const DType dtype = input.dtype();
  const bool divide = op == ReduceOp::kAvg && !UsesNcclAvg(dtype);
  return Run(Fingerprint("Reduce", op_ctx.seq, input, ReduceOpName(op), root), op_ctx.deadline,
             QueuedIfOnDevice(op_ctx, {&input, &output}), [&]() -> absl::Status {
               Stager stage(*comm_, options_.cpu_tensors);
               const int in = stage.Add(input, true, false);
               // NCCL writes recvbuff only on the root; elsewhere `output` may be undefined.
               const int out = rank_ == root ? stage.Add(output, false, true) : in;
               LOCKSTEP_RETURN_IF_ERROR(stage.CopyIn());
               LOCKSTEP_RETURN_IF_ERROR(comm_->Reduce(stage.Ptr(in), stage.Ptr(out), n, dtype,
                                                      divide ? ReduceOp::kSum : OneRankAvgAsSum(op), root));
               if (divide && rank_ == root) LOCKSTEP_RETURN_IF_ERROR(comm_->Divide(stage.Ptr(out), n, dtype, size_));
               return stage.CopyOut();
             });
}

absl::Status NcclBackend::Broadcast(const Tensor& tensor, int root, const OpContext& op_ctx) {
  return Run(Fingerprint("Broadcast", op_ctx.seq, tensor, {}, root), op_ctx.deadline,
             QueuedIfOnDevice(op_ctx, {&tensor}), [&]() -> absl::Status {
               Stager stage(*comm_, options_.cpu_tensors);
               const int t = stage.Add(tensor, rank_ == root, rank_ != root);
               LOCKSTEP_RETURN_IF_ERROR(stage.CopyIn());
               LOCKSTEP_RETURN_IF_ERROR(comm_->Broadcast(stage.Ptr(t), stage.Ptr(t),
                                                         static_cast<size_t>(tensor.numel()), tensor.dtype(), root));
               return stage.CopyOut();
             });
}

absl::Status NcclBackend::AllGather(const Tensor& input, const Tensor& output, const OpContext& op_ctx) {
  return Run(Fingerprint("AllGather", op_ctx.seq, input), op_ctx.deadline, QueuedIfOnDevice(op_ctx, {&input, &output}),
             [&]() -> absl::Status {
               Stager stage(*comm_, options_.cpu_tensors);
               const int in = stage.Add(input, true, false);
               const int out = stage.Add(output, false, true);
               LOCKSTEP_RETURN_IF_ERROR(stage.CopyIn());
               LOCKSTEP_RETURN_IF_ERROR(
                   comm_->AllGather(stage.Ptr(in), stage.Ptr(out), static_cast<size_t>(input.numel()), input.dtype()));
               return stage.CopyOut();
             });
}

absl::Status NcclBackend::ReduceScatter(const Tensor& input, const Tensor& output, ReduceOp given,
                                        const OpContext& op_ctx) {
  const ReduceOp op = ForNccl(given, input.dtype());
  const size_t n = static_cast<size_t>(output.numel());
  const DType dtype = input.dtype();
  const bool divide = op == ReduceOp::kAvg && !UsesNcclAvg(dtype);
  return Run(Fingerprint("ReduceScatter", op_ctx.seq, input, ReduceOpName(op)), op_ctx.deadline,
             QueuedIfOnDevice(op_ctx, {&input, &output}), [&]() -> absl::Status {
               Stager stage(*comm_, options_.cpu_tensors);
               const int in = stage.Add(input, true, false);
               const int out = stage.Add(output, false, true);
               LOCKSTEP_RETURN_IF_ERROR(stage.CopyIn());
               LOCKSTEP_RETURN_IF_ERROR(comm_->ReduceScatter(stage.Ptr(in), stage.Ptr(out), n, dtype,
                                                             divide ? ReduceOp::kSum : OneRankAvgAsSum(op)));
               if (divide) LOCKSTEP_RETURN_IF_ERROR(comm_->Divide(stage.Ptr(out), n, dtype, size_));
               return stage.CopyOut();
             });
}

absl::Status NcclBackend::Gather(const Tensor& input, const Tensor& output, int root, const OpContext& op_ctx) {
  const size_t n = static_cast<size_t>(input.numel());
  const size_t bytes = input.nbytes();
  return Run(Fingerprint("Gather", op_ctx.seq, input, {}, root), op_ctx.deadline,
             QueuedIfOnDevice(op_ctx, {&input, &output}), [&]() -> absl::Status {
               Stager stage(*comm_, options_.cpu_tensors);
               const int in = stage.Add(input, true, false);
               const int out = rank_ == root ? stage.Add(output, false, true) : -1;
               LOCKSTEP_RETURN_IF_ERROR(stage.CopyIn());
               if (rank_ != root) {
                 LOCKSTEP_RETURN_IF_ERROR(comm_->GroupStart());
                 LOCKSTEP_RETURN_IF_ERROR(comm_->Send(stage.Ptr(in), n, input.dtype(), root));
                 return comm_->GroupEnd();
               }
               char* own = stage.Ptr(out) + rank_ * bytes;
               if (own != stage.Ptr(in)) LOCKSTEP_RETURN_IF_ERROR(comm_->Copy(own, stage.Ptr(in), bytes));
               if (size_ > 1) {
                 LOCKSTEP_RETURN_IF_ERROR(comm_->GroupStart());
                 for (int peer = 0; peer < size_; ++peer) {
                   if (peer == rank_) continue;
                   LOCKSTEP_RETURN_IF_ERROR(comm_->Recv(stage.Ptr(out) + peer * bytes, n, input.dtype(), peer));
                 }
                 LOCKSTEP_RETURN_IF_ERROR(comm_->GroupEnd());
               }
               return stage.CopyOut();
             });
}

absl::Status NcclBackend::Scatter(const Tensor& input, const Tensor& output, int root, const OpContext& op_ctx) {
  const size_t n = static_cast<size_t>(output.numel());
  const size_t bytes = output.nbytes();
  return Run(Fingerprint("Scatter", op_ctx.seq, output, {}, root), op_ctx.deadline,
             QueuedIfOnDevice(op_ctx, {&input, &output}), [&]() -> absl::Status {
               Stager stage(*comm_, options_.cpu_tensors);
               const int in = rank_ == root ? stage.Add(input, true, false) : -1;
               const int out = stage.Add(output, false, true);
               LOCKSTEP_RETURN_IF_ERROR(stage.CopyIn());
               if (rank_ != root) {
                 LOCKSTEP_RETURN_IF_ERROR(comm_->GroupStart());
                 LOCKSTEP_RETURN_IF_ERROR(comm_->Recv(stage.Ptr(out), n, output.dtype(), root));
                 LOCKSTEP_RETURN_IF_ERROR(comm_->GroupEnd());
                 return stage.CopyOut();
               }
               const char* own = stage.Ptr(in) + rank_ * bytes;
               if (own != stage.Ptr(out)) LOCKSTEP_RETURN_IF_ERROR(comm_->Copy(stage.Ptr(out), own, bytes));
               if (size_ > 1) {
                 LOCKSTEP_RETURN_IF_ERROR(comm_->GroupStart());
                 for (int peer = 0; peer < size_; ++peer) {
                   if (peer == rank_) continue;
                   LOCKSTEP_RETURN_IF_ERROR(comm_->Send(stage.Ptr(in) + peer * bytes, n, output.dtype(), peer));
                 }
                 LOCKSTEP_RETURN_IF_ERROR(comm_->GroupEnd());
               }
               return stage.CopyOut();
             });
}

absl::Status NcclBackend::AllGatherV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts,
                                     const OpContext& op_ctx) {
  const DType dtype = output.dtype();
  const std::vector<size_t> at = ByteOffsets(counts, output.element_size());
  return Run(Fingerprint("AllGatherV", op_ctx.seq, output), op_ctx.deadline,
             QueuedIfOnDevice(op_ctx, {&input, &output}), [&]() -> absl::Status {
               Stager stage(*comm_, options_.cpu_tensors);
               const int in = stage.Add(input, true, false);
               const int out = stage.Add(output, false, true);
               LOCKSTEP_RETURN_IF_ERROR(stage.CopyIn());
               if (input.nbytes() > 0)
                 LOCKSTEP_RETURN_IF_ERROR(comm_->Copy(stage.Ptr(out) + at[rank_], stage.Ptr(in), input.nbytes()));
               LOCKSTEP_RETURN_IF_ERROR(comm_->GroupStart());
               for (int peer = 0; peer < size_; ++peer) {
                 if (peer == rank_) continue;
                 LOCKSTEP_RETURN_IF_ERROR(comm_->Send(stage.Ptr(in), static_cast<size_t>(counts[rank_]), dtype, peer));
                 LOCKSTEP_RETURN_IF_ERROR(
                     comm_->Recv(stage.Ptr(out) + at[peer], static_cast<size_t>(counts[peer]), dtype, peer));
               }
               LOCKSTEP_RETURN_IF_ERROR(comm_->GroupEnd());
               return stage.CopyOut();
             });
}

absl::Status NcclBackend::ReduceScatterV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts,
                                         ReduceOp given, const OpContext& op_ctx) {
  const DType dtype = input.dtype();
  const ReduceOp op = ForNccl(given, dtype);
  const bool divide = op == ReduceOp::kAvg && !UsesNcclAvg(dtype);
  const std::vector<size_t> at = ByteOffsets(counts, input.element_size());
  return Run(
      Fingerprint("ReduceScatterV", op_ctx.seq, input, ReduceOpName(op)), op_ctx.deadline,
      QueuedIfOnDevice(op_ctx, {&input, &output}), [&]() -> absl::Status {
        Stager stage(*comm_, options_.cpu_tensors);
        const int in = stage.Add(input, true, false);
        const int out = stage.Add(output, false, true);
        LOCKSTEP_RETURN_IF_ERROR(stage.CopyIn());
        // One reduce per rank's block, rooted at that rank, grouped.
        LOCKSTEP_RETURN_IF_ERROR(comm_->GroupStart());
        for (int root = 0; root < size_; ++root) {
          LOCKSTEP_RETURN_IF_ERROR(comm_->Reduce(stage.Ptr(in) + at[root], root == rank_ ? stage.Ptr(out) : nullptr,
                                                 static_cast<size_t>(counts[root]), dtype,
                                                 divide ? ReduceOp::kSum : OneRankAvgAsSum(op), root));
        }
        LOCKSTEP_RETURN_IF_ERROR(comm_->GroupEnd());
        if (divide)
          LOCKSTEP_RETURN_IF_ERROR(comm_->Divide(stage.Ptr(out), static_cast<size_t>(counts[rank_]), dtype, size_));
        return stage.CopyOut();
      });
}

absl::Status NcclBackend::GatherV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts, int root,
                                  const OpContext& op_ctx) {
  const DType dtype = input.dtype();
  const std::vector<size_t> at = ByteOffsets(counts, input.element_size());
  return Run(Fingerprint("GatherV", op_ctx.seq, input, {}, root), op_ctx.deadline,
             QueuedIfOnDevice(op_ctx, {&input, &output}), [&]() -> absl::Status {
               Stager stage(*comm_, options_.cpu_tensors);
               const int in = stage.Add(input, true, false);
               const int out = rank_ == root ? stage.Add(output, false, true) : -1;
               LOCKSTEP_RETURN_IF_ERROR(stage.CopyIn());
               LOCKSTEP_RETURN_IF_ERROR(comm_->GroupStart());
               if (rank_ != root) {
                 LOCKSTEP_RETURN_IF_ERROR(comm_->Send(stage.Ptr(in), static_cast<size_t>(counts[rank_]), dtype, root));
               } else {
                 for (int peer = 0; peer < size_; ++peer) {
                   if (peer == rank_) continue;
                   LOCKSTEP_RETURN_IF_ERROR(
                       comm_->Recv(stage.Ptr(out) + at[peer], static_cast<size_t>(counts[peer]), dtype, peer));
                 }
               }
               LOCKSTEP_RETURN_IF_ERROR(comm_->GroupEnd());
               if (rank_ == root && input.nbytes() > 0) {
                 LOCKSTEP_RETURN_IF_ERROR(comm_->Copy(stage.Ptr(out) + at[rank_], stage.Ptr(in), input.nbytes()));
               }
               return stage.CopyOut();
             });
}

absl::Status NcclBackend::ScatterV(const Tensor& input, const Tensor& output, absl::Span<const int64_t> counts,
                                   int root, const OpContext& op_ctx) {
  const DType dtype = output.dtype();
  const std::vector<size_t> at = ByteOffsets(counts, output.element_size());
  return Run(Fingerprint("ScatterV", op_ctx.seq, output, {}, root), op_ctx.deadline,
             QueuedIfOnDevice(op_ctx, {&input, &output}), [&]() -> absl::Status {
               Stager stage(*comm_, options_.cpu_tensors);
               const int in = rank_ == root ? stage.Add(input, true, false) : -1;
               const int out = stage.Add(output, false, true);
               LOCKSTEP_RETURN_IF_ERROR(stage.CopyIn());
               LOCKSTEP_RETURN_IF_ERROR(comm_->GroupStart());
               if (rank_ != root) {
                 LOCKSTEP_RETURN_IF_ERROR(comm_->Recv(stage.Ptr(out), static_cast<size_t>(counts[rank_]), dtype, root));
               } else {
                 for (int peer = 0; peer < size_; ++peer) {
                   if (peer == rank_) continue;
                   LOCKSTEP_RETURN_IF_ERROR(
                       comm_->Send(stage.Ptr(in) + at[peer], static_cast<size_t>(counts[peer]), dtype, peer));
                 }
               }
               LOCKSTEP_RETURN_IF_ERROR(comm_->GroupEnd());
               if (rank_ == root && output.nbytes() > 0) {
                 LOCKSTEP_RETURN_IF_ERROR(comm_->Copy(stage.Ptr(out), stage.Ptr(in) + at[rank_], output.nbytes()));
               }
               return stage.CopyOut();
             });
}

absl::Status NcclBackend::AllToAll(const Tensor& input, const Tensor& output, absl::Span<const int64_t> send_counts,
                                   absl::Span<const int64_t> recv_counts, const OpContext& op_ctx) {
  const DType dtype = output.dtype();
  const std::vector<size_t> send_at = ByteOffsets(send_counts, input.element_size());
  const std::vector<size_t> recv_at = ByteOffsets(recv_counts, output.element_size());
  return Run(
      Fingerprint("AllToAll", op_ctx.seq, output), op_ctx.deadline, QueuedIfOnDevice(op_ctx, {&input, &output}),
      [&]() -> absl::Status {
        Stager stage(*comm_, options_.cpu_tensors);
        const int in = stage.Add(input, true, false);
        const int out = stage.Add(output, false, true);
        LOCKSTEP_RETURN_IF_ERROR(stage.CopyIn());
        const size_t own = static_cast<size_t>(send_counts[rank_]) * output.element_size();
        if (own > 0) {
          LOCKSTEP_RETURN_IF_ERROR(comm_->Copy(stage.Ptr(out) + recv_at[rank_], stage.Ptr(in) + send_at[rank_], own));
        }
        // All pairs in one group: NCCL schedules them without deadlock.
        LOCKSTEP_RETURN_IF_ERROR(comm_->GroupStart());
        for (int s = 1; s < size_; ++s) {
          const int to = (rank_ + s) % size_, from = (rank_ - s + size_) % size_;
          LOCKSTEP_RETURN_IF_ERROR(
              comm_->Send(stage.Ptr(in) + send_at[to], static_cast<size_t>(send_counts[to]), dtype, to));
          LOCKSTEP_RETURN_IF_ERROR(
              comm_->Recv(stage.Ptr(out) + recv_at[from], static_cast<size_t>(recv_counts[from]), dtype, from));
        }
        LOCKSTEP_RETURN_IF_ERROR(comm_->GroupEnd());
        return stage.CopyOut();
      });
}

absl::Status NcclBackend::Barrier(const OpContext& op_ctx) {
  return Run(absl::StrCat("Barrier seq ", op_ctx.seq), op_ctx.deadline, QueuedIfOnDevice(op_ctx, {}),
             [&]() -> absl::Status {
               LOCKSTEP_ASSIGN_OR_RETURN(void* word, comm_->Scratch(1));
               return comm_->AllReduce(word, word, 1, DType::kU8, ReduceOp::kMax);
             });
}

absl::Status NcclBackend::AllGatherBytes(const void* mine, size_t bytes, void* all, const OpContext& op_ctx) {
  return Run(absl::StrCat("AllGatherBytes seq ", op_ctx.seq, " (", bytes, " bytes)"), op_ctx.deadline, nullptr,
             [&]() -> absl::Status {
               LOCKSTEP_ASSIGN_OR_RETURN(void* scratch, comm_->Scratch(bytes * size_));
               char* slot = static_cast<char*>(scratch) + rank_ * bytes;
               LOCKSTEP_RETURN_IF_ERROR(comm_->Copy(slot, mine, bytes));
               LOCKSTEP_RETURN_IF_ERROR(comm_->AllGather(slot, scratch, bytes, DType::kU8));
               return comm_->Copy(all, scratch, bytes * size_);
             });
}

absl::Status NcclBackend::RunPointToPoint(PointToPointSource& source, Deadline deadline) {
  std::vector<PointToPointOp> ops;
  for (;;) {
    ops.clear();
    source.Take(&ops);
    if (ops.empty()) return absl::OkStatus();
    const PointToPointOp& first = ops.front();
    const std::string fingerprint =
        absl::StrCat("point-to-point batch of ", ops.size(), " (first: ", first.send ? "send to" : "recv from",
                     " rank ", first.peer, ", tag ", first.tag, ", seq ", first.seq, ", ",
                     DTypeName(first.tensor.dtype()), ", ", first.tensor.numel(), " elements)");
    LOCKSTEP_RETURN_IF_ERROR(Run(fingerprint, deadline, nullptr, [&]() -> absl::Status {
      Stager stage(*comm_, options_.cpu_tensors);
      std::vector<int> slots;
      for (const PointToPointOp& op : ops) slots.push_back(stage.Add(op.tensor, op.send, !op.send));
      LOCKSTEP_RETURN_IF_ERROR(stage.CopyIn());
      LOCKSTEP_RETURN_IF_ERROR(comm_->GroupStart());
      for (size_t i = 0; i < ops.size(); ++i) {
        const PointToPointOp& op = ops[i];
        const size_t n = static_cast<size_t>(op.tensor.numel());
        LOCKSTEP_RETURN_IF_ERROR(op.send ? comm_->Send(stage.Ptr(slots[i]), n, op.tensor.dtype(), op.peer)
                                         : comm_->Recv(stage.Ptr(slots[i]), n, op.tensor.dtype(), op.peer));
      }
      LOCKSTEP_RETURN_IF_ERROR(comm_->GroupEnd());
      return stage.CopyOut();
    }));
    for (PointToPointOp& op : ops) {
      if (op.done) op.done(op.peer);
    }
  }
}

absl::StatusOr<std::unique_ptr<Backend>> NcclBackend::Split(int color, int key, int new_rank, int new_size,
                                                            const OpContext& op_ctx) {
  if (watchdog_->failed()) return NotRun(absl::StrCat("Split seq ", op_ctx.seq));
  absl::StatusOr<std::unique_ptr<NcclComm>> child = comm_->Split(color, key, op_ctx.deadline);
  if (!child.ok()) {
    absl::Status error =
        absl::Status(child.status().code(), absl::StrCat("NCCL Split seq ", op_ctx.seq, " on rank ", rank_, " (color ",
                                                         color, "): ", child.status().message()));
    watchdog_->Fail(error);
    return error;
  }
  if (*child == nullptr) return std::unique_ptr<Backend>();
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<NcclBackend> backend,
                            Create(*std::move(child), new_rank, new_size, device_, nccl_version_, options_));
  return std::unique_ptr<Backend>(std::move(backend));
}

void NcclBackend::Abort(absl::string_view reason) {
  watchdog_->Fail(absl::AbortedError(
      absl::StrCat("NCCL communicator of rank ", rank_, " on ", device_.ToString(), " aborted: ", reason)));
}

TrafficCounters NcclBackend::Traffic() const {
  // NCCL does not report bytes per peer.
  TrafficCounters counters;
  counters.bytes_sent.assign(size_, 0);
  counters.bytes_received.assign(size_, 0);
  return counters;
}

}  // namespace lockstep
