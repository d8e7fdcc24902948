// The cost model's calibration as JSON, and the JSON lines that `model fit`
// reads (tools/scale_lab/model_main.cc).
//
//   using namespace lockstep::cost_model;
//   const std::string text = CostModelToJson(DefaultCostModel());
//   absl::StatusOr<CostModel> back = CostModelFromJson(text);
//   absl::StatusOr<LinkPoint> point = ParseLinkPoint(R"({"bytes": 4096, "time_us": 12.5})");
//
// The calibration file:
//   {
//     "version": 1,
//     "links": {
//       "shm":        {"alpha_us": 1.0,  "beta_us_per_byte": 0.000125},
//       "tcp_local":  {"alpha_us": 8.0,  "beta_us_per_byte": 0.00025},
//       "tcp_remote": {"alpha_us": 50.0, "beta_us_per_byte": 0.0008}
//     },
//     "gamma_us_per_byte": 0.0001,
//     "cpu_us_per_round": 38.0,
//     "setup": {"constant_us": 100000, "store_us_per_request": 20, "handshake_us": 100},
//     "notes": "optional: where and how it was measured"
//   }
// Every field but "notes" is required, every number finite and >= 0;
// unknown fields are errors (a misspelt one would otherwise be ignored).
// Errors name the field ("links.tcp_remote.alpha_us").
//
// Point lines: {"bytes": B, "time_us": T} (T one way: half a ping-pong's
// round trip) for FitLink; {"p": P, "ranks_per_host": L, "cores_per_host":
// C, "time_us": T} for FitSetup (cores_per_host optional: as many as ranks).
// Other fields on a line are allowed (a benchmark's extra columns).
#ifndef LOCKSTEP_COLLECTIVES_COST_MODEL_COST_MODEL_JSON_H_
#define LOCKSTEP_COLLECTIVES_COST_MODEL_COST_MODEL_JSON_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectives/cost_model/cost_model.h"
#include "collectives/cost_model/fit_link.h"
#include "collectives/cost_model/setup_cost.h"

namespace lockstep {
namespace cost_model {

inline constexpr int kCostModelJsonVersion = 1;

// Indented JSON, numbers written so that they read back to the same double.
std::string CostModelToJson(const CostModel& model, absl::string_view notes = "");

// InvalidArgument naming the field that is missing, of the wrong type,
// unknown or out of range, or saying where the text is not JSON.
absl::StatusOr<CostModel> CostModelFromJson(absl::string_view text);

// Files: errors name the path.
absl::StatusOr<CostModel> LoadCostModel(const std::string& path);
absl::Status SaveCostModel(const CostModel& model, const std::string& path, absl::string_view notes = "");

absl::StatusOr<LinkPoint> ParseLinkPoint(absl::string_view line);
// {"p", "ranks_per_host" (1), "cores_per_host" (0: as many as ranks),
// "time_us", "connections": "on_demand" (the default) or "full_mesh"}.
absl::StatusOr<SetupPoint> ParseSetupPoint(absl::string_view line);

}  // namespace cost_model
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_COST_MODEL_COST_MODEL_JSON_H_
