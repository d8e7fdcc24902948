// The file behind FileStore (collectives/store/file_store.h), and its parser.
// Internal to //collectives/store.
//
// Layout: the 8-byte magic "LKFSTOR1", then records appended one after
// another, each
//   u8 kind (1: set, 2: delete) | u32 key bytes | key
//   | (set only) u32 value bytes | value
// with little-endian lengths. A key is at most kMaxKeyBytes and a value
// kMaxValueBytes; a record claiming more is corrupt and refused before
// anything is allocated. The last record may be incomplete (a writer died
// mid-append): the parser stops before it, and the next writer cuts it off.
#ifndef LOCKSTEP_COLLECTIVES_STORE_FILE_STORE_FORMAT_H_
#define LOCKSTEP_COLLECTIVES_STORE_FILE_STORE_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {
namespace file_store {

inline constexpr absl::string_view kMagic("LKFSTOR1", 8);
inline constexpr size_t kMaxKeyBytes = 64 << 10;
inline constexpr size_t kMaxValueBytes = size_t{1} << 30;

struct Record {
  enum class Kind : uint8_t { kSet = 1, kDelete = 2 };
  Kind kind = Kind::kSet;
  std::string key;
  std::string value;  // kSet only.
};

std::string Encode(const Record& record);

// Parses the whole records at the start of `bytes` into `out` and returns
// how many bytes they took (an incomplete last record is left for later).
// A malformed record (unknown kind, a length over its limit) is a DataLoss
// error naming its offset in the file (`bytes` starts at `file_offset`).
absl::StatusOr<size_t> ParseRecords(absl::string_view bytes, uint64_t file_offset, std::vector<Record>* out);

}  // namespace file_store
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_STORE_FILE_STORE_FORMAT_H_
