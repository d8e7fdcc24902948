#include "collectives/cost_model/setup_cost.h"

#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace cost_model {
namespace {

CostModel WithSetup(double constant, double per_request, double handshake) {
  CostModel model;
  model.setup = SetupCost{constant, per_request, handshake};
  return model;
}

TEST(PredictSetup, FlatGroupByHand) {
  // p = 4 on one host: R = 3*16 + 3*4 = 60 requests, 3 peers.
  absl::StatusOr<SetupPrediction> s = PredictSetup(Topology{4, 1, 4, 4}, WithSetup(1000, 2, 10));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->store_requests, 60);
  EXPECT_DOUBLE_EQ(s->peers_per_rank, 3);
  EXPECT_EQ(s->sockets_per_rank, 6);
  EXPECT_DOUBLE_EQ(s->time_us, 1000 + 2 * 60 + 10 * 3);
  EXPECT_TRUE(s->warnings.empty());
}

TEST(PredictSetup, MixedGroupAddsLeadersAndLocalGroupsAndSharesCores) {
  // p = 8, 2 hosts of 4 on 2 cores: R = 3*64 + 24 + 2*5 + 8*9 = 298;
  // P = 7 + 1 + 3 = 11, handshakes x 4/2.
  absl::StatusOr<SetupPrediction> s = PredictSetup(Topology{8, 2, 4, 2}, WithSetup(1000, 2, 10));
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s->store_requests, 298);
  EXPECT_DOUBLE_EQ(s->peers_per_rank, 11);
  EXPECT_DOUBLE_EQ(s->handshake_us, 10 * 11 * 2);
  EXPECT_DOUBLE_EQ(s->time_us, 1000 + 2 * 298 + 220);
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
  absl::StatusOr<SetupPrediction> s = PredictSetup(*big, model);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->warnings.size(), 2u);
  EXPECT_NE(s->warnings[0].find("ulimit"), std::string::npos);
  EXPECT_NE(s->warnings[1].find("max_connections"), std::string::npos);
  EXPECT_FALSE(PredictSetup(Topology{8, 3, 4, 4}, model).ok());
}

TEST(FitSetup, RecoversExactConstants) {
  const CostModel truth = WithSetup(50000, 3, 120);
  std::vector<SetupPoint> points;
  for (auto [p, per_host, cores] : {std::tuple<int64_t, int64_t, int>{2, 2, 2}, {4, 4, 2}, {8, 4, 2}, {16, 8, 2}}) {
    absl::StatusOr<Topology> t = MakeTopology(p, per_host, cores);
    points.push_back(SetupPoint{*t, PredictSetup(*t, truth)->time_us});
  }
  absl::StatusOr<SetupFit> fit = FitSetup(points);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->cost.constant_us, 50000, 1e-3);
  EXPECT_NEAR(fit->cost.store_us_per_request, 3, 1e-8);
  EXPECT_NEAR(fit->cost.handshake_us, 120, 1e-6);
  EXPECT_NEAR(fit->rms_residual_us, 0, 1e-6);
  EXPECT_TRUE(fit->zeroed.empty());
}

TEST(FitSetup, HoldsAtZeroATermTheDataWouldMakeNegative) {
  // Exact data of 30000 + 40 R - 200 P (one host of p ranks: R = 3p² + 3p,
  // P = p - 1): plain least squares would give handshake_us = -200.
  std::vector<SetupPoint> points;
  for (int64_t p : {2, 4, 8, 16}) {
    absl::StatusOr<Topology> t = MakeTopology(p, p);
    points.push_back(SetupPoint{*t, 30000.0 + 40.0 * (3 * p * p + 3 * p) - 200.0 * (p - 1)});
  }
  absl::StatusOr<SetupFit> fit = FitSetup(points);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->cost.handshake_us, 0);
  EXPECT_EQ(fit->zeroed, std::vector<std::string>{"handshake_us"});
  EXPECT_GT(fit->cost.constant_us, 0);
  EXPECT_GT(fit->cost.store_us_per_request, 0);
  EXPECT_GT(fit->rms_residual_us, 0);
  // Times that fall with p: only the constant is left.
  absl::StatusOr<Topology> t2 = MakeTopology(2, 2), t4 = MakeTopology(4, 4), t8 = MakeTopology(8, 8);
  std::vector<SetupPoint> shrinking = {{*t2, 1000}, {*t4, 500}, {*t8, 10}};
  fit = FitSetup(shrinking);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->cost.constant_us, 1510.0 / 3, 1e-9);
  EXPECT_EQ(fit->zeroed, (std::vector<std::string>{"store_us_per_request", "handshake_us"}));
}

TEST(FitSetup, RefusesTooFewSizesAndBadPoints) {
  absl::StatusOr<Topology> t2 = MakeTopology(2, 2), t4 = MakeTopology(4, 4), t8 = MakeTopology(8, 8);
  std::vector<SetupPoint> two_sizes = {{*t2, 10}, {*t4, 20}, {*t4, 21}};
  absl::StatusOr<SetupFit> fit = FitSetup(two_sizes);
  EXPECT_EQ(fit.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(fit.status().message().find("at least 3"), std::string::npos) << fit.status();
  std::vector<SetupPoint> negative_time = {{*t2, 10}, {*t4, -20}, {*t8, 30}};
  EXPECT_NE(FitSetup(negative_time).status().message().find("point 1"), std::string::npos);
  std::vector<SetupPoint> bad_topology = {{Topology{8, 3, 4, 4}, 10}, {*t4, 20}, {*t8, 30}};
  EXPECT_NE(FitSetup(bad_topology).status().message().find("point 0"), std::string::npos);
}

}  // namespace
}  // namespace cost_model
}  // namespace lockstep
