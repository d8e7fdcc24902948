// CreateCommunicator: builds a group over the transport that suits where its
// ranks run, chosen from their host identities (collectives/transport/host_identity.h):
//
//   all ranks on one host        -> shared memory  ("shm",  collectives/bootstrap/shm_communicator.h)
//   every rank on its own host   -> TCP            ("tcp",  collectives/bootstrap/tcp_communicator.h)
//   some hosts with several ranks -> hierarchical  ("hierarchical(shm+tcp)",
//                                    collectives/hierarchical/hierarchical_backend.h)
//
//   CommunicatorFactoryOptions options;
//   options.tcp.host = "10.0.0.2";  // where ranks on other hosts reach this one
//   LOCKSTEP_RETURN_IF_ERROR(ApplyTransportEnvironment(env, &options));
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
//                             CreateCommunicator(store, rank, world_size, options));
//   comm->capabilities().name;  // "host over shm", "host over tcp", "hierarchical(shm+tcp)"
//
// Every rank publishes "<transport asked for>;<algorithm choices>|<host
// identity>" under "<store_prefix>/host/<rank>" and reads everybody's, so
// all ranks make the same choice from the same facts; what chooses the
// algorithms (AlgorithmOptions' all_reduce, small_message_bytes and link:
// LOCKSTEP_ALGO among them) is rank 0's on every rank. `transport` (or LOCKSTEP_TRANSPORT)
// forces one: "tcp" always works; "shm" on ranks of several hosts is an
// error naming them; ranks that ask for different transports fail naming
// both. Such errors come on every rank: each waits (up to 10 s) until all
// have read the announcements, so a rank that serves the store does not
// exit with it before the others have learned why. The hierarchical group uses shared memory inside each host
// (`local_transport` "tcp" puts TCP there too, for hosts without usable
// shared memory and for tests), TCP among the hosts' leaders, and a TCP
// mesh of all ranks for the operations that it does not split.
#ifndef LOCKSTEP_COLLECTIVES_BOOTSTRAP_COMMUNICATOR_FACTORY_H_
#define LOCKSTEP_COLLECTIVES_BOOTSTRAP_COMMUNICATOR_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "collectives/algorithms/algorithm.h"
#include "collectives/bootstrap/rank_environment.h"
#include "collectives/communicator.h"
#include "collectives/store/store.h"
#include "collectives/transport/shm/shm_transport.h"
#include "collectives/transport/tcp/tcp_transport.h"

namespace lockstep {

// The environment variable that forces a transport (auto, tcp or shm).
inline constexpr char kTransportEnv[] = "LOCKSTEP_TRANSPORT";
// "0" connects every pair of TCP ranks while the group is created
// (TcpTransportOptions::full_mesh); "1", the default, on first use (NCCL's
// NCCL_RUNTIME_CONNECT has the same meaning).
inline constexpr char kRuntimeConnectEnv[] = "LOCKSTEP_RUNTIME_CONNECT";

// Forces the all-reduce algorithm (AlgorithmOptions::all_reduce): auto,
// ring, recursive_doubling or rabenseifner, as NCCL_ALGO. Rank 0's value
// (with the rest of what chooses algorithms) holds on every rank.
inline constexpr char kAlgorithmEnv[] = "LOCKSTEP_ALGO";

struct CommunicatorFactoryOptions {
  CommunicatorOptions communicator;  // Deadlines, debug checks, Work.
  AlgorithmOptions algorithms;       // Algorithm choice and pipelining (every level).
  TcpTransportOptions tcp;           // Between hosts; `tcp.timeout` also bounds the identity exchange.
  ShmTransportOptions shm;           // Inside a host (its secret, when empty, is tcp's).
  // "auto" (by host identities), "tcp" or "shm".
  std::string transport = "auto";
  // Inside each host of a hierarchical group: "shm" or "tcp".
  std::string local_transport = "shm";
  // This rank's host identity; empty: LocalHostIdentity() (which honours
  // LOCKSTEP_HOST_ID).
  std::string host_id;
  // Namespace of this group's keys in the store (several groups, restarts).
  std::string store_prefix = "comm";
};

// InvalidArgument naming the bad field and the accepted values; also
// validates the nested options.
absl::Status ValidateCommunicatorFactoryOptions(const CommunicatorFactoryOptions& options);

// LOCKSTEP_TRANSPORT into `transport` when that is "auto" (an explicit
// choice wins), LOCKSTEP_HOST_ID into `host_id` when empty,
// LOCKSTEP_RUNTIME_CONNECT=0 into `tcp.full_mesh`, LOCKSTEP_ALGO into
// `algorithms.all_reduce` when that is kAuto. A value that is not auto,
// tcp or shm (0 or 1; an algorithm's name) is an InvalidArgument naming the
// variable.
absl::Status ApplyTransportEnvironment(const EnvLookup& env, CommunicatorFactoryOptions* options);

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                                                 const CommunicatorFactoryOptions& options);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_BOOTSTRAP_COMMUNICATOR_FACTORY_H_
