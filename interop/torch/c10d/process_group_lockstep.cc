#include "interop/torch/c10d/process_group_lockstep.h"

#include <ATen/ATen.h>
#include <sys/random.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "collectives/bootstrap/init_from_env.h"
#include "collectives/monitored_barrier.h"
#include "collectives/work_promise.h"
#include "core/status.h"
#include "interop/torch/bridge/tensor_bridge.h"
#include "interop/torch/c10d/huge_pages.h"
#include "interop/torch/c10d/torch_store.h"
#include "interop/torch/c10d/torch_work.h"

namespace lockstep {
namespace {

using ::c10d::OpType;
using TorchWorkPtr = c10::intrusive_ptr<::c10d::Work>;

// Throws the status (c10::Error, a RuntimeError in Python) unless OK.
void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) TORCH_CHECK(false, std::string(status.message()));
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  ThrowIfError(value.status());
  return *std::move(value);
}

// The torch tensor an operation reads or writes, as lockstep sees it: its
// own memory when dense and contiguous, else a contiguous copy that
// WriteBack copies into it once the operation succeeded.
struct Staged {
  at::Tensor original;
  at::Tensor dense;
  Tensor view;

  void WriteBack() const {
    if (!dense.is_same(original)) original.copy_(dense.view(original.sizes()));
  }
};

void CheckTensor(const at::Tensor& t, const char* op, const char* what) {
  TORCH_CHECK(t.defined(), "lockstep ", op, ": ", what, " is an undefined tensor");
  TORCH_CHECK(t.layout() == at::kStrided, "lockstep ", op, ": ", what, " is a ", t.layout(),
              " tensor; the lockstep backend reduces dense tensors only (call .to_dense(), or use gloo for "
              "sparse all-reduce)");
}

Staged Stage(const at::Tensor& t, const char* op, const char* what, HugePageAdvisor* advisor) {
  CheckTensor(t, op, what);
  Staged s;
  s.original = t;
  s.dense = t.is_contiguous() ? t : t.contiguous();
  if (advisor != nullptr && s.dense.device().is_cpu()) advisor->Advise(s.dense.data_ptr(), s.dense.nbytes());
  absl::StatusOr<Tensor> view = FromTorch(s.dense);
  if (!view.ok()) {
    TORCH_CHECK(false, "lockstep ", op, ": ", what, ": ", std::string(view.status().message()));
  }
  s.view = *std::move(view);
  return s;
}

// A contiguous tensor of n elements of `like`'s dtype and device, and its view.
std::pair<at::Tensor, Tensor> Flat(const at::Tensor& like, int64_t n) {
  at::Tensor flat = at::empty({n}, like.options().memory_format(at::MemoryFormat::Contiguous));
  return {flat, ValueOrThrow(FromTorch(flat))};
}

ReduceOp ToReduceOp(const ::c10d::ReduceOp& op, const char* name) {
  switch (op.op_) {
    case ::c10d::ReduceOp::SUM:
      return ReduceOp::kSum;
    case ::c10d::ReduceOp::AVG:
      return ReduceOp::kAvg;
    case ::c10d::ReduceOp::PRODUCT:
      return ReduceOp::kProd;
    case ::c10d::ReduceOp::MIN:
      return ReduceOp::kMin;
    case ::c10d::ReduceOp::MAX:
      return ReduceOp::kMax;
    case ::c10d::ReduceOp::BAND:
      return ReduceOp::kBand;
    case ::c10d::ReduceOp::BOR:
      return ReduceOp::kBor;
    case ::c10d::ReduceOp::BXOR:
      return ReduceOp::kBxor;
    case ::c10d::ReduceOp::PREMUL_SUM:
    case ::c10d::ReduceOp::UNUSED:
      break;
  }
  TORCH_CHECK(false, "lockstep ", name, ": reduce op ", static_cast<int>(op.op_),
              " (PREMUL_SUM or UNUSED) is not supported; use SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR or BXOR");
}

void CheckOne(const std::vector<at::Tensor>& tensors, const char* op) {
  TORCH_CHECK(tensors.size() == 1, "lockstep ", op, ": expects one tensor per process, got ", tensors.size());
}

void CheckRank(int64_t rank, int size, const char* op, const char* what) {
  TORCH_CHECK(rank >= 0 && rank < size, "lockstep ", op, ": ", what, " ", rank, " is not a rank of this group (size ",
              size, ")");
}

void CheckLike(const at::Tensor& t, const at::Tensor& like, const char* op, const char* what) {
  CheckTensor(t, op, what);
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), "lockstep ", op, ": ", what, " is ", t.scalar_type(),
              " but the input is ", like.scalar_type(), "; every tensor must have the input's dtype");
  TORCH_CHECK(t.numel() == like.numel(), "lockstep ", op, ": ", what, " has ", t.numel(),
              " elements but the input has ", like.numel(), "; every tensor must have the input's size");
}

uint32_t Tag(int tag, const char* op) {
  TORCH_CHECK(tag >= 0 && static_cast<uint32_t>(tag) < kMonitoredBarrierTag, "lockstep ", op, ": tag ", tag,
              " is outside [0, ", kMonitoredBarrierTag, ")");
  return static_cast<uint32_t>(tag);
}

// Copies `flat`'s consecutive blocks into `tensors` (each its own size).
absl::Status Unpack(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) {
  try {
    int64_t offset = 0;
    for (const at::Tensor& t : tensors) {
      t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
    return absl::OkStatus();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("lockstep: copying results out: ", e.what_without_backtrace()));
  }
}

// The tensors one after another in one contiguous tensor.
at::Tensor Pack(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const at::Tensor& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

std::function<absl::Status()> WriteBackAll(std::vector<Staged> staged) {
  bool any = false;
  for (const Staged& s : staged) any = any || !s.dense.is_same(s.original);
  if (!any) return nullptr;
  return [staged = std::move(staged)]() -> absl::Status {
    try {
      for (const Staged& s : staged) s.WriteBack();
      return absl::OkStatus();
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat("lockstep: copying results out: ", e.what_without_backtrace()));
    }
  };
}

// The group secret: LOCKSTEP_STORE_TOKEN, else rank 0's random one
// through the store.
absl::StatusOr<std::string> GroupSecret(Store& store, int rank, const EnvLookup& env,
                                        std::chrono::milliseconds timeout) {
  if (const char* token = env("LOCKSTEP_STORE_TOKEN"); token != nullptr && *token != '\0') return std::string(token);
  constexpr char kKey[] = "lockstep_torch/secret";
  if (rank == 0) {
    unsigned char bytes[32];
    size_t got = 0;
    while (got < sizeof(bytes)) {
      const ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
      if (n < 0) return absl::InternalError("ProcessGroupLockstep: getrandom failed");
      got += static_cast<size_t>(n);
    }
    const std::string secret =
        absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
    LOCKSTEP_RETURN_IF_ERROR(store.Set(kKey, secret));
    return secret;
  }
  return store.Get(kKey, timeout);
}

}  // namespace

absl::StatusOr<c10::intrusive_ptr<ProcessGroupLockstep>> ProcessGroupLockstep::Create(
    const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout,
    const EnvLookup& env) {
  if (!store) return absl::InvalidArgumentError("ProcessGroupLockstep: no store");
  auto lockstep_store = std::make_shared<TorchStore>(store);
  lockstep_store->set_timeout(timeout);
  InitOptions options;
  options.store_timeout = timeout;
  options.communicator.communicator.timeout = timeout;
  options.communicator.transport.timeout = timeout;
  absl::StatusOr<std::string> secret = GroupSecret(*lockstep_store, rank, env, timeout);
  if (!secret.ok()) {
    return absl::Status(secret.status().code(),
                        absl::StrCat("ProcessGroupLockstep: rank ", rank,
                                     " could not get the group's secret from the store: ", secret.status().message()));
  }
  options.communicator.transport.secret = *secret;
  LOCKSTEP_ASSIGN_OR_RETURN(lockstep::ProcessGroup group,
                            JoinGroupOnStore(lockstep_store, rank, size, "torch.distributed", env, options));
  return c10::make_intrusive<ProcessGroupLockstep>(std::move(group.comm), std::move(group.store));
}

c10::intrusive_ptr<ProcessGroupLockstep> ProcessGroupLockstep::Create(const c10::intrusive_ptr<::c10d::Store>& store,
                                                                      int rank, int size,
                                                                      std::chrono::milliseconds timeout) {
  return ValueOrThrow(
      Create(store, rank, size, timeout, [](const char* name) -> const char* { return std::getenv(name); }));
}

ProcessGroupLockstep::ProcessGroupLockstep(std::unique_ptr<Communicator> comm, std::shared_ptr<Store> store)
    : TorchBackendBase(comm->rank(), comm->size()), store_(std::move(store)), comm_(std::move(comm)) {}

c10::intrusive_ptr<ProcessGroupLockstep> ProcessGroupLockstep::Create(
    const ::c10d::DistributedBackendOptions& options) {
  TORCH_CHECK(options.timeout.count() > 0, "lockstep: the group's timeout must be positive, got ",
              options.timeout.count(), " s");
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options.timeout);
  c10::intrusive_ptr<ProcessGroupLockstep> group =
      Create(options.store, options.group_rank, options.group_size, std::max(timeout, std::chrono::milliseconds(1)));
  TORCH_CHECK(options.global_ranks_in_group.empty() ||
                  static_cast<int>(options.global_ranks_in_group.size()) == options.group_size,
              "lockstep: group ", options.group_id, " has ", options.group_size, " ranks but ",
              options.global_ranks_in_group.size(), " global ranks were given");
  group->group_name_ = options.group_id;
  group->global_ranks_ = options.global_ranks_in_group;
  // torch.distributed passes none for the default group: its ranks are the
  // global ones.
  if (group->global_ranks_.empty()) {
    for (int r = 0; r < options.group_size; ++r) group->global_ranks_.push_back(r);
  }
  return group;
}

TorchWorkPtr ProcessGroupLockstep::Track(TorchWorkPtr work) {
  std::lock_guard<std::mutex> lock(coalescing_mu_);
  if (coalescing_) coalesced_.push_back(work);
  return work;
}

#if LOCKSTEP_TORCH_BACKEND_API
void ProcessGroupLockstep::startCoalescing() {
  std::lock_guard<std::mutex> lock(coalescing_mu_);
  TORCH_CHECK(!coalescing_, "lockstep startCoalescing: rank ", rank_,
              " is coalescing already; call endCoalescing first (coalescing does not nest)");
  coalescing_ = true;
  coalesced_.clear();
}

TorchWorkPtr ProcessGroupLockstep::endCoalescing() {
  std::vector<TorchWorkPtr> works;
  {
    std::lock_guard<std::mutex> lock(coalescing_mu_);
    TORCH_CHECK(coalescing_, "lockstep endCoalescing: rank ", rank_, " did not call startCoalescing");
    coalescing_ = false;
    works.swap(coalesced_);
  }
  // Completes when every operation has, with the first error among them.
  struct Pending {
    std::mutex mu;
    size_t left;
    absl::Status first_error;
    WorkPromise promise;
  };
  auto pending = std::make_shared<Pending>();
  pending->left = works.size();
  std::shared_ptr<Work> all = pending->promise.work();
  std::vector<at::Tensor> outputs;
  if (works.empty()) pending->promise.Complete(absl::OkStatus());
  for (const TorchWorkPtr& w : works) {
    w->getFuture()->addCallback([pending](c10::ivalue::Future& future) {
      std::lock_guard<std::mutex> lock(pending->mu);
      if (future.hasError() && pending->first_error.ok()) {
        pending->first_error = absl::InternalError(future.tryRetrieveErrorMessage());
      }
      if (--pending->left == 0) pending->promise.Complete(pending->first_error);
    });
  }
  return TorchWork::Create(rank_, OpType::COALESCED, all, {outputs}, nullptr, "lockstep:coalesced");
}
#endif

ProcessGroupLockstep::~ProcessGroupLockstep() {
  if (teardown_) teardown_([this] { comm_.reset(); });
}

TorchWorkPtr ProcessGroupLockstep::broadcast(std::vector<at::Tensor>& tensors, const ::c10d::BroadcastOptions& opts) {
  constexpr const char* kOp = "broadcast";
  CheckOne(tensors, kOp);
  CheckRank(opts.rootRank, size_, kOp, "root rank");
  TORCH_CHECK(opts.rootTensor == 0, "lockstep broadcast: root tensor ", opts.rootTensor, " (one tensor per process)");
  Staged s = Stage(tensors[0], kOp, "tensor", &huge_pages_);
  Count();
  std::shared_ptr<Work> work = comm_->Broadcast(s.view, static_cast<int>(opts.rootRank));
  return Track(
      TorchWork::Create(rank_, OpType::BROADCAST, work, {tensors}, WriteBackAll({s}), "lockstep:broadcast", tensors));
}

TorchWorkPtr ProcessGroupLockstep::allreduce(std::vector<at::Tensor>& tensors, const ::c10d::AllreduceOptions& opts) {
  constexpr const char* kOp = "allreduce";
  CheckOne(tensors, kOp);
  const ReduceOp op = ToReduceOp(opts.reduceOp, kOp);
  Staged s = Stage(tensors[0], kOp, "tensor", &huge_pages_);
  Count();
  std::shared_ptr<Work> work = comm_->AllReduce(s.view, op);
  return Track(
      TorchWork::Create(rank_, OpType::ALLREDUCE, work, {tensors}, WriteBackAll({s}), "lockstep:all_reduce", tensors));
}

TorchWorkPtr ProcessGroupLockstep::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                       const ::c10d::AllreduceCoalescedOptions& opts) {
  constexpr const char* kOp = "allreduce_coalesced";
  TORCH_CHECK(!tensors.empty(), "lockstep allreduce_coalesced: no tensors");
  const ReduceOp op = ToReduceOp(opts.reduceOp, kOp);
  std::vector<Staged> staged;
  std::vector<Tensor> views;
  for (const at::Tensor& t : tensors) {
    TORCH_CHECK(t.defined() && t.scalar_type() == tensors[0].scalar_type(),
                "lockstep allreduce_coalesced: every tensor must have one dtype (", tensors[0].scalar_type(), ")");
    staged.push_back(Stage(t, kOp, "tensor", &huge_pages_));
    views.push_back(staged.back().view);
  }
  Count();
  std::shared_ptr<Work> work = comm_->AllReduceCoalesced(std::move(views), op);
  return Track(TorchWork::Create(rank_, OpType::ALLREDUCE_COALESCED, work, {tensors}, WriteBackAll(std::move(staged)),
                                 "lockstep:allreduce_coalesced", tensors));
}

TorchWorkPtr ProcessGroupLockstep::reduce(std::vector<at::Tensor>& tensors, const ::c10d::ReduceOptions& opts) {
  constexpr const char* kOp = "reduce";
  CheckOne(tensors, kOp);
  CheckRank(opts.rootRank, size_, kOp, "root rank");
  TORCH_CHECK(opts.rootTensor == 0, "lockstep reduce: root tensor ", opts.rootTensor, " (one tensor per process)");
  const ReduceOp op = ToReduceOp(opts.reduceOp, kOp);
  Staged s = Stage(tensors[0], kOp, "tensor", &huge_pages_);
  Count();
  std::shared_ptr<Work> work = comm_->Reduce(s.view, s.view, op, static_cast<int>(opts.rootRank));
  return Track(
      TorchWork::Create(rank_, OpType::REDUCE, work, {tensors}, WriteBackAll({s}), "lockstep:reduce", tensors));
}

TorchWorkPtr ProcessGroupLockstep::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                             std::vector<at::Tensor>& inputs, const ::c10d::AllgatherOptions&) {
  constexpr const char* kOp = "allgather";
  CheckOne(inputs, kOp);
  TORCH_CHECK(outputs.size() == 1, "lockstep allgather: expects one output list per process, got ", outputs.size());
  TORCH_CHECK(static_cast<int>(outputs[0].size()) == size_, "lockstep allgather: the output list has ",
              outputs[0].size(), " tensors; it needs one per rank (", size_, ")");
  for (const at::Tensor& t : outputs[0]) CheckLike(t, inputs[0], kOp, "an output tensor");
  Staged in = Stage(inputs[0], kOp, "input", &huge_pages_);
  auto [flat, flat_view] = Flat(inputs[0], inputs[0].numel() * size_);
  Count();
  std::shared_ptr<Work> work = comm_->AllGather(in.view, flat_view);
  std::vector<at::Tensor> targets = outputs[0];
  return Track(TorchWork::Create(
      rank_, OpType::ALLGATHER, work, outputs, [flat = flat, targets] { return Unpack(flat, targets); },
      "lockstep:all_gather", inputs));
}

TorchWorkPtr ProcessGroupLockstep::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                   const ::c10d::AllgatherOptions&) {
  constexpr const char* kOp = "_allgather_base";
  CheckTensor(output, kOp, "output");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "lockstep _allgather_base: output is ", output.scalar_type(),
              " but input is ", input.scalar_type());
  TORCH_CHECK(output.numel() == input.numel() * size_, "lockstep _allgather_base: output has ", output.numel(),
              " elements; it must have world size (", size_, ") times the input's ", input.numel());
  Staged in = Stage(input, kOp, "input", &huge_pages_);
  Staged out = Stage(output, kOp, "output", &huge_pages_);
  Count();
  std::shared_ptr<Work> work = comm_->AllGather(in.view, out.view);
  return Track(TorchWork::Create(rank_, OpType::_ALLGATHER_BASE, work, {{output}}, WriteBackAll({out}),
                                 "lockstep:_all_gather_base", {input}));
}

TorchWorkPtr ProcessGroupLockstep::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const ::c10d::AllgatherOptions&) {
  constexpr const char* kOp = "allgather_coalesced";
  TORCH_CHECK(!inputs.empty(), "lockstep allgather_coalesced: no input tensors");
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_, "lockstep allgather_coalesced: ", outputs.size(),
              " output lists; it needs one per rank (", size_, ")");
  for (const auto& list : outputs) {
    TORCH_CHECK(list.size() == inputs.size(), "lockstep allgather_coalesced: an output list has ", list.size(),
                " tensors; it needs one per input (", inputs.size(), ")");
    for (size_t i = 0; i < inputs.size(); ++i) CheckLike(list[i], inputs[i], kOp, "an output tensor");
  }
  for (const at::Tensor& t : inputs) {
    CheckTensor(t, kOp, "an input");
    TORCH_CHECK(t.scalar_type() == inputs[0].scalar_type(),
                "lockstep allgather_coalesced: every input must have one dtype (", inputs[0].scalar_type(), ")");
  }
  at::Tensor packed = Pack(inputs);
  Tensor packed_view = ValueOrThrow(FromTorch(packed));
  auto [flat, flat_view] = Flat(packed, packed.numel() * size_);
  std::vector<at::Tensor> targets;
  for (const auto& list : outputs) targets.insert(targets.end(), list.begin(), list.end());
  Count();
  std::shared_ptr<Work> work = comm_->AllGather(packed_view, flat_view);
  return Track(TorchWork::Create(
      rank_, OpType::ALLGATHER_COALESCED, work, outputs,
      [flat = flat, targets, packed] { return Unpack(flat, targets); }, "lockstep:all_gather_coalesced", inputs));
}

TorchWorkPtr ProcessGroupLockstep::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                          std::vector<at::Tensor>& inputs, const ::c10d::GatherOptions& opts) {
  constexpr const char* kOp = "gather";
  CheckOne(inputs, kOp);
  CheckRank(opts.rootRank, size_, kOp, "root rank");
  const int root = static_cast<int>(opts.rootRank);
  Staged in = Stage(inputs[0], kOp, "input", &huge_pages_);
  at::Tensor flat;
  Tensor flat_view;
  std::vector<at::Tensor> targets;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1, "lockstep gather: the root expects one output list, got ", outputs.size());
    TORCH_CHECK(static_cast<int>(outputs[0].size()) == size_, "lockstep gather: the root's output list has ",
                outputs[0].size(), " tensors; it needs one per rank (", size_, ")");
    for (const at::Tensor& t : outputs[0]) CheckLike(t, inputs[0], kOp, "an output tensor");
    std::tie(flat, flat_view) = Flat(inputs[0], inputs[0].numel() * size_);
    targets = outputs[0];
  } else {
    TORCH_CHECK(outputs.empty(), "lockstep gather: only the root (rank ", root, ") takes output tensors");
  }
  Count();
  std::shared_ptr<Work> work = comm_->Gather(in.view, flat_view, root);
  std::function<absl::Status()> finish;
  if (rank_ == root) finish = [flat, targets] { return Unpack(flat, targets); };
  return Track(TorchWork::Create(rank_, OpType::GATHER, work, outputs, std::move(finish), "lockstep:gather", inputs));
}

TorchWorkPtr ProcessGroupLockstep::scatter(std::vector<at::Tensor>& outputs,
                                           std::vector<std::vector<at::Tensor>>& inputs,
                                           const ::c10d::ScatterOptions& opts) {
  constexpr const char* kOp = "scatter";
  CheckOne(outputs, kOp);
  CheckRank(opts.rootRank, size_, kOp, "root rank");
  const int root = static_cast<int>(opts.rootRank);
  Staged out = Stage(outputs[0], kOp, "output", &huge_pages_);
  Tensor packed_view;
  at::Tensor packed;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1, "lockstep scatter: the root expects one input list, got ", inputs.size());
    TORCH_CHECK(static_cast<int>(inputs[0].size()) == size_, "lockstep scatter: the root's input list has ",
                inputs[0].size(), " tensors; it needs one per rank (", size_, ")");
    for (const at::Tensor& t : inputs[0]) CheckLike(t, outputs[0], kOp, "an input tensor");
    packed = Pack(inputs[0]);
    packed_view = ValueOrThrow(FromTorch(packed));
  } else {
    TORCH_CHECK(inputs.empty(), "lockstep scatter: only the root (rank ", root, ") takes input tensors");
  }
  Count();
  std::shared_ptr<Work> work = comm_->Scatter(packed_view, out.view, root);
  return Track(
      TorchWork::Create(rank_, OpType::SCATTER, work, {outputs}, WriteBackAll({out}), "lockstep:scatter", outputs));
}

TorchWorkPtr ProcessGroupLockstep::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                  std::vector<std::vector<at::Tensor>>& inputs,
                                                  const ::c10d::ReduceScatterOptions& opts) {
  constexpr const char* kOp = "reduce_scatter";
  CheckOne(outputs, kOp);
  const ReduceOp op = ToReduceOp(opts.reduceOp, kOp);
  TORCH_CHECK(inputs.size() == 1, "lockstep reduce_scatter: expects one input list per process, got ", inputs.size());
  TORCH_CHECK(static_cast<int>(inputs[0].size()) == size_, "lockstep reduce_scatter: the input list has ",
              inputs[0].size(), " tensors; it needs one per rank (", size_, ")");
  for (const at::Tensor& t : inputs[0]) CheckLike(t, outputs[0], kOp, "an input tensor");
  Staged out = Stage(outputs[0], kOp, "output", &huge_pages_);
  at::Tensor packed = Pack(inputs[0]);
  Tensor packed_view = ValueOrThrow(FromTorch(packed));
  Count();
  std::shared_ptr<Work> work = comm_->ReduceScatter(packed_view, out.view, op);
  return Track(TorchWork::Create(rank_, OpType::REDUCE_SCATTER, work, {outputs}, WriteBackAll({out}),
                                 "lockstep:reduce_scatter", outputs));
}

TorchWorkPtr ProcessGroupLockstep::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                        const ::c10d::ReduceScatterOptions& opts) {
  constexpr const char* kOp = "_reduce_scatter_base";
  const ReduceOp op = ToReduceOp(opts.reduceOp, kOp);
  CheckTensor(output, kOp, "output");
  CheckTensor(input, kOp, "input");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "lockstep _reduce_scatter_base: output is ",
              output.scalar_type(), " but input is ", input.scalar_type());
  TORCH_CHECK(input.numel() == output.numel() * size_, "lockstep _reduce_scatter_base: input has ", input.numel(),
              " elements; it must have world size (", size_, ") times the output's ", output.numel());
  Staged in = Stage(input, kOp, "input", &huge_pages_);
  Staged out = Stage(output, kOp, "output", &huge_pages_);
  Count();
  std::shared_ptr<Work> work = comm_->ReduceScatter(in.view, out.view, op);
  return Track(TorchWork::Create(rank_, OpType::_REDUCE_SCATTER_BASE, work, {{output}}, WriteBackAll({out}),
                                 "lockstep:_reduce_scatter_base", {input}));
}

TorchWorkPtr ProcessGroupLockstep::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                 std::vector<int64_t>& output_split_sizes,
                                                 std::vector<int64_t>& input_split_sizes,
                                                 const ::c10d::AllToAllOptions&) {
  constexpr const char* kOp = "alltoall_base";
  CheckTensor(output, kOp, "output");
  CheckTensor(input, kOp, "input");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "lockstep alltoall_base: output is ", output.scalar_type(),
              " but input is ", input.scalar_type());
  // Split sizes count rows (the first dimension), as c10d's; none: equal.
  const auto counts = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* what) {
    std::vector<int64_t> out(static_cast<size_t>(size_));
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const int64_t row = rows == 0 ? 0 : t.numel() / rows;
    if (splits.empty()) {
      TORCH_CHECK(rows % size_ == 0, "lockstep alltoall_base: the ", what, "'s first dimension (", rows,
                  ") does not divide by the world size (", size_, "); pass split sizes");
      for (int64_t& c : out) c = rows / size_ * row;
      return out;
    }
    TORCH_CHECK(static_cast<int>(splits.size()) == size_, "lockstep alltoall_base: ", splits.size(), " ", what,
                " split sizes; it needs one per rank (", size_, ")");
    int64_t total = 0;
    for (size_t i = 0; i < splits.size(); ++i) {
      TORCH_CHECK(splits[i] >= 0, "lockstep alltoall_base: ", what, " split size ", splits[i], " is negative");
      total += splits[i];
      out[i] = splits[i] * row;
    }
    TORCH_CHECK(total == rows, "lockstep alltoall_base: the ", what, " split sizes add up to ", total, " rows but the ",
                what, " has ", rows);
    return out;
  };
  const std::vector<int64_t> send = counts(input, input_split_sizes, "input");
  const std::vector<int64_t> recv = counts(output, output_split_sizes, "output");
  Staged in = Stage(input, kOp, "input", &huge_pages_);
  Staged out = Stage(output, kOp, "output", &huge_pages_);
  Count();
  std::shared_ptr<Work> work = output_split_sizes.empty() && input_split_sizes.empty()
                                   ? comm_->AllToAll(in.view, out.view)
                                   : comm_->AllToAllV(in.view, out.view, send, recv);
  return Track(TorchWork::Create(rank_, OpType::ALLTOALL_BASE, work, {{output}}, WriteBackAll({out}),
                                 "lockstep:all_to_all", {input}));
}

TorchWorkPtr ProcessGroupLockstep::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                            const ::c10d::AllToAllOptions&) {
  constexpr const char* kOp = "alltoall";
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              "lockstep alltoall: ", inputs.size(), " inputs and ", outputs.size(),
              " outputs; it needs one of each per rank (", size_, ")");
  std::vector<int64_t> send, recv;
  for (int r = 0; r < size_; ++r) {
    CheckTensor(inputs[r], kOp, "an input");
    CheckTensor(outputs[r], kOp, "an output");
    TORCH_CHECK(
        inputs[r].scalar_type() == inputs[0].scalar_type() && outputs[r].scalar_type() == inputs[0].scalar_type(),
        "lockstep alltoall: every tensor must have one dtype (", inputs[0].scalar_type(), ")");
    send.push_back(inputs[r].numel());
    recv.push_back(outputs[r].numel());
  }
  at::Tensor packed = Pack(inputs);
  Tensor packed_view = ValueOrThrow(FromTorch(packed));
  int64_t total = 0;
  for (int64_t c : recv) total += c;
  auto [flat, flat_view] = Flat(inputs[0], total);
  Count();
  std::shared_ptr<Work> work = comm_->AllToAllV(packed_view, flat_view, send, recv);
  std::vector<at::Tensor> targets = outputs;
  return Track(TorchWork::Create(
      rank_, OpType::ALLTOALL, work, {outputs}, [flat = flat, targets, packed] { return Unpack(flat, targets); },
      "lockstep:all_to_all", inputs));
}

void ProcessGroupLockstep::monitoredBarrier(const ::c10d::BarrierOptions& opts, bool wait_all_ranks) {
  const std::chrono::milliseconds timeout =
      opts.timeout == ::c10d::kUnsetTimeout ? comm_->options().timeout : opts.timeout;
  // gloo's answer to a timeout that leaves no time to wait (its wording).
  TORCH_CHECK(timeout > std::chrono::milliseconds(0), "[Rank ", rank_, "]: Rank ", rank_,
              " timed out in monitoredBarrier after ", timeout.count(), " ms: a timeout of ", timeout.count(),
              " ms leaves no time to wait for any rank");
  ThrowIfError(MonitoredBarrier(*comm_, timeout, wait_all_ranks));
}

void ProcessGroupLockstep::setSequenceNumberForGroup() {}

uint64_t ProcessGroupLockstep::getSequenceNumberForGroup() { return seq_.load(std::memory_order_relaxed); }

TorchWorkPtr ProcessGroupLockstep::send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) {
  constexpr const char* kOp = "send";
  CheckOne(tensors, kOp);
  CheckRank(dst_rank, size_, kOp, "destination");
  Staged s = Stage(tensors[0], kOp, "tensor", &huge_pages_);
  std::shared_ptr<Work> work = comm_->Send(s.view, dst_rank, Tag(tag, kOp));
  // Keeps the staged copy alive until sent.
  return Track(TorchWork::Create(
      rank_, OpType::SEND, work, {}, [s] { return absl::OkStatus(); }, "lockstep:send", tensors));
}

TorchWorkPtr ProcessGroupLockstep::recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) {
  constexpr const char* kOp = "recv";
  CheckOne(tensors, kOp);
  CheckRank(src_rank, size_, kOp, "source");
  Staged s = Stage(tensors[0], kOp, "tensor", &huge_pages_);
  std::shared_ptr<Work> work = comm_->Recv(s.view, src_rank, Tag(tag, kOp));
  return Track(TorchWork::Create(rank_, OpType::RECV, work, {tensors}, WriteBackAll({s}), "lockstep:recv", tensors));
}

TorchWorkPtr ProcessGroupLockstep::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  constexpr const char* kOp = "recvAnysource";
  CheckOne(tensors, kOp);
  Staged s = Stage(tensors[0], kOp, "tensor", &huge_pages_);
  std::shared_ptr<Work> work = comm_->RecvAnySource(s.view, Tag(tag, kOp));
  return Track(TorchWork::Create(rank_, OpType::RECVANYSOURCE, work, {tensors}, WriteBackAll({s}),
                                 "lockstep:recvAnySource", tensors));
}

TorchWorkPtr ProcessGroupLockstep::barrier(const ::c10d::BarrierOptions&) {
  Count();
  return Track(TorchWork::Create(rank_, OpType::BARRIER, comm_->Barrier(), {}, nullptr, "lockstep:barrier", {}));
}

}  // namespace lockstep
