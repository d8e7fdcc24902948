// libFuzzer entry point for FileStore's record parser (see
// data/idx_fuzz_target.cc for the clang command). Under gcc,
// file_store_fuzz_test drives it with seeded mutations.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/store/file_store_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = lockstep::file_store;
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::vector<fs::Record> records;
  absl::StatusOr<size_t> used = fs::ParseRecords(bytes, 8, &records);
  if (!used.ok()) return 0;
  if (*used > bytes.size()) __builtin_trap();
  // What parses re-encodes to exactly the bytes it came from.
  std::string again;
  for (const fs::Record& r : records) again += fs::Encode(r);
  if (again != bytes.substr(0, *used)) __builtin_trap();
  return 0;
}
