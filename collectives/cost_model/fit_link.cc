#include "collectives/cost_model/fit_link.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace cost_model {

absl::StatusOr<LinkFit> FitLink(absl::Span<const LinkPoint> points, FitError error) {
  std::set<double> sizes;
  for (size_t i = 0; i < points.size(); ++i) {
    const LinkPoint& pt = points[i];
    if (!std::isfinite(pt.bytes) || !std::isfinite(pt.time_us) || pt.bytes < 0 || pt.time_us < 0) {
      return absl::InvalidArgumentError(absl::StrCat("FitLink: point ", i, " is (bytes ", pt.bytes, ", time_us ",
                                                     pt.time_us, "); both must be finite and >= 0"));
    }
    if (error == FitError::kRelative && pt.time_us <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("FitLink: point ", i, " has time_us ", pt.time_us,
                                                     "; a relative fit divides by it (give times > 0)"));
    }
    sizes.insert(pt.bytes);
  }
  if (sizes.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("FitLink: ", points.size(), " points at ", sizes.size(),
                                                   " distinct size(s); α and β need at least 2 sizes "
                                                   "(e.g. 0 B and 1 MiB)"));
  }
  // Weighted least squares (weights 1, or 1/time² for relative errors) with
  // centered sums: the normal equations without cancellation at large sizes.
  auto weight = [error](const LinkPoint& pt) {
    return error == FitError::kRelative ? 1.0 / (pt.time_us * pt.time_us) : 1.0;
  };
  double total = 0, mean_x = 0, mean_y = 0;
  for (const LinkPoint& pt : points) total += weight(pt);
  for (const LinkPoint& pt : points) {
    mean_x += weight(pt) * pt.bytes / total;
    mean_y += weight(pt) * pt.time_us / total;
  }
  double sxx = 0, sxy = 0;
  for (const LinkPoint& pt : points) {
    sxx += weight(pt) * (pt.bytes - mean_x) * (pt.bytes - mean_x);
    sxy += weight(pt) * (pt.bytes - mean_x) * (pt.time_us - mean_y);
  }
  const double n = static_cast<double>(points.size());
  LinkFit fit;
  fit.points = static_cast<int64_t>(points.size());
  fit.cost.beta_us_per_byte = sxy / sxx;
  fit.cost.alpha_us = mean_y - fit.cost.beta_us_per_byte * mean_x;
  // Exact data may leave rounding noise around zero: within 1e-9 of the
  // largest time, a zero.
  double largest = 0;
  for (const LinkPoint& pt : points) largest = std::max(largest, pt.time_us);
  if (std::fabs(fit.cost.alpha_us) <= 1e-9 * largest) fit.cost.alpha_us = 0;
  if (fit.cost.alpha_us < 0 || fit.cost.beta_us_per_byte < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FitLink: the best line through ", points.size(), " points has alpha_us ", fit.cost.alpha_us,
        " and beta_us_per_byte ", fit.cost.beta_us_per_byte,
        "; both must be >= 0 (measure more sizes, from 0 B to several MiB, and more repetitions per size)"));
  }
  double squares = 0;
  for (const LinkPoint& pt : points) {
    const double r = pt.time_us - (fit.cost.alpha_us + fit.cost.beta_us_per_byte * pt.bytes);
    squares += r * r;
  }
  fit.rms_residual_us = std::sqrt(squares / n);
  return fit;
}

}  // namespace cost_model
}  // namespace lockstep
