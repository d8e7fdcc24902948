// ProcessGroupLockstep: lockstep's Communicator as a torch.distributed
// backend: a c10d::ProcessGroup on PyTorch 1.13, a c10d::Backend (which
// PyTorch's ProcessGroup holds for CPU tensors) on 2.x, from one source
// (torch_version.h keeps the difference). Python programs get it through
// the `lockstep_torch` module (lockstep_torch_module.cc):
//
//   import torch.distributed as dist
//   import lockstep_torch                     # registers the backend "lockstep"
//   dist.init_process_group("lockstep", init_method="env://")
//   dist.all_reduce(t)                        # lockstep's collectives
//
// and C++ programs that hold a c10d store through Create:
//
//   c10::intrusive_ptr<TorchBackendBase> pg =  // c10d::ProcessGroup (1.13) or c10d::Backend (2.x)
//       ProcessGroupLockstep::Create(store, rank, size, std::chrono::minutes(30));
//   pg->allreduce(tensors)->wait();
//
// Create meets the other ranks through the c10d store it is given (a
// PrefixStore per group: every dist.new_group is a group of its own), each
// rank publishing its host identity there, and builds the communicator as
// lockstep's own init does (collectives/bootstrap/init_from_env.h): shared
// memory when all ranks share a host, TCP when each has its own, shared
// memory inside hosts and TCP between them otherwise; LOCKSTEP_TRANSPORT
// forces one. The advertised address is chosen toward MASTER_ADDR (or
// LOCKSTEP_SOCKET_ADDR / LOCKSTEP_SOCKET_IFNAME). `timeout` bounds the
// rendezvous and every operation.
//
// PyTorch's stores are not authenticated. The key of lockstep's rank
// handshake is LOCKSTEP_STORE_TOKEN when set (lockstep-run sets it; give
// every rank the same); otherwise rank 0 draws a random one and shares it
// through the store, which then keeps out anything that cannot read the
// store (a process of another job connecting to a rank's port) but not a
// reader of the store (docs/ARCHITECTURE.md, threat model).
//
// Operations map onto the communicator's one to one; every dtype lockstep
// has (f32, f64, f16, bf16, i32, i64, u8, i8, bool), SUM, AVG, PRODUCT,
// MIN, MAX, BAND, BOR, BXOR. Tensors of 4 MiB and more are moved onto
// 2 MiB pages the first time an operation sees them (huge_pages.h:
// PyTorch's allocator uses 4 KiB pages, which cost large transfers up to
// half their speed). Non-contiguous tensors are staged through a
// contiguous copy (copied back when the operation succeeds), as gloo does;
// lists of tensors (allgather, gather, scatter, alltoall, reduce_scatter)
// through one flat buffer. Sparse tensors and PREMUL_SUM are refused. Bad
// arguments raise at the call (ValueError/RuntimeError in Python), naming
// the operation and what was expected; an operation that fails in flight
// (a mismatch between ranks, a dead peer, the timeout) raises lockstep's
// error at wait(). Sequence numbers count the collectives each rank
// started (every rank agrees while they call the same ones).
//
// CUDA tensors: on 1.13 they reach the backend, and the communicator
// stages them through pinned host memory (correct, not fast). On 2.x the
// backend is registered for "cpu" only, so PyTorch itself refuses a CUDA
// tensor ("No backend type associated with device type cuda") before it
// reaches lockstep; name a CUDA backend beside it for those:
// init_process_group("cpu:lockstep,cuda:nccl"). On 2.x, operations between
// startCoalescing() and endCoalescing() (dist._coalescing_manager) run as
// they are called, each asynchronous already; endCoalescing's Work
// completes when all of them have, with the first error among them.
#ifndef LOCKSTEP_INTEROP_TORCH_C10D_PROCESS_GROUP_LOCKSTEP_H_
#define LOCKSTEP_INTEROP_TORCH_C10D_PROCESS_GROUP_LOCKSTEP_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/bootstrap/rank_environment.h"
#include "collectives/communicator.h"
#include "collectives/store/store.h"
#include "interop/torch/c10d/huge_pages.h"
#include "interop/torch/c10d/torch_version.h"

namespace lockstep {

class ProcessGroupLockstep final : public TorchBackendBase {
 public:
  // Throws c10::Error (RuntimeError in Python) when the group cannot form.
  static c10::intrusive_ptr<ProcessGroupLockstep> Create(const c10::intrusive_ptr<::c10d::Store>& store, int rank,
                                                         int size, std::chrono::milliseconds timeout);
  // The same, with an explicit environment (tests); a Status, no throw.
  static absl::StatusOr<c10::intrusive_ptr<ProcessGroupLockstep>> Create(const c10::intrusive_ptr<::c10d::Store>& store,
                                                                         int rank, int size,
                                                                         std::chrono::milliseconds timeout,
                                                                         const EnvLookup& env);

  // As torch.distributed's creator registered with extended_api=True
  // calls it (both versions): the group's store, rank, size and timeout,
  // and its name and members' global ranks, kept for group_name() and
  // global_ranks().
  static c10::intrusive_ptr<ProcessGroupLockstep> Create(const ::c10d::DistributedBackendOptions& options);

  ProcessGroupLockstep(std::unique_ptr<Communicator> comm, std::shared_ptr<Store> store);
  ~ProcessGroupLockstep() override;

  const std::string getBackendName() const override { return "lockstep"; }
  // What lockstep chose: "host over shm", "host over tcp", "hierarchical(shm+tcp)".
  std::string transport() const { return comm_->capabilities().name; }
  Communicator& communicator() { return *comm_; }
  // torch.distributed's name of the group and the global rank of each of
  // its ranks; empty unless made from DistributedBackendOptions.
  const std::string& group_name() const { return group_name_; }
  const std::vector<int64_t>& global_ranks() const { return global_ranks_; }

  // How the destructor tears the communicator down: `teardown` is given a
  // function that does it (joining the communicator's threads) and must
  // call it once. The Python module's releases the GIL meanwhile, as
  // PyTorch's holder does for gloo's groups: a group released from Python
  // is destroyed with the GIL held, and the communicator's threads may
  // need it to finish (a torch future's Python callback, the last
  // reference to a tensor Python owns). Unset: torn down directly.
  using Teardown = std::function<void(const std::function<void()>& destroy)>;
  void SetTeardown(Teardown teardown) { teardown_ = std::move(teardown); }

  c10::intrusive_ptr<::c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                             const ::c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                             const ::c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                       const ::c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce(std::vector<at::Tensor>& tensors, const ::c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                             std::vector<at::Tensor>& inputs,
                                             const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                   const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                          std::vector<at::Tensor>& inputs, const ::c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                           std::vector<std::vector<at::Tensor>>& inputs,
                                           const ::c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                  std::vector<std::vector<at::Tensor>>& inputs,
                                                  const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                        const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                                 std::vector<int64_t>& output_split_sizes,
                                                 std::vector<int64_t>& input_split_sizes,
                                                 const ::c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                            const ::c10d::AllToAllOptions& opts) override;
  void monitoredBarrier(const ::c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;
  c10::intrusive_ptr<::c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) override;
  c10::intrusive_ptr<::c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) override;
  c10::intrusive_ptr<::c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<::c10d::Work> barrier(const ::c10d::BarrierOptions& opts) override;
#if LOCKSTEP_TORCH_BACKEND_API
  void startCoalescing() override;
  c10::intrusive_ptr<::c10d::Work> endCoalescing() override;
#endif

 private:
  // A started collective's number (getSequenceNumberForGroup).
  void Count() { seq_.fetch_add(1, std::memory_order_relaxed); }
  // Every operation's Work passes here: between startCoalescing and
  // endCoalescing it is kept for endCoalescing's Work.
  c10::intrusive_ptr<::c10d::Work> Track(c10::intrusive_ptr<::c10d::Work> work);

  std::shared_ptr<Store> store_;  // Outlives comm_ (its failure reports).
  HugePageAdvisor huge_pages_;    // 2 MiB pages for large tensors (huge_pages.h).
  std::unique_ptr<Communicator> comm_;
  Teardown teardown_;
  std::atomic<uint64_t> seq_{0};
  std::string group_name_;
  std::vector<int64_t> global_ranks_;
  std::mutex coalescing_mu_;
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<::c10d::Work>> coalesced_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_INTEROP_TORCH_C10D_PROCESS_GROUP_LOCKSTEP_H_
