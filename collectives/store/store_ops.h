// Store semantics shared by HashStore and the TcpStore server, so that both
// behave identically (Add's integer parsing, CompareSet's rules, timeout
// messages).
#ifndef LOCKSTEP_COLLECTIVES_STORE_STORE_OPS_H_
#define LOCKSTEP_COLLECTIVES_STORE_STORE_OPS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectives/store/store.h"

namespace lockstep {
namespace store_ops {

using Map = std::map<std::string, std::string, std::less<>>;
// The TCP store's server: it looks keys up for every waiting request and
// every value it answers (~17 M lookups in the set-up of 4,096 ranks), and
// nothing needs them in order.
using HashMap = absl::flat_hash_map<std::string, std::string>;

absl::StatusOr<int64_t> Add(Map& data, absl::string_view key, int64_t delta);
absl::StatusOr<int64_t> Add(HashMap& data, absl::string_view key, int64_t delta);
std::string CompareSet(Map& data, absl::string_view key, absl::string_view expected, absl::string_view desired);
std::string CompareSet(HashMap& data, absl::string_view key, absl::string_view expected, absl::string_view desired);
bool AllPresent(const Map& data, const std::vector<std::string>& keys);
bool AllPresent(const HashMap& data, const std::vector<std::string>& keys);
absl::Status WaitTimeout(const Map& data, const std::vector<std::string>& keys, Milliseconds timeout);
absl::Status WaitTimeout(const HashMap& data, const std::vector<std::string>& keys, Milliseconds timeout);

}  // namespace store_ops
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_STORE_STORE_OPS_H_
