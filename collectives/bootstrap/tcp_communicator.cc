#include "collectives/bootstrap/tcp_communicator.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/host_backend.h"
#include "collectives/store/prefix_store.h"
#include "core/status.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<Communicator>> CreateTcpCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                                                    const TcpCommunicatorOptions& options) {
  if (store == nullptr) return absl::InvalidArgumentError("CreateTcpCommunicator: no store");
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("CreateTcpCommunicator: rank ", rank, " is not in [0, ", size, ") (world size ", size, ")"));
  }
  if (options.store_prefix.empty()) {
    return absl::InvalidArgumentError("TcpCommunicatorOptions.store_prefix is empty; give each group its own prefix");
  }
  LOCKSTEP_RETURN_IF_ERROR(ValidateCommunicatorOptions(options.communicator));
  LOCKSTEP_RETURN_IF_ERROR(ValidateAlgorithmOptions(options.algorithms));
  LOCKSTEP_RETURN_IF_ERROR(ValidateTcpTransportOptions(options.transport));
  auto prefixed = std::make_shared<PrefixStore>(options.store_prefix, store);
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TcpTransport> transport,
                            TcpTransport::Create(prefixed, rank, size, options.transport));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<HostBackend> backend,
                            HostBackend::Create(std::move(transport), options.algorithms, "tcp"));
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                            Communicator::Create(std::move(backend), options.communicator, std::move(prefixed)));
  // Subgroups: TCP connections of their own, met under this group's prefix.
  comm->set_subgroup_factory([store, options](const Communicator::SubgroupSpec& spec) {
    TcpCommunicatorOptions child = options;
    child.store_prefix = absl::StrCat(options.store_prefix, "/", spec.name);
    return CreateTcpCommunicator(store, spec.rank, spec.size, child);
  });
  return comm;
}

}  // namespace lockstep
