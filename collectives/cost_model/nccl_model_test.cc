#include "collectives/cost_model/nccl_model.h"

#include <algorithm>

#include "gtest/gtest.h"

namespace lockstep {
namespace cost_model {
namespace {

NcclLink Link(double gbytes) {
  NcclLink link;
  link.bus_gbytes_per_s = gbytes;
  return link;
}

TEST(NcclPredict, RingSimpleOnTwoNodesByHand) {
  // p = 16 on 2 nodes of 8: lat = 8.4 + (30 - 2) * max(5.7, 3 * 1.0) + 2 * 14.0 = 196,
  // x1.4 plateau (1 MiB / (2 channels * 16) >= 64); bw = 10 * 16 / 30.
  absl::StatusOr<NcclPrediction> r =
      NcclPredictProtocol(NcclAlgorithm::kRing, NcclProtocol::kSimple, 1 << 20, Topology{16, 2, 8, 8}, Link(10));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->latency_us, 196 * 1.4, 1e-9);
  EXPECT_NEAR(r->algorithm_gbytes_per_s, 10.0 * 16 / 30, 1e-12);
  EXPECT_NEAR(r->time_us, 274.4 + 1048576 / (1000 * 10.0 * 16 / 30), 1e-9);
}

TEST(NcclPredict, TreeSimpleOnTwoNodesByHand) {
  // lat = 8.4 + 2 * ((8 - 1) * 4.0 + log2(2) * 14) = 92.4; bw = 10 * 0.92 * 0.5,
  // x treeCorrectionFactor[Simple][log2(1 MiB / 64) = 14] = 0.5.
  absl::StatusOr<NcclPrediction> r =
      NcclPredictProtocol(NcclAlgorithm::kTree, NcclProtocol::kSimple, 1 << 20, Topology{16, 2, 8, 8}, Link(10));
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->latency_us, 92.4, 1e-9);
  EXPECT_NEAR(r->algorithm_gbytes_per_s, 2.3, 1e-12);
  EXPECT_NEAR(r->time_us, 92.4 + 1048576 / 2300.0, 1e-9);
}

TEST(NcclPredict, OneRankPerNodeUsesTheTreesNetworkLatency) {
  // p = 4 nodes of 1, ring LL: every step crosses nodes at hwLat[NET][tree][LL] = 5.0;
  // bw = min(20.4, 10 * 0.5) * 4 / 6.
  absl::StatusOr<NcclPrediction> r =
      NcclPredictProtocol(NcclAlgorithm::kRing, NcclProtocol::kLL, 1024, Topology{4, 4, 1, 1}, Link(10));
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->latency_us, 6.6 + 6 * 5.0, 1e-9);
  EXPECT_NEAR(r->time_us, 36.6 + 1024 / (1000 * 5.0 * 4 / 6), 1e-9);
}

TEST(NcclPredict, OneNodeHasNoNetworkTerms) {
  // p = 8 on one node over PCI, ring Simple: 8.4 + 14 * 5.7, no plateau.
  absl::StatusOr<NcclPrediction> r =
      NcclPredictProtocol(NcclAlgorithm::kRing, NcclProtocol::kSimple, 1 << 20, Topology{8, 1, 8, 8}, Link(10));
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->latency_us, 8.4 + 14 * 5.7, 1e-9);
  EXPECT_NEAR(NcclPredict(NcclAlgorithm::kTree, 1 << 20, Topology{1, 1, 1, 1}, Link(10))->time_us, 0, 0);
}

TEST(NcclPredict, TakesTheFastestProtocol) {
  for (int64_t bytes : {int64_t{0}, int64_t{4096}, int64_t{1} << 20, int64_t{256} << 20}) {
    for (NcclAlgorithm a : {NcclAlgorithm::kRing, NcclAlgorithm::kTree}) {
      const Topology t{1024, 128, 8, 8};
      absl::StatusOr<NcclPrediction> best = NcclPredict(a, bytes, t, Link(3.125));
      ASSERT_TRUE(best.ok());
      for (NcclProtocol p : {NcclProtocol::kLL, NcclProtocol::kLL128, NcclProtocol::kSimple}) {
        EXPECT_LE(best->time_us, NcclPredictProtocol(a, p, bytes, t, Link(3.125))->time_us);
      }
    }
  }
  // Tiny messages: LL; huge ones: Simple (LL128's 0.92 and LL's 0.5 lose).
  EXPECT_EQ(NcclPredict(NcclAlgorithm::kRing, 8, Topology{16, 2, 8, 8}, Link(3.125))->protocol, NcclProtocol::kLL);
  EXPECT_EQ(NcclPredict(NcclAlgorithm::kRing, int64_t{1} << 30, Topology{16, 2, 8, 8}, Link(3.125))->protocol,
            NcclProtocol::kSimple);
}

TEST(NcclPredict, RefusesBadInputs) {
  const Topology t{16, 2, 8, 8};
  EXPECT_FALSE(NcclPredict(NcclAlgorithm::kRing, 1, t, Link(0)).ok());
  EXPECT_FALSE(NcclPredict(NcclAlgorithm::kRing, -1, t, Link(1)).ok());
  NcclLink no_channels = Link(1);
  no_channels.channels = 0;
  EXPECT_NE(NcclPredict(NcclAlgorithm::kRing, 1, t, no_channels).status().message().find("channels"),
            std::string::npos);
  EXPECT_FALSE(NcclPredict(NcclAlgorithm::kTree, 1, Topology{16, 3, 8, 8}, Link(1)).ok());
}

}  // namespace
}  // namespace cost_model
}  // namespace lockstep
