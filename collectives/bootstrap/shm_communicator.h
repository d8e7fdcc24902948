// A Communicator whose ranks, all on one host, talk through shared memory
// (collectives/transport/shm/shm_transport.h), met through a Store.
//
//   std::shared_ptr<Store> store = ...;  // see collectives/store/tcp_store.h
//   ShmCommunicatorOptions options;
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
//                             CreateShmCommunicator(store, rank, world_size, options));
//
// Every option is validated first: a bad value is an InvalidArgument naming
// the field and its accepted range, before anything is created.
#ifndef LOCKSTEP_COLLECTIVES_BOOTSTRAP_SHM_COMMUNICATOR_H_
#define LOCKSTEP_COLLECTIVES_BOOTSTRAP_SHM_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "collectives/algorithms/algorithm.h"
#include "collectives/communicator.h"
#include "collectives/store/store.h"
#include "collectives/transport/shm/shm_transport.h"

namespace lockstep {

struct ShmCommunicatorOptions {
  CommunicatorOptions communicator;  // Deadlines, debug checks, Work.
  AlgorithmOptions algorithms;       // Algorithm choice and pipelining.
  ShmTransportOptions transport;     // Ring sizes, spinning, set-up timeout.
  // Namespace of this group's keys in the store (several groups, restarts).
  std::string store_prefix = "comm";
};

absl::StatusOr<std::unique_ptr<Communicator>> CreateShmCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                                                    const ShmCommunicatorOptions& options);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_BOOTSTRAP_SHM_COMMUNICATOR_H_
