#include "collectives/transport/message_header.h"

#include "absl/strings/str_cat.h"
#include "collectives/transport/transport_errors.h"

namespace lockstep {

absl::Status MessageHeaderError(const MessageHeader& got, const MessageTag& expected, uint64_t expected_bytes,
                                const std::string& peer_name, int rank) {
  if (got.magic != kMessageMagic || got.seq != expected.seq || got.tag != expected.tag || got.bytes != expected_bytes) {
    return MessageMismatchError(peer_name, rank, got.seq, got.tag, got.bytes, expected, expected_bytes);
  }
  if (got.element != 0 && expected.element != 0 && got.element != expected.element) {
    return absl::InternalError(absl::StrCat("collective mismatch: ", peer_name, " sent op #", got.seq, " with ",
                                            ElementName(static_cast<uint8_t>(got.element)), " elements, but rank ",
                                            rank, " expected ", ElementName(expected.element),
                                            " (the same number of bytes). Every rank must call the same "
                                            "collective with the same dtype"));
  }
  return absl::InternalError(absl::StrCat("MessageHeaderError: rank ", rank, " called it for a header from ", peer_name,
                                          " that matches op #", expected.seq));
}

}  // namespace lockstep
