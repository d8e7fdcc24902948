#include "collectives/bootstrap/init_from_env.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/store/prefix_store.h"
#include "collectives/store/tcp_store.h"
#include "collectives/transport/tcp/address.h"
#include "core/status.h"

namespace lockstep {

absl::StatusOr<ProcessGroup> InitFromEnv(const EnvLookup& env, const InitOptions& options) {
  ProcessGroup group;
  LOCKSTEP_ASSIGN_OR_RETURN(group.env, RankEnvironmentFromEnv(env));
  TcpStoreOptions store_options;
  store_options.host = group.env.master_addr;
  store_options.port = group.env.master_port;
  store_options.is_server = group.env.rank == 0 && !group.env.agent_store;
  store_options.num_workers = group.env.world_size;
  store_options.timeout = options.store_timeout;
  store_options.token = group.env.store_token;
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Create(store_options);
  if (!store.ok()) {
    return absl::Status(store.status().code(),
                        absl::StrCat("InitFromEnv: rank ", group.env.rank, " (from ", group.env.source,
                                     "'s variables) could not ", store_options.is_server ? "serve" : "reach",
                                     " the store at ", group.env.master_addr, ":", group.env.master_port, ": ",
                                     store.status().message()));
  }
  group.store = std::move(*store);
  // A launcher's store outlives a restart: like torch's env:// rendezvous,
  // every key of this attempt, the caller's own included, lives under
  // /worker/attempt_<TORCHELASTIC_RESTART_COUNT>, so nothing of a failed
  // attempt is read by the next.
  if (group.env.agent_store) {
    const char* restart = env("TORCHELASTIC_RESTART_COUNT");
    group.store = std::make_shared<PrefixStore>(
        absl::StrCat("/worker/attempt_", restart != nullptr && *restart != '\0' ? restart : "0"),
        std::move(group.store));
  }
  TcpCommunicatorOptions communicator = options.communicator;
  // A restarted group (torchrun's TORCHELASTIC_RESTART_COUNT) may meet at
  // the same store: each attempt gets its own key space.
  if (const char* restart = env("TORCHELASTIC_RESTART_COUNT"); restart != nullptr && *restart != '\0') {
    communicator.store_prefix = absl::StrCat(communicator.store_prefix, "/attempt", restart);
  }
  AddressSelection selection;
  selection.master_addr = group.env.master_addr;
  selection.spans_hosts = group.env.world_size > group.env.local_world_size;
  selection.host = options.host;
  ApplyAddressEnvironment(&selection);
  absl::StatusOr<std::string> host = ChooseLocalAddress(selection);
  if (!host.ok()) {
    return absl::Status(host.status().code(), absl::StrCat("InitFromEnv: rank ", group.env.rank, ": ",
                                                           host.status().message()));
  }
  communicator.transport.host = *host;
  if (communicator.transport.secret.empty()) communicator.transport.secret = group.env.store_token;
  CommunicatorFactoryOptions factory;
  factory.communicator = communicator.communicator;
  factory.algorithms = communicator.algorithms;
  factory.tcp = communicator.transport;
  factory.store_prefix = communicator.store_prefix;
  factory.shm = options.shm;
  factory.transport = options.transport;
  factory.local_transport = options.local_transport;
  factory.host_id = options.host_id;
  absl::Status applied = ApplyTransportEnvironment(env, &factory);
  if (!applied.ok()) {
    return absl::Status(applied.code(), absl::StrCat("InitFromEnv: rank ", group.env.rank, ": ", applied.message()));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(group.comm,
                            CreateCommunicator(group.store, group.env.rank, group.env.world_size, factory));
  return group;
}

absl::StatusOr<ProcessGroup> InitFromEnv(const InitOptions& options) {
  return InitFromEnv([](const char* name) -> const char* { return std::getenv(name); }, options);
}

}  // namespace lockstep
