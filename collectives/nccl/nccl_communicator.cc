#include "collectives/nccl/nccl_communicator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/store/prefix_store.h"
#include "core/status.h"

namespace lockstep {
namespace {

constexpr char kUniqueIdKey[] = "nccl_unique_id";
constexpr char kGenerationKeyPrefix[] = "nccl_generation/rank";

// NCCL refuses two ranks on one GPU, in some versions only after a long
// wait: find them first, by the devices' host name and PCI bus id.
absl::Status CheckOneRankPerGpu(NcclRuntime& runtime, Store& store, int rank, int size, Device device,
                                Milliseconds timeout) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::string mine, runtime.DeviceId(device.index()));
  LOCKSTEP_RETURN_IF_ERROR(store.Set(absl::StrCat("nccl_device/", rank), mine));
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    absl::StatusOr<std::string> theirs = store.Get(absl::StrCat("nccl_device/", peer), timeout);
    if (!theirs.ok()) {
      return absl::Status(
          theirs.status().code(),
          absl::StrCat("CreateNcclCommunicator on rank ", rank, ": rank ", peer, " did not publish its GPU within ",
                       timeout.count(), " ms: ", theirs.status().message(), "; check that every rank started"));
    }
    if (*theirs == mine) {
      return absl::FailedPreconditionError(absl::StrCat(
          "CreateNcclCommunicator: ranks ", std::min(rank, peer), " and ", std::max(rank, peer), " both use GPU ", mine,
          " (", device.ToString(), " on rank ", rank,
          "); NCCL needs one rank per GPU. Give each local rank its own device (cuda:<local rank>), or use the "
          "host backend (LOCKSTEP_BACKEND=host), which stages CUDA tensors through pinned host memory"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclBackend>> CreateNcclBackend(NcclRuntime& runtime, Store& store, int rank, int size,
                                                               Device device, const NcclCommunicatorOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("CreateNcclCommunicator: rank ", rank, " is not in [0, ", size, ") (world size ", size, ")"));
  }
  if (options.init_timeout <= Milliseconds(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("NcclCommunicatorOptions.init_timeout is ", options.init_timeout.count(), " ms; it must be > 0"));
  }
  const int version = runtime.Version();
  if (version == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("CreateNcclCommunicator on rank ", rank,
                     ": this build has no NCCL; build with the CUDA toolkit (--config=cuda) or use the host backend "
                     "(LOCKSTEP_BACKEND=host)"));
  }
  if (version < kNcclMinimumVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CreateNcclCommunicator on rank ", rank, ": the linked NCCL is ", NcclVersionString(version), ", older than ",
        NcclVersionString(kNcclMinimumVersion),
        " (send/recv); put a newer libnccl.so.2 on LD_LIBRARY_PATH or use the host backend (LOCKSTEP_BACKEND=host)"));
  }
  const int devices = runtime.DeviceCount();
  if (!device.is_cuda() || device.index() >= devices) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CreateNcclCommunicator on rank ", rank, ": device ", device.ToString(), " is not one of the ", devices,
        " visible CUDA device(s); give each rank its own cuda:<local rank>, or use the host backend "
        "(LOCKSTEP_BACKEND=host) for CPU tensors"));
  }
  const Deadline deadline = DeadlineIn(options.init_timeout);
  LOCKSTEP_RETURN_IF_ERROR(CheckOneRankPerGpu(runtime, store, rank, size, device, options.init_timeout));
  // Versioned: every rank counts the communicators it made on this store
  // (ranks make them in the same order), so a group made again on a store
  // that outlived the last one (a restart at a launcher's store, a second
  // communicator with the same prefix) never reads a stale id.
  absl::StatusOr<int64_t> generation = store.Add(absl::StrCat(kGenerationKeyPrefix, rank), 1);
  if (!generation.ok()) {
    return absl::Status(
        generation.status().code(),
        absl::StrCat("CreateNcclCommunicator on rank ", rank,
                     ": could not count this rank's communicators in the store: ", generation.status().message()));
  }
  const std::string id_key = absl::StrCat(kUniqueIdKey, "/", *generation);
  std::string id;
  if (rank == 0) {
    LOCKSTEP_ASSIGN_OR_RETURN(id, runtime.NewUniqueId());
    LOCKSTEP_RETURN_IF_ERROR(store.Set(id_key, id));
  } else {
    absl::StatusOr<std::string> got = store.Get(id_key, options.init_timeout);
    if (!got.ok()) {
      return absl::Status(
          got.status().code(),
          absl::StrCat("CreateNcclCommunicator on rank ", rank, ": rank 0 did not publish NCCL's unique id (", id_key,
                       ") within ", options.init_timeout.count(), " ms: ", got.status().message(),
                       "; check that rank 0 started and uses the same store and store_prefix"));
    }
    id = *std::move(got);
  }
  if (id.size() != kNcclUniqueIdBytes) {
    return absl::DataLossError(absl::StrCat("CreateNcclCommunicator on rank ", rank,
                                            ": NCCL's unique id in the store has ", id.size(), " bytes, expected ",
                                            kNcclUniqueIdBytes, "; another program may use the same store prefix"));
  }
  const bool non_blocking = version >= kNcclNonBlockingInitVersion;
  absl::StatusOr<std::unique_ptr<NcclComm>> comm =
      runtime.InitRank(id, rank, size, device.index(), non_blocking, deadline);
  if (!comm.ok()) {
    return absl::Status(comm.status().code(), absl::StrCat("CreateNcclCommunicator: NCCL ", NcclVersionString(version),
                                                           " init of rank ", rank, " of ", size, " on ",
                                                           device.ToString(), " failed: ", comm.status().message()));
  }
  return NcclBackend::Create(*std::move(comm), rank, size, device, version, options.backend);
}

int LinkedNcclVersion() { return SystemNcclRuntime()->Version(); }

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                                                     Device device,
                                                                     const NcclCommunicatorOptions& options) {
  if (store == nullptr) return absl::InvalidArgumentError("CreateNcclCommunicator: no store");
  if (options.store_prefix.empty()) {
    return absl::InvalidArgumentError("NcclCommunicatorOptions.store_prefix is empty; give each group its own prefix");
  }
  LOCKSTEP_RETURN_IF_ERROR(ValidateCommunicatorOptions(options.communicator));
  auto prefixed = std::make_shared<PrefixStore>(options.store_prefix, store);
  std::unique_ptr<NcclRuntime> runtime = SystemNcclRuntime();
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<NcclBackend> backend,
                            CreateNcclBackend(*runtime, *prefixed, rank, size, device, options));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                            Communicator::Create(std::move(backend), options.communicator, std::move(prefixed)));
  // Subgroups where NCCL cannot split (before 2.18): a new unique id through
  // the store, under this group's prefix.
  comm->set_subgroup_factory([store, device, options](const Communicator::SubgroupSpec& spec) {
    NcclCommunicatorOptions child = options;
    child.store_prefix = absl::StrCat(options.store_prefix, "/", spec.name);
    return CreateNcclCommunicator(store, spec.rank, spec.size, device, child);
  });
  return comm;
}

}  // namespace lockstep
