#include "collectives/testing/fake_transport.h"

#include "collectives/testing/transport_conformance.h"

namespace lockstep {
namespace testing {
namespace {

INSTANTIATE_TEST_SUITE_P(Fake, TransportConformanceTest,
                         ::testing::Values(TransportFactory{"fake", [](int n) { return FakeNetwork::Create(n); }},
                                           // A header and a few hundred bytes fit: every transfer blocks often.
                                           TransportFactory{"fake_tiny_capacity",
                                                            [](int n) {
                                                              return FakeNetwork::Create(n, {/*capacity_bytes=*/1000});
                                                            }}),
                         TransportFactoryName);

}  // namespace
}  // namespace testing
}  // namespace lockstep
