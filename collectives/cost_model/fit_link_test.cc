#include "collectives/cost_model/fit_link.h"

#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace cost_model {
namespace {

TEST(FitLink, RecoversAlphaAndBetaFromExactPoints) {
  std::vector<LinkPoint> points;
  for (double bytes : {0.0, 1024.0, 65536.0, 1048576.0, 67108864.0}) {
    points.push_back({bytes, 12.5 + 0.0004 * bytes});
    points.push_back({bytes, 12.5 + 0.0004 * bytes});  // repetitions are fine
  }
  absl::StatusOr<LinkFit> fit = FitLink(points);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->cost.alpha_us, 12.5, 1e-6);
  EXPECT_NEAR(fit->cost.beta_us_per_byte, 0.0004, 1e-15);
  EXPECT_NEAR(fit->rms_residual_us, 0, 1e-6);
  EXPECT_EQ(fit->points, 10);
}

TEST(FitLink, ZeroAlphaIsAllowed) {
  std::vector<LinkPoint> points = {{1000, 1}, {2000, 2}, {4000, 4}};
  absl::StatusOr<LinkFit> fit = FitLink(points);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->cost.alpha_us, 0);
  EXPECT_NEAR(fit->cost.beta_us_per_byte, 0.001, 1e-15);
}

TEST(FitLink, LeastSquaresOnNoisyPoints) {
  // Residuals +1, -1, -1, +1 around 10 + 0.01 x: the fit is the line itself.
  std::vector<LinkPoint> points = {{0, 11}, {100, 10}, {200, 11}, {300, 14}};
  absl::StatusOr<LinkFit> fit = FitLink(points);
  ASSERT_TRUE(fit.ok());
  EXPECT_NEAR(fit->cost.alpha_us, 10, 1e-9);
  EXPECT_NEAR(fit->cost.beta_us_per_byte, 0.01, 1e-12);
  EXPECT_GT(fit->rms_residual_us, 0);
}

TEST(FitLink, RelativeErrorsKeepAlphaWhereSmallSizesPutIt) {
  // The lab's link through the forwarder: superlinear at large sizes. Plain
  // least squares follows the megabytes to alpha -1.69; relative errors give
  // alpha 41.81, beta 1.27336e-3 (numpy's lstsq on rows scaled by 1/time).
  std::vector<LinkPoint> points = {{4096, 54},    {16384, 61},   {65536, 117},
                                   {131072, 165}, {524288, 852}, {2097152, 3611}};
  EXPECT_FALSE(FitLink(points).ok());
  absl::StatusOr<LinkFit> fit = FitLink(points, FitError::kRelative);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->cost.alpha_us, 41.8079103, 1e-6);
  EXPECT_NEAR(fit->cost.beta_us_per_byte, 1.27336080e-3, 1e-11);
  // Exact points: both errors give the line.
  std::vector<LinkPoint> exact = {{1000, 11}, {100000, 110}, {10000000, 10010}};
  fit = FitLink(exact, FitError::kRelative);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->cost.alpha_us, 10, 1e-9);
  EXPECT_NEAR(fit->cost.beta_us_per_byte, 0.001, 1e-15);
  // A zero time cannot be a relative error's denominator.
  std::vector<LinkPoint> zero = {{0, 0}, {1000, 1}};
  EXPECT_NE(FitLink(zero, FitError::kRelative).status().message().find("time_us 0"), std::string::npos);
}

TEST(FitLink, RefusesFewerThanTwoSizes) {
  EXPECT_EQ(FitLink({}).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<LinkPoint> one_size = {{4096, 10}, {4096, 11}, {4096, 12}};
  absl::StatusOr<LinkFit> fit = FitLink(one_size);
  EXPECT_EQ(fit.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(fit.status().message().find("2 sizes"), std::string::npos) << fit.status();
}

TEST(FitLink, RefusesNegativeAlphaOrBeta) {
  std::vector<LinkPoint> shrinking = {{0, 100}, {1000, 50}};
  absl::StatusOr<LinkFit> fit = FitLink(shrinking);
  EXPECT_EQ(fit.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(fit.status().message().find("beta_us_per_byte"), std::string::npos) << fit.status();
  std::vector<LinkPoint> through_below_zero = {{1000, 1}, {2000, 3}};  // alpha = -1
  fit = FitLink(through_below_zero);
  EXPECT_NE(fit.status().message().find("alpha_us -1"), std::string::npos) << fit.status();
}

TEST(FitLink, RefusesBadPoints) {
  std::vector<LinkPoint> points = {{0, 1}, {-1, 2}};
  EXPECT_NE(FitLink(points).status().message().find("point 1"), std::string::npos);
  points = {{0, 1}, {10, std::numeric_limits<double>::quiet_NaN()}};
  EXPECT_FALSE(FitLink(points).ok());
}

}  // namespace
}  // namespace cost_model
}  // namespace lockstep
