#include "collectives/store/tcp_store.h"

#include <sys/socket.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/store/store_wire.h"
#include "collectives/transport/tcp/socket.h"
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
    // The server closes the connection: a read sees EOF, or a reset where the
    // server closed without reading the rest (no reply comes).
    char c;
    const absl::Status r = RecvAll(fd->get(), &c, 1, deadline, "store server");
    EXPECT_EQ(r.code(), absl::StatusCode::kUnavailable) << r;
    EXPECT_TRUE(r.message().find("closed") != absl::string_view::npos ||
                r.message().find("reset") != absl::string_view::npos)
        << r;
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
  EXPECT_NE(c.status().message().find(absl::StrCat("127.0.0.1:", port)), absl::string_view::npos) << c.status();
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

// ---- Hardening: limits, fairness and deadlines (issue 15) ----

namespace wire = store_wire;

constexpr Milliseconds kTestDeadline{20000};

// Waits (without sleeping a fixed time) until `done` holds; false at the deadline.
bool WaitUntil(const std::function<bool()>& done, Milliseconds limit = kTestDeadline) {
  const Deadline deadline = DeadlineIn(limit);
  while (!done()) {
    if (SteadyClock::now() >= deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

std::unique_ptr<TcpStoreServer> StartServer(const TcpStoreLimits& limits, const std::string& token = "") {
  TcpStoreServerOptions o;
  o.host = "127.0.0.1";
  o.token = token;
  o.limits = limits;
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> s = TcpStoreServer::Start(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

Fd RawConnect(int port) {
  absl::StatusOr<Fd> fd = Connect("127.0.0.1", port, DeadlineIn(kTestDeadline), "store server");
  EXPECT_TRUE(fd.ok()) << fd.status();
  return fd.ok() ? *std::move(fd) : Fd();
}

absl::StatusOr<wire::Response> ReadResponse(int fd) {
  const Deadline deadline = DeadlineIn(kTestDeadline);
  char header[wire::kHeaderBytes];
  absl::Status s = RecvAll(fd, header, sizeof(header), deadline, "store server");
  if (!s.ok()) return s;
  absl::StatusOr<wire::FrameHeader> h = wire::ParseHeader(absl::string_view(header, sizeof(header)));
  if (!h.ok()) return h.status();
  std::string body(h->body_bytes, '\0');
  s = RecvAll(fd, body.data(), body.size(), deadline, "store server");
  if (!s.ok()) return s;
  return wire::ParseResponse(body);
}

void Send(int fd, const std::string& bytes) {
  ASSERT_TRUE(SendAll(fd, bytes.data(), bytes.size(), DeadlineIn(kTestDeadline), "store server").ok());
}

// A raw connection that has said HELLO.
Fd RawHello(int port, const std::string& token = "") {
  Fd fd = RawConnect(port);
  wire::Request hello;
  hello.op = wire::Op::kHello;
  hello.value = token;
  Send(fd.get(), wire::EncodeRequest(hello));
  absl::StatusOr<wire::Response> r = ReadResponse(fd.get());
  EXPECT_TRUE(r.ok() && r->code == absl::StatusCode::kOk) << (r.ok() ? r->value : r.status().ToString());
  return fd;
}

// The server closed the connection: a read sees EOF (or a reset), no reply.
void ExpectClosedByServer(int fd) {
  char c;
  const absl::Status r = RecvAll(fd, &c, 1, DeadlineIn(kTestDeadline), "store server");
  EXPECT_EQ(r.code(), absl::StatusCode::kUnavailable) << r;
}

std::string RequestFrame(wire::Op op, const std::string& key, const std::string& value = "", int64_t integer = 0) {
  wire::Request r;
  r.op = op;
  r.keys = {key};
  r.value = value;
  r.integer = integer;
  return wire::EncodeRequest(r);
}

TEST(DeadlineTest, HugeTimeoutsSaturateInsteadOfOverflowing) {
  EXPECT_EQ(DeadlineIn(Milliseconds::max()), kNoDeadline);
  EXPECT_EQ(DeadlineIn(Milliseconds(int64_t{1} << 62)), kNoDeadline);
  const Deadline past = DeadlineIn(Milliseconds::min());
  EXPECT_LE(past, SteadyClock::now());
  const Deadline due = DeadlineIn(Milliseconds(0));
  EXPECT_LE(due, SteadyClock::now());
  const Deadline soon = DeadlineIn(Milliseconds(60000));
  EXPECT_GT(soon, SteadyClock::now());
  EXPECT_LT(soon, kNoDeadline);
  EXPECT_EQ(PollTimeoutMs(kNoDeadline), 3600 * 1000);
  EXPECT_EQ(PollTimeoutMs(Deadline::min()), 0);
  EXPECT_EQ(PollTimeoutMs(SteadyClock::now() - Milliseconds(5)), 0);
  EXPECT_GT(PollTimeoutMs(soon), 50000);
  EXPECT_EQ(SaturatingAdd(Milliseconds::max(), Milliseconds(1)), Milliseconds::max());
  EXPECT_EQ(SaturatingAdd(Milliseconds(int64_t{1} << 62), Milliseconds(300000)).count(), (int64_t{1} << 62) + 300000);
  EXPECT_EQ(SaturatingAdd(Milliseconds::min(), Milliseconds(-1)), Milliseconds::min());
  EXPECT_EQ(SaturatingAdd(Milliseconds(2), Milliseconds(-3)), Milliseconds(-1));
}

// A GET or WAIT with 2^62 ms or Milliseconds::max() waits for the key (it used
// to overflow and fail at once with DEADLINE_EXCEEDED).
TEST(TcpStoreTest, HugeTimeoutsWait) {
  auto server = Server();
  const TcpStoreServer& stats_source = *server->server();
  TcpStoreOptions forever;
  forever.port = server->port();
  forever.timeout = Milliseconds::max();  // The store's own timeout: "none".
  absl::StatusOr<std::unique_ptr<TcpStore>> waiter = TcpStore::Create(forever);
  ASSERT_TRUE(waiter.ok()) << waiter.status();

  absl::StatusOr<std::string> got;
  absl::Status waited;
  std::thread get([&] { got = (*waiter)->Get("late", Milliseconds(int64_t{1} << 62)); });
  std::thread wait([&] { waited = (*waiter)->Wait({"late", "later"}, Milliseconds::max()); });
  // Both requests are parked on the server before the keys exist.
  ASSERT_TRUE(WaitUntil([&] { return stats_source.stats().pending_waits >= 2; }));
  ASSERT_TRUE(server->Set("late", "value").ok());
  get.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "value");
  ASSERT_TRUE(server->Set("later", "x").ok());
  wait.join();
  EXPECT_TRUE(waited.ok()) << waited;
}

// Connections that never say HELLO but announce a large frame are closed at
// the header: the server buffers nothing for them.
TEST(TcpStoreTest, UnauthenticatedLargeFramesAreRefusedAtTheHeader) {
  auto server = StartServer(TcpStoreLimits{}, "s3cret");
  std::vector<Fd> attackers;
  const std::string filler(1 << 20, 'x');
  for (int i = 0; i < 8; ++i) {
    // A HELLO claiming a body just over its limit, then 1 MiB of it.
    std::string frame = wire::EncodeFrame(wire::Op::kHello, "");
    const uint32_t body = i % 2 == 0 ? wire::kMaxHelloBodyBytes + 1 : wire::kMaxBodyBytes;
    std::memcpy(frame.data() + 8, &body, 4);
    attackers.push_back(RawConnect(server->port()));
    // The server may close mid-send: ignore send errors, then expect EOF.
    (void)SendAll(attackers.back().get(), frame.data(), frame.size(), DeadlineIn(kTestDeadline), "server");
    (void)SendAll(attackers.back().get(), filler.data(), filler.size(), DeadlineIn(Milliseconds(2000)), "server");
  }
  // A SET before HELLO, claiming 64 MiB.
  attackers.push_back(RawConnect(server->port()));
  Send(attackers.back().get(), RequestFrame(wire::Op::kSet, "k", std::string(1000, 'v')).substr(0, 100));
  for (const Fd& fd : attackers) ExpectClosedByServer(fd.get());
  ASSERT_TRUE(WaitUntil([&] { return server->stats().dropped_bad_frame >= 9; })) << server->stats().dropped_bad_frame;
  EXPECT_LT(server->stats().buffered_bytes, 1 << 20);

  TcpStoreOptions o;
  o.port = server->port();
  o.token = "s3cret";
  o.timeout = kTestDeadline;
  absl::StatusOr<std::unique_ptr<TcpStore>> good = TcpStore::Create(o);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE((*good)->Set("k", "v").ok());
}

// More idle connections than the limit: the server stops accepting (no
// spinning), drops the silent ones at their HELLO deadline, and then serves a
// correct client that waited in the backlog.
TEST(TcpStoreTest, IdleConnectionsCannotLockClientsOut) {
  TcpStoreLimits limits;
  limits.max_connections = 8;
  limits.hello_timeout = Milliseconds(300);
  auto server = StartServer(limits);
  std::vector<Fd> idle;
  for (int i = 0; i < 20; ++i) idle.push_back(RawConnect(server->port()));
  ASSERT_TRUE(WaitUntil([&] { return server->stats().accept_limit_pauses > 0; }));
  EXPECT_LE(server->stats().connections, 8);

  absl::StatusOr<std::unique_ptr<TcpStore>> good = Client(server->port());
  ASSERT_TRUE(good.ok()) << good.status();
  ASSERT_TRUE((*good)->Set("k", "v").ok());
  EXPECT_EQ(*(*good)->Get("k"), "v");
  for (const Fd& fd : idle) ExpectClosedByServer(fd.get());
  EXPECT_TRUE(WaitUntil([&] { return server->stats().dropped_hello_timeout >= 20; }));
  EXPECT_LE(server->stats().connections, 8);
}

// A frame that stops halfway is dropped at the frame deadline, before HELLO
// (by the HELLO deadline) and after it; idle connections between frames stay.
TEST(TcpStoreTest, HalfSentFramesAreDropped) {
  TcpStoreLimits limits;
  limits.hello_timeout = Milliseconds(300);
  limits.frame_timeout = Milliseconds(300);
  auto server = StartServer(limits);
  Fd before_hello = RawConnect(server->port());
  Send(before_hello.get(), wire::EncodeFrame(wire::Op::kHello, std::string(4, '\0')).substr(0, 7));
  Fd after_hello = RawHello(server->port());
  Send(after_hello.get(), RequestFrame(wire::Op::kSet, "key", "value").substr(0, 20));
  Fd idle = RawHello(server->port());
  ExpectClosedByServer(before_hello.get());
  ExpectClosedByServer(after_hello.get());
  // Stats are published at the end of the round that closed them.
  EXPECT_TRUE(WaitUntil([&] {
    const TcpStoreServerStats stats = server->stats();
    return stats.dropped_hello_timeout >= 1 && stats.dropped_frame_timeout >= 1;
  }));
  // The idle authenticated connection outlived both deadlines and still works.
  Send(idle.get(), RequestFrame(wire::Op::kSet, "key", "value"));
  absl::StatusOr<wire::Response> r = ReadResponse(idle.get());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->code, absl::StatusCode::kOk);
}

// One client pipelines GETs of a large value and never reads the replies;
// the server queues one reply at a time for it, and another client's
// Set/Get still completes while the greedy client stays connected.
TEST(TcpStoreTest, GreedyClientCannotFreezeOthers) {
  TcpStoreLimits limits;
  limits.frame_timeout = Milliseconds(600000);  // Keep the greedy client connected.
  auto server = StartServer(limits);
  constexpr size_t kValueBytes = 16 << 20;
  constexpr int kPipelined = 8;
  {
    absl::StatusOr<std::unique_ptr<TcpStore>> setter = Client(server->port());
    ASSERT_TRUE(setter.ok()) << setter.status();
    ASSERT_TRUE((*setter)->Set("big", std::string(kValueBytes, 'b')).ok());
  }
  Fd greedy = RawHello(server->port());
  std::string requests;
  for (int i = 0; i < kPipelined; ++i) requests += RequestFrame(wire::Op::kGet, "big", "", 1000);
  Send(greedy.get(), requests);
  // The first reply is queued (more than the kernel's buffers can take).
  ASSERT_TRUE(WaitUntil([&] { return server->stats().buffered_bytes >= static_cast<int64_t>(kValueBytes / 2); }));

  absl::StatusOr<std::unique_ptr<TcpStore>> other = Client(server->port());
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_TRUE((*other)->Set("small", "1").ok());
  absl::StatusOr<std::string> v = (*other)->Get("small");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "1");

  const TcpStoreServerStats stats = server->stats();
  EXPECT_EQ(stats.dropped_frame_timeout, 0);
  EXPECT_GE(stats.authenticated, 2);  // The greedy client is still there.
  // One queued reply (plus small buffers), not kPipelined of them.
  EXPECT_LT(stats.buffered_bytes, static_cast<int64_t>(kValueBytes + (1 << 20))) << stats.buffered_bytes;
}

// A MULTI_GET whose reply would pass the 64 MiB a reply carries is refused
// with the reason, before the server copies a value: one 16 MiB key named
// 60,000 times (~1 TB if copied) costs the server nothing, and it goes on
// serving this client and others.
TEST(TcpStoreTest, OversizeMultiGetIsRefusedWithoutCopying) {
  auto server = StartServer(TcpStoreLimits{});
  absl::StatusOr<std::unique_ptr<TcpStore>> setter = Client(server->port());
  ASSERT_TRUE(setter.ok()) << setter.status();
  ASSERT_TRUE((*setter)->Set("big", std::string(16 << 20, 'b')).ok());
  Fd hostile = RawHello(server->port());
  wire::Request r;
  r.op = wire::Op::kMultiGet;
  r.keys.assign(60000, "big");
  r.integer = 1000;
  Send(hostile.get(), wire::EncodeRequest(r));
  absl::StatusOr<wire::Response> answer = ReadResponse(hostile.get());
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->code, absl::StatusCode::kResourceExhausted);
  EXPECT_NE(answer->value.find("more than a reply carries"), std::string::npos) << answer->value;
  EXPECT_NE(answer->value.find("ask for fewer keys"), std::string::npos) << answer->value;
  // The same connection, and another client, are still served.
  Send(hostile.get(), RequestFrame(wire::Op::kGet, "big", "", 1000));
  answer = ReadResponse(hostile.get());
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->value.size(), size_t{16} << 20);
  EXPECT_LT(server->stats().buffered_bytes, int64_t{17} << 20);
  ASSERT_TRUE((*setter)->Set("small", "1").ok());
  EXPECT_EQ(*(*setter)->Get("small"), "1");
}

// MultiGet over more keys than one request carries (kMultiGetKeysPerRequest)
// asks in several requests and still answers in order, waiting for a key
// that arrives while the later requests are pending.
TEST(TcpStoreTest, MultiGetOfManyKeysSpansRequests) {
  auto server = StartServer(TcpStoreLimits{});
  absl::StatusOr<std::unique_ptr<TcpStore>> client = Client(server->port());
  absl::StatusOr<std::unique_ptr<TcpStore>> late = Client(server->port());
  ASSERT_TRUE(client.ok() && late.ok());
  const int n = 2 * static_cast<int>(wire::kMultiGetKeysPerRequest) + 500;
  std::vector<std::string> keys;
  std::vector<std::string> want;
  for (int i = 0; i < n; ++i) {
    keys.push_back(absl::StrCat("k", i));
    want.push_back(absl::StrCat("v", i));
    if (i != n - 1) ASSERT_TRUE((*client)->Set(keys.back(), want.back()).ok());
  }
  std::thread setter([&] { ASSERT_TRUE((*late)->Set(keys.back(), want.back()).ok()); });
  absl::StatusOr<std::vector<std::string>> got = (*client)->MultiGet(keys, kTestDeadline);
  setter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, want);
  // A missing key in the last request: the timeout names it.
  keys.push_back("never");
  got = (*client)->MultiGet(keys, Milliseconds(100));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(got.status().message().find("never"), absl::string_view::npos) << got.status();
}

// Frames split at every byte and interleaved between clients are reassembled
// per connection.
TEST(TcpStoreTest, FramesSplitAtEveryByteAndInterleaved) {
  auto server = StartServer(TcpStoreLimits{}, "tok");
  constexpr int kClients = 3;
  std::vector<Fd> fds;
  std::vector<std::string> streams;
  for (int i = 0; i < kClients; ++i) {
    fds.push_back(RawConnect(server->port()));
    wire::Request hello;
    hello.op = wire::Op::kHello;
    hello.value = "tok";
    streams.push_back(
        wire::EncodeRequest(hello) + RequestFrame(wire::Op::kSet, absl::StrCat("k", i), absl::StrCat("value", i)) +
        RequestFrame(wire::Op::kGet, absl::StrCat("k", i), "", 1000) + RequestFrame(wire::Op::kAdd, "n", "", 1));
  }
  // Requests are sent before their replies are read: all fit in the socket
  // buffers, and the server answers them one at a time.
  for (size_t offset = 0;; ++offset) {
    bool any = false;
    for (int i = 0; i < kClients; ++i) {
      if (offset >= streams[i].size()) continue;
      any = true;
      Send(fds[i].get(), streams[i].substr(offset, 1));
    }
    if (!any) break;
  }
  for (int i = 0; i < kClients; ++i) {
    for (int reply = 0; reply < 4; ++reply) {
      absl::StatusOr<wire::Response> r = ReadResponse(fds[i].get());
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->code, absl::StatusCode::kOk) << r->value;
      if (reply == 2) EXPECT_EQ(r->value, absl::StrCat("value", i));
    }
  }
  absl::StatusOr<std::unique_ptr<TcpStore>> check = Client(server->port(), "tok");
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_EQ(*(*check)->Get("n"), absl::StrCat(kClients));
}

TEST(TcpStoreTest, LimitsAndTokenLengthAreValidated) {
  TcpStoreServerOptions o;
  o.limits.max_connections = 0;
  EXPECT_EQ(TcpStoreServer::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.limits = TcpStoreLimits{};
  o.token = std::string(wire::kMaxTokenBytes + 1, 't');
  EXPECT_EQ(TcpStoreServer::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
  TcpStoreOptions c;
  c.port = 1;
  c.token = o.token;
  const absl::Status s = TcpStore::Create(c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("LOCKSTEP_STORE_TOKEN"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace lockstep
