// delay_link --selftest: an achieved forwarding rate, measured by a TCP bulk
// transfer from host 0 to host 1 through the forwarder.
//
// The sockets are created inside the hosts' namespaces (so they are bound to
// them) and driven by two threads of normal priority; the calling thread
// runs the forwarder meanwhile, until the transfer ends or a stop fd fires.
// On a machine with few cores the three threads and the two network stacks
// share them: the result is what this machine achieved, a lower bound on the
// forwarder's own ceiling (the ceiling_* stats estimate that).
#ifndef LOCKSTEP_TOOLS_SCALE_LAB_SELFTEST_H_
#define LOCKSTEP_TOOLS_SCALE_LAB_SELFTEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/scale_lab/forwarder.h"

namespace lockstep {
namespace scale_lab {

struct SelftestResult {
  int64_t bytes = 0;       // received by host 1, byte-checked
  double seconds = 0;      // from the first byte received to the last
  double gbps = 0;         // bytes * 8 / seconds / 1e9
  bool completed = false;  // false: stopped early (signal) or failed
  std::string error;       // why not completed
};

// Runs `forwarder` on this thread while host 0 (netns[0], `address0`)
// sends to host 1 (netns[1], `address1`) for `seconds`.
absl::StatusOr<SelftestResult> RunSelftest(Forwarder& forwarder, const std::vector<std::string>& netns,
                                           uint32_t address0, uint32_t address1, double seconds,
                                           const std::vector<int>& stop_fds);

// The result as JSON fields for StatsJson's extra_fields.
std::string SelftestJsonFields(const SelftestResult& result);

}  // namespace scale_lab
}  // namespace lockstep

#endif  // LOCKSTEP_TOOLS_SCALE_LAB_SELFTEST_H_
