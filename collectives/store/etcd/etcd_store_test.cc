// EtcdStore against a real etcd (started here): the Store contract, and what
// etcd adds: transactions split at 128 keys, atomic Add across clients,
// leases and watches, endpoints that fail over, errors that say where.
#include "collectives/store/etcd/etcd_store.h"

#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/store/etcd/testing/etcd_server.h"
#include "collectives/store/testing/store_contract.h"
#include "core/deadline.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

// One etcd for the whole test binary; each store gets a prefix of its own.
std::shared_ptr<EtcdServer> SharedServer() {
  static std::shared_ptr<EtcdServer> server = [] {
    absl::StatusOr<std::unique_ptr<EtcdServer>> s = EtcdServer::Start();
    if (!s.ok()) {
      ADD_FAILURE() << s.status();
      return std::shared_ptr<EtcdServer>();
    }
    return std::shared_ptr<EtcdServer>(*std::move(s));
  }();
  return server;
}

std::unique_ptr<EtcdStore> NewStore(const std::string& prefix) {
  std::shared_ptr<EtcdServer> server = SharedServer();
  if (server == nullptr) return nullptr;
  EtcdClientOptions o;
  o.endpoints = {server->endpoint()};
  absl::StatusOr<std::unique_ptr<EtcdStore>> s = EtcdStore::Create(o, prefix, Milliseconds(10000));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

StoreFixture MakeEtcd() {
  static std::atomic<int> n{0};
  std::shared_ptr<Store> store = NewStore(absl::StrCat("/contract/", n++, "/"));
  return {store, SharedServer()};
}

INSTANTIATE_TEST_SUITE_P(Etcd, StoreContractTest, ::testing::Values(&MakeEtcd));

TEST(EtcdStoreTest, MultiGetSpansSeveralTransactions) {
  std::unique_ptr<EtcdStore> s = NewStore("/many/");
  ASSERT_NE(s, nullptr);
  std::vector<std::string> keys;
  std::vector<std::string> want;
  for (int i = 0; i < 300; ++i) {  // etcd allows 128 operations a transaction.
    keys.push_back(absl::StrCat("rank", 299 - i));
    want.push_back(absl::StrCat("addr-", 299 - i));
  }
  std::thread setter([&] {
    for (int i = 0; i < 300; ++i) ASSERT_TRUE(s->Set(absl::StrCat("rank", i), absl::StrCat("addr-", i)).ok());
  });
  absl::StatusOr<std::vector<std::string>> got = s->MultiGet(keys, Milliseconds(60000));
  setter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, want);
  EXPECT_EQ(*s->NumKeys(), 300);
}

TEST(EtcdStoreTest, AddIsAtomicAcrossClients) {
  constexpr int kClients = 4;
  constexpr int kAdds = 25;
  std::vector<std::unique_ptr<EtcdStore>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(NewStore("/counter/"));
  std::vector<std::vector<int64_t>> seen(kClients);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    ASSERT_NE(clients[c], nullptr);
    threads.emplace_back([&, c] {
      for (int i = 0; i < kAdds; ++i) {
        absl::StatusOr<int64_t> v = clients[c]->Add("n", 1);
        ASSERT_TRUE(v.ok()) << v.status();
        seen[c].push_back(*v);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  // Every increment landed once: the answers are exactly 1..100.
  std::set<int64_t> all;
  for (const auto& v : seen) all.insert(v.begin(), v.end());
  ASSERT_EQ(all.size(), static_cast<size_t>(kClients * kAdds));
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kClients * kAdds);
  EXPECT_EQ(*clients[0]->Get("n"), absl::StrCat(kClients * kAdds));
}

TEST(EtcdStoreTest, AKeyOnALeaseGoesWithItAndAWatchSeesIt) {
  std::unique_ptr<EtcdStore> s = NewStore("/lease/");
  ASSERT_NE(s, nullptr);
  absl::StatusOr<int64_t> lease = s->GrantLease(std::chrono::seconds(30));
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(s->SetWithLease("alive/7", "x", *lease).ok());
  EXPECT_GT(*s->KeepAliveOnce(*lease), 0);
  int64_t revision = 0;
  absl::StatusOr<std::map<std::string, std::string>> now = s->ListPrefix("alive/", &revision);
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(*now, (std::map<std::string, std::string>{{"alive/7", "x"}}));
  std::thread revoker([&] { ASSERT_TRUE(s->RevokeLease(*lease).ok()); });
  std::vector<EtcdEvent> events;
  absl::Status watched = s->WatchPrefix("alive/", revision, Milliseconds(30000), [&](const std::vector<EtcdEvent>& e) {
    events.insert(events.end(), e.begin(), e.end());
    return events.empty();
  });
  revoker.join();
  ASSERT_TRUE(watched.ok()) << watched;
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(events[0].deleted);
  EXPECT_EQ(events[0].key, "alive/7");
  EXPECT_FALSE(*s->Check({"alive/7"}));
  EXPECT_EQ(*s->KeepAliveOnce(*lease), 0);  // Gone for good.
}

TEST(EtcdStoreTest, AWatchEndsWhenCancelled) {
  std::unique_ptr<EtcdStore> s = NewStore("/cancel/");
  ASSERT_NE(s, nullptr);
  std::atomic<bool> cancel{false};
  std::atomic<bool> created{false};
  std::thread canceller([&] {
    // Cancels once the watch runs, and in any case by the deadline: the
    // watch then ends Cancelled either way, and this thread always ends.
    const Deadline deadline = DeadlineIn(Milliseconds(30000));
    while (!created.load() && SteadyClock::now() < deadline) std::this_thread::yield();
    cancel = true;
  });
  // The watch calls back only on events: a write shows it is running.
  std::thread writer([&] { ASSERT_TRUE(s->Set("k", "1").ok()); });
  absl::Status watched = s->WatchPrefix(
      "", 0, Milliseconds(60000),
      [&](const std::vector<EtcdEvent>&) {
        created = true;
        return true;
      },
      &cancel);
  writer.join();
  canceller.join();
  EXPECT_TRUE(created.load()) << "the watch saw no event";
  EXPECT_EQ(watched.code(), absl::StatusCode::kCancelled) << watched;
}

TEST(EtcdStoreTest, ADeadEndpointIsSkippedAndNoneAliveIsNamed) {
  std::shared_ptr<EtcdServer> server = SharedServer();
  ASSERT_NE(server, nullptr);
  EtcdClientOptions o;
  // Port 1 on loopback: nothing listens there (connection refused at once).
  o.endpoints = {"127.0.0.1:1", server->endpoint()};
  absl::StatusOr<std::unique_ptr<EtcdStore>> s = EtcdStore::Create(o, "/failover/", Milliseconds(10000));
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->Set("k", "v").ok());
  EXPECT_EQ(*(*s)->Get("k"), "v");

  o.endpoints = {"127.0.0.1:1"};
  absl::StatusOr<std::unique_ptr<EtcdStore>> dead = EtcdStore::Create(o, "/x/", Milliseconds(2000));
  ASSERT_FALSE(dead.ok());
  EXPECT_EQ(dead.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(dead.status().message().find("127.0.0.1:1"), absl::string_view::npos) << dead.status();
  EXPECT_NE(dead.status().message().find("is etcd running"), absl::string_view::npos) << dead.status();
}

TEST(EtcdStoreTest, BadOptionsAreRefusedWithTheReason) {
  EtcdClientOptions o;
  EXPECT_EQ(EtcdStore::Create(o, "/").status().code(), absl::StatusCode::kInvalidArgument);
  o.endpoints = {"127.0.0.1:2379"};
  o.protocol = "gopher";
  EXPECT_NE(EtcdStore::Create(o, "/").status().message().find("gopher"), absl::string_view::npos);
  o.protocol = "https";
  o.client_cert = "/some/cert.pem";
  EXPECT_NE(EtcdStore::Create(o, "/").status().message().find("needs its key"), absl::string_view::npos);
}

TEST(EtcdStoreTest, PrefixEnd) {
  EXPECT_EQ(EtcdPrefixEnd("abc"), "abd");
  EXPECT_EQ(EtcdPrefixEnd(std::string("a\xff", 2)), "b");
  EXPECT_EQ(EtcdPrefixEnd(""), std::string(1, '\0'));
}

}  // namespace
}  // namespace lockstep
