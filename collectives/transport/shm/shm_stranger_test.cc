// ShmTransport's set-up against strangers (docs/ARCHITECTURE.md, threat
// model): a rank's socket name is listed in /proc/net/unix, so any local
// process may connect to it.
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <future>
#include <string>

#include "collectives/store/hash_store.h"
#include "collectives/testing/transport_conformance.h"
#include "collectives/transport/shm/shm_transport.h"
#include "core/testing/require_root.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

// A stranger's connection to a rank's socket, whose name anyone can read in
// /proc/net/unix: one from another user (a forked child that switched to
// uid 65534, as `setpriv --reuid` does), a silent one of the same user and,
// with a secret, one of the same user claiming rank 0 without proving the
// secret. Each is dropped and logged while set-up goes on for the real
// ranks; the silent one's handshake timeout is longer than the whole
// set-up's, so only reading the hellos side by side lets the group form.
class StrangerChild {
 public:
  // Connects to @`name` as `uid`, then holds the connection until
  // destroyed. Ok() once connected.
  StrangerChild(const std::string& name, uid_t uid) {
    int ready[2], hold[2];
    if (::pipe(ready) != 0 || ::pipe(hold) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(ready[0]);
      ::close(hold[1]);
      char ok = 0;
      if (::setresgid(uid, uid, uid) == 0 && ::setresuid(uid, uid, uid) == 0) {
        const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::memcpy(a.sun_path + 1, name.data(), name.size());
        const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
        if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), len) == 0) ok = 1;
      }
      (void)!::write(ready[1], &ok, 1);
      char b;
      (void)!::read(hold[0], &b, 1);  // Until the parent closes its end.
      ::_exit(0);
    }
    ::close(ready[1]);
    ::close(hold[0]);
    hold_ = hold[1];
    char ok = 0;
    connected_ = ::read(ready[0], &ok, 1) == 1 && ok == 1;
    ::close(ready[0]);
  }
  ~StrangerChild() {
    if (hold_ >= 0) ::close(hold_);
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
  }
  bool connected() const { return connected_; }

 private:
  pid_t pid_ = -1;
  int hold_ = -1;
  bool connected_ = false;
};

Fd ConnectAbstract(const std::string& name) {
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), len) != 0) return Fd();
  return fd;
}

TEST(ShmTransportTest, StrangersConnectionsAreDroppedAndTheGroupForms) {
  LOCKSTEP_REQUIRE_ROOT("connecting as another user");
  for (const std::string secret : {"", "group secret"}) {
    HashStore store;
    ShmTransportOptions options;
    options.timeout = Milliseconds(60000);
    options.handshake_timeout = Milliseconds(3600000);
    options.secret = secret;
    auto rank1 = std::async(std::launch::async, [&] { return ShmTransport::Create(store, 1, 2, options); });
    absl::StatusOr<std::string> name = store.Get("shm_transport/1", Milliseconds(30000));
    ASSERT_TRUE(name.ok()) << name.status();
    StrangerChild other_user(*name, 65534);
    ASSERT_TRUE(other_user.connected()) << "uid 65534 could not connect to @" << *name;
    Fd silent = ConnectAbstract(*name);
    ASSERT_TRUE(silent.valid());
    Fd forger;
    if (!secret.empty()) {
      // A well-formed hello for rank 0 with a zero MAC and no segment.
      forger = ConnectAbstract(*name);
      ASSERT_TRUE(forger.valid());
      struct {
        uint32_t magic, version;
        int32_t rank, size;
        uint64_t ring_bytes;
        uint8_t nonce_and_mac[48];
      } hello{0x4C4B5348u, 3, 0, 2, options.slot_bytes * static_cast<uint64_t>(options.slots), {}};
      static_assert(sizeof(hello) == 72, "the shm hello");
      ASSERT_EQ(::send(forger.get(), &hello, sizeof(hello), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(hello)));
    }
    absl::StatusOr<std::unique_ptr<ShmTransport>> rank0 = ShmTransport::Create(store, 0, 2, options);
    ASSERT_TRUE(rank0.ok()) << secret << ": " << rank0.status();
    absl::StatusOr<std::unique_ptr<ShmTransport>> t1 = rank1.get();
    ASSERT_TRUE(t1.ok()) << secret << ": " << t1.status();
    if (forger.valid()) {
      char byte;
      EXPECT_EQ(::recv(forger.get(), &byte, 1, 0), 0) << "the forger got an answer";
    }
    const absl::Status s = testing::SendOneWord(**rank0, **t1, 0x1234);
    EXPECT_TRUE(s.ok()) << s;
  }
}

}  // namespace
}  // namespace lockstep
