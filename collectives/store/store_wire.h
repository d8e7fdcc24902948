// The TcpStore wire format. Versioned, length-prefixed, and validated field
// by field before anything is allocated: a peer that sends garbage is
// refused, never trusted.
//
// Frame:    u32 magic "LKST" | u8 version | u8 op | u16 zero | u32 body bytes | body
// Strings:  u32 length | bytes.     Integers: i64 little-endian.
// Requests (client -> server), body by op:
//   HELLO token | SET key value | GET key timeout_ms | ADD key delta |
//   COMPARE_SET key expected desired | WAIT count keys... timeout_ms |
//   CHECK count keys... | DELETE key | NUM_KEYS (empty) |
//   MULTI_GET count keys... timeout_ms (the reply's value: PackValues)
// Response (op RESPONSE): u8 status code | string value-or-error | i64 integer
// The first frame of every connection is HELLO (body <= kMaxHelloBodyBytes);
// with a server token, a wrong token gets PERMISSION_DENIED and the
// connection is closed.
#ifndef LOCKSTEP_COLLECTIVES_STORE_STORE_WIRE_H_
#define LOCKSTEP_COLLECTIVES_STORE_STORE_WIRE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {
namespace store_wire {

inline constexpr uint32_t kMagic = 0x4C4B5354;  // "LKST"
inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kHeaderBytes = 12;
inline constexpr uint32_t kMaxValueBytes = 64u << 20;
inline constexpr uint32_t kMaxKeyBytes = 64u << 10;
inline constexpr uint32_t kMaxKeys = 1u << 16;
// A client's MultiGet asks for at most this many keys a request (more go in
// several requests, one after another): a server answering thousands of
// clients at once then holds at most ~1,024 values for each, not p each.
inline constexpr uint32_t kMultiGetKeysPerRequest = 1024;
inline constexpr uint32_t kMaxBodyBytes = kMaxValueBytes + 2 * kMaxKeyBytes + 64;
// HELLO is all a server reads from a client that has not authenticated, so
// its limit is small: an unauthenticated peer can make the server buffer at
// most kHeaderBytes + kMaxHelloBodyBytes.
inline constexpr uint32_t kMaxTokenBytes = 4096;
inline constexpr uint32_t kMaxHelloBodyBytes = 4 + kMaxTokenBytes;

enum class Op : uint8_t {
  kHello = 1,
  kSet = 2,
  kGet = 3,
  kAdd = 4,
  kCompareSet = 5,
  kWait = 6,
  kCheck = 7,
  kDelete = 8,
  kNumKeys = 9,
  kMultiGet = 10,
  kResponse = 0x80,
};

const char* OpName(Op op);

struct FrameHeader {
  Op op = Op::kHello;
  uint32_t body_bytes = 0;
};

// Validates magic, version, op and body length (<= kMaxBodyBytes).
absl::StatusOr<FrameHeader> ParseHeader(absl::string_view bytes);
std::string EncodeFrame(Op op, absl::string_view body);

struct Request {
  Op op = Op::kHello;
  std::vector<std::string> keys;  // One key for single-key ops.
  std::string value;              // token (HELLO), value (SET), expected (COMPARE_SET)
  std::string desired;            // COMPARE_SET
  int64_t integer = 0;            // delta (ADD), timeout_ms (GET, WAIT)
};

// Parses a request body for `op`; every length is checked against what is
// left and the limits above; trailing bytes are an error.
absl::StatusOr<Request> ParseRequest(Op op, absl::string_view body);
// The whole frame.
std::string EncodeRequest(const Request& request);

struct Response {
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string value;  // The value, or the error message.
  int64_t integer = 0;
};

absl::StatusOr<Response> ParseResponse(absl::string_view body);

// MULTI_GET's reply value: the values in the request's key order, each as a
// string (u32 length | bytes). Unpack checks every length and that exactly
// `count` values fill the bytes.
std::string PackValues(const std::vector<std::string>& values);
// The same from values left where they are (the server's map).
std::string PackValues(const std::vector<const std::string*>& values);
absl::StatusOr<std::vector<std::string>> UnpackValues(absl::string_view packed, size_t count);
std::string EncodeResponse(const Response& response);

}  // namespace store_wire
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_STORE_STORE_WIRE_H_
