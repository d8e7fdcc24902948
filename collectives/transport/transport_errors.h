// The errors every transport reports the same way, so that a user sees one
// wording whichever transport ran (collectives/transport/tcp/tcp_transport.h,
// collectives/transport/shm/shm_transport.h).
#ifndef LOCKSTEP_COLLECTIVES_TRANSPORT_TRANSPORT_ERRORS_H_
#define LOCKSTEP_COLLECTIVES_TRANSPORT_TRANSPORT_ERRORS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collectives/transport/transport.h"

namespace lockstep {

// A received header is not the one expected: names the peer, both views,
// and what to do.
absl::Status MessageMismatchError(const std::string& peer_name, int rank, uint64_t got_seq, uint32_t got_tag,
                                  uint64_t got_bytes, MessageTag expected, size_t expected_bytes);

// An exchange's deadline passed; `waiting` lists what was still in flight
// ("receiving from rank 1 (...) (10 of 64 bytes)").
absl::Status ExchangeTimeoutError(uint64_t seq, int rank, const std::vector<std::string>& waiting);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_TRANSPORT_TRANSPORT_ERRORS_H_
