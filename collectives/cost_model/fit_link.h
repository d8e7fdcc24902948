// Least-squares fit of a link's α and β from measured message times.
//
//   using namespace lockstep::cost_model;
//   std::vector<LinkPoint> points = {{0, 10.0}, {1000, 11.0}, {1000000, 1010.0}};
//   absl::StatusOr<LinkFit> fit = FitLink(points);
//   // fit->cost.alpha_us == 10, fit->cost.beta_us_per_byte == 0.001
//
// Each point is (bytes, one-way time in µs): half of a ping-pong's round
// trip between two ranks that each have a core (how the lab measures; see
// collectives/cost_model/cost_model.h for why α then includes one round's
// CPU). The fit minimizes, in closed form, Σ (α + β·bytes − time)²
// (FitError::kAbsolute), or Σ ((α + β·bytes − time) / time)²
// (kRelative: every point's error as a fraction of it, so the microsecond
// points that pin α weigh as much as the millisecond ones that pin β; over
// sizes spanning decades plain least squares lets the largest sizes' noise
// drive α below zero).
#ifndef LOCKSTEP_COLLECTIVES_COST_MODEL_FIT_LINK_H_
#define LOCKSTEP_COLLECTIVES_COST_MODEL_FIT_LINK_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/cost_model/cost_model.h"

namespace lockstep {
namespace cost_model {

struct LinkPoint {
  double bytes = 0;
  double time_us = 0;  // one way
};

struct LinkFit {
  LinkCost cost;
  double rms_residual_us = 0;  // root mean square of time − (α + β·bytes)
  int64_t points = 0;
};

// InvalidArgument when a point is negative or not finite (naming it), when
// the points have fewer than 2 distinct sizes, or when the best fit has
// α < 0 or β < 0 (the message gives both, and what to measure).
// kRelative needs every time > 0.
enum class FitError { kAbsolute, kRelative };
absl::StatusOr<LinkFit> FitLink(absl::Span<const LinkPoint> points, FitError error = FitError::kAbsolute);

}  // namespace cost_model
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_COST_MODEL_FIT_LINK_H_
