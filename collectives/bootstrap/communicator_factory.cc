#include "collectives/bootstrap/communicator_factory.h"

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "collectives/bootstrap/shm_communicator.h"
#include "collectives/bootstrap/tcp_communicator.h"
#include "collectives/hierarchical/hierarchical_backend.h"
#include "collectives/hierarchical/hierarchical_layout.h"
#include "collectives/host_backend.h"
#include "collectives/store/prefix_store.h"
#include "collectives/transport/host_identity.h"
#include "core/status.h"

namespace lockstep {
namespace {

bool IsTransportName(const std::string& name) { return name == "auto" || name == "tcp" || name == "shm"; }

// The values that choose algorithms, which every rank must share:
// "all_reduce=<name>,small=<bytes>[,link=<α>:<β>:<γ>]" (doubles in C's
// exact hexadecimal form).
std::string EncodeSelection(const AlgorithmOptions& a) {
  std::string s = absl::StrCat("all_reduce=", AllReduceAlgorithmName(a.all_reduce), ",small=", a.small_message_bytes,
                               ",cores=", a.cores_per_host);
  if (a.link.has_value()) {
    absl::StrAppend(&s, absl::StrFormat(",link=%a:%a:%a:%a", a.link->latency_us, a.link->us_per_byte,
                                        a.link->reduce_us_per_byte, a.link->message_us));
  }
  return s;
}

// `encoded` (EncodeSelection's, published by `rank`) into `a`.
absl::Status DecodeSelection(absl::string_view encoded, int rank, AlgorithmOptions* a) {
  auto bad = [&](absl::string_view what) {
    return absl::DataLossError(
        absl::StrCat("CreateCommunicator: rank ", rank, " published algorithm choices '", encoded, "' (", what,
                     "); expected all_reduce=<name>,small=<bytes>[,cores=<n>][,link=<a>:<b>:<g>:<o>]: does "
                     "every rank run the same lockstep version?"));
  };
  AlgorithmOptions decoded = *a;
  decoded.link.reset();
  for (absl::string_view field : absl::StrSplit(encoded, ',')) {
    const std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(field, absl::MaxSplits('=', 1));
    if (kv.first == "all_reduce") {
      absl::StatusOr<AllReduceAlgorithm> algorithm = ParseAllReduceAlgorithm(kv.second);
      if (!algorithm.ok()) return bad(algorithm.status().message());
      decoded.all_reduce = *algorithm;
    } else if (kv.first == "small") {
      uint64_t bytes = 0;
      if (!absl::SimpleAtoi(kv.second, &bytes)) return bad("small is not a byte count");
      decoded.small_message_bytes = static_cast<size_t>(bytes);
    } else if (kv.first == "cores") {
      int cores = 0;
      if (!absl::SimpleAtoi(kv.second, &cores)) return bad("cores is not a count");
      decoded.cores_per_host = cores;
    } else if (kv.first == "link") {
      const std::vector<std::string> parts = absl::StrSplit(kv.second, ':');
      if (parts.size() != 4) return bad("link has not 4 numbers");
      double v[4];
      for (int i = 0; i < 4; ++i) {
        char* end = nullptr;
        v[i] = std::strtod(parts[static_cast<size_t>(i)].c_str(), &end);
        if (parts[static_cast<size_t>(i)].empty() || *end != '\0') return bad("a link constant is not a number");
      }
      decoded.link = LinkConstants{v[0], v[1], v[2], v[3]};
    } else {
      return bad(absl::StrCat("unknown field '", kv.first, "'"));
    }
  }
  if (absl::Status valid = ValidateAlgorithmOptions(decoded); !valid.ok()) return bad(valid.message());
  *a = decoded;
  return absl::OkStatus();
}

// Every rank's "<asked>;<selection>|<identity>", by rank.
struct Announcements {
  std::vector<std::string> asked;
  std::vector<std::string> selections;
  std::vector<std::string> identities;
};

absl::StatusOr<Announcements> Announce(Store& store, int rank, int size, const std::string& asked,
                                       const std::string& selection, const std::string& identity,
                                       Milliseconds timeout) {
  LOCKSTEP_RETURN_IF_ERROR(store.Set(absl::StrCat("host/", rank), absl::StrCat(asked, ";", selection, "|", identity)));
  Announcements all;
  // One round trip for all of them (Store::MultiGet), not one per rank.
  std::vector<std::string> keys;
  keys.reserve(static_cast<size_t>(size));
  for (int peer = 0; peer < size; ++peer) keys.push_back(absl::StrCat("host/", peer));
  absl::StatusOr<std::vector<std::string>> values = store.MultiGet(keys, timeout);
  if (!values.ok()) {
    return absl::Status(values.status().code(),
                        absl::StrCat("CreateCommunicator: rank ", rank,
                                     " waited for every rank's host identity: ", values.status().message(),
                                     "; is every rank started, with the same world size and store prefix?"));
  }
  for (int peer = 0; peer < size; ++peer) {
    const std::string* value = &(*values)[static_cast<size_t>(peer)];
    const size_t bar = value->find('|');
    const size_t semicolon = value->find(';');
    if (bar == std::string::npos || semicolon == std::string::npos || semicolon > bar) {
      return absl::DataLossError(absl::StrCat("CreateCommunicator: rank ", peer, " published '", *value,
                                              "' as its host; expected '<transport>;<algorithms>|<identity>' "
                                              "(another program, or another lockstep version, uses this store "
                                              "prefix?)"));
    }
    all.asked.push_back(value->substr(0, semicolon));
    all.selections.push_back(value->substr(semicolon + 1, bar - semicolon - 1));
    all.identities.push_back(value->substr(bar + 1));
  }
  LOCKSTEP_RETURN_IF_ERROR(store.Set(absl::StrCat("host_read/", rank), "1"));
  return all;
}

// Before returning an error that every rank reaches on its own (they all
// read the same announcements), waits up to `window` for every rank to have
// read them: a rank that serves the store must not exit while the others
// still need it to learn the same error.
absl::Status AfterAllRead(Store& store, int size, Milliseconds window, absl::Status error) {
  std::vector<std::string> keys;
  for (int peer = 0; peer < size; ++peer) keys.push_back(absl::StrCat("host_read/", peer));
  (void)store.Wait(keys, window);  // Best effort: the error is what matters.
  return error;
}

// "auto", "tcp" or "shm" as all ranks asked, or an error naming two that differ.
absl::StatusOr<std::string> AgreedTransport(const std::vector<std::string>& asked) {
  for (size_t r = 1; r < asked.size(); ++r) {
    if (asked[r] != asked[0]) {
      return absl::InvalidArgumentError(
          absl::StrCat("CreateCommunicator: rank 0 asks for transport '", asked[0], "' but rank ", r, " for '",
                       asked[r], "'; set the same --transport / ", kTransportEnv, " on every rank"));
    }
  }
  return asked[0];
}

// AlgorithmOptions::ranks_per_host of a TCP group over `layout` (every
// rank computes it from the same layout).
int MostRanksOnAHost(const HostLayout& layout) {
  size_t most = 1;
  for (const std::vector<int>& ranks : layout.hosts) most = std::max(most, ranks.size());
  return static_cast<int>(most);
}

// AlgorithmOptions::ranks_per_core over `layout` with rank 0's cores (every
// rank computes it from the same values).
double RanksPerCore(const HostLayout& layout, int cores_per_host) {
  return std::max(1.0, static_cast<double>(MostRanksOnAHost(layout)) / std::max(1, cores_per_host));
}

absl::StatusOr<std::unique_ptr<Transport>> MakeLevelTransport(const std::string& kind, std::shared_ptr<Store> store,
                                                              int rank, int size,
                                                              const CommunicatorFactoryOptions& options) {
  if (kind == "shm") {
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<ShmTransport> t, ShmTransport::Create(*store, rank, size, options.shm));
    return std::unique_ptr<Transport>(std::move(t));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TcpTransport> t, TcpTransport::Create(store, rank, size, options.tcp));
  return std::unique_ptr<Transport>(std::move(t));
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateHierarchical(std::shared_ptr<Store> prefixed, int rank,
                                                                 HostLayout layout,
                                                                 const CommunicatorFactoryOptions& options) {
  const int host = layout.host_of[rank];
  const int local_size = static_cast<int>(layout.hosts[host].size());
  HierarchicalBackend::Levels levels;
  levels.local_name = options.local_transport;
  levels.leaders_name = "tcp";
  // Set-up order: local group, leaders (leaders only), flat group. Each step
  // waits only for ranks that reach it without waiting on a later one. The
  // TCP levels keep their stores and connect on first use: the flat group
  // (point-to-point, all-to-all) costs nothing until it is used.
  if (local_size > 1) {
    auto local_store = std::make_shared<PrefixStore>(absl::StrCat("local", host), prefixed);
    LOCKSTEP_ASSIGN_OR_RETURN(levels.local, MakeLevelTransport(options.local_transport, std::move(local_store),
                                                               layout.local_index[rank], local_size, options));
  }
  if (layout.is_leader(rank) && layout.num_hosts() > 1) {
    auto leaders_store = std::make_shared<PrefixStore>("leaders", prefixed);
    LOCKSTEP_ASSIGN_OR_RETURN(levels.leaders,
                              MakeLevelTransport("tcp", std::move(leaders_store), host, layout.num_hosts(), options));
  }
  auto flat_store = std::make_shared<PrefixStore>("flat", prefixed);
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TcpTransport> flat,
                            TcpTransport::Create(std::move(flat_store), rank, layout.world_size(), options.tcp));
  // The flat group's ranks share their hosts' links.
  AlgorithmOptions flat_algorithms = options.algorithms;
  flat_algorithms.ranks_per_host = MostRanksOnAHost(layout);
  LOCKSTEP_ASSIGN_OR_RETURN(levels.flat, HostBackend::Create(std::move(flat), flat_algorithms, "tcp"));
  LOCKSTEP_ASSIGN_OR_RETURN(
      std::unique_ptr<HierarchicalBackend> backend,
      HierarchicalBackend::Create(std::move(layout), rank, std::move(levels), options.algorithms));
  return Communicator::Create(std::move(backend), options.communicator, std::move(prefixed));
}

}  // namespace

absl::Status ValidateCommunicatorFactoryOptions(const CommunicatorFactoryOptions& options) {
  if (!IsTransportName(options.transport)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CommunicatorFactoryOptions.transport is '", options.transport, "'; expected auto, tcp or shm"));
  }
  if (options.local_transport != "shm" && options.local_transport != "tcp") {
    return absl::InvalidArgumentError(absl::StrCat("CommunicatorFactoryOptions.local_transport is '",
                                                   options.local_transport, "'; expected shm or tcp"));
  }
  if (options.store_prefix.empty()) {
    return absl::InvalidArgumentError(
        "CommunicatorFactoryOptions.store_prefix is empty; give each group its own prefix");
  }
  if (options.host_id.find('|') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("CommunicatorFactoryOptions.host_id '", options.host_id, "' contains '|'; choose another name"));
  }
  LOCKSTEP_RETURN_IF_ERROR(ValidateCommunicatorOptions(options.communicator));
  LOCKSTEP_RETURN_IF_ERROR(ValidateAlgorithmOptions(options.algorithms));
  LOCKSTEP_RETURN_IF_ERROR(ValidateTcpTransportOptions(options.tcp));
  return ValidateShmTransportOptions(options.shm);
}

absl::Status ApplyTransportEnvironment(const EnvLookup& env, CommunicatorFactoryOptions* options) {
  if (const char* forced = env(kTransportEnv); forced != nullptr && *forced != '\0' && options->transport == "auto") {
    if (!IsTransportName(forced)) {
      return absl::InvalidArgumentError(
          absl::StrCat(kTransportEnv, "='", forced, "' is not a transport; use auto, tcp or shm (or unset it)"));
    }
    options->transport = forced;
  }
  if (options->host_id.empty()) {
    if (const char* id = env(kHostIdEnv); id != nullptr) options->host_id = id;
  }
  if (const char* connect = env(kRuntimeConnectEnv); connect != nullptr && *connect != '\0') {
    const absl::string_view value = connect;
    if (value != "0" && value != "1") {
      return absl::InvalidArgumentError(absl::StrCat(kRuntimeConnectEnv, "='", connect,
                                                     "' is not 0 (connect every pair of ranks at start-up) or 1 "
                                                     "(connect on first use, the default)"));
    }
    if (value == "0") options->tcp.full_mesh = true;
  }
  if (const char* algo = env(kAlgorithmEnv);
      algo != nullptr && *algo != '\0' && options->algorithms.all_reduce == AllReduceAlgorithm::kAuto) {
    absl::StatusOr<AllReduceAlgorithm> forced = ParseAllReduceAlgorithm(algo);
    if (!forced.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(kAlgorithmEnv, "='", algo, "': ", forced.status().message(), " (or unset it)"));
    }
    options->algorithms.all_reduce = *forced;
  }
  return absl::OkStatus();
}

namespace {

absl::StatusOr<std::unique_ptr<Communicator>> CreateAnyCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                                                    const CommunicatorFactoryOptions& given);

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                                                 const CommunicatorFactoryOptions& options) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, CreateAnyCommunicator(store, rank, size, options));
  // Subgroups choose their transport anew, for their own members (two
  // ranks of one host in a group of several hosts talk through shared
  // memory), under this group's prefix.
  comm->set_subgroup_factory([store, options](const Communicator::SubgroupSpec& spec) {
    CommunicatorFactoryOptions child = options;
    child.store_prefix = absl::StrCat(options.store_prefix, "/", spec.name);
    return CreateCommunicator(store, spec.rank, spec.size, child);
  });
  return comm;
}

namespace {

absl::StatusOr<std::unique_ptr<Communicator>> CreateAnyCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                                                    const CommunicatorFactoryOptions& given) {
  // One group secret for both transports: shared memory's handshake proves
  // the same LOCKSTEP_STORE_TOKEN as TCP's.
  CommunicatorFactoryOptions options = given;
  if (options.shm.secret.empty()) options.shm.secret = options.tcp.secret;
  if (store == nullptr) return absl::InvalidArgumentError("CreateCommunicator: no store");
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("CreateCommunicator: rank ", rank, " is not in [0, ", size, ") (world size ", size, ")"));
  }
  LOCKSTEP_RETURN_IF_ERROR(ValidateCommunicatorFactoryOptions(options));
  std::string identity = options.host_id;
  if (identity.empty()) {
    LOCKSTEP_ASSIGN_OR_RETURN(identity, LocalHostIdentity());
  }
  if (options.algorithms.cores_per_host == 0) {
    options.algorithms.cores_per_host = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  auto prefixed = std::make_shared<PrefixStore>(options.store_prefix, store);
  LOCKSTEP_ASSIGN_OR_RETURN(Announcements all,
                            Announce(*prefixed, rank, size, options.transport, EncodeSelection(options.algorithms),
                                     identity, options.tcp.timeout));
  // What chooses the algorithms is rank 0's, on every rank: ranks that
  // chose differently would run different steps and wait for each other.
  if (absl::Status adopted = DecodeSelection(all.selections[0], 0, &options.algorithms); !adopted.ok()) {
    return AfterAllRead(*prefixed, size, std::min(options.tcp.timeout, Milliseconds(10000)), adopted);
  }
  // Every rank has announced, so all are alive and about to read: waiting
  // for them is short, and bounded in case one dies meanwhile.
  const Milliseconds window = std::min(options.tcp.timeout, Milliseconds(10000));
  absl::StatusOr<std::string> agreed = AgreedTransport(all.asked);
  if (!agreed.ok()) return AfterAllRead(*prefixed, size, window, agreed.status());
  const std::string asked = *agreed;
  LOCKSTEP_ASSIGN_OR_RETURN(HostLayout layout, HostLayout::FromIdentities(all.identities));
  options.algorithms.ranks_per_core = RanksPerCore(layout, options.algorithms.cores_per_host);
  std::string kind = asked;
  if (kind == "auto") {
    kind = layout.single_host() ? "shm" : layout.one_rank_per_host() ? "tcp" : "hierarchical";
  }
  if (kind == "shm" && !layout.single_host()) {
    const absl::Status error = absl::InvalidArgumentError(
        absl::StrCat("CreateCommunicator: transport shm was forced but the ranks run on ", layout.num_hosts(),
                     " hosts (ranks by host: ", layout.Describe(), "; rank 0 on '", all.identities[0], "', rank ",
                     layout.leader(1), " on '", all.identities[layout.leader(1)],
                     "'); shared memory joins ranks of one host "
                     "only: use auto or tcp"));
    return AfterAllRead(*prefixed, size, window, error);
  }
  if (kind == "shm") {
    ShmCommunicatorOptions shm;
    shm.communicator = options.communicator;
    shm.algorithms = options.algorithms;
    shm.transport = options.shm;
    shm.store_prefix = options.store_prefix;
    return CreateShmCommunicator(std::move(store), rank, size, shm);
  }
  if (kind == "tcp") {
    TcpCommunicatorOptions tcp;
    tcp.communicator = options.communicator;
    tcp.algorithms = options.algorithms;
    tcp.algorithms.ranks_per_host = MostRanksOnAHost(layout);
    tcp.transport = options.tcp;
    tcp.store_prefix = options.store_prefix;
    return CreateTcpCommunicator(std::move(store), rank, size, tcp);
  }
  return CreateHierarchical(std::move(prefixed), rank, std::move(layout), options);
}

}  // namespace

}  // namespace lockstep
