#include "collectives/cost_model/setup_cost.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace cost_model {
namespace {

constexpr int64_t kUsualDescriptorLimit = 1024;  // ulimit -n's usual soft limit
constexpr int64_t kStoreMaxConnections = 1000;   // TcpStoreLimits::max_connections

struct Terms {
  double requests = 0;  // R
  double values = 0;    // V
  double peers = 0;     // P
  double oversubscription = 1;
};

// Requests of a MultiGet of n keys (store_wire::kMultiGetKeysPerRequest).
double MultiGetRequests(double n) { return n <= 0 ? 0 : std::ceil(n / 1024.0); }

// Recursive doubling's partners among n ranks.
double Log2Ceil(double n) { return n <= 1 ? 0 : std::ceil(std::log2(n) - 1e-12); }

Terms TermsOf(const Topology& t, Connections connections) {
  const double p = static_cast<double>(t.p), H = static_cast<double>(t.hosts),
               L = static_cast<double>(t.ranks_per_host);
  Terms terms;
  if (connections == Connections::kFullMesh) {
    terms.requests = p * (4 + MultiGetRequests(p) + MultiGetRequests(2 * (p - 1)));
    terms.values = p * (p + 2 * (p - 1));
    terms.peers = p - 1;
    if (t.mixed()) {
      terms.requests += H * (3 + MultiGetRequests(2 * (H - 1))) + p * (3 + MultiGetRequests(2 * (L - 1)));
      terms.values += 2 * H * (H - 1) + 2 * p * (L - 1);
      terms.peers += (H - 1) + (L - 1);
    }
  } else if (!t.mixed()) {
    // Each of the first all-reduce's partners: one lookup of 2 keys.
    const double partners = Log2Ceil(p);
    terms.requests = p * (4 + MultiGetRequests(p) + partners);
    terms.values = p * (p + 2 * partners);
    terms.peers = partners;
  } else {
    // The flat group's transport reads nothing until it is used; the first
    // all-reduce runs among the leaders (recursive doubling over H) and in
    // each host (shared memory, connected at once).
    const double partners = Log2Ceil(H);
    terms.requests = p * (4 + MultiGetRequests(p)) + H * (3 + partners) + p * (3 + MultiGetRequests(2 * (L - 1)));
    terms.values = p * p + 2 * H * partners + 2 * p * (L - 1);
    terms.peers = partners + (L - 1);
  }
  terms.oversubscription = std::max(1.0, L / std::max(1, t.cores_per_host));
  return terms;
}

}  // namespace

absl::StatusOr<SetupPrediction> PredictSetup(const Topology& topology, const CostModel& model,
                                             Connections connections) {
  absl::Status s = ValidateTopology(topology);
  if (s.ok()) s = ValidateCostModel(model);
  if (!s.ok()) return s;
  const Terms terms = TermsOf(topology, connections);
  SetupPrediction out;
  out.store_requests = terms.requests;
  out.store_values = terms.values;
  out.peers_per_rank = terms.peers;
  out.sockets_per_rank = 2 * static_cast<int64_t>(terms.peers);
  out.store_connections = topology.p;
  out.store_us = model.setup.store_us_per_request * terms.requests + model.setup.store_us_per_value * terms.values;
  out.handshake_us = model.setup.handshake_us * terms.peers * terms.oversubscription;
  out.time_us = model.setup.constant_us + out.store_us + out.handshake_us;
  if (out.sockets_per_rank + 16 > kUsualDescriptorLimit) {
    out.warnings.push_back(absl::StrCat(
        "each rank opens ", out.sockets_per_rank, " sockets; the usual descriptor limit is ", kUsualDescriptorLimit,
        connections == Connections::kFullMesh ? " (raise ulimit -n, or connect on demand: LOCKSTEP_RUNTIME_CONNECT=1)"
                                              : " (raise ulimit -n)"));
  }
  if (topology.p > kStoreMaxConnections) {
    out.warnings.push_back(absl::StrCat(topology.p, " ranks connect to the store; it serves ", kStoreMaxConnections,
                                        " at once (TcpStoreLimits::max_connections) and the rest wait in its "
                                        "listen backlog"));
  }
  return out;
}

namespace {

// Least squares over the columns in `use` (the others fixed at 0) of rows
// (1, R, P·o) scaled by `scale`; false when they are linearly dependent.
bool SolveSubset(absl::Span<const SetupPoint> points, const std::array<double, 3>& scale,
                 const std::array<bool, 3>& use, std::array<double, 3>* x, double* squares) {
  std::vector<int> cols;
  for (int i = 0; i < 3; ++i) {
    if (use[i]) cols.push_back(i);
  }
  const int n = static_cast<int>(cols.size());
  double m[3][4] = {};
  for (const SetupPoint& pt : points) {
    const Terms t = TermsOf(pt.topology, pt.connections);
    const double full[3] = {1, t.requests / scale[1], t.peers * t.oversubscription / scale[2]};
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) m[i][j] += full[cols[i]] * full[cols[j]];
      m[i][n] += full[cols[i]] * pt.time_us;
    }
  }
  // Gauss-Jordan elimination with partial pivoting.
  for (int col = 0; col < n; ++col) {
    int pivot = col;
    for (int r = col + 1; r < n; ++r) {
      if (std::fabs(m[r][col]) > std::fabs(m[pivot][col])) pivot = r;
    }
    if (std::fabs(m[pivot][col]) < 1e-12) return false;
    for (int j = 0; j <= n; ++j) std::swap(m[col][j], m[pivot][j]);
    for (int r = 0; r < n; ++r) {
      if (r == col) continue;
      const double f = m[r][col] / m[col][col];
      for (int j = col; j <= n; ++j) m[r][j] -= f * m[col][j];
    }
  }
  *x = {0, 0, 0};
  for (int i = 0; i < n; ++i) (*x)[cols[i]] = m[i][n] / m[i][i];
  *squares = 0;
  for (const SetupPoint& pt : points) {
    const Terms t = TermsOf(pt.topology, pt.connections);
    const double full[3] = {1, t.requests / scale[1], t.peers * t.oversubscription / scale[2]};
    double r = pt.time_us;
    for (int i = 0; i < 3; ++i) r -= (*x)[i] * full[i];
    *squares += r * r;
  }
  return true;
}

}  // namespace

absl::StatusOr<SetupFit> FitSetup(absl::Span<const SetupPoint> measured, double store_us_per_request,
                                  double store_us_per_value) {
  for (double v : {store_us_per_request, store_us_per_value}) {
    if (!std::isfinite(v) || v < 0) {
      return absl::InvalidArgumentError(absl::StrCat("FitSetup: the store's constants (", store_us_per_request, ", ",
                                                     store_us_per_value, ") must be finite and >= 0"));
    }
  }
  const absl::Span<const SetupPoint> points = measured;
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
  if (sizes.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("FitSetup: ", points.size(), " points at ", sizes.size(),
                                                   " distinct p; the two constants need at least 2 (e.g. p = 2, "
                                                   "4, 8, 16)"));
  }
  // The store's terms are known (measured alone): fit what is left of each
  // time. (For flat groups R is nearly linear in p, so it could not be told
  // from the constant and the handshakes anyway.)
  std::vector<SetupPoint> rest(points.begin(), points.end());
  for (SetupPoint& pt : rest) {
    const Terms t = TermsOf(pt.topology, pt.connections);
    pt.time_us -= store_us_per_request * t.requests + store_us_per_value * t.values;
  }
  // Columns scaled so that p² and 1 stay comparable.
  std::array<double, 3> scale = {1, 1, 1};
  double largest = 0;
  for (const SetupPoint& pt : rest) {
    const Terms t = TermsOf(pt.topology, pt.connections);
    scale[1] = std::max(scale[1], t.requests);
    scale[2] = std::max(scale[2], t.peers * t.oversubscription);
    largest = std::max(largest, pt.time_us);
  }
  // Non-negative least squares by trying every subset of the three terms:
  // the best fit with no negative constant. Ties: the fuller subset first.
  static constexpr std::array<std::array<bool, 3>, 3> kSubsets = {
      {{true, false, true}, {true, false, false}, {false, false, true}}};
  bool found = false;
  std::array<double, 3> best{};
  double best_squares = 0;
  for (const std::array<bool, 3>& use : kSubsets) {
    std::array<double, 3> x;
    double squares = 0;
    if (!SolveSubset(rest, scale, use, &x, &squares)) continue;
    // Rounding noise around zero on exact data: a term worth at most 1e-9
    // of the largest time is a zero.
    for (double& v : x) {
      if (std::fabs(v) <= 1e-9 * std::max(largest, 1.0)) v = 0;
    }
    if (x[0] < 0 || x[1] < 0 || x[2] < 0) continue;
    if (!found || squares < best_squares * (1 - 1e-12)) {
      found = true;
      best = x;
      best_squares = squares;
    }
  }
  if (!found) return absl::InvalidArgumentError("FitSetup: no fit with non-negative constants; measure more p");
  SetupFit fit;
  fit.cost = SetupCost{best[0], store_us_per_request, best[2] / scale[2], store_us_per_value};
  fit.rms_residual_us = std::sqrt(best_squares / static_cast<double>(points.size()));
  if (best[0] == 0) fit.zeroed.push_back("constant_us");
  if (best[2] == 0) fit.zeroed.push_back("handshake_us");
  return fit;
}

}  // namespace cost_model
}  // namespace lockstep
