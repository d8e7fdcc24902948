#include "collectives/transport/tcp/rank_handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace lockstep {
namespace rank_handshake {
namespace {

void Append(std::string* data, int32_t v) { data->append(reinterpret_cast<const char*>(&v), sizeof(v)); }
void Append(std::string* data, const Nonce& n) { data->append(reinterpret_cast<const char*>(n.data()), n.size()); }

Mac Hmac(const std::string& secret, const std::string& data) {
  Mac mac{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac.data(), &len);
  return mac;
}

}  // namespace

absl::StatusOr<Nonce> RandomNonce() {
  Nonce n{};
  if (getrandom(n.data(), n.size(), 0) != static_cast<ssize_t>(n.size())) {
    return absl::InternalError(absl::StrCat("getrandom failed: ", std::strerror(errno)));
  }
  return n;
}

std::string ToHex(const Nonce& nonce) {
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(nonce.data()), nonce.size()));
}

absl::StatusOr<Nonce> NonceFromHex(absl::string_view hex) {
  Nonce n{};
  if (hex.size() != 2 * n.size()) return absl::InvalidArgumentError("malformed challenge in the store");
  for (char c : hex) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return absl::InvalidArgumentError("malformed challenge");
  }
  const std::string bytes = absl::HexStringToBytes(hex);
  std::memcpy(n.data(), bytes.data(), n.size());
  return n;
}

Mac ConnectMac(const std::string& secret, const Nonce& challenge, int from, int to, int size, const Nonce& nonce) {
  std::string data = "lockstep-connect";
  Append(&data, challenge);
  Append(&data, from);
  Append(&data, to);
  Append(&data, size);
  Append(&data, nonce);
  return Hmac(secret, data);
}

Mac AcceptMac(const std::string& secret, const Nonce& nonce, int from, int to, int size) {
  std::string data = "lockstep-accept";
  Append(&data, nonce);
  Append(&data, from);
  Append(&data, to);
  Append(&data, size);
  return Hmac(secret, data);
}

bool MacEqual(const Mac& a, const Mac& b) { return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0; }

absl::StatusOr<Fd> ConnectToPeer(const std::string& host, int port, int my_rank, int peer,
                                 std::chrono::milliseconds connect_timeout, Deadline deadline, int refusals_allowed) {
  const Deadline start = SteadyClock::now();
  const Deadline give_up = std::min(deadline, start + connect_timeout);
  const std::string where = HostPort(host, port);
  int refusals = 0;
  auto backoff = std::chrono::milliseconds(5);
  while (true) {
    int error = 0;
    absl::StatusOr<Fd> fd = ConnectOnce(host, port, give_up, &error);
    if (fd.ok()) return fd;
    if (absl::IsInvalidArgument(fd.status())) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", my_rank, " cannot connect to rank ", peer, ": ", fd.status().message()));
    }
    const bool refused = error == ECONNREFUSED || error == EHOSTUNREACH || error == ENETUNREACH;
    if (refused) ++refusals;
    // Rank `peer` listened before it published this address: refusals are
    // not a slow start but a wrong address. A short grace allows for a
    // listener still being set up by the kernel.
    const bool wrong =
        refused && refusals > refusals_allowed && SteadyClock::now() - start >= std::chrono::milliseconds(200);
    if (wrong || SteadyClock::now() >= give_up) {
      const bool loopback = host.rfind("127.", 0) == 0 || host == "::1" || host == "localhost";
      return absl::UnavailableError(absl::StrCat(
          "rank ", my_rank, " cannot connect to rank ", peer, " at ", where, " (the address rank ", peer,
          " published): ", std::strerror(error),
          wrong ? absl::StrCat(" ", refusals, " times") : absl::StrCat(" for ", connect_timeout.count(), " ms"), ". ",
          loopback ? absl::StrCat("Rank ", peer,
                                  " advertised a loopback address, which other hosts cannot "
                                  "reach. ")
                   : "",
          "Set LOCKSTEP_SOCKET_IFNAME (an interface) or LOCKSTEP_SOCKET_ADDR (an address) on rank ", peer,
          " to one this host can reach, or check firewalls and routes"));
    }
    std::this_thread::sleep_for(std::min<Deadline::duration>(backoff, give_up - SteadyClock::now()));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
}

}  // namespace rank_handshake
}  // namespace lockstep
