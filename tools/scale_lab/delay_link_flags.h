// delay_link's command line (see kDelayLinkUsage for every flag).
//
//   LOCKSTEP_ASSIGN_OR_RETURN(DelayLinkFlags flags, ParseDelayLinkFlags(argc, argv));
#ifndef LOCKSTEP_TOOLS_SCALE_LAB_DELAY_LINK_FLAGS_H_
#define LOCKSTEP_TOOLS_SCALE_LAB_DELAY_LINK_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {
namespace scale_lab {

extern const char kDelayLinkUsage[];

struct DelayLinkFlags {
  bool help = false;
  std::vector<std::string> netns;
  int64_t delay_ns = -1;  // required
  int64_t rate_bps = 0;
  int mtu = 65000;
  std::string ifname = "lab0";
  uint32_t subnet = 0;  // a.b.0.0, host byte order (from --subnet=a.b, default 10.77)
  std::string stats_json;
  std::string ready_file;
  double stats_every_s = 0;
  int64_t spin_ns = 20'000;
  bool busy_poll = false;
  int buffers = 0;  // 0: from --mtu (see kDelayLinkUsage)
  int realtime_priority = 50;
  bool selftest = false;
  double selftest_s = 3;
};

// "1gbit", "100mbit", "2.5gbit", "800kbit", "9600bit" or plain bits per
// second ("1e9"), as tc spells rates; "0" is no rate. Bytes ("bps") are
// refused: tc's "bps" means bytes per second, which is easy to misread.
absl::StatusOr<int64_t> ParseRateBps(absl::string_view text);

absl::StatusOr<DelayLinkFlags> ParseDelayLinkFlags(const std::vector<std::string>& args);

}  // namespace scale_lab
}  // namespace lockstep

#endif  // LOCKSTEP_TOOLS_SCALE_LAB_DELAY_LINK_FLAGS_H_
