// libFuzzer entry point for the IDX parser. With clang:
//   clang++ -std=c++17 -fsanitize=fuzzer,address -I. data/idx_fuzz_target.cc data/idx.cc
//     -labsl_status -labsl_strings -labsl_str_format_internal -labsl_int128 -lz -o /tmp/idx_fuzz
//   (one command)
//   /tmp/idx_fuzz -max_total_time=60
// Under gcc, idx_fuzz_test drives it with seeded mutations in CI.
#include <cstddef>
#include <cstdint>

#include "data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A small limit keeps huge-but-valid headers cheap; the checks are the same.
  absl::StatusOr<lockstep::IdxArray> parsed =
      lockstep::ParseIdx(absl::string_view(reinterpret_cast<const char*>(data), size), "fuzz", /*max_bytes=*/1 << 20);
  if (parsed.ok()) {
    // A successful parse must describe exactly the bytes it returned.
    const int64_t expected = parsed->numel() * static_cast<int64_t>(lockstep::IdxTypeSize(parsed->type));
    if (expected != static_cast<int64_t>(parsed->data.size())) __builtin_trap();
  }
  return 0;
}
