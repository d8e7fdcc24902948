#include "collectives/cost_model/setup_cost.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace cost_model {
namespace {

constexpr int64_t kUsualDescriptorLimit = 1024;   // ulimit -n's usual soft limit
constexpr int64_t kStoreMaxConnections = 1000;    // TcpStoreLimits::max_connections

struct Terms {
  double requests = 0;  // R
  double peers = 0;     // P
  double oversubscription = 1;
};

Terms TermsOf(const Topology& t) {
  const double p = static_cast<double>(t.p), H = static_cast<double>(t.hosts),
               L = static_cast<double>(t.ranks_per_host);
  Terms terms;
  terms.requests = 3 * p * p + 3 * p;
  terms.peers = p - 1;
  if (t.mixed()) {
    terms.requests += H * (2 * H + 1) + p * (2 * L + 1);
    terms.peers += (H - 1) + (L - 1);
  }
  terms.oversubscription = std::max(1.0, L / std::max(1, t.cores_per_host));
  return terms;
}

}  // namespace

absl::StatusOr<SetupPrediction> PredictSetup(const Topology& topology, const CostModel& model) {
  absl::Status s = ValidateTopology(topology);
  if (s.ok()) s = ValidateCostModel(model);
  if (!s.ok()) return s;
  const Terms terms = TermsOf(topology);
  SetupPrediction out;
  out.store_requests = terms.requests;
  out.peers_per_rank = terms.peers;
  out.sockets_per_rank = 2 * static_cast<int64_t>(terms.peers);
  out.store_connections = topology.p;
  out.store_us = model.setup.store_us_per_request * terms.requests;
  out.handshake_us = model.setup.handshake_us * terms.peers * terms.oversubscription;
  out.time_us = model.setup.constant_us + out.store_us + out.handshake_us;
  if (out.sockets_per_rank + 16 > kUsualDescriptorLimit) {
    out.warnings.push_back(absl::StrCat("each rank opens ", out.sockets_per_rank,
                                        " sockets for the full mesh; the usual descriptor limit is ",
                                        kUsualDescriptorLimit, " (raise ulimit -n, or connect lazily)"));
  }
  if (topology.p > kStoreMaxConnections) {
    out.warnings.push_back(absl::StrCat(topology.p, " ranks connect to the store; it serves ", kStoreMaxConnections,
                                        " at once (TcpStoreLimits::max_connections) and the rest wait in its "
                                        "listen backlog"));
  }
  return out;
}

absl::StatusOr<SetupCost> FitSetup(absl::Span<const SetupPoint> points) {
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < points.size(); ++i) {
    absl::Status s = ValidateTopology(points[i].topology);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("FitSetup: point ", i, ": ", s.message()));
    if (!std::isfinite(points[i].time_us) || points[i].time_us < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("FitSetup: point ", i, " has time_us ", points[i].time_us, "; it must be finite and >= 0"));
    }
    if (std::find(sizes.begin(), sizes.end(), points[i].topology.p) == sizes.end()) {
      sizes.push_back(points[i].topology.p);
    }
  }
  if (sizes.size() < 3) {
    return absl::InvalidArgumentError(absl::StrCat("FitSetup: ", points.size(), " points at ", sizes.size(),
                                                   " distinct p; the three constants need at least 3 (e.g. p = 2, "
                                                   "4, 8, 16)"));
  }
  // Normal equations A^T A x = A^T y for rows (1, R, P·o), in scaled
  // columns so that p² and 1 stay comparable.
  std::array<double, 3> scale = {1, 1, 1};
  for (const SetupPoint& pt : points) {
    const Terms t = TermsOf(pt.topology);
    scale[1] = std::max(scale[1], t.requests);
    scale[2] = std::max(scale[2], t.peers * t.oversubscription);
  }
  double m[3][4] = {};
  for (const SetupPoint& pt : points) {
    const Terms t = TermsOf(pt.topology);
    const double row[3] = {1, t.requests / scale[1], t.peers * t.oversubscription / scale[2]};
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) m[i][j] += row[i] * row[j];
      m[i][3] += row[i] * pt.time_us;
    }
  }
  // Gaussian elimination with partial pivoting.
  for (int col = 0; col < 3; ++col) {
    int pivot = col;
    for (int r = col + 1; r < 3; ++r) {
      if (std::fabs(m[r][col]) > std::fabs(m[pivot][col])) pivot = r;
    }
    if (std::fabs(m[pivot][col]) < 1e-12) {
      return absl::InvalidArgumentError(
          "FitSetup: the points cannot tell the three constants apart; measure more different p");
    }
    for (int j = 0; j < 4; ++j) std::swap(m[col][j], m[pivot][j]);
    for (int r = 0; r < 3; ++r) {
      if (r == col) continue;
      const double f = m[r][col] / m[col][col];
      for (int j = col; j < 4; ++j) m[r][j] -= f * m[col][j];
    }
  }
  SetupCost fit;
  fit.constant_us = m[0][3] / m[0][0];
  fit.store_us_per_request = m[1][3] / m[1][1] / scale[1];
  fit.handshake_us = m[2][3] / m[2][2] / scale[2];
  double largest = 0;
  for (const SetupPoint& pt : points) largest = std::max(largest, pt.time_us);
  // Exact data may leave rounding noise around zero: a term worth at most
  // 1e-9 of the largest time is a zero.
  const std::array<double*, 3> fitted = {&fit.constant_us, &fit.store_us_per_request, &fit.handshake_us};
  for (int i = 0; i < 3; ++i) {
    if (std::fabs(*fitted[i]) * scale[i] <= 1e-9 * largest) *fitted[i] = 0;
  }
  if (fit.constant_us < 0 || fit.store_us_per_request < 0 || fit.handshake_us < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FitSetup: the best fit has constant_us ", fit.constant_us, ", store_us_per_request ",
        fit.store_us_per_request, " and handshake_us ", fit.handshake_us,
        "; all must be >= 0 (measure more p, with repetitions, over a wider range)"));
  }
  return fit;
}

}  // namespace cost_model
}  // namespace lockstep
