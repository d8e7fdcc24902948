#include "collectives/communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <sched.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/algorithm.h"
#include "collectives/all_gather.h"
#include "collectives/all_reduce.h"
#include "collectives/barrier.h"
#include "collectives/broadcast.h"
#include "collectives/gather.h"
#include "collectives/prefix_store.h"
#include "collectives/reduce.h"
#include "collectives/reduce_scatter.h"
#include "collectives/tcp_transport.h"
#include "core/dtype.h"
#include "core/status.h"

namespace lockstep {
namespace {

constexpr uint32_t kFingerprintTag = 0xFFFFFFFFu;
constexpr uint32_t kPointToPointTagBit = 0x80000000u;

const char* OpTypeName(uint8_t op) {
  switch (op) {
    case 1: return "AllReduce";
    case 2: return "Reduce";
    case 3: return "Broadcast";
    case 4: return "AllGather";
    case 5: return "Gather";
    case 6: return "Scatter";
    case 7: return "ReduceScatter";
    case 8: return "Barrier";
    case 9: return "Send";
    case 10: return "Recv";
  }
  return "?";
}

// A CPU tensor to run an algorithm on: `t` itself, or a pinned host copy of a
// CUDA tensor (copied in when `copy_in`).
absl::StatusOr<Tensor> Stage(const Tensor& t, bool copy_in) {
  if (t.device().is_cpu()) return t;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor host, Tensor::Empty({t.numel()}, t.dtype(), Device::Cpu(), /*pinned=*/true));
  if (copy_in) LOCKSTEP_RETURN_IF_ERROR(host.CopyFrom(t));
  return host;
}

absl::Status Unstage(const Tensor& host, const Tensor& t) {
  if (t.device().is_cpu()) return absl::OkStatus();
  return t.CopyFrom(host);
}

absl::StatusOr<Tensor> Flat1d(const Tensor& t) { return t.Flat(0, t.numel()); }

absl::Status CheckTensor(const Tensor& t, const char* op, const char* what) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " is undefined"));
  return absl::OkStatus();
}

absl::Status CheckSame(const Tensor& a, const Tensor& b, const char* op, int64_t b_factor,
                       const char* a_name, const char* b_name) {
  if (a.dtype() != b.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", a_name, " is ", DTypeName(a.dtype()), " but ",
                                                   b_name, " is ", DTypeName(b.dtype())));
  }
  if (a.numel() * b_factor != b.numel()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", b_name, " has ", b.numel(), " elements, expected ", a.numel() * b_factor,
        b_factor == 1 ? std::string(" (as many as the ") + a_name + ")"
                      : absl::StrCat(" (world size ", b_factor, " x ", a.numel(), " of the ", a_name, ")")));
  }
  if (a.device() != b.device()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", a_name, " is on ", a.device().ToString(), " but ",
                                                   b_name, " on ", b.device().ToString()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(std::shared_ptr<Store> store, int rank,
                                                                   int size, CommunicatorOptions options) {
  if (store == nullptr) return absl::InvalidArgumentError("Communicator::Create: no store");
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("Communicator::Create: rank ", rank,
                                                   " is not in [0, ", size, ") (world size ", size, ")"));
  }
  const char* debug = std::getenv("LOCKSTEP_DEBUG");
  if (debug != nullptr && std::strcmp(debug, "DETAIL") == 0) options.debug_checks = true;
  auto prefixed = std::make_shared<PrefixStore>(options.store_prefix, std::move(store));
  TcpTransportOptions transport_options;
  transport_options.host = options.host;
  transport_options.timeout = options.timeout;
  transport_options.socket_buffer_bytes = options.socket_buffer_bytes;
  transport_options.congestion_control = options.tcp_congestion_control;
  transport_options.spin_microseconds = options.transport_spin_microseconds;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TcpTransport> transport,
                            TcpTransport::Create(*prefixed, rank, size, transport_options));
  return FromTransport(std::move(transport), std::move(options), std::move(prefixed));
}

std::unique_ptr<Communicator> Communicator::FromTransport(std::unique_ptr<Transport> transport,
                                                          CommunicatorOptions options,
                                                          std::shared_ptr<Store> store) {
  return std::unique_ptr<Communicator>(new Communicator(std::move(transport), std::move(options), std::move(store)));
}

Communicator::Communicator(std::unique_ptr<Transport> transport, CommunicatorOptions options,
                           std::shared_ptr<Store> store)
    : transport_(std::move(transport)), store_(std::move(store)), options_(std::move(options)), rank_(transport_->rank()),
      size_(transport_->size()), send_seq_(size_, 0), recv_seq_(size_, 0) {
  worker_ = std::thread([this] { WorkerLoop(); });
}

Communicator::~Communicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    stopping_flag_.store(true, std::memory_order_release);
  }
  work_cv_.notify_all();
  worker_.join();
}

absl::Status Communicator::broken_status() {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

std::shared_ptr<Work> Communicator::Failed(absl::Status status) {
  auto work = std::make_shared<Work>(options_.wait_spin_microseconds);
  work->Complete(std::move(status));
  return work;
}

std::shared_ptr<Work> Communicator::Enqueue(Fingerprint fingerprint, Task task) {
  auto work = std::make_shared<Work>(options_.wait_spin_microseconds);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) {
      work->Complete(broken_);
      return work;
    }
    fingerprint.seq = next_seq_++;
    queue_.push_back(Item{work, std::move(task), fingerprint, true});
    queue_size_.store(queue_.size(), std::memory_order_release);
  }
  work_cv_.notify_one();
  return work;
}

void Communicator::WorkerLoop() {
  while (true) {
    Item item;
    {
      // The next operation often follows within microseconds (a training
      // step's buckets, a benchmark loop): look for it briefly, yielding the
      // core to the caller's thread, before sleeping, because a thread woken
      // from a futex on these VMs can take tens of microseconds.
      const Deadline spin_until = SteadyClock::now() + std::chrono::microseconds(50);
      while (queue_size_.load(std::memory_order_acquire) == 0 && !stopping_flag_.load(std::memory_order_acquire) &&
             SteadyClock::now() < spin_until) {
        sched_yield();
      }
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // Stopping, and everything queued ran.
      item = std::move(queue_.front());
      queue_.pop_front();
      queue_size_.store(queue_.size(), std::memory_order_release);
      if (!broken_.ok()) {
        lock.unlock();
        item.work->Complete(broken_);
        continue;
      }
    }
    const Deadline deadline = DeadlineIn(options_.timeout);
    absl::Status status;
    if (item.collective && options_.debug_checks && size_ > 1) {
      status = CheckFingerprints(item.fingerprint, deadline);
    }
    if (status.ok()) status = item.task(item.fingerprint.seq, deadline);
    if (!status.ok()) {
      status = absl::Status(status.code(), absl::StrCat("rank ", rank_, ": ", Describe(item.fingerprint),
                                                        " failed: ", status.message()));
      transport_->Abort(status.message());  // Peers blocked on us fail now, not at their deadline.
      status = ShareFailure(status);
      {
        std::lock_guard<std::mutex> lock(mu_);
        broken_ = status;
      }
    }
    item.work->Complete(status);
  }
}

absl::Status Communicator::ShareFailure(absl::Status status) {
  if (store_ == nullptr || size_ == 1) return status;
  // Best effort: the store may be gone with the rank that hosted it.
  if (!store_->Set(absl::StrCat("failure/", rank_), status.message()).ok()) return status;
  const Deadline until = DeadlineIn(options_.failure_report_window);
  std::vector<std::string> reports;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    const auto left = std::chrono::duration_cast<Milliseconds>(until - SteadyClock::now());
    absl::StatusOr<std::string> report =
        store_->Get(absl::StrCat("failure/", peer), std::max(left, Milliseconds(0)));
    if (report.ok()) reports.push_back(*report);
  }
  if (reports.empty()) return status;
  return absl::Status(status.code(), absl::StrCat(status.message(), ". Other ranks reported: ",
                                                  absl::StrJoin(reports, " | ")));
}

std::string Communicator::Describe(const Fingerprint& f) {
  std::string s = absl::StrCat(OpTypeName(f.op), " #", f.seq, " (");
  if (f.op != static_cast<uint8_t>(OpType::kBarrier)) {
    absl::StrAppend(&s, DTypeName(static_cast<DType>(f.dtype)), ", count ", f.count);
  }
  if (f.op == static_cast<uint8_t>(OpType::kAllReduce) || f.op == static_cast<uint8_t>(OpType::kReduce) ||
      f.op == static_cast<uint8_t>(OpType::kReduceScatter)) {
    absl::StrAppend(&s, ", ", ReduceOpName(static_cast<ReduceOp>(f.reduce_op)));
  }
  if (f.root >= 0) absl::StrAppend(&s, ", root ", f.root);
  return s + ")";
}

absl::Status Communicator::CheckFingerprints(const Fingerprint& mine, Deadline deadline) {
  std::vector<Fingerprint> all(size_);
  all[rank_] = mine;
  std::vector<Transfer> transfers;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    transfers.push_back(Transfer::Send(peer, &mine, sizeof(Fingerprint)));
    transfers.push_back(Transfer::Recv(peer, &all[peer], sizeof(Fingerprint)));
  }
  LOCKSTEP_RETURN_IF_ERROR(transport_->Exchange(absl::MakeSpan(transfers), MessageTag{mine.seq, kFingerprintTag}, deadline));
  bool same = true;
  for (const Fingerprint& f : all) same &= std::memcmp(&f, &mine, sizeof(Fingerprint)) == 0;
  if (same) return absl::OkStatus();
  std::vector<std::string> views;
  for (int r = 0; r < size_; ++r) views.push_back(absl::StrCat("rank ", r, " called ", Describe(all[r])));
  return absl::FailedPreconditionError(absl::StrCat(
      "collective mismatch (LOCKSTEP_DEBUG=DETAIL): ", absl::StrJoin(views, "; "),
      ". Every rank must issue the same collectives, with the same dtype, count, root and op, "
      "in the same order"));
}

std::shared_ptr<Work> Communicator::AllReduce(const Tensor& tensor, ReduceOp op) {
  return AllReduce(tensor, tensor, op);
}

std::shared_ptr<Work> Communicator::AllReduce(const Tensor& input, const Tensor& output, ReduceOp op) {
  if (auto s = CheckTensor(input, "AllReduce", "input"); !s.ok()) return Failed(s);
  if (auto s = CheckTensor(output, "AllReduce", "output"); !s.ok()) return Failed(s);
  if (auto s = CheckSame(input, output, "AllReduce", 1, "input", "output"); !s.ok()) return Failed(s);
  if (!IsValidReduceOp(static_cast<uint8_t>(op))) return Failed(absl::InvalidArgumentError("AllReduce: invalid reduce op"));
  Fingerprint f{0, static_cast<uint8_t>(OpType::kAllReduce), static_cast<uint8_t>(input.dtype()),
                static_cast<uint8_t>(op), 0, -1, input.numel()};
  return Enqueue(f, [this, input, output, op](uint64_t seq, Deadline deadline) -> absl::Status {
    if (!output.SharesStorageWith(input) || output.raw_data() != input.raw_data()) {
      LOCKSTEP_RETURN_IF_ERROR(output.CopyFrom(input));
    }
    if (output.numel() == 0) return absl::OkStatus();
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor staged, Stage(output, true));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor buffer, Flat1d(staged));
    AlgorithmContext ctx{*transport_, seq, 0, deadline, options_.segment_bytes, &scratch_};
    if (buffer.nbytes() < options_.small_message_bytes || buffer.numel() < size_) {
      LOCKSTEP_RETURN_IF_ERROR(RecursiveDoublingAllReduce(ctx, buffer, op));
    } else {
      LOCKSTEP_RETURN_IF_ERROR(RingAllReduce(ctx, buffer, op));
    }
    return Unstage(staged, output);
  });
}

std::shared_ptr<Work> Communicator::Reduce(const Tensor& input, const Tensor& output, ReduceOp op, int root) {
  if (root < 0 || root >= size_) {
    return Failed(absl::InvalidArgumentError(absl::StrCat("Reduce: root ", root, " is not a rank (world size ", size_, ")")));
  }
  if (auto s = CheckTensor(input, "Reduce", "input"); !s.ok()) return Failed(s);
  if (rank_ == root) {
    if (auto s = CheckTensor(output, "Reduce", "output (at the root)"); !s.ok()) return Failed(s);
    if (auto s = CheckSame(input, output, "Reduce", 1, "input", "output"); !s.ok()) return Failed(s);
  }
  if (!IsValidReduceOp(static_cast<uint8_t>(op))) return Failed(absl::InvalidArgumentError("Reduce: invalid reduce op"));
  Fingerprint f{0, static_cast<uint8_t>(OpType::kReduce), static_cast<uint8_t>(input.dtype()),
                static_cast<uint8_t>(op), 0, root, input.numel()};
  return Enqueue(f, [this, input, output, op, root](uint64_t seq, Deadline deadline) -> absl::Status {
    if (input.numel() == 0) return absl::OkStatus();
    AlgorithmContext ctx{*transport_, seq, 0, deadline, options_.segment_bytes, &scratch_};
    if (rank_ == root) {
      if (output.raw_data() != input.raw_data()) LOCKSTEP_RETURN_IF_ERROR(output.CopyFrom(input));
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor staged, Stage(output, true));
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor buffer, Flat1d(staged));
      LOCKSTEP_RETURN_IF_ERROR(BinomialReduce(ctx, buffer, op, root));
      return Unstage(staged, output);
    }
    // Partial results must not overwrite the caller's input.
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor scratch, input.To(Device::Cpu()));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor buffer, Flat1d(scratch));
    return BinomialReduce(ctx, buffer, op, root);
  });
}

std::shared_ptr<Work> Communicator::Broadcast(const Tensor& tensor, int root) {
  if (root < 0 || root >= size_) {
    return Failed(absl::InvalidArgumentError(absl::StrCat("Broadcast: root ", root, " is not a rank (world size ", size_, ")")));
  }
  if (auto s = CheckTensor(tensor, "Broadcast", "tensor"); !s.ok()) return Failed(s);
  Fingerprint f{0, static_cast<uint8_t>(OpType::kBroadcast), static_cast<uint8_t>(tensor.dtype()), 0, 0, root,
                tensor.numel()};
  return Enqueue(f, [this, tensor, root](uint64_t seq, Deadline deadline) -> absl::Status {
    if (tensor.numel() == 0) return absl::OkStatus();
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor staged, Stage(tensor, rank_ == root));
    AlgorithmContext ctx{*transport_, seq, 0, deadline, options_.segment_bytes, &scratch_};
    LOCKSTEP_RETURN_IF_ERROR(BinomialBroadcast(ctx, staged, root));
    return rank_ == root ? absl::OkStatus() : Unstage(staged, tensor);
  });
}

std::shared_ptr<Work> Communicator::AllGather(const Tensor& input, const Tensor& output) {
  if (auto s = CheckTensor(input, "AllGather", "input"); !s.ok()) return Failed(s);
  if (auto s = CheckTensor(output, "AllGather", "output"); !s.ok()) return Failed(s);
  if (auto s = CheckSame(input, output, "AllGather", size_, "input", "output"); !s.ok()) return Failed(s);
  Fingerprint f{0, static_cast<uint8_t>(OpType::kAllGather), static_cast<uint8_t>(input.dtype()), 0, 0, -1,
                input.numel()};
  return Enqueue(f, [this, input, output](uint64_t seq, Deadline deadline) -> absl::Status {
    if (input.numel() == 0) return absl::OkStatus();
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor staged, Stage(output, false));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor buffer, Flat1d(staged));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor own, buffer.Flat(rank_ * input.numel(), input.numel()));
    LOCKSTEP_RETURN_IF_ERROR(own.CopyFrom(input));
    AlgorithmContext ctx{*transport_, seq, 0, deadline, options_.segment_bytes, &scratch_};
    LOCKSTEP_RETURN_IF_ERROR(RingAllGather(ctx, buffer));
    return Unstage(staged, output);
  });
}

std::shared_ptr<Work> Communicator::Gather(const Tensor& input, const Tensor& output, int root) {
  if (root < 0 || root >= size_) {
    return Failed(absl::InvalidArgumentError(absl::StrCat("Gather: root ", root, " is not a rank (world size ", size_, ")")));
  }
  if (auto s = CheckTensor(input, "Gather", "input"); !s.ok()) return Failed(s);
  if (rank_ == root) {
    if (auto s = CheckTensor(output, "Gather", "output (at the root)"); !s.ok()) return Failed(s);
    if (auto s = CheckSame(input, output, "Gather", size_, "input", "output"); !s.ok()) return Failed(s);
  }
  Fingerprint f{0, static_cast<uint8_t>(OpType::kGather), static_cast<uint8_t>(input.dtype()), 0, 0, root,
                input.numel()};
  return Enqueue(f, [this, input, output, root](uint64_t seq, Deadline deadline) -> absl::Status {
    if (input.numel() == 0) return absl::OkStatus();
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine, Stage(input, true));
    AlgorithmContext ctx{*transport_, seq, 0, deadline, options_.segment_bytes, &scratch_};
    if (rank_ != root) return DirectGather(ctx, mine, Tensor(), root);
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor staged, Stage(output, false));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor slots, Flat1d(staged));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine_flat, Flat1d(mine));
    LOCKSTEP_RETURN_IF_ERROR(DirectGather(ctx, mine_flat, slots, root));
    return Unstage(staged, output);
  });
}

std::shared_ptr<Work> Communicator::Scatter(const Tensor& input, const Tensor& output, int root) {
  if (root < 0 || root >= size_) {
    return Failed(absl::InvalidArgumentError(absl::StrCat("Scatter: root ", root, " is not a rank (world size ", size_, ")")));
  }
  if (auto s = CheckTensor(output, "Scatter", "output"); !s.ok()) return Failed(s);
  if (rank_ == root) {
    if (auto s = CheckTensor(input, "Scatter", "input (at the root)"); !s.ok()) return Failed(s);
    if (auto s = CheckSame(output, input, "Scatter", size_, "output", "input"); !s.ok()) return Failed(s);
  }
  Fingerprint f{0, static_cast<uint8_t>(OpType::kScatter), static_cast<uint8_t>(output.dtype()), 0, 0, root,
                output.numel()};
  return Enqueue(f, [this, input, output, root](uint64_t seq, Deadline deadline) -> absl::Status {
    if (output.numel() == 0) return absl::OkStatus();
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine_staged, Stage(output, false));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine, Flat1d(mine_staged));
    AlgorithmContext ctx{*transport_, seq, 0, deadline, options_.segment_bytes, &scratch_};
    if (rank_ == root) {
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor staged, Stage(input, true));
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor slots, Flat1d(staged));
      LOCKSTEP_RETURN_IF_ERROR(DirectScatter(ctx, slots, mine, root));
    } else {
      LOCKSTEP_RETURN_IF_ERROR(DirectScatter(ctx, Tensor(), mine, root));
    }
    return Unstage(mine_staged, output);
  });
}

std::shared_ptr<Work> Communicator::ReduceScatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  if (auto s = CheckTensor(input, "ReduceScatter", "input"); !s.ok()) return Failed(s);
  if (auto s = CheckTensor(output, "ReduceScatter", "output"); !s.ok()) return Failed(s);
  if (auto s = CheckSame(output, input, "ReduceScatter", size_, "output", "input"); !s.ok()) return Failed(s);
  if (!IsValidReduceOp(static_cast<uint8_t>(op))) return Failed(absl::InvalidArgumentError("ReduceScatter: invalid reduce op"));
  Fingerprint f{0, static_cast<uint8_t>(OpType::kReduceScatter), static_cast<uint8_t>(input.dtype()),
                static_cast<uint8_t>(op), 0, -1, input.numel()};
  return Enqueue(f, [this, input, output, op](uint64_t seq, Deadline deadline) -> absl::Status {
    if (output.numel() == 0) return absl::OkStatus();
    // The ring reduces in place: work on a copy so the input is unchanged.
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor scratch, input.To(Device::Cpu()));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor buffer, Flat1d(scratch));
    AlgorithmContext ctx{*transport_, seq, 0, deadline, options_.segment_bytes, &scratch_};
    LOCKSTEP_RETURN_IF_ERROR(RingReduceScatter(ctx, buffer, op));
    // The ring has divided chunk r already for AVG.
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor mine, buffer.Flat(rank_ * output.numel(), output.numel()));
    return output.CopyFrom(mine);
  });
}

std::shared_ptr<Work> Communicator::Barrier() {
  Fingerprint f{0, static_cast<uint8_t>(OpType::kBarrier), 0, 0, 0, -1, 0};
  return Enqueue(f, [this](uint64_t seq, Deadline deadline) {
    AlgorithmContext ctx{*transport_, seq, 0, deadline, options_.segment_bytes, &scratch_};
    return DisseminationBarrier(ctx);
  });
}

std::shared_ptr<Work> Communicator::Send(const Tensor& tensor, int dst, uint32_t tag) {
  return EnqueuePointToPoint(dst, tag, /*send=*/true, tensor);
}

std::shared_ptr<Work> Communicator::Recv(const Tensor& tensor, int src, uint32_t tag) {
  return EnqueuePointToPoint(src, tag, /*send=*/false, tensor);
}

std::shared_ptr<Work> Communicator::EnqueuePointToPoint(int peer, uint32_t tag, bool send, const Tensor& tensor) {
  const char* name = send ? "Send" : "Recv";
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return Failed(absl::InvalidArgumentError(absl::StrCat(name, ": peer ", peer, " is not another rank (this is rank ",
                                                          rank_, " of ", size_, ")")));
  }
  if (tag & kPointToPointTagBit) {
    return Failed(absl::InvalidArgumentError(absl::StrCat(name, ": tag ", tag, " must be below 2^31")));
  }
  if (auto s = CheckTensor(tensor, name, "tensor"); !s.ok()) return Failed(s);
  auto work = std::make_shared<Work>(options_.wait_spin_microseconds);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) {
      work->Complete(broken_);
      return work;
    }
    // Point-to-point messages are numbered per peer and direction, not in the
    // collective sequence (only two ranks take part).
    const uint64_t seq = send ? send_seq_[peer]++ : recv_seq_[peer]++;
    Fingerprint f{seq, static_cast<uint8_t>(send ? OpType::kSend : OpType::kRecv),
                  static_cast<uint8_t>(tensor.dtype()), 0, 0, peer, tensor.numel()};
    Task task = [this, tensor, peer, tag, send](uint64_t seq, Deadline deadline) -> absl::Status {
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor staged, Stage(tensor, send));
      Transfer t = send ? Transfer::Send(peer, staged.raw_data(), staged.nbytes())
                        : Transfer::Recv(peer, staged.raw_data(), staged.nbytes());
      LOCKSTEP_RETURN_IF_ERROR(
          transport_->Exchange({&t, 1}, MessageTag{seq, tag | kPointToPointTagBit}, deadline));
      return send ? absl::OkStatus() : Unstage(staged, tensor);
    };
    queue_.push_back(Item{work, std::move(task), f, false});
    queue_size_.store(queue_.size(), std::memory_order_release);
  }
  work_cv_.notify_one();
  return work;
}

}  // namespace lockstep
