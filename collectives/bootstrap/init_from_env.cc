#include "collectives/bootstrap/init_from_env.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collectives/store/file_store.h"
#include "collectives/store/prefix_store.h"
#include "collectives/store/tcp_store.h"
#include "collectives/transport/host_identity.h"
#include "collectives/transport/tcp/address.h"
#include "core/status.h"

namespace lockstep {

namespace {

// The group's communicator over `group.store`, for `group.env`'s rank,
// with `options` and the environment's overrides; `what` names the caller.
absl::Status JoinGroup(const EnvLookup& env, const InitOptions& options, const char* what, ProcessGroup* out);
absl::Status JoinByHostIdentity(const EnvLookup& env, const InitOptions& options, const char* what, ProcessGroup* out);
// The communicator factory's options for `rank_env`'s rank, as InitFromEnv
// builds its communicator.
absl::StatusOr<CommunicatorFactoryOptions> FactoryOptions(const EnvLookup& env, const RankEnvironment& rank_env,
                                                          const InitOptions& options, const char* what);

// The group's TcpStore at env's master address; `serve`: this rank runs it.
absl::StatusOr<std::unique_ptr<TcpStore>> OpenTcpStore(const RankEnvironment& env, bool serve,
                                                       const InitOptions& options, const char* what) {
  TcpStoreOptions store_options;
  store_options.host = env.master_addr;
  store_options.port = env.master_port;
  store_options.is_server = serve;
  store_options.num_workers = env.world_size;
  store_options.timeout = options.store_timeout;
  store_options.token = env.store_token;
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Create(store_options);
  if (!store.ok()) {
    return absl::Status(
        store.status().code(),
        absl::StrCat(what, ": rank ", env.rank, " (from ", env.source, ") could not ", serve ? "serve" : "reach",
                     " the store at ", env.master_addr, ":", env.master_port, ": ", store.status().message()));
  }
  return store;
}

}  // namespace

absl::StatusOr<ProcessGroup> ConnectFromEnv(const EnvLookup& env, const InitOptions& options) {
  ProcessGroup group;
  LOCKSTEP_ASSIGN_OR_RETURN(group.env, RankEnvironmentFromEnv(env));
  LOCKSTEP_ASSIGN_OR_RETURN(
      group.store, OpenTcpStore(group.env, group.env.rank == 0 && !group.env.agent_store, options, "InitFromEnv"));
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
  return group;
}

absl::StatusOr<ProcessGroup> InitFromEnv(const EnvLookup& env, const InitOptions& options) {
  LOCKSTEP_ASSIGN_OR_RETURN(ProcessGroup group, ConnectFromEnv(env, options));
  LOCKSTEP_RETURN_IF_ERROR(JoinGroup(env, options, "InitFromEnv", &group));
  return group;
}

absl::StatusOr<ProcessGroup> InitFromEnv(const InitOptions& options) {
  return InitFromEnv([](const char* name) -> const char* { return std::getenv(name); }, options);
}

namespace {

absl::Status JoinGroup(const EnvLookup& env, const InitOptions& options, const char* what, ProcessGroup* out) {
  ProcessGroup& group = *out;
  absl::StatusOr<CommunicatorFactoryOptions> factory = FactoryOptions(env, group.env, options, what);
  if (!factory.ok()) return factory.status();
  LOCKSTEP_ASSIGN_OR_RETURN(group.comm,
                            CreateCommunicator(group.store, group.env.rank, group.env.world_size, *factory));
  return absl::OkStatus();
}

absl::StatusOr<CommunicatorFactoryOptions> FactoryOptions(const EnvLookup& env, const RankEnvironment& rank_env,
                                                          const InitOptions& options, const char* what) {
  TcpCommunicatorOptions communicator = options.communicator;
  // A restarted group (torchrun's TORCHELASTIC_RESTART_COUNT) may meet at
  // the same store: each attempt gets its own key space.
  if (const char* restart = env("TORCHELASTIC_RESTART_COUNT"); restart != nullptr && *restart != '\0') {
    communicator.store_prefix = absl::StrCat(communicator.store_prefix, "/attempt", restart);
  }
  AddressSelection selection;
  selection.master_addr = rank_env.master_addr;
  selection.spans_hosts = rank_env.world_size > rank_env.local_world_size;
  selection.host = options.host;
  ApplyAddressEnvironment(&selection);
  absl::StatusOr<std::string> host = ChooseLocalAddress(selection);
  if (!host.ok()) {
    return absl::Status(host.status().code(),
                        absl::StrCat(what, ": rank ", rank_env.rank, ": ", host.status().message()));
  }
  communicator.transport.host = *host;
  if (communicator.transport.secret.empty()) communicator.transport.secret = rank_env.store_token;
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
    return absl::Status(applied.code(), absl::StrCat(what, ": rank ", rank_env.rank, ": ", applied.message()));
  }
  return factory;
}

}  // namespace

absl::StatusOr<CommunicatorFactoryOptions> CommunicatorOptionsFromEnv(const EnvLookup& env,
                                                                      const RankEnvironment& rank_env,
                                                                      const InitOptions& options) {
  return FactoryOptions(env, rank_env, options, "CommunicatorOptionsFromEnv");
}

namespace {

// Only the rank and the world size are known: which ranks share this host
// (so which address to advertise) comes from their host identities,
// published in the group's store; then JoinGroup.
absl::Status JoinByHostIdentity(const EnvLookup& env, const InitOptions& options, const char* what, ProcessGroup* out) {
  ProcessGroup& group = *out;
  std::string identity = options.host_id;
  if (identity.empty()) {
    LOCKSTEP_ASSIGN_OR_RETURN(identity, LocalHostIdentity(env));
  }
  LOCKSTEP_RETURN_IF_ERROR(group.store->Set(absl::StrCat("init_method/host/", group.env.rank), identity));
  group.env.local_rank = 0;
  group.env.local_world_size = 0;
  std::vector<std::string> keys;
  for (int peer = 0; peer < group.env.world_size; ++peer) keys.push_back(absl::StrCat("init_method/host/", peer));
  absl::StatusOr<std::vector<std::string>> all = group.store->MultiGet(keys, options.store_timeout);
  if (!all.ok()) {
    return absl::Status(all.status().code(),
                        absl::StrCat(what, ": rank ", group.env.rank, " waited for every rank's host (",
                                     group.env.source, "): ", all.status().message(),
                                     "; is every rank started with the same init method and world size?"));
  }
  for (int peer = 0; peer < group.env.world_size; ++peer) {
    const std::string* theirs = &(*all)[static_cast<size_t>(peer)];
    if (*theirs != identity) continue;
    if (peer < group.env.rank) ++group.env.local_rank;
    ++group.env.local_world_size;
  }
  return JoinGroup(env, options, what, &group);
}

// torch's init_method URL, taken apart.
struct InitMethod {
  std::string scheme;              // "env", "tcp", "file"
  std::string host;                // tcp
  int port = 0;                    // tcp
  std::string path;                // file
  int rank = -1, world_size = -1;  // ?rank=&world_size=
};

absl::StatusOr<InitMethod> ParseInitMethod(absl::string_view url) {
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("init_method '", url, "': ", why,
                                                   "; expected env://, tcp://HOST:PORT or file:///PATH (optionally "
                                                   "?rank=R&world_size=N)"));
  };
  InitMethod m;
  const size_t colon = url.find("://");
  if (colon == absl::string_view::npos) return bad("no scheme");
  m.scheme = std::string(url.substr(0, colon));
  absl::string_view rest = url.substr(colon + 3);
  const size_t query = rest.find('?');
  if (query != absl::string_view::npos) {
    for (absl::string_view pair : absl::StrSplit(rest.substr(query + 1), '&', absl::SkipEmpty())) {
      const size_t eq = pair.find('=');
      const absl::string_view key = pair.substr(0, eq);
      int value = 0;
      if (eq == absl::string_view::npos || !absl::SimpleAtoi(pair.substr(eq + 1), &value) || value < 0) {
        return bad(absl::StrCat("'", pair, "' is not NAME=<number >= 0>"));
      }
      if (key == "rank") {
        m.rank = value;
      } else if (key == "world_size") {
        m.world_size = value;
      } else {
        return bad(absl::StrCat("unknown parameter '", key, "' (rank and world_size are known)"));
      }
    }
    rest = rest.substr(0, query);
  }
  if (m.scheme == "env") {
    if (!rest.empty()) return bad("env:// takes nothing after the scheme");
  } else if (m.scheme == "tcp") {
    const size_t port_colon = rest.rfind(':');
    if (port_colon == absl::string_view::npos || port_colon == 0) return bad("tcp:// needs HOST:PORT");
    absl::string_view host = rest.substr(0, port_colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    m.host = std::string(host);
    if (!absl::SimpleAtoi(rest.substr(port_colon + 1), &m.port) || m.port < 1 || m.port > 65535) {
      return bad(absl::StrCat("port '", rest.substr(port_colon + 1), "' is not in [1, 65535]"));
    }
  } else if (m.scheme == "file") {
    if (rest.empty() || rest.front() != '/') return bad("file:// needs an absolute path (file:///tmp/x)");
    m.path = std::string(rest);
  } else {
    return bad(absl::StrCat("unknown scheme '", m.scheme, "'"));
  }
  return m;
}

// The rank (or world size) from the call and from the URL: either, or both
// when they agree.
absl::StatusOr<int> Pick(int given, int in_url, const char* name, absl::string_view url) {
  if (given >= 0 && in_url >= 0 && given != in_url) {
    return absl::InvalidArgumentError(absl::StrCat("init_method '", url, "' says ", name, "=", in_url,
                                                   " but the call says ", given, "; give it once"));
  }
  if (given < 0 && in_url < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("init_method '", url, "' needs the ", name, ": pass it, or add ?", name, "=N to the URL"));
  }
  return given >= 0 ? given : in_url;
}

}  // namespace

absl::StatusOr<ProcessGroup> InitProcessGroup(absl::string_view init_method, int rank, int world_size,
                                              const EnvLookup& env, const InitOptions& options) {
  LOCKSTEP_ASSIGN_OR_RETURN(InitMethod m, ParseInitMethod(init_method));
  if (m.scheme == "env") {
    LOCKSTEP_ASSIGN_OR_RETURN(ProcessGroup group, InitFromEnv(env, options));
    if ((rank >= 0 && rank != group.env.rank) || (world_size >= 0 && world_size != group.env.world_size)) {
      return absl::InvalidArgumentError(absl::StrCat("InitProcessGroup(env://): the call says rank ", rank, " of ",
                                                     world_size, " but the environment (", group.env.source, ") says ",
                                                     group.env.rank, " of ", group.env.world_size));
    }
    return group;
  }
  ProcessGroup group;
  LOCKSTEP_ASSIGN_OR_RETURN(group.env.rank, Pick(rank, m.rank, "rank", init_method));
  LOCKSTEP_ASSIGN_OR_RETURN(group.env.world_size, Pick(world_size, m.world_size, "world_size", init_method));
  if (group.env.world_size < 1 || group.env.rank >= group.env.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("InitProcessGroup('", init_method, "'): rank ", group.env.rank,
                                                   " is not in [0, ", group.env.world_size, ")"));
  }
  group.env.source = m.scheme;
  if (const char* token = env("LOCKSTEP_STORE_TOKEN")) group.env.store_token = token;
  if (m.scheme == "tcp") {
    group.env.master_addr = m.host;
    group.env.master_port = m.port;
    LOCKSTEP_ASSIGN_OR_RETURN(group.store, OpenTcpStore(group.env, group.env.rank == 0, options, "InitProcessGroup"));
  } else {
    // Reached by no address: the ranks advertise this host's route to
    // loopback unless told otherwise (LOCKSTEP_SOCKET_ADDR / _IFNAME).
    group.env.master_addr = "127.0.0.1";
    FileStoreOptions store_options;
    store_options.timeout = options.store_timeout;
    store_options.num_users = group.env.world_size;  // The last rank to leave removes the file.
    absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(m.path, store_options);
    if (!store.ok()) {
      return absl::Status(store.status().code(),
                          absl::StrCat("InitProcessGroup: rank ", group.env.rank, ": ", store.status().message()));
    }
    group.store = std::move(*store);
  }
  LOCKSTEP_RETURN_IF_ERROR(JoinByHostIdentity(env, options, "InitProcessGroup", &group));
  return group;
}

absl::StatusOr<ProcessGroup> InitProcessGroup(absl::string_view init_method, int rank, int world_size,
                                              const InitOptions& options) {
  return InitProcessGroup(
      init_method, rank, world_size, [](const char* name) -> const char* { return std::getenv(name); }, options);
}

absl::StatusOr<ProcessGroup> JoinGroupOnStore(std::shared_ptr<Store> store, int rank, int world_size,
                                              absl::string_view source, const EnvLookup& env,
                                              const InitOptions& options) {
  if (store == nullptr) return absl::InvalidArgumentError("JoinGroupOnStore: no store");
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("JoinGroupOnStore(", source, "): rank ", rank, " is not in [0, ", world_size, ")"));
  }
  ProcessGroup group;
  group.env.rank = rank;
  group.env.world_size = world_size;
  group.env.source = std::string(source);
  const char* master = env("MASTER_ADDR");
  group.env.master_addr = master != nullptr && *master != '\0' ? master : "127.0.0.1";
  if (const char* token = env("LOCKSTEP_STORE_TOKEN")) group.env.store_token = token;
  group.store = std::move(store);
  LOCKSTEP_RETURN_IF_ERROR(JoinByHostIdentity(env, options, "JoinGroupOnStore", &group));
  return group;
}

}  // namespace lockstep
