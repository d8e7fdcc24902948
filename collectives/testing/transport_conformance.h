// The conformance suite every Transport passes: message order on one stream,
// segment callbacks, sends gated by `ready`, header checks, deadlines,
// aborts, open exchanges and traffic counters. A transport's test
// instantiates it with a factory:
//
//   INSTANTIATE_TEST_SUITE_P(Tcp, TransportConformanceTest,
//       ::testing::Values(TransportFactory{"tcp", MakeTcpTransports}),
//       TransportFactoryName);
#ifndef LOCKSTEP_COLLECTIVES_TESTING_TRANSPORT_CONFORMANCE_H_
#define LOCKSTEP_COLLECTIVES_TESTING_TRANSPORT_CONFORMANCE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/transport/transport.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace testing {

struct TransportFactory {
  std::string name;
  // n connected transports, [r] for rank r.
  std::function<std::vector<std::unique_ptr<Transport>>(int n)> make;
};

inline std::string TransportFactoryName(const ::testing::TestParamInfo<TransportFactory>& info) {
  return info.param.name;
}

class TransportConformanceTest : public ::testing::TestWithParam<TransportFactory> {};

// Sends `value` from `from` to `to` (two transports of one group) and
// checks that it arrived: for tests that set a group up against strangers
// and then show that the real mesh carries data.
absl::Status SendOneWord(Transport& from, Transport& to, uint64_t value);

}  // namespace testing
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_TESTING_TRANSPORT_CONFORMANCE_H_
