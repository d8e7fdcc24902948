// A Communicator whose ranks talk over a full TCP mesh (collectives/
// transport/tcp/tcp_transport.h), met through a Store: the usual way to build
// a group.
//
//   TcpStoreOptions store_options;  // see collectives/store/tcp_store.h
//   ...
//   LOCKSTEP_ASSIGN_OR_RETURN(std::shared_ptr<Store> store, TcpStore::Create(store_options));
//   TcpCommunicatorOptions options;
//   options.transport.host = "10.0.0.2";  // where the other ranks reach this one
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
//                             CreateTcpCommunicator(store, rank, world_size, options));
//
// Every option is validated first: a bad value is an InvalidArgument naming
// the field and its accepted range, before anything is connected.
#ifndef LOCKSTEP_COLLECTIVES_BOOTSTRAP_TCP_COMMUNICATOR_H_
#define LOCKSTEP_COLLECTIVES_BOOTSTRAP_TCP_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "collectives/algorithms/algorithm.h"
#include "collectives/communicator.h"
#include "collectives/store/store.h"
#include "collectives/transport/tcp/tcp_transport.h"

namespace lockstep {

struct TcpCommunicatorOptions {
  CommunicatorOptions communicator;  // Deadlines, debug checks, Work.
  AlgorithmOptions algorithms;       // Algorithm choice and pipelining.
  TcpTransportOptions transport;     // Address, socket tuning, set-up timeout.
  // Namespace of this group's keys in the store (several groups, restarts).
  std::string store_prefix = "comm";
};

absl::StatusOr<std::unique_ptr<Communicator>> CreateTcpCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                                                    const TcpCommunicatorOptions& options);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_BOOTSTRAP_TCP_COMMUNICATOR_H_
