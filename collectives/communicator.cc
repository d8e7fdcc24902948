#include "collectives/communicator.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <sched.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/completable_work.h"
#include "collectives/internal/communicator_checks.h"
#include "collectives/internal/task_work.h"
#include "core/dtype.h"
#include "core/status.h"

namespace lockstep {
namespace {

// On the wire a tag carries kPointToPointTagBit, and tags from 0xFFFFFF00
// up are the transports' own (abort): user tags stay below 2^31 - 256.
constexpr uint32_t kPointToPointTagLimit = 0x7FFFFF00u;

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
    case 11: return "AllGatherV";
    case 12: return "ReduceScatterV";
    case 13: return "GatherV";
    case 14: return "ScatterV";
    case 15: return "AllToAll";
    case 16: return "AllToAllV";
    case 17: return "AllReduceCoalesced";
    case 18: return "BroadcastCoalesced";
    case 19: return "RecvAnySource";
    case 20: return "Split";
  }
  return "?";
}

}  // namespace

absl::Status ValidateCommunicatorOptions(const CommunicatorOptions& options) {
  if (options.timeout <= Milliseconds(0)) {
    return absl::InvalidArgumentError(absl::StrCat("CommunicatorOptions.timeout is ", options.timeout.count(),
                                                   " ms; it must be positive (default 300000)"));
  }
  if (options.wait_spin_microseconds < 0 || options.wait_spin_microseconds > 1000000) {
    return absl::InvalidArgumentError(absl::StrCat("CommunicatorOptions.wait_spin_microseconds is ",
                                                   options.wait_spin_microseconds,
                                                   "; it must be in [0, 1000000] (default 100)"));
  }
  if (options.worker_spin_microseconds < 0 || options.worker_spin_microseconds > 1000000) {
    return absl::InvalidArgumentError(absl::StrCat("CommunicatorOptions.worker_spin_microseconds is ",
                                                   options.worker_spin_microseconds,
                                                   "; it must be in [0, 1000000] (default 50)"));
  }
  if (options.max_object_bytes < 1 || options.max_object_bytes > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat("CommunicatorOptions.max_object_bytes is ",
                                                   options.max_object_bytes,
                                                   "; it must be in [1, 2^40] (default 2^30)"));
  }
  if (options.flight_recorder_entries < 0 || options.flight_recorder_entries > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("CommunicatorOptions.flight_recorder_entries is ",
                                                   options.flight_recorder_entries,
                                                   "; it must be in [0, 2^20] (default 64; 0: off)"));
  }
  if (options.failure_report_window < Milliseconds(0)) {
    return absl::InvalidArgumentError(absl::StrCat("CommunicatorOptions.failure_report_window is ",
                                                   options.failure_report_window.count(),
                                                   " ms; it must be >= 0 (default 1000)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(std::unique_ptr<Backend> backend,
                                                                   CommunicatorOptions options,
                                                                   std::shared_ptr<Store> failure_store) {
  if (backend == nullptr) return absl::InvalidArgumentError("Communicator::Create: no backend");
  LOCKSTEP_RETURN_IF_ERROR(ValidateCommunicatorOptions(options));
  // TORCH_DISTRIBUTED_DEBUG's levels.
  if (const char* debug = std::getenv("LOCKSTEP_DEBUG"); debug != nullptr && *debug != '\0') {
    const std::string level = absl::AsciiStrToUpper(debug);
    if (level == "INFO" || level == "DETAIL") options.log_summary = true;
    if (level == "DETAIL") options.debug_checks = true;
    if (level != "OFF" && level != "INFO" && level != "DETAIL") {
      return absl::InvalidArgumentError(absl::StrCat("Communicator::Create: LOCKSTEP_DEBUG='", debug,
                                                     "' is not a debug level; use OFF, INFO (a line at creation, "
                                                     "operation counts at the end) or DETAIL (also compare every "
                                                     "operation's fingerprint across ranks)"));
    }
  }
  if (const char* dir = std::getenv("LOCKSTEP_DUMP_ON_FAILURE");
      dir != nullptr && *dir != '\0' && options.dump_on_failure.empty()) {
    options.dump_on_failure = dir;
  }
  const int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    return absl::InternalError(absl::StrCat("Communicator::Create: eventfd failed: ", std::strerror(errno)));
  }
  auto comm = std::unique_ptr<Communicator>(
      new Communicator(std::move(backend), std::move(options), std::move(failure_store)));
  comm->wake_ = Fd(wake);
  comm->worker_ = std::thread([c = comm.get()] { c->WorkerLoop(); });
  if (comm->options_.log_summary) {
    std::fprintf(stderr, "[lockstep] rank %d of %d: communicator created: backend %s, timeout %lld ms, checks %s\n",
                 comm->rank_, comm->size_, comm->capabilities_.name.c_str(),
                 static_cast<long long>(comm->options_.timeout.count()),
                 comm->options_.debug_checks ? "DETAIL (fingerprints compared)" : "off");
  }
  return comm;
}

Communicator::Communicator(std::unique_ptr<Backend> backend, CommunicatorOptions options,
                           std::shared_ptr<Store> store)
    : backend_(std::move(backend)), store_(std::move(store)), options_(std::move(options)),
      recorder_(static_cast<size_t>(options_.flight_recorder_entries)),
      rank_(backend_->rank()), size_(backend_->size()), capabilities_(backend_->capabilities()),
      coarse_tick_(CoarseResolution()),
      help_gate_(std::make_shared<HelpGate>()), sequence_gate_(std::make_shared<HelpGate>()) {
  help_gate_->comm = this;
  sequence_gate_->comm = this;
  std::weak_ptr<HelpGate> sequence_gate = sequence_gate_;
  sequencer_ = std::make_shared<const Work::Sequencer>([sequence_gate](std::function<void()> run) {
    std::shared_ptr<HelpGate> g = sequence_gate.lock();
    if (g == nullptr) return false;
    std::lock_guard<std::mutex> lock(g->mu);
    return g->comm != nullptr && g->comm->EnqueueContinuation(std::move(run));
  });
  // The waiting thread runs queued operations itself while this
  // communicator's thread is idle (Work::SetHelper). The gate outlives the
  // communicator: a Work waited on after it is gone helps nobody.
  // The awaited Work is passed at each call (not captured): a Work chained
  // from another inherits the helper and must be the one checked, since
  // the other may be gone by then. One helper serves every Work.
  // The helper owns the gate (a mutex and a pointer): no weak_ptr to lock
  // on every Wait.
  helper_ = std::make_shared<const Work::Helper>([g = help_gate_](Work* awaited) {
    // try_lock: a Then callback that waits inside a helped operation must
    // not deadlock on the gate; it simply waits without helping.
    std::unique_lock<std::mutex> lock(g->mu, std::try_to_lock);
    if (lock.owns_lock() && g->comm != nullptr) g->comm->HelpUntilDone(awaited);
  });
}

Communicator::~Communicator() {
  {
    // No waiting caller may start an operation from now on.
    std::lock_guard<std::mutex> gate(help_gate_->mu);
    help_gate_->comm = nullptr;
  }
  {
    // Nor queue a ThenWork step (the chain then goes on unordered).
    std::lock_guard<std::mutex> gate(sequence_gate_->mu);
    sequence_gate_->comm = nullptr;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    stopping_flag_.store(true, std::memory_order_release);
  }
  work_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  // Then the operations still on the device (each ends by its deadline).
  {
    std::lock_guard<std::mutex> lock(finish_mu_);
    finisher_stop_ = true;
  }
  finish_cv_.notify_all();
  if (finisher_.joinable()) finisher_.join();
  if (options_.log_summary) {
    std::string counts;
    uint64_t total = 0;
    for (int op = 1; op < kOpTypes; ++op) {
      if (op_counts_[op] == 0) continue;
      absl::StrAppend(&counts, counts.empty() ? "" : ", ", OpTypeName(op), " ", op_counts_[op]);
      total += op_counts_[op];
    }
    const absl::Status broken = broken_status();
    std::fprintf(stderr, "[lockstep] rank %d of %d: communicator destroyed after %llu operations%s%s%s\n", rank_,
                 size_, static_cast<unsigned long long>(total), counts.empty() ? "" : ": ", counts.c_str(),
                 broken.ok() ? "" : absl::StrCat("; broken by: ", broken.message()).c_str());
  }
}

absl::Status Communicator::broken_status() {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

std::shared_ptr<Work> Communicator::Failed(absl::Status status) {
  return CompletableWork::Done(std::move(status), options_.wait_spin_microseconds);
}

absl::Status Communicator::CheckDevice(const Tensor& t, const char* op, const char* what) const {
  if (!t.defined()) return absl::OkStatus();
  const BackendCapabilities& caps = capabilities_;
  if (t.device().is_cpu() ? caps.cpu_tensors : caps.cuda_tensors) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " is on ", t.device().ToString(), ", which the ",
                                                 caps.name, " backend does not accept; move it to ",
                                                 caps.cpu_tensors ? "the CPU" : "a CUDA device"));
}

std::shared_ptr<CompletableWork> Communicator::NewWork() {
  auto work = CompletableWork::Create(options_.wait_spin_microseconds);
  work->SetHelper(helper_);
  work->SetSequencer(sequencer_);
  return work;
}

void Communicator::PushLocked(Item item) {
  if (step_thread_ == std::this_thread::get_id()) {
    queue_.insert(step_queued_++, std::move(item));
  } else {
    queue_.push_back(std::move(item));
  }
  queue_size_.store(queue_.size(), std::memory_order_release);
  enqueued_.store(enqueued_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // Under mu_.
}

bool Communicator::EnqueueContinuation(std::function<void()> run) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok() || stopping_) return false;
    Item item;
    item.continuation = std::make_unique<std::function<void()>>(std::move(run));
    PushLocked(std::move(item));
    wake = worker_sleeping_;
  }
  if (wake) work_cv_.notify_one();
  return true;
}

std::shared_ptr<Work> Communicator::EnqueueTask(Fingerprint fingerprint,
                                                std::shared_ptr<communicator_internal::TaskWork> work) {
  work->SetHelper(helper_);
  work->SetSequencer(sequencer_);
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) {
      work->ReleaseTask();
      work->Complete(broken_);
      return work;
    }
    // Numbered when it runs (TakeFrontLocked): the order that every rank shares.
    Item item;
    item.task = work.get();
    item.work = work;
    item.fingerprint = fingerprint;
    PushLocked(std::move(item));
    wake = worker_sleeping_;
  }
  if (wake) work_cv_.notify_one();
  return work;
}

absl::Status Communicator::Break(const absl::Status& status) {
  backend_->Abort(status.message());  // Peers blocked on us fail now, not at their deadline.
  absl::Status shared = ShareFailure(status);
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_.ok()) broken_ = shared;
  return shared;
}

void Communicator::WorkerLoop() {
  const auto spin = std::chrono::microseconds(options_.worker_spin_microseconds);
  while (true) {
    Item item;
    absl::Status broken;
    {
      // The next operation often follows within microseconds (a training
      // step's buckets, a benchmark loop): look for it, yielding the core to
      // the caller's thread, before sleeping, because a thread woken from a
      // futex on these VMs can take tens of microseconds. While a waiting
      // caller runs the operations itself (HelpUntilDone), keep looking
      // rather than sleep: each operation would otherwise cost a futex wake
      // on the caller's path and a context switch on its core. Any new
      // operation restarts the window.
      uint64_t seen = enqueued_.load(std::memory_order_relaxed);
      Deadline spin_until = SteadyClock::now() + spin;
      std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
      while (true) {
        bool spinning = true;
        while (!stopping_flag_.load(std::memory_order_acquire)) {
          if (queue_size_.load(std::memory_order_acquire) != 0 && !helping_.load(std::memory_order_acquire)) break;
          const Deadline now = SteadyClock::now();
          const uint64_t enqueued = enqueued_.load(std::memory_order_relaxed);
          if (enqueued != seen) {
            seen = enqueued;
            spin_until = now + spin;
          } else if (now >= spin_until) {
            spinning = false;
            break;
          }
          sched_yield();
        }
        lock.lock();
        // A caller took the operation meanwhile: keep looking while in the
        // window rather than sleep.
        if (!spinning || stopping_ || (!running_ && !queue_.empty())) break;
        lock.unlock();
      }
      // One runner at a time: a waiting caller may be running operations.
      worker_sleeping_ = true;
      work_cv_.wait(lock, [&] { return !running_ && (stopping_ || !queue_.empty()); });
      worker_sleeping_ = false;
      if (queue_.empty()) return;  // Stopping, and everything queued ran.
      item = TakeFrontLocked(&broken);
    }
    RunItem(item, broken);
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
    // Nobody else waits on work_cv_: no notification.
  }
}

void Communicator::HelpUntilDone(Work* awaited) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!running_ && !queue_.empty() && !awaited->IsCompleted()) {
    {
      absl::Status broken;
      Item item = TakeFrontLocked(&broken);
      helping_.store(true, std::memory_order_release);
      lock.unlock();
      RunItem(item, broken);
    }  // The item (its tensors, its task's captures) is released outside the lock.
    lock.lock();
    running_ = false;
    helping_.store(false, std::memory_order_release);
  }
  // The worker sleeps only when it has nothing to run: wake it only if it
  // now has (operations queued behind ours, or the communicator stops).
  const bool wake = worker_sleeping_ && (stopping_ || !queue_.empty());
  lock.unlock();
  if (wake) work_cv_.notify_all();
}

Communicator::Item Communicator::TakeFrontLocked(absl::Status* broken) {
  Item item = queue_.pop_front();
  queue_size_.store(queue_.size(), std::memory_order_release);
  running_ = true;
  *broken = broken_;
  if (item.continuation) {
    // A ThenWork step: the collectives it starts run next, in its order.
    step_thread_ = std::this_thread::get_id();
    step_queued_ = 0;
  } else if (broken->ok() && item.task) {
    // Collectives are numbered in the order they run.
    item.fingerprint.seq = next_seq_++;
    ++op_counts_[item.fingerprint.op % kOpTypes];
  }
  return item;
}

void Communicator::RunItem(Item& item, const absl::Status& broken) {
  if (item.continuation) {
    (*item.continuation)();
    std::lock_guard<std::mutex> lock(mu_);
    step_thread_ = std::thread::id();
    return;
  }
  // One clock read serves the deadline and the flight recorder: the
  // coarse clock (an eighth of a fine read's cost, per operation), so the
  // deadline counts from up to one tick earlier and gets that tick added:
  // an operation never fails before its timeout.
  const SteadyClock::time_point started = CoarseNow();
  if (broken.ok() && item.task) item.record = recorder_.Start(RecordOf(item.fingerprint), started);
  if (!broken.ok()) {
    // Outside the lock: the Work's callbacks may start more operations.
    if (item.task != nullptr) item.task->ReleaseTask();
    item.work->Complete(broken);
    return;
  }
  if (!item.task) {
    RunPointToPointBatch(std::move(item));
    return;
  }
  OpContext op_ctx{item.fingerprint.seq, DeadlineAfter(started + coarse_tick_, options_.timeout), nullptr};
  // One pointer captured: std::function keeps it inline (no allocation per
  // operation).
  struct Queued {
    CompletableWork* work;
    std::function<absl::Status()> finish;
  } queued{item.work.get(), nullptr};
  std::function<absl::Status()>& finish = queued.finish;
  op_ctx.queued = [q = &queued](std::shared_ptr<StreamMarker> marker, std::function<absl::Status()> finish_op) {
    q->work->SetStreamMarker(std::move(marker));
    q->finish = std::move(finish_op);
  };
  absl::Status status;
  if (options_.debug_checks && size_ > 1) status = CheckFingerprints(item.fingerprint, op_ctx);
  if (status.ok()) status = item.task->RunTask(op_ctx);
  if (status.ok() && finish) {
    // Queued on the device: the completion thread finishes it.
    Defer(std::move(item), std::move(finish));
    return;
  }
  // The task's captures (the caller's tensors) are released before the
  // Work completes: once Wait returns, the communicator holds none of them.
  item.task->ReleaseTask();
  recorder_.Finish(item.record, status.ok());
  if (!status.ok()) status = Fail(item.fingerprint, status);
  item.work->Complete(status);
}

absl::Status Communicator::Fail(const Fingerprint& fingerprint, const absl::Status& status) {
  const absl::Status described(status.code(), absl::StrCat("rank ", rank_, ": ", Describe(fingerprint),
                                                           " failed: ", status.message()));
  // Operations that were on the device together fail together: the first
  // failure breaks the group (and is shared), the others report their own.
  if (!broken_status().ok()) return described;
  return Break(described);
}

void Communicator::Defer(Item item, std::function<absl::Status()> finish) {
  std::lock_guard<std::mutex> lock(finish_mu_);
  if (!finisher_.joinable()) finisher_ = std::thread([this] { FinisherLoop(); });
  to_finish_.push_back(Deferred{std::move(item), std::move(finish)});
  finish_cv_.notify_one();
}

void Communicator::FinisherLoop() {
  while (true) {
    Deferred d;
    {
      std::unique_lock<std::mutex> lock(finish_mu_);
      finish_cv_.wait(lock, [&] { return finisher_stop_ || !to_finish_.empty(); });
      if (to_finish_.empty()) return;  // Stopping, and everything deferred finished.
      d = std::move(to_finish_.front());
      to_finish_.pop_front();
    }
    absl::Status status = d.finish();
    d.item.task->ReleaseTask();  // The device is done with the tensors.
    recorder_.Finish(d.item.record, status.ok());
    if (!status.ok()) status = Fail(d.item.fingerprint, status);
    d.item.work->Complete(status);
  }
}

// The operations of one point-to-point batch: the first, then whatever is
// posted while it runs, up to the next collective.
class Communicator::Batch : public PointToPointSource {
 public:
  Batch(Communicator& comm, Item first) : comm_(comm) { pending_.push_back(std::move(first)); }

  void Take(std::vector<PointToPointOp>* ops) override {
    uint64_t drained;
    (void)::read(comm_.wake_.get(), &drained, sizeof(drained));  // Re-arms the wake-up.
    std::lock_guard<std::mutex> lock(comm_.mu_);
    // Point-to-point operations only: a ThenWork step queued behind them
    // runs after the batch, as a step.
    while (!comm_.queue_.empty() && comm_.queue_.front().p2p) {
      pending_.push_back(std::move(comm_.queue_.front()));
      comm_.queue_.pop_front();
    }
    comm_.queue_size_.store(comm_.queue_.size(), std::memory_order_release);
    for (; handed_ < pending_.size(); ++handed_) {
      Item& item = pending_[handed_];
      PointToPointOp op = std::move(*item.p2p);
      std::shared_ptr<CompletableWork> work = item.work;
      FlightRecorder* recorder = &comm_.recorder_;
      const uint64_t record = item.record = recorder->Start(RecordOf(item.fingerprint));
      if (op.send) {
        op.done = [work, recorder, record](int) {
          recorder->Finish(record, true);
          work->Complete(absl::OkStatus());
        };
      } else {
        op.done = [work, recorder, record](int source) {
          recorder->Finish(record, true);
          work->SetSourceRank(source);
          work->Complete(absl::OkStatus());
        };
      }
      ops->push_back(std::move(op));
    }
  }
  int wake_fd() const override { return comm_.wake_.get(); }

  // Fails every operation of the batch that has not finished.
  void Fail(const absl::Status& status) {
    for (Item& item : pending_) {
      comm_.recorder_.Finish(item.record, false);  // Ignored for those done.
      item.work->Complete(absl::Status(status.code(), absl::StrCat("rank ", comm_.rank_, ": ",
                                                                   Describe(item.fingerprint), " failed: ",
                                                                   status.message())));
    }
  }

 private:
  Communicator& comm_;
  std::deque<Item> pending_;  // Deque: items keep their addresses.
  size_t handed_ = 0;
};

void Communicator::RunPointToPointBatch(Item first) {
  Batch batch(*this, std::move(first));
  {
    std::lock_guard<std::mutex> lock(mu_);
    p2p_running_ = true;
  }
  absl::Status status = backend_->RunPointToPoint(batch, DeadlineIn(options_.timeout));
  {
    std::lock_guard<std::mutex> lock(mu_);
    p2p_running_ = false;
  }
  if (!status.ok()) {
    status = Break(absl::Status(status.code(), absl::StrCat("point-to-point: ", status.message())));
    batch.Fail(status);  // Completed operations keep their OK status.
  }
}

absl::Status Communicator::ShareFailure(absl::Status status) {
  const std::string recorded = recorder_.ToJson(rank_, /*last=*/16);
  if (store_ == nullptr || size_ == 1) {
    if (!options_.dump_on_failure.empty()) DumpFlightRecorder({});
    return status;
  }
  // Every failing rank posts its error and its flight recorder, and appends
  // its rank to a log of failures; each reads the log in order, so it waits
  // only for failures still to come, never on a rank that is not failing.
  // The store may hang with the rank that hosts it (a stopped process still
  // accepts connections): the exchange runs on a thread of its own, and this
  // rank takes whatever reports arrived within the window. The thread owns
  // everything it touches, so it may outlive this call (until the store's
  // own timeout) without harm.
  struct Reports {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::string> texts;
    std::vector<std::string> recorders;  // Peers' flight recorders (JSON).
    bool done = false;
  };
  auto reports = std::make_shared<Reports>();
  const Deadline until = DeadlineIn(options_.failure_report_window);
  std::thread([store = store_, reports, until, rank = rank_, size = size_, recorded,
               message = std::string(status.message())] {
    const auto left = [until] {
      return std::max(Milliseconds(0), std::chrono::duration_cast<Milliseconds>(until - SteadyClock::now()));
    };
    bool posted = store->Set(absl::StrCat("recorder/", rank), recorded).ok() &&
                  store->Set(absl::StrCat("failure/", rank), message).ok();
    absl::StatusOr<int64_t> index = posted ? store->Add("failure_count", 1) : absl::StatusOr<int64_t>(0);
    posted = posted && index.ok() && store->Set(absl::StrCat("failure_log/", *index - 1), absl::StrCat(rank)).ok();
    for (int i = 0; posted && i < size && left() > Milliseconds(0); ++i) {
      absl::StatusOr<std::string> who = store->Get(absl::StrCat("failure_log/", i), left());
      int peer = -1;
      if (!who.ok() || !absl::SimpleAtoi(*who, &peer) || peer < 0 || peer >= size) break;
      if (peer == rank) continue;
      absl::StatusOr<std::string> text = store->Get(absl::StrCat("failure/", peer), left());
      absl::StatusOr<std::string> peer_recorded = store->Get(absl::StrCat("recorder/", peer), left());
      std::lock_guard<std::mutex> lock(reports->mu);
      if (text.ok()) reports->texts.push_back(*text);
      if (peer_recorded.ok()) reports->recorders.push_back(*peer_recorded);
    }
    std::lock_guard<std::mutex> lock(reports->mu);
    reports->done = true;
    reports->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(reports->mu);
  reports->cv.wait_until(lock, until, [&] { return reports->done; });
  const std::vector<std::string> texts = reports->texts, recorders = reports->recorders;
  lock.unlock();
  std::string message(status.message());
  if (recorder_.capacity() > 0) {
    // Every rank's place, this one's and those that reported; the others
    // are in no failed operation of this group.
    std::vector<RankReport> by_rank(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) by_rank[r].rank = r;
    std::vector<std::string> all = recorders;
    all.push_back(recorded);
    for (const std::string& json : all) {
      absl::StatusOr<RankReport> report = ParseRankReport(json);
      if (report.ok() && report->rank >= 0 && report->rank < size_) by_rank[report->rank] = *std::move(report);
    }
    absl::StrAppend(&message, ". ", AnalyzeFlightRecords(by_rank));
  }
  if (!texts.empty()) absl::StrAppend(&message, ". Other ranks reported: ", absl::StrJoin(texts, " | "));
  if (!options_.dump_on_failure.empty()) DumpFlightRecorder(recorders);
  return absl::Status(status.code(), message);
}

void Communicator::DumpFlightRecorder(const std::vector<std::string>& reports) {
  const std::string path = absl::StrCat(options_.dump_on_failure, "/flight_recorder_rank", rank_, ".json");
  const std::string temp = path + ".tmp";
  std::string json = absl::StrCat("{\"rank\": ", rank_, ", \"size\": ", size_,
                                  ", \"recorder\": ", recorder_.ToJson(rank_), ", \"peers\": [",
                                  absl::StrJoin(reports, ", "), "]}\n");
  // Written aside and renamed: a reader never sees half a file.
  FILE* f = std::fopen(temp.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "[lockstep] rank %d: could not write the flight recorder to %s: %s\n", rank_,
                 temp.c_str(), std::strerror(errno));
    return;
  }
  const bool written = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  if (std::fclose(f) != 0 || !written || std::rename(temp.c_str(), path.c_str()) != 0) {
    std::fprintf(stderr, "[lockstep] rank %d: could not write the flight recorder to %s\n", rank_, path.c_str());
    std::remove(temp.c_str());
    return;
  }
  std::fprintf(stderr, "[lockstep] rank %d: flight recorder written to %s\n", rank_, path.c_str());
}

FlightRecord Communicator::RecordOf(const Fingerprint& f) {
  const auto is = [&f](OpType op) { return f.op == static_cast<uint8_t>(op); };
  FlightRecord r;
  r.seq = f.seq;
  r.op = OpTypeName(f.op);
  r.dtype = f.dtype;
  r.count = f.count;
  r.point_to_point = is(OpType::kSend) || is(OpType::kRecv) || is(OpType::kRecvAnySource);
  r.peer = is(OpType::kRecvAnySource) ? -2 : f.root;
  r.tag = f.tag;
  if (is(OpType::kAllReduce) || is(OpType::kReduce) || is(OpType::kReduceScatter) || is(OpType::kReduceScatterV) ||
      is(OpType::kAllReduceCoalesced)) {
    r.reduce_op = f.reduce_op;
  }
  return r;
}

std::string Communicator::Describe(const Fingerprint& f) {
  const auto is = [&f](OpType op) { return f.op == static_cast<uint8_t>(op); };
  std::string s = absl::StrCat(OpTypeName(f.op), " #", f.seq, " (");
  if (!is(OpType::kBarrier)) {
    absl::StrAppend(&s, DTypeName(static_cast<DType>(f.dtype)));
    if (!is(OpType::kAllToAllV)) absl::StrAppend(&s, ", count ", f.count);
  }
  if (is(OpType::kAllReduce) || is(OpType::kReduce) || is(OpType::kReduceScatter) || is(OpType::kReduceScatterV) ||
      is(OpType::kAllReduceCoalesced)) {
    absl::StrAppend(&s, ", ", ReduceOpName(static_cast<ReduceOp>(f.reduce_op)));
  }
  if (f.layout != 0) absl::StrAppend(&s, ", layout ", absl::Hex(f.layout, absl::kZeroPad8));
  if (is(OpType::kSend)) {
    absl::StrAppend(&s, ", to rank ", f.root, ", tag ", f.tag);
  } else if (is(OpType::kRecv)) {
    absl::StrAppend(&s, ", from rank ", f.root, ", tag ", f.tag);
  } else if (is(OpType::kRecvAnySource)) {
    absl::StrAppend(&s, ", from any rank, tag ", f.tag);
  } else if (f.root >= 0) {
    absl::StrAppend(&s, ", root ", f.root);
  }
  return s + ")";
}

absl::Status Communicator::CheckFingerprints(const Fingerprint& mine, const OpContext& op_ctx) {
  std::vector<Fingerprint> all(size_);
  LOCKSTEP_RETURN_IF_ERROR(backend_->AllGatherBytes(&mine, sizeof(Fingerprint), all.data(), op_ctx));
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

std::shared_ptr<Work> Communicator::Send(const Tensor& tensor, int dst, uint32_t tag) {
  return EnqueuePointToPoint(dst, tag, /*send=*/true, tensor);
}

std::shared_ptr<Work> Communicator::Recv(const Tensor& tensor, int src, uint32_t tag) {
  return EnqueuePointToPoint(src, tag, /*send=*/false, tensor);
}

std::shared_ptr<Work> Communicator::RecvAnySource(const Tensor& tensor, uint32_t tag) {
  return EnqueuePointToPoint(PointToPointOp::kAnySource, tag, /*send=*/false, tensor);
}

std::shared_ptr<Work> Communicator::EnqueuePointToPoint(int peer, uint32_t tag, bool send, const Tensor& tensor) {
  const bool any_source = !send && peer == PointToPointOp::kAnySource;
  const char* name = send ? "Send" : any_source ? "RecvAnySource" : "Recv";
  if (any_source && size_ == 1) {
    return Failed(absl::InvalidArgumentError(
        "RecvAnySource: this rank is alone in its group (world size 1), so no message can ever come"));
  }
  if (any_source && !capabilities_.any_source_receive) {
    return Failed(absl::UnimplementedError(absl::StrCat(
        "RecvAnySource: the ", capabilities_.name,
        " backend cannot receive from any rank (NCCL has no wildcard receive); name the sender with Recv")));
  }
  if (!any_source && (peer < 0 || peer >= size_ || peer == rank_)) {
    return Failed(absl::InvalidArgumentError(absl::StrCat(name, ": peer ", peer, " is not another rank (this is rank ",
                                                          rank_, " of ", size_, ")")));
  }
  if (tag >= kPointToPointTagLimit) {
    return Failed(absl::InvalidArgumentError(absl::StrCat(name, ": tag ", tag, " must be below ", kPointToPointTagLimit,
                                                          " (2^31 - 256)")));
  }
  if (auto s = communicator_internal::CheckTensor(tensor, name, "tensor"); !s.ok()) return Failed(s);
  if (auto s = CheckDevice(tensor, name, "tensor"); !s.ok()) return Failed(s);
  if (!capabilities_.point_to_point) {
    return Failed(absl::UnimplementedError(absl::StrCat(name, ": the ", capabilities_.name,
                                                        " backend has no point-to-point operations")));
  }
  std::shared_ptr<CompletableWork> work = NewWork();
  bool wake = false, wake_worker = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) {
      work->Complete(broken_);
      return work;
    }
    // Point-to-point messages are numbered per (peer, tag) and direction,
    // not in the collective sequence (only two ranks take part). A send's
    // number travels with it; a receive's only names it in messages.
    const uint64_t seq = send ? send_seq_[{peer, tag}]++ : any_source ? recv_any_seq_[tag]++ : recv_seq_[{peer, tag}]++;
    const OpType type = send ? OpType::kSend : any_source ? OpType::kRecvAnySource : OpType::kRecv;
    ++op_counts_[static_cast<uint8_t>(type)];
    Item item;
    item.work = work;
    item.fingerprint = Fingerprint{seq, static_cast<uint8_t>(type), static_cast<uint8_t>(tensor.dtype()), 0, 0, peer,
                                   tensor.numel(), tag, 0};
    item.p2p = std::make_unique<PointToPointOp>();
    item.p2p->send = send;
    item.p2p->peer = peer;
    item.p2p->tag = tag;
    item.p2p->seq = seq;
    item.p2p->tensor = tensor;
    // At a ThenWork step's place when the step posts it, as collectives.
    PushLocked(std::move(item));
    wake = p2p_running_;
    wake_worker = worker_sleeping_;
  }
  if (wake) {
    const uint64_t one = 1;
    (void)::write(wake_.get(), &one, sizeof(one));  // The running batch takes it.
  }
  if (wake_worker) work_cv_.notify_one();
  return work;
}

}  // namespace lockstep
