#include "collectives/store/file_store_format.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace file_store {
namespace {

void PutU32(std::string* out, uint32_t v) {
  const char bytes[4] = {static_cast<char>(v), static_cast<char>(v >> 8), static_cast<char>(v >> 16),
                         static_cast<char>(v >> 24)};
  out->append(bytes, 4);
}

uint32_t GetU32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return static_cast<uint32_t>(u[0]) | (static_cast<uint32_t>(u[1]) << 8) | (static_cast<uint32_t>(u[2]) << 16) |
         (static_cast<uint32_t>(u[3]) << 24);
}

}  // namespace

std::string Encode(const Record& record) {
  std::string out;
  out.reserve(1 + 4 + record.key.size() + 4 + record.value.size());
  out.push_back(static_cast<char>(record.kind));
  PutU32(&out, static_cast<uint32_t>(record.key.size()));
  out += record.key;
  if (record.kind == Record::Kind::kSet) {
    PutU32(&out, static_cast<uint32_t>(record.value.size()));
    out += record.value;
  }
  return out;
}

absl::StatusOr<size_t> ParseRecords(absl::string_view bytes, uint64_t file_offset, std::vector<Record>* out) {
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t start = at;
    const auto corrupt = [&](const std::string& what) {
      return absl::DataLossError(absl::StrCat("FileStore: the record at offset ", file_offset + start, " ", what,
                                              "; the file is corrupt or another program wrote it"));
    };
    const uint8_t kind = static_cast<uint8_t>(bytes[at]);
    if (kind != static_cast<uint8_t>(Record::Kind::kSet) && kind != static_cast<uint8_t>(Record::Kind::kDelete)) {
      return corrupt(absl::StrCat("has kind ", kind, " (expected 1: set, 2: delete)"));
    }
    ++at;
    if (bytes.size() - at < 4) return start;  // Incomplete: later.
    const uint32_t key_bytes = GetU32(bytes.data() + at);
    at += 4;
    if (key_bytes > kMaxKeyBytes) {
      return corrupt(absl::StrCat("claims a key of ", key_bytes, " bytes (at most ", kMaxKeyBytes, ")"));
    }
    if (bytes.size() - at < key_bytes) return start;
    Record record;
    record.kind = static_cast<Record::Kind>(kind);
    record.key.assign(bytes.data() + at, key_bytes);
    at += key_bytes;
    if (record.kind == Record::Kind::kSet) {
      if (bytes.size() - at < 4) return start;
      const uint32_t value_bytes = GetU32(bytes.data() + at);
      at += 4;
      if (value_bytes > kMaxValueBytes) {
        return corrupt(absl::StrCat("claims a value of ", value_bytes, " bytes (at most ", kMaxValueBytes, ")"));
      }
      if (bytes.size() - at < value_bytes) return start;
      record.value.assign(bytes.data() + at, value_bytes);
      at += value_bytes;
    }
    out->push_back(std::move(record));
  }
  return at;
}

}  // namespace file_store
}  // namespace lockstep
