// InitFromEnv: joins the process group that a launcher described in the
// environment, as torch.distributed.init_process_group("env://") does.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(ProcessGroup group, InitFromEnv());
//   LOCKSTEP_RETURN_IF_ERROR(group.comm->AllReduce(grads, ReduceOp::kAvg)->Wait());
//
// Works under tools/launch and torchrun, `mpirun -np N` and `srun -n N`:
// which variables each provides, which are required and the defaults for
// MASTER_ADDR/MASTER_PORT are tabled in collectives/bootstrap/rank_environment.h.
// What is missing or malformed is an error naming the variables.
//
// The rendezvous store is a TcpStore at MASTER_ADDR:MASTER_PORT: rank 0
// serves it, unless TORCHELASTIC_USE_AGENT_STORE=True says that a launcher
// already does (then every rank is a client, and no rank binds a port
// chosen in advance). LOCKSTEP_STORE_TOKEN, when set, is the store's shared
// secret and the key of the ranks' authenticated handshake. Each rank
// advertises an address its peers can reach (collectives/transport/tcp/address.h), so a
// multi-node job needs nothing beyond MASTER_ADDR. The communicator's
// transport is then chosen from where the ranks run
// (collectives/bootstrap/communicator_factory.h): shared memory when all share this
// host, TCP when each has its own, hierarchical (shared memory inside hosts,
// TCP between them) otherwise; `transport` or LOCKSTEP_TRANSPORT=tcp|shm
// forces one, and LOCKSTEP_HOST_ID overrides the host identity
// (collectives/transport/host_identity.h). `group.comm->capabilities().name` says
// which one runs. TCP ranks connect when they first talk;
// LOCKSTEP_RUNTIME_CONNECT=0 connects every pair at start-up instead.
#ifndef LOCKSTEP_COLLECTIVES_BOOTSTRAP_INIT_FROM_ENV_H_
#define LOCKSTEP_COLLECTIVES_BOOTSTRAP_INIT_FROM_ENV_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectives/bootstrap/communicator_factory.h"
#include "collectives/bootstrap/rank_environment.h"
#include "collectives/bootstrap/tcp_communicator.h"
#include "collectives/communicator.h"
#include "collectives/store/store.h"

namespace lockstep {

struct InitOptions {
  // `communicator.transport.host` is chosen here (see `host`), and
  // `communicator.transport.secret` defaults to LOCKSTEP_STORE_TOKEN.
  TcpCommunicatorOptions communicator;
  // The address this rank advertises; empty: chosen as collectives/transport/tcp/address.h
  // says (LOCKSTEP_SOCKET_ADDR, LOCKSTEP_SOCKET_IFNAME, else the route toward
  // MASTER_ADDR, never loopback when the group spans hosts).
  std::string host;
  // How long to wait for the store and for every rank to arrive.
  Milliseconds store_timeout = Milliseconds(300000);
  // The shared-memory transport's options (groups with ranks on one host);
  // `communicator.communicator`, `.algorithms` and `.store_prefix` apply to
  // every transport, `communicator.transport` to TCP only.
  ShmTransportOptions shm;
  // "auto" (by host identity), "tcp" or "shm"; LOCKSTEP_TRANSPORT overrides
  // "auto" (see collectives/bootstrap/communicator_factory.h).
  std::string transport = "auto";
  // Inside each host of a mixed group: "shm" or "tcp".
  std::string local_transport = "shm";
  // This rank's host identity; empty: LOCKSTEP_HOST_ID, else
  // collectives/transport/host_identity.h's.
  std::string host_id;
};

struct ProcessGroup {
  RankEnvironment env;
  // Also for the caller's own keys. Under a launcher's store
  // (TORCHELASTIC_USE_AGENT_STORE=True) it is prefixed per attempt,
  // /worker/attempt_<TORCHELASTIC_RESTART_COUNT>, as torch's env:// does.
  std::shared_ptr<Store> store;
  std::unique_ptr<Communicator> comm;
};

// Reads the process environment.
absl::StatusOr<ProcessGroup> InitFromEnv(const InitOptions& options = {});
// For tests and embedders: an explicit environment.
absl::StatusOr<ProcessGroup> InitFromEnv(const EnvLookup& env, const InitOptions& options);

// torch.distributed.init_process_group's init_method:
//   "env://"          InitFromEnv (rank and world_size, if given, must agree);
//   "tcp://HOST:PORT" rank 0 serves a TcpStore there, the others connect
//                     (LOCKSTEP_STORE_TOKEN, when set, is its secret);
//   "file:///PATH"    a FileStore at PATH (collectives/store/file_store.h)
//                     on a file system every rank sees; the last rank to
//                     leave removes the file.
// tcp:// and file:// need the rank and world size: the arguments (-1: not
// given) or the URL's ?rank=R&world_size=N, as torch's. The group is then
// built as InitFromEnv builds it (automatic transport choice; `options`).
//
//   LOCKSTEP_ASSIGN_OR_RETURN(ProcessGroup group,
//                             InitProcessGroup("tcp://10.0.0.2:29500", rank, world_size));
absl::StatusOr<ProcessGroup> InitProcessGroup(absl::string_view init_method, int rank = -1, int world_size = -1,
                                              const InitOptions& options = {});
// With an explicit environment (LOCKSTEP_* overrides, env://'s variables).
absl::StatusOr<ProcessGroup> InitProcessGroup(absl::string_view init_method, int rank, int world_size,
                                              const EnvLookup& env, const InitOptions& options);

// For a fault-tolerant job (collectives/elastic/elastic_group.h), whose
// communicators are made per membership epoch: InitFromEnv's rank, world
// and store (under the same per-attempt prefix), and no communicator
// (`comm` is null). Rank 0 serves the store unless a launcher does; in a
// fault-tolerant job the launcher should (lockstep-run does), or the store
// dies with rank 0.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(ProcessGroup connected, ConnectFromEnv(env, {}));
//   LOCKSTEP_ASSIGN_OR_RETURN(CommunicatorFactoryOptions factory,
//                             CommunicatorOptionsFromEnv(env, connected.env, {}));
absl::StatusOr<ProcessGroup> ConnectFromEnv(const EnvLookup& env, const InitOptions& options);
// What CreateCommunicator (collectives/bootstrap/communicator_factory.h)
// takes to make `rank_env`'s rank's communicator as InitFromEnv does: the
// advertised address, the secret, the transport and the environment's
// overrides. Set store_prefix per communicator.
absl::StatusOr<CommunicatorFactoryOptions> CommunicatorOptionsFromEnv(const EnvLookup& env,
                                                                      const RankEnvironment& rank_env,
                                                                      const InitOptions& options);

// For embedders that hold a store already (interop/torch's backend gets
// PyTorch's): rank `rank` of `world_size` joins over `store`, as
// InitProcessGroup does after opening its store: the ranks' host
// identities, published in `store`, say which share a host; the address
// advertised is chosen toward MASTER_ADDR when `env` has it (else
// loopback: one host); LOCKSTEP_STORE_TOKEN is the handshake's secret
// unless `options` has one. `source` names the caller in errors.
absl::StatusOr<ProcessGroup> JoinGroupOnStore(std::shared_ptr<Store> store, int rank, int world_size,
                                              absl::string_view source, const EnvLookup& env,
                                              const InitOptions& options);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_BOOTSTRAP_INIT_FROM_ENV_H_
