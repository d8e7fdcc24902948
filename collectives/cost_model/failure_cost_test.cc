#include "collectives/cost_model/failure_cost.h"

#include <cmath>

#include "collectives/cost_model/setup_cost.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace cost_model {
namespace {

CostModel Model() {
  CostModel m = DefaultCostModel();
  m.setup.store_us_per_request = 100;
  m.setup.store_us_per_value = 0.01;
  m.link(LinkKind::kTcpRemote) = LinkCost{10.0, 0.001};
  return m;
}

TEST(FailureCostTest, EachPathsTermsAsDocumented) {
  const Topology t = *MakeTopology(2048, 8);
  const CostModel m = Model();
  FailureInputs in;
  in.mttf_s = 3600;
  in.step_s = 0.5;
  in.detect_s = 3;
  in.restart_s = 7;
  in.checkpoint_every_steps = 40;
  in.checkpoint_write_s = 2;
  in.checkpoint_read_s = 4;
  in.parameter_bytes = 1e6;
  in.state_bytes = 3e6;
  in.admit_every_steps = 5;
  absl::StatusOr<FailurePrediction> f = PredictFailureCost(t, m, in);
  ASSERT_TRUE(f.ok()) << f.status();
  const double setup = PredictSetup(t, m)->time_us * 1e-6;
  EXPECT_DOUBLE_EQ(f->setup_s, setup);
  // 2048 arrivals: 2 MultiGet requests each; 4 more requests each.
  const double agreement = (100.0 * 2048 * (4 + 2) + 0.01 * 2048.0 * 2048) * 1e-6;
  EXPECT_DOUBLE_EQ(f->agreement_s, agreement);
  // log2(2048) = 11 hops of 10 us, plus the bytes at 1 ns each.
  const double bcast_params = (1e6 * 0.001 + 110) * 1e-6, bcast_state = (3e6 * 0.001 + 110) * 1e-6;
  EXPECT_DOUBLE_EQ(f->restart.lost_s, 3 + 7 + setup + 4 + 40 * 0.5 / 2);
  EXPECT_DOUBLE_EQ(f->restart.overhead, 2 / (40 * 0.5));
  EXPECT_DOUBLE_EQ(f->shrink.lost_s, 3 + 2 * (agreement + setup) + 0.5 + bcast_params + bcast_state);
  EXPECT_DOUBLE_EQ(f->shrink.overhead, (100e-6 + (8 * 0.001 + 110) * 1e-6) / (5 * 0.5));
  EXPECT_DOUBLE_EQ(f->restart.goodput, (1 - f->restart.lost_s / 3600) / (1 + f->restart.overhead));
  EXPECT_DOUBLE_EQ(f->shrink.goodput, (1 - f->shrink.lost_s / 3600) / (1 + f->shrink.overhead));
}

TEST(FailureCostTest, FailuresMoreOftenThanTheyCanBeMendedLeaveNoGoodput) {
  FailureInputs in;
  in.mttf_s = 1;  // a failure a second: the restart path never finishes one
  absl::StatusOr<FailurePrediction> f = PredictFailureCost(*MakeTopology(64, 8), Model(), in);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->restart.goodput, 0);
}

TEST(FailureCostTest, BadInputsAreNamed) {
  FailureInputs in;
  in.step_s = 0;
  absl::Status s = PredictFailureCost(*MakeTopology(64, 8), Model(), in).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("step_s"), std::string::npos) << s;
  in = FailureInputs();
  in.detect_s = -1;
  s = PredictFailureCost(*MakeTopology(64, 8), Model(), in).status();
  EXPECT_NE(s.message().find("detect_s"), std::string::npos) << s;
}

}  // namespace
}  // namespace cost_model
}  // namespace lockstep
