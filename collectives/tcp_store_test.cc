#include "collectives/tcp_store.h"

#include <sys/socket.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/socket.h"
#include "collectives/store_wire.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

std::unique_ptr<TcpStore> Server(const std::string& token = "", int64_t workers = -1) {
  TcpStoreOptions o;
  o.is_server = true;
  o.token = token;
  o.num_workers = workers;
  o.wait_for_workers = false;
  o.timeout = Milliseconds(20000);
  absl::StatusOr<std::unique_ptr<TcpStore>> s = TcpStore::Create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

absl::StatusOr<std::unique_ptr<TcpStore>> Client(int port, const std::string& token = "",
                                                 Milliseconds timeout = Milliseconds(20000)) {
  TcpStoreOptions o;
  o.port = port;
  o.token = token;
  o.timeout = timeout;
  return TcpStore::Create(o);
}

TEST(TcpStoreTest, ManyConcurrentClients) {
  constexpr int kClients = 256;
  auto server = Server();
  const int port = server->port();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<std::unique_ptr<TcpStore>> c = Client(port);
      if (!c.ok()) {
        ++failures;
        return;
      }
      TcpStore& s = **c;
      if (!s.Set(absl::StrCat("key", i), absl::StrCat("value", i)).ok()) ++failures;
      if (!s.Add("count", 1).ok()) ++failures;
      // Every client reads its neighbour's key (waiting if it is not there yet).
      absl::StatusOr<std::string> v = s.Get(absl::StrCat("key", (i + 1) % kClients));
      if (!v.ok() || *v != absl::StrCat("value", (i + 1) % kClients)) ++failures;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(*server->Get("count"), absl::StrCat(kClients));
}

TEST(TcpStoreTest, TokenIsRequiredWhenSet) {
  auto server = Server("s3cret");
  const absl::StatusOr<std::unique_ptr<TcpStore>> none = Client(server->port(), "", Milliseconds(2000));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(none.status().message().find("token"), absl::string_view::npos) << none.status();
  EXPECT_FALSE(Client(server->port(), "wrong", Milliseconds(2000)).ok());
  auto good = Client(server->port(), "s3cret");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE((*good)->Set("k", "v").ok());
}

// Raw connections that send garbage are dropped; the server and its other
// clients carry on.
TEST(TcpStoreTest, MalformedFramesDropOnlyTheirSender) {
  auto server = Server();
  auto good = *Client(server->port());
  ASSERT_TRUE(good->Set("before", "1").ok());
  const Deadline deadline = DeadlineIn(Milliseconds(5000));
  std::vector<std::string> attacks = {
      "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
      std::string(12, '\xff'),
      store_wire::EncodeFrame(store_wire::Op::kHello, std::string("\xff\xff\xff\x7f", 4)),  // Bad length.
      store_wire::EncodeFrame(store_wire::Op::kSet, "no hello first"),
  };
  // A frame claiming a body larger than the limit.
  std::string huge = store_wire::EncodeFrame(store_wire::Op::kHello, "");
  const uint32_t big = store_wire::kMaxBodyBytes + 1;
  std::memcpy(huge.data() + 8, &big, 4);
  attacks.push_back(huge);
  for (const std::string& bytes : attacks) {
    absl::StatusOr<Fd> fd = Connect("127.0.0.1", server->port(), deadline, "store");
    ASSERT_TRUE(fd.ok());
    ASSERT_TRUE(SendAll(fd->get(), bytes.data(), bytes.size(), deadline, "store").ok());
    // The server closes the connection: a read sees EOF (no reply comes).
    char c;
    const absl::Status r = RecvAll(fd->get(), &c, 1, deadline, "store server");
    EXPECT_EQ(r.code(), absl::StatusCode::kUnavailable) << r;
    EXPECT_NE(r.message().find("closed"), absl::string_view::npos) << r;
  }
  EXPECT_EQ(*good->Get("before"), "1");
  ASSERT_TRUE(good->Set("after", "2").ok());
  EXPECT_EQ(*(*Client(server->port()))->Get("after"), "2");
}

TEST(TcpStoreTest, ClientsWaitForALateServer) {
  // Reserve a free port, release it, let a client start connecting, then
  // start the server on that port.
  int port = 0;
  { Fd probe = *Listen("127.0.0.1", 0, &port); }
  absl::StatusOr<std::unique_ptr<TcpStore>> client;
  std::thread t([&] { client = Client(port); });
  TcpStoreOptions o;
  o.is_server = true;
  o.port = port;
  o.host = "127.0.0.1";
  auto server = TcpStore::Create(o);
  ASSERT_TRUE(server.ok()) << server.status();
  t.join();
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Set("k", "v").ok());
  EXPECT_EQ(*(*server)->Get("k"), "v");
}

TEST(TcpStoreTest, NoServerIsATimelyError) {
  int port = 0;
  { Fd probe = *Listen("127.0.0.1", 0, &port); }
  const auto c = Client(port, "", Milliseconds(300));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(c.status().message().find(absl::StrCat("127.0.0.1:", port)), absl::string_view::npos)
      << c.status();
}

TEST(TcpStoreTest, ServerWaitsForAllWorkers) {
  TcpStoreOptions o;
  o.is_server = true;
  o.num_workers = 3;
  o.timeout = Milliseconds(300);
  const auto alone = TcpStore::Create(o);  // Nobody else comes.
  ASSERT_FALSE(alone.ok());
  EXPECT_NE(alone.status().message().find("only 1 of 3 workers"), absl::string_view::npos) << alone.status();

  int port = 0;
  { Fd probe = *Listen("127.0.0.1", 0, &port); }
  o.port = port;
  o.host = "127.0.0.1";
  o.timeout = Milliseconds(20000);
  std::vector<std::thread> workers;
  for (int i = 0; i < 2; ++i) {
    workers.emplace_back([&] {
      TcpStoreOptions w;
      w.port = port;
      w.num_workers = 3;
      w.timeout = Milliseconds(20000);
      EXPECT_TRUE(TcpStore::Create(w).ok());
    });
  }
  auto server = TcpStore::Create(o);
  EXPECT_TRUE(server.ok()) << server.status();
  for (std::thread& t : workers) t.join();
}

}  // namespace
}  // namespace lockstep
