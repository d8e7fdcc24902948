// Address selection on this host: explicit choices win, loopback toward a
// loopback MASTER_ADDR on one host, an interface by name, and clear errors.
// (The multi-host cases run in tests/multinode_test.sh, between network
// namespaces.)
#include "collectives/transport/tcp/address.h"

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(AddressTest, AnExplicitHostWins) {
  AddressSelection s;
  s.host = "10.1.2.3";
  s.ifname = "lo";
  s.master_addr = "127.0.0.1";
  EXPECT_EQ(*ChooseLocalAddress(s), "10.1.2.3");
}

TEST(AddressTest, OneHostTowardLoopbackMasterIsLoopback) {
  AddressSelection s;
  s.master_addr = "127.0.0.1";
  EXPECT_EQ(*ChooseLocalAddress(s), "127.0.0.1");
  s.master_addr = "localhost";
  absl::StatusOr<std::string> a = ChooseLocalAddress(s);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(IsLoopbackAddress(*a)) << *a;
}

TEST(AddressTest, AnInterfaceByName) {
  AddressSelection s;
  s.ifname = "lo";
  EXPECT_EQ(*ChooseLocalAddress(s), "127.0.0.1");
  s.ifname = "no-such-if0";
  absl::StatusOr<std::string> a = ChooseLocalAddress(s);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("LOCKSTEP_SOCKET_IFNAME=no-such-if0"), absl::string_view::npos) << a.status();
}

TEST(AddressTest, AMultiHostGroupNeverAdvertisesLoopback) {
  AddressSelection s;
  s.master_addr = "127.0.0.1";
  s.spans_hosts = true;
  absl::StatusOr<std::string> a = ChooseLocalAddress(s);
  bool has_other = false;
  for (const InterfaceAddress& i : LocalAddresses()) has_other |= !i.loopback && i.up;
  if (has_other) {
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_FALSE(IsLoopbackAddress(*a)) << *a;
  } else {
    ASSERT_FALSE(a.ok());
    EXPECT_NE(a.status().message().find("LOCKSTEP_SOCKET_IFNAME"), absl::string_view::npos) << a.status();
  }
}

}  // namespace
}  // namespace lockstep
