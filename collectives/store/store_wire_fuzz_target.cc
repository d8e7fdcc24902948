// libFuzzer entry point for the TcpStore frame parsers (see
// data/idx_fuzz_target.cc for the clang command). Under gcc,
// store_wire_fuzz_test drives it with seeded mutations.
#include <cstddef>
#include <cstdint>

#include "collectives/store/store_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace wire = lockstep::store_wire;
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (bytes.size() < wire::kHeaderBytes) return 0;
  absl::StatusOr<wire::FrameHeader> h = wire::ParseHeader(bytes.substr(0, wire::kHeaderBytes));
  const absl::string_view body = bytes.substr(wire::kHeaderBytes);
  if (h.ok() && h->op != wire::Op::kResponse) {
    absl::StatusOr<wire::Request> r = wire::ParseRequest(h->op, body);
    // What parses must re-encode to the same bytes (no field silently lost).
    if (r.ok() && wire::EncodeRequest(*r).substr(wire::kHeaderBytes) != body) __builtin_trap();
  }
  // The response parser sees every body too.
  (void)wire::ParseResponse(body);
  return 0;
}
