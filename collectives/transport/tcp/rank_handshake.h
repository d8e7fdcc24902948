// How two ranks of a TcpTransport mesh make sure of each other (protocol
// version 3). Internal to //collectives:tcp_transport.
//
// Every rank publishes in the store, before its address, a fresh random
// challenge. A rank that connects to peer p sends
//   Hello{magic, version, rank r, world size, nonce_c,
//         HMAC(secret, "lockstep-connect" | challenge_p | r | p | size | nonce_c)}
// and p answers
//   Hello{magic, version, p, size, nonce_a,
//         HMAC(secret, "lockstep-accept" | nonce_c | p | r | size)}.
// So p learns that the connection comes from a process that knows the
// group's secret and read p's challenge of this rendezvous (no replay of an
// old connection), and r learns that it reached p, not an impostor
// listening at p's address. The secret never travels. HMAC-SHA256 is
// OpenSSL's (libcrypto).
//
// Without a secret (no LOCKSTEP_STORE_TOKEN) the MACs are not checked: the
// mesh is then as open as the store (c10d's default too).
#ifndef LOCKSTEP_COLLECTIVES_TRANSPORT_TCP_RANK_HANDSHAKE_H_
#define LOCKSTEP_COLLECTIVES_TRANSPORT_TCP_RANK_HANDSHAKE_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectives/transport/tcp/socket.h"

namespace lockstep {
namespace rank_handshake {

inline constexpr uint32_t kMagic = 0x4C4B5450;  // "LKTP"
inline constexpr uint32_t kVersion = 3;

using Nonce = std::array<uint8_t, 16>;
using Mac = std::array<uint8_t, 32>;

// The first 16 bytes keep their layout in every version, so that any peer's
// version can be read and named.
struct HelloPrefix {
  uint32_t magic;
  uint32_t version;
  int32_t rank;
  int32_t size;
};
struct Hello {
  HelloPrefix prefix;
  Nonce nonce;
  Mac mac;
};
static_assert(sizeof(HelloPrefix) == 16 && sizeof(Hello) == 64, "wire layout");

absl::StatusOr<Nonce> RandomNonce();
std::string ToHex(const Nonce& nonce);
absl::StatusOr<Nonce> NonceFromHex(absl::string_view hex);

Mac ConnectMac(const std::string& secret, const Nonce& challenge, int from, int to, int size, const Nonce& nonce);
Mac AcceptMac(const std::string& secret, const Nonce& nonce, int from, int to, int size);
// Constant time.
bool MacEqual(const Mac& a, const Mac& b);

// Connects to a peer at the address it published in the store. The peer
// listened before publishing, so connection refusals mean a wrong address:
// after `refusals_allowed` of them (over at least a short grace) the error
// says so at once, naming both ranks, the address, the OS error and what
// to set; an address that does not answer fails after `connect_timeout`.
absl::StatusOr<Fd> ConnectToPeer(const std::string& host, int port, int my_rank, int peer,
                                 std::chrono::milliseconds connect_timeout, Deadline deadline,
                                 int refusals_allowed = 3);

}  // namespace rank_handshake
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_TRANSPORT_TCP_RANK_HANDSHAKE_H_
