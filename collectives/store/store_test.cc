// The Store contract (testing/store_contract.cc) against the stores that
// need no server of their own, and what is particular to each.
#include <memory>
#include <thread>

#include <stdlib.h>
#include <unistd.h>

#include "collectives/store/file_store.h"
#include "collectives/store/hash_store.h"
#include "collectives/store/prefix_store.h"
#include "collectives/store/tcp_store.h"
#include "collectives/store/testing/store_contract.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

StoreFixture MakeHash() { return {std::make_shared<HashStore>(), nullptr}; }

StoreFixture MakeTcp() {
  TcpStoreOptions o;
  o.is_server = true;
  o.timeout = Milliseconds(10000);
  std::shared_ptr<Store> s = *TcpStore::Create(o);
  return {s, nullptr};
}

StoreFixture MakeFile() {
  // A unique name, free again for the store to create.
  char tmpl[] = "/tmp/store_test.XXXXXX";
  const int fd = ::mkstemp(tmpl);
  if (fd < 0) return {};
  ::close(fd);
  ::unlink(tmpl);
  FileStoreOptions o;
  o.num_users = 1;  // Removed when the fixture's store goes.
  o.timeout = Milliseconds(10000);
  std::shared_ptr<Store> s = *FileStore::Open(tmpl, o);
  return {s, nullptr};
}

StoreFixture MakePrefix() {
  auto base = std::make_shared<HashStore>();
  return {std::make_shared<PrefixStore>("group7", base), base};
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreContractTest, ::testing::Values(&MakeHash, &MakeTcp, &MakePrefix, &MakeFile));

TEST(PrefixStoreTest, NamespacesKeys) {
  auto base = std::make_shared<HashStore>();
  PrefixStore a("a", base), b("b", base);
  ASSERT_TRUE(a.Set("k", "1").ok());
  ASSERT_TRUE(b.Set("k", "2").ok());
  EXPECT_EQ(*a.Get("k"), "1");
  EXPECT_EQ(*b.Get("k"), "2");
  EXPECT_EQ(*base->Get("a/k"), "1");
  EXPECT_FALSE(*a.Check({"b/k"}));
}

TEST(HashStoreTest, AHugeTimeoutWaitsInsteadOfOverflowing) {
  HashStore store;
  std::thread setter([&] {
    // Set once the getter is parked: the key's arrival ends the wait.
    while (store.NumWaitersForTesting() == 0) std::this_thread::yield();
    ASSERT_TRUE(store.Set("k", "v").ok());
  });
  absl::StatusOr<std::string> v = store.Get("k", Milliseconds::max());
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "v");
}

}  // namespace
}  // namespace lockstep
