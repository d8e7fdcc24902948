#include "collectives/transport/transport_errors.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lockstep {

absl::Status MessageMismatchError(const std::string& peer_name, int rank, uint64_t got_seq, uint32_t got_tag,
                                  uint64_t got_bytes, MessageTag expected, size_t expected_bytes) {
  return absl::InternalError(absl::StrCat(
      "collective mismatch: ", peer_name, " sent op #", got_seq, " ", DescribeTag(got_tag), " with ", got_bytes,
      " bytes, but rank ", rank, " expected op #", expected.seq, " ", DescribeTag(expected.tag), " with ",
      expected_bytes,
      " bytes. The ranks called different collectives or sizes (or posted point-to-point receives from one "
      "peer in another order than that peer's sends); run with LOCKSTEP_DEBUG=DETAIL to compare every call"));
}

absl::Status ExchangeTimeoutError(uint64_t seq, int rank, const std::vector<std::string>& waiting) {
  return absl::DeadlineExceededError(
      absl::StrCat("op #", seq, " timed out on rank ", rank, " while ", absl::StrJoin(waiting, "; "),
                   ". The peer may be stuck in other work, deadlocked in a different collective, or dead; ",
                   "raise the timeout if it is just slow"));
}

}  // namespace lockstep
