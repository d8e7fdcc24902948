// Host identity: a string that is equal for two processes exactly when they
// can share memory and should talk through it rather than through TCP.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(std::string id, LocalHostIdentity());
//   // "node7/3f6c...-boot-id/net:4026531840"
//
// It joins the hostname, the kernel's boot id (/proc/sys/kernel/random/
// boot_id: two machines, or two boots, with one hostname still differ) and
// the inode of this process's network namespace (/proc/self/ns/net): two
// network namespaces on one machine are two "hosts", as the multi-node tests
// make them, and ranks in them must meet over TCP. LOCKSTEP_HOST_ID, when set
// and not empty, replaces all of it (tests fake several hosts on one
// machine with it; a cluster whose containers share memory across network
// namespaces can say so with it).
#ifndef LOCKSTEP_COLLECTIVES_TRANSPORT_HOST_IDENTITY_H_
#define LOCKSTEP_COLLECTIVES_TRANSPORT_HOST_IDENTITY_H_

#include <string>

#include "absl/status/statusor.h"
#include "collectives/bootstrap/rank_environment.h"

namespace lockstep {

// The environment variable that overrides the identity.
inline constexpr char kHostIdEnv[] = "LOCKSTEP_HOST_ID";

// This process's identity; LOCKSTEP_HOST_ID is read through `env`. Fails
// only when neither the override nor the namespace inode can be read.
absl::StatusOr<std::string> LocalHostIdentity(const EnvLookup& env);
// Reads this process's environment.
absl::StatusOr<std::string> LocalHostIdentity();

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_TRANSPORT_HOST_IDENTITY_H_
