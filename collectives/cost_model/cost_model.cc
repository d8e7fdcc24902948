#include "collectives/cost_model/cost_model.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace cost_model {
namespace {

constexpr LinkKind kKinds[] = {LinkKind::kShm, LinkKind::kTcpLocal, LinkKind::kTcpRemote};

absl::Status CheckNonNegative(absl::string_view field, double value) {
  if (std::isfinite(value) && value >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("cost model field ", field, " is ", value, "; it must be a finite number >= 0"));
}

}  // namespace

absl::string_view LinkKindName(LinkKind kind) {
  switch (kind) {
    case LinkKind::kShm:
      return "shm";
    case LinkKind::kTcpLocal:
      return "tcp_local";
    case LinkKind::kTcpRemote:
      return "tcp_remote";
  }
  return "unknown_link";
}

absl::StatusOr<LinkKind> ParseLinkKind(absl::string_view name) {
  for (LinkKind kind : kKinds) {
    if (LinkKindName(kind) == name) return kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown link kind '", name, "'; expected shm, tcp_local or tcp_remote"));
}

CostModel DefaultCostModel() {
  CostModel model;
  model.link(LinkKind::kShm) = LinkCost{1.0, 1.0 / 8000.0};         // 8 GB/s
  model.link(LinkKind::kTcpLocal) = LinkCost{8.0, 1.0 / 4000.0};    // 4 GB/s
  model.link(LinkKind::kTcpRemote) = LinkCost{50.0, 1.0 / 1250.0};  // 10 Gbit/s
  // TcpTransportOptions::socket_buffer_bytes' default fixes TCP's window.
  model.link(LinkKind::kTcpLocal).window_bytes = 256 << 10;
  model.link(LinkKind::kTcpRemote).window_bytes = 256 << 10;
  model.gamma_us_per_byte = 1.0 / 10000.0;  // 10 GB/s
  model.cpu_us_per_round = 38.0;
  model.setup = SetupCost{100000.0, 20.0, 100.0, 0.1};
  return model;
}

double TransferTime(const LinkCost& link, double bytes, double flows) {
  double time = link.alpha_us + link.beta_us_per_byte * bytes * flows;
  if (link.window_bytes > 0 && bytes > link.window_bytes) {
    const double windows = std::ceil(bytes / link.window_bytes);
    time += (windows - 1) * std::max(0.0, 2 * link.alpha_us - link.beta_us_per_byte * link.window_bytes * flows);
  }
  return time;
}

absl::Status ValidateCostModel(const CostModel& model) {
  for (LinkKind kind : kKinds) {
    const LinkCost& link = model.link(kind);
    const std::string prefix = absl::StrCat("links.", LinkKindName(kind), ".");
    absl::Status s = CheckNonNegative(prefix + "alpha_us", link.alpha_us);
    if (s.ok()) s = CheckNonNegative(prefix + "beta_us_per_byte", link.beta_us_per_byte);
    if (s.ok()) s = CheckNonNegative(prefix + "window_bytes", link.window_bytes);
    if (!s.ok()) return s;
  }
  for (const auto& [field, value] : {std::pair<absl::string_view, double>{"gamma_us_per_byte", model.gamma_us_per_byte},
                                     {"cpu_us_per_round", model.cpu_us_per_round},
                                     {"fabric_us_per_byte", model.fabric_us_per_byte},
                                     {"setup.constant_us", model.setup.constant_us},
                                     {"setup.store_us_per_request", model.setup.store_us_per_request},
                                     {"setup.handshake_us", model.setup.handshake_us},
                                     {"setup.store_us_per_value", model.setup.store_us_per_value}}) {
    absl::Status s = CheckNonNegative(field, value);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace cost_model
}  // namespace lockstep
