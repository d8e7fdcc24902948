// The Store contract's tests (store_contract.h).
#include "collectives/store/testing/store_contract.h"

#include <string>
#include <thread>
#include <vector>

namespace lockstep {
namespace {

TEST_P(StoreContractTest, SetGetAddCompareSetCheckDelete) {
  StoreFixture f = GetParam()();
  Store& s = *f.store;
  ASSERT_TRUE(s.Set("a", std::string("x\0y", 3)).ok());
  EXPECT_EQ(*s.Get("a", Milliseconds(1000)), std::string("x\0y", 3));  // Binary-safe.
  EXPECT_EQ(*s.Add("n", 5), 5);
  EXPECT_EQ(*s.Add("n", -7), -2);
  EXPECT_EQ(*s.Get("n", Milliseconds(1000)), "-2");
  const absl::StatusOr<int64_t> not_int = s.Add("a", 1);
  ASSERT_FALSE(not_int.ok());
  EXPECT_NE(not_int.status().message().find("not an integer"), absl::string_view::npos);
  // CompareSet, c10d's rules.
  EXPECT_EQ(*s.CompareSet("c", "", "first"), "first");        // Absent + empty expected: set.
  EXPECT_EQ(*s.CompareSet("c", "wrong", "second"), "first");  // Mismatch: unchanged.
  EXPECT_EQ(*s.CompareSet("c", "first", "second"), "second");
  EXPECT_EQ(*s.CompareSet("absent", "x", "y"), "x");  // Absent + expected given.
  EXPECT_FALSE(*s.Check({"absent"}));
  EXPECT_TRUE(*s.Check({"a", "n", "c"}));
  EXPECT_FALSE(*s.Check({"a", "zzz"}));
  EXPECT_TRUE(*s.DeleteKey("a"));
  EXPECT_FALSE(*s.DeleteKey("a"));
  EXPECT_FALSE(*s.Check({"a"}));
  EXPECT_GE(*s.NumKeys(), 2);
}

TEST_P(StoreContractTest, GetAndWaitTimeOutNamingTheMissingKeys) {
  StoreFixture f = GetParam()();
  Store& s = *f.store;
  ASSERT_TRUE(s.Set("here", "1").ok());
  const absl::StatusOr<std::string> get = s.Get("missing", Milliseconds(50));
  ASSERT_FALSE(get.ok());
  EXPECT_EQ(get.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(get.status().message().find("missing"), absl::string_view::npos) << get.status();
  const absl::Status wait = s.Wait({"here", "gone1", "gone2"}, Milliseconds(50));
  EXPECT_EQ(wait.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(wait.message().find("gone1, "), absl::string_view::npos) << wait;
  EXPECT_NE(wait.message().find("gone2;"), absl::string_view::npos) << wait;
  EXPECT_EQ(wait.message().find("here,"), absl::string_view::npos) << wait;
  // The store still works after a timeout.
  EXPECT_EQ(*s.Get("here", Milliseconds(50)), "1");
}

TEST_P(StoreContractTest, WaitReturnsWhenAnotherThreadSets) {
  StoreFixture f = GetParam()();
  std::shared_ptr<Store> s = f.store;
  // The setter runs after the waiter has been told to wait; order does not
  // matter for correctness, only that Get returns the value once it is set.
  std::thread setter([&] { ASSERT_TRUE(s->Set("late", "v").ok()); });
  EXPECT_EQ(*s->Get("late", Milliseconds(10000)), "v");
  setter.join();
}

// MultiGet: the values in the keys' order (a key twice gives its value
// twice), waiting for the missing ones; a timeout names them; an empty list
// is an empty answer. TcpStore does it in one request, the others by Wait
// then Get: the answers must be the same.
TEST_P(StoreContractTest, MultiGetReturnsTheValuesInOrderOnceAllExist) {
  StoreFixture f = GetParam()();
  std::shared_ptr<Store> s = f.store;
  ASSERT_TRUE(s->Set("k1", "one").ok());
  ASSERT_TRUE(s->Set("k2", std::string("t\0wo", 4)).ok());
  ASSERT_TRUE(s->Set("empty", "").ok());
  absl::StatusOr<std::vector<std::string>> got = s->MultiGet({"k2", "empty", "k1", "k2"}, Milliseconds(1000));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, (std::vector<std::string>{std::string("t\0wo", 4), "", "one", std::string("t\0wo", 4)}));
  EXPECT_TRUE(s->MultiGet({}, Milliseconds(1000))->empty());
  const absl::StatusOr<std::vector<std::string>> missing = s->MultiGet({"k1", "nope"}, Milliseconds(50));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(missing.status().message().find("nope"), absl::string_view::npos) << missing.status();
  // Waits for a key another thread sets later.
  std::thread setter([&] { ASSERT_TRUE(s->Set("k3", "three").ok()); });
  got = s->MultiGet({"k1", "k3"}, Milliseconds(10000));
  setter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, (std::vector<std::string>{"one", "three"}));
}

}  // namespace
}  // namespace lockstep
