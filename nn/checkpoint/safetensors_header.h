// The safetensors header: its JSON parsed strictly (every byte checked,
// UTF-8 validated, duplicate keys refused), the tensors' layout checked
// against the data section, and the JSON string writer the serializer uses.
// Internal to //nn:safetensors (nn/checkpoint/safetensors.h is the API).
#ifndef LOCKSTEP_NN_CHECKPOINT_SAFETENSORS_HEADER_H_
#define LOCKSTEP_NN_CHECKPOINT_SAFETENSORS_HEADER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace lockstep {
namespace safetensors_internal {

constexpr absl::string_view kMetadataKey = "__metadata__";
constexpr absl::string_view kCorruptHint = "the file is corrupt or was written by a different tool";
constexpr size_t kPrefixBytes = 8;

// One tensor as the header describes it.
struct Entry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  int64_t begin = 0;
  int64_t end = 0;
};

struct Header {
  // After ValidateLayout: sorted by data offset, tiling the data section.
  std::vector<Entry> entries;
  std::map<std::string, std::string> metadata;
};

// DataLoss: "safetensors <source>: <what>".
absl::Status Corrupt(absl::string_view source, absl::string_view what);

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code
// points above U+10FFFF), as JSON requires.
bool IsValidUtf8(absl::string_view s);

// `s` quoted for an error message, unprintable bytes escaped.
std::string Quoted(absl::string_view s);

// Appends `s` (valid UTF-8) as a JSON string, quotes included.
void AppendJsonString(absl::string_view s, std::string* out);

// The header length from the 8-byte little-endian prefix, checked against
// kMaxSafetensorsHeaderBytes and the `available` bytes after the prefix.
absl::StatusOr<uint64_t> CheckHeaderLength(absl::string_view source, const char* prefix, uint64_t available);

// Parses the header's JSON and checks that its entries tile a data section
// of `data_size` bytes; the entries come back sorted by offset.
absl::StatusOr<Header> ParseHeader(absl::string_view source, absl::string_view json, uint64_t data_size);

}  // namespace safetensors_internal
}  // namespace lockstep

#endif  // LOCKSTEP_NN_CHECKPOINT_SAFETENSORS_HEADER_H_
