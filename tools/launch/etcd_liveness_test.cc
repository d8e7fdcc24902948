// EtcdLiveness against a real etcd: live agents are not lost; one that stops
// renewing its lease is reported once etcd lets the lease lapse (pushed by
// the watch); one that never came is reported after the timeout.
#include "tools/launch/etcd_liveness.h"

#include <memory>
#include <optional>

#include "collectives/store/etcd/testing/etcd_server.h"
#include "core/deadline.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace launch {
namespace {

using std::chrono::milliseconds;

std::unique_ptr<EtcdStore> Connect(const EtcdServer& server) {
  EtcdClientOptions o;
  o.endpoints = {server.endpoint()};
  absl::StatusOr<std::unique_ptr<EtcdStore>> s = EtcdStore::Create(o, "/lockstep-run/live/", milliseconds(10000));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

// Asks `live` until it names an agent or `within` passes.
std::optional<int64_t> LostWithin(EtcdLiveness& live, const std::vector<int64_t>& ids, milliseconds timeout,
                                  milliseconds within) {
  const Deadline deadline = DeadlineIn(within);
  while (SteadyClock::now() < deadline) {
    absl::StatusOr<std::optional<int64_t>> lost = live.Lost(ids, timeout);
    EXPECT_TRUE(lost.ok()) << lost.status();
    if (!lost.ok() || lost->has_value()) return lost.ok() ? *lost : std::nullopt;
    std::this_thread::sleep_for(milliseconds(20));  // Asking again, not synchronizing.
  }
  return std::nullopt;
}

TEST(EtcdLivenessTest, ASilentAgentIsLostOnceItsLeaseLapses) {
  absl::StatusOr<std::unique_ptr<EtcdServer>> server = EtcdServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<EtcdStore> store_a = Connect(**server);
  std::unique_ptr<EtcdStore> store_b = Connect(**server);
  ASSERT_NE(store_a, nullptr);
  ASSERT_NE(store_b, nullptr);
  const milliseconds ttl(2000);  // etcd's minimum lease TTL.
  absl::StatusOr<std::unique_ptr<EtcdLiveness>> a = EtcdLiveness::Start(store_a.get(), 1, "host-a", ttl);
  absl::StatusOr<std::unique_ptr<EtcdLiveness>> b = EtcdLiveness::Start(store_b.get(), 2, "host-b", ttl);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*store_a->Get("alive/2"), "host-b");
  // Both renew: over two TTLs neither is lost (B's key must first be seen
  // by A's watch; the timeout covers that).
  EXPECT_EQ(LostWithin(**a, {1, 2}, milliseconds(10000), 2 * ttl), std::nullopt);
  EXPECT_TRUE((*a)->Beat().ok());
  EXPECT_TRUE((*b)->Beat().ok());
  // B stops renewing (its process "died"): etcd drops its key within about
  // a TTL, and A hears of it.
  b->reset();
  EXPECT_EQ(LostWithin(**a, {2}, milliseconds(60000), milliseconds(30000)), std::optional<int64_t>(2));
  EXPECT_FALSE(*store_a->Check({"alive/2"}));
  // An agent that never registered is lost after the timeout.
  EXPECT_EQ(LostWithin(**a, {3}, milliseconds(200), milliseconds(10000)), std::optional<int64_t>(3));
  // And A never counts itself.
  EXPECT_EQ(*(*a)->Lost({1}, milliseconds(0)), std::nullopt);
}

TEST(EtcdLivenessTest, BeatFailsOnceEtcdIsGoneForATtl) {
  absl::StatusOr<std::unique_ptr<EtcdServer>> server = EtcdServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<EtcdStore> store = Connect(**server);
  ASSERT_NE(store, nullptr);
  store->set_timeout(milliseconds(1000));
  absl::StatusOr<std::unique_ptr<EtcdLiveness>> live = EtcdLiveness::Start(store.get(), 1, "h", milliseconds(2000));
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_TRUE((*live)->Beat().ok());
  server->reset();  // etcd stops.
  const Deadline deadline = DeadlineIn(milliseconds(30000));
  absl::Status beat;
  while (SteadyClock::now() < deadline && (beat = (*live)->Beat()).ok()) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_FALSE(beat.ok());
  EXPECT_NE(beat.message().find("could not renew this agent's lease at etcd"), absl::string_view::npos) << beat;
}

}  // namespace
}  // namespace launch
}  // namespace lockstep
