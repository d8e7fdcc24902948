#include "collectives/cost_model/setup_cost.h"

#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace cost_model {
namespace {

CostModel WithSetup(double constant, double per_request, double handshake, double per_value = 0.5) {
  CostModel model;
  model.setup = SetupCost{constant, per_request, handshake, per_value};
  return model;
}

TEST(PredictSetup, FlatGroupByHand) {
  // p = 4 on one host: R = 4 (4 + 1 + 1) = 24 requests (each rank: set its
  // host, one MultiGet of 4 hosts, claim, challenge, address, one MultiGet
  // of 6 keys); V = 4 (4 + 6) = 40 values; 3 peers for the full mesh.
  absl::StatusOr<SetupPrediction> s =
      PredictSetup(Topology{4, 1, 4, 4}, WithSetup(1000, 2, 10), Connections::kFullMesh);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->store_requests, 24);
  EXPECT_DOUBLE_EQ(s->store_values, 40);
  EXPECT_DOUBLE_EQ(s->peers_per_rank, 3);
  EXPECT_EQ(s->sockets_per_rank, 6);
  EXPECT_DOUBLE_EQ(s->time_us, 1000 + 2 * 24 + 0.5 * 40 + 10 * 3);
  EXPECT_TRUE(s->warnings.empty());
  // On demand (the default): the first all-reduce's 2 recursive-doubling
  // partners, each one lookup of 2 keys: R = 4 (4 + 1 + 2) = 28,
  // V = 4 (4 + 2 * 2) = 32.
  s = PredictSetup(Topology{4, 1, 4, 4}, WithSetup(1000, 2, 10));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->store_requests, 28);
  EXPECT_DOUBLE_EQ(s->store_values, 32);
  EXPECT_DOUBLE_EQ(s->peers_per_rank, 2);
  EXPECT_EQ(s->sockets_per_rank, 4);
  EXPECT_DOUBLE_EQ(s->time_us, 1000 + 2 * 28 + 0.5 * 32 + 10 * 2);
  // 5 ranks: 3 partners (ceil(log2 5)), 1 rank: none.
  EXPECT_DOUBLE_EQ(PredictSetup(Topology{5, 1, 5, 5}, WithSetup(0, 0, 1))->peers_per_rank, 3);
  EXPECT_DOUBLE_EQ(PredictSetup(Topology{1, 1, 1, 1}, WithSetup(0, 0, 1))->peers_per_rank, 0);
}

TEST(PredictSetup, MixedGroupAddsLeadersAndLocalGroupsAndSharesCores) {
  // p = 8, 2 hosts of 4 on 2 cores: R = 8 (4 + 1 + 1) + 2 (3 + 1) + 8 (3 + 1)
  // = 88; V = 8 (8 + 14) + 2 * 2 * 1 + 2 * 8 * 3 = 228; P = 7 + 1 + 3 = 11,
  // handshakes x 4/2.
  absl::StatusOr<SetupPrediction> s =
      PredictSetup(Topology{8, 2, 4, 2}, WithSetup(1000, 2, 10), Connections::kFullMesh);
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s->store_requests, 88);
  EXPECT_DOUBLE_EQ(s->store_values, 228);
  EXPECT_DOUBLE_EQ(s->peers_per_rank, 11);
  EXPECT_DOUBLE_EQ(s->handshake_us, 10 * 11 * 2);
  EXPECT_DOUBLE_EQ(s->time_us, 1000 + 2 * 88 + 0.5 * 228 + 220);
  // On demand: the flat transport reads nothing; 1 leader partner (log2 2)
  // + the host's 3 local peers. R = 8 (4 + 1) + 2 (3 + 1) + 8 (3 + 1) = 80,
  // V = 64 + 2 * 2 * 1 + 2 * 8 * 3 = 116.
  s = PredictSetup(Topology{8, 2, 4, 2}, WithSetup(1000, 2, 10));
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s->store_requests, 80);
  EXPECT_DOUBLE_EQ(s->store_values, 116);
  EXPECT_DOUBLE_EQ(s->peers_per_rank, 4);
  EXPECT_DOUBLE_EQ(s->handshake_us, 10 * 4 * 2);
}

// A MultiGet is one request per 1,024 keys: at p = 2,048 each rank's host
// read is 2 requests and its address read 4 (4,094 keys).
TEST(PredictSetup, MultiGetsOfMoreThan1024KeysTakeSeveralRequests) {
  absl::StatusOr<SetupPrediction> s =
      PredictSetup(Topology{2048, 1, 2048, 2048}, WithSetup(0, 1, 0, 0), Connections::kFullMesh);
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s->store_requests, 2048.0 * (4 + 2 + 4));
  EXPECT_DOUBLE_EQ(s->store_values, 2048.0 * (2048 + 2 * 2047));
  // On demand only the hosts' MultiGet is that large; 11 lookups.
  s = PredictSetup(Topology{2048, 1, 2048, 2048}, WithSetup(0, 1, 0, 0));
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s->store_requests, 2048.0 * (4 + 2 + 11));
  EXPECT_DOUBLE_EQ(s->store_values, 2048.0 * (2048 + 2 * 11));
}

TEST(PredictSetup, GrowsWithPAndWarnsAtScale) {
  const CostModel model = DefaultCostModel();
  double last = 0;
  for (int64_t p : {1, 2, 16, 1024, 16384, 131072}) {
    absl::StatusOr<Topology> t = MakeTopology(p, 1);
    const double now = PredictSetup(*t, model)->time_us;
    EXPECT_GT(now, last - 1e-9);
    last = now;
  }
  absl::StatusOr<Topology> big = MakeTopology(16384, 8);
  absl::StatusOr<SetupPrediction> s = PredictSetup(*big, model, Connections::kFullMesh);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->warnings.size(), 2u);
  EXPECT_NE(s->warnings[0].find("ulimit"), std::string::npos);
  EXPECT_NE(s->warnings[1].find("max_connections"), std::string::npos);
  // On demand a rank's sockets stay few: only the store's limit is left.
  s = PredictSetup(*big, model);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->warnings.size(), 1u);
  EXPECT_NE(s->warnings[0].find("max_connections"), std::string::npos);
  EXPECT_LT(s->time_us, PredictSetup(*big, model, Connections::kFullMesh)->time_us);
  EXPECT_FALSE(PredictSetup(Topology{8, 3, 4, 4}, model).ok());
}

TEST(FitSetup, RecoversExactConstantsWithTheStoreHeld) {
  // Points of both kinds of connection: each fitted with its own P.
  const CostModel truth = WithSetup(50000, 3, 120, 0.25);
  std::vector<SetupPoint> points;
  for (auto [p, per_host, cores] : {std::tuple<int64_t, int64_t, int>{2, 2, 2}, {4, 4, 2}, {8, 4, 2}, {16, 8, 2}}) {
    absl::StatusOr<Topology> t = MakeTopology(p, per_host, cores);
    for (Connections c : {Connections::kOnDemand, Connections::kFullMesh}) {
      points.push_back(SetupPoint{*t, PredictSetup(*t, truth, c)->time_us, c});
    }
  }
  absl::StatusOr<SetupFit> fit = FitSetup(points, 3, 0.25);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->cost.constant_us, 50000, 1e-3);
  EXPECT_EQ(fit->cost.store_us_per_request, 3);
  EXPECT_EQ(fit->cost.store_us_per_value, 0.25);
  EXPECT_NEAR(fit->cost.handshake_us, 120, 1e-6);
  EXPECT_NEAR(fit->rms_residual_us, 0, 1e-6);
  EXPECT_TRUE(fit->zeroed.empty());
}

TEST(FitSetup, HoldsAtZeroATermTheDataWouldMakeNegative) {
  // Times of 30000 - 200 P beyond the store's part (one host of p ranks,
  // the full mesh: P = p - 1): plain least squares would give
  // handshake_us = -200.
  std::vector<SetupPoint> points;
  const CostModel store = WithSetup(0, 2, 0, 0.5);
  for (int64_t p : {2, 4, 8, 16}) {
    absl::StatusOr<Topology> t = MakeTopology(p, p);
    points.push_back(
        SetupPoint{*t, 30000.0 + PredictSetup(*t, store)->time_us - 200.0 * (p - 1), Connections::kFullMesh});
  }
  absl::StatusOr<SetupFit> fit = FitSetup(points, 2, 0.5);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->cost.handshake_us, 0);
  EXPECT_EQ(fit->zeroed, std::vector<std::string>{"handshake_us"});
  EXPECT_GT(fit->cost.constant_us, 0);
  EXPECT_GT(fit->rms_residual_us, 0);
  // Times that fall with p and no store: only the constant is left.
  absl::StatusOr<Topology> t2 = MakeTopology(2, 2), t4 = MakeTopology(4, 4), t8 = MakeTopology(8, 8);
  std::vector<SetupPoint> shrinking = {{*t2, 1000}, {*t4, 500}, {*t8, 10}};
  fit = FitSetup(shrinking, 0, 0);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->cost.constant_us, 1510.0 / 3, 1e-9);
  EXPECT_EQ(fit->zeroed, (std::vector<std::string>{"handshake_us"}));
}

TEST(FitSetup, RefusesTooFewSizesAndBadPoints) {
  absl::StatusOr<Topology> t2 = MakeTopology(2, 2), t4 = MakeTopology(4, 4), t8 = MakeTopology(8, 8);
  std::vector<SetupPoint> one_size = {{*t4, 20}, {*t4, 21}};
  absl::StatusOr<SetupFit> fit = FitSetup(one_size, 0, 0);
  EXPECT_EQ(fit.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(fit.status().message().find("at least 2"), std::string::npos) << fit.status();
  std::vector<SetupPoint> negative_time = {{*t2, 10}, {*t4, -20}, {*t8, 30}};
  EXPECT_NE(FitSetup(negative_time, 0, 0).status().message().find("point 1"), std::string::npos);
  std::vector<SetupPoint> bad_topology = {{Topology{8, 3, 4, 4}, 10}, {*t4, 20}, {*t8, 30}};
  EXPECT_NE(FitSetup(bad_topology, 0, 0).status().message().find("point 0"), std::string::npos);
  EXPECT_FALSE(FitSetup({{*t2, 10}, {*t4, 20}}, -1, 0).ok());
}

}  // namespace
}  // namespace cost_model
}  // namespace lockstep
