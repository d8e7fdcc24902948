// FakeTransport: an in-memory Transport for tests. The ranks of one
// FakeNetwork are threads of one process; each ordered pair of ranks has a
// byte stream of bounded capacity (as a socket buffer), so a send that the
// receiver does not drain blocks exactly as over TCP. Messages carry the
// same checked header (seq, tag, bytes) as TcpTransport's.
//
//   auto transports = FakeNetwork::Create(4, {.capacity_bytes = 4096});
//   // give transports[r] to rank r's thread
//
// Small capacities and odd segment sizes exercise paths that loopback TCP
// with 256 KiB buffers rarely takes. Not for production: everything is
// guarded by one mutex.
#ifndef LOCKSTEP_COLLECTIVES_TESTING_FAKE_TRANSPORT_H_
#define LOCKSTEP_COLLECTIVES_TESTING_FAKE_TRANSPORT_H_

#include <memory>
#include <vector>

#include "collectives/transport/transport.h"
#include "core/deadline.h"

namespace lockstep {
namespace testing {

struct FakeNetworkOptions {
  size_t capacity_bytes = 64 << 10;  // Per direction per pair, headers included.
};

class FakeNetwork {
 public:
  static std::vector<std::unique_ptr<Transport>> Create(int size, FakeNetworkOptions options = {});
};

}  // namespace testing
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_TESTING_FAKE_TRANSPORT_H_
