#include "collectives/testing/group.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "collectives/bootstrap/shm_communicator.h"
#include "collectives/host_backend.h"
#include "collectives/store/hash_store.h"
#include "collectives/store/tcp_store.h"
#include "core/deadline.h"
#include "core/fd.h"
#include "core/subprocess.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace testing {

TcpCommunicatorOptions TestOptions() {
  TcpCommunicatorOptions o;
  o.communicator.timeout = Milliseconds(60000);
  o.transport.timeout = Milliseconds(60000);
  return o;
}

std::vector<absl::Status> RunFakeThreads(int size, const RankFn& fn, FakeNetworkOptions network,
                                         TcpCommunicatorOptions options) {
  std::vector<std::unique_ptr<Transport>> transports = FakeNetwork::Create(size, network);
  std::vector<absl::Status> results(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<std::unique_ptr<HostBackend>> backend =
          HostBackend::Create(std::move(transports[rank]), options.algorithms, "fake");
      if (!backend.ok()) {
        results[rank] = backend.status();
        return;
      }
      absl::StatusOr<std::unique_ptr<Communicator>> comm =
          Communicator::Create(std::move(*backend), options.communicator);
      results[rank] = comm.ok() ? fn(**comm) : comm.status();
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

std::vector<absl::Status> RunThreadsWith(int size, const RankFn& fn, const CommunicatorFactory& make,
                                         Milliseconds timeout) {
  auto store = std::make_shared<HashStore>();
  store->set_timeout(timeout);
  std::vector<absl::Status> results(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<std::unique_ptr<Communicator>> comm = make(store, rank, size);
      results[rank] = comm.ok() ? fn(**comm) : comm.status();
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

std::vector<absl::Status> RunThreads(int size, const RankFn& fn, TcpCommunicatorOptions options) {
  return RunThreadsWith(
      size, fn,
      [&options](std::shared_ptr<Store> store, int rank, int n) {
        return CreateTcpCommunicator(store, rank, n, options);
      },
      options.communicator.timeout);
}

namespace {

constexpr char kChildEnv[] = "LOCKSTEP_TEST_GROUP_CHILD";

// In a child: runs `fn` as the rank described by the environment and exits.
[[noreturn]] void RunChild(int rank, int size, int port, int fd, const RankFn& fn, const CommunicatorFactory& make,
                           Milliseconds timeout) {
  TcpStoreOptions store_options;
  store_options.port = port;
  store_options.timeout = timeout;
  absl::Status status;
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Create(store_options);
  if (!store.ok()) {
    status = store.status();
  } else {
    std::shared_ptr<Store> shared = std::move(*store);
    absl::StatusOr<std::unique_ptr<Communicator>> comm = make(shared, rank, size);
    status = comm.ok() ? fn(**comm) : comm.status();
  }
  const std::string message = status.ToString();
  if (write(fd, message.data(), message.size()) < 0) _exit(3);
  close(fd);
  std::fflush(nullptr);
  _exit(status.ok() ? 0 : 1);  // Never back into gtest.
}

}  // namespace

std::vector<absl::Status> RunProcesses(int size, const RankFn& fn, TcpCommunicatorOptions options,
                                       int deadline_seconds) {
  return RunProcessesWith(
      size, fn,
      [options](std::shared_ptr<Store> store, int rank, int n) {
        return CreateTcpCommunicator(store, rank, n, options);
      },
      options.communicator.timeout, deadline_seconds);
}

std::vector<absl::Status> RunProcessesWith(int size, const RankFn& fn, const CommunicatorFactory& make,
                                           Milliseconds timeout, int deadline_seconds) {
  // Children are this test binary, re-executed with a filter for the current
  // test (fork+exec: fresh processes, and ThreadSanitizer-friendly). The test
  // body runs again in the child up to the same RunProcesses call, which
  // then runs one rank and exits. Calls are numbered within the current test
  // (the child runs only that test, so its count starts at 0 as well).
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string test_name = absl::StrCat(test->test_suite_name(), ".", test->name());
  static std::string counted_test;  // Test-only: the test whose calls are counted.
  static int calls = 0;             // Test-only: RunProcesses calls in that test.
  if (counted_test != test_name) {
    counted_test = test_name;
    calls = 0;
  }
  const int call = calls++;
  if (const char* env = std::getenv(kChildEnv)) {
    int env_call, rank, env_size, port, fd;
    if (std::sscanf(env, "%d,%d,%d,%d,%d", &env_call, &rank, &env_size, &port, &fd) != 5) _exit(4);
    if (env_call != call) return std::vector<absl::Status>(size);  // Another call: skip it.
    RunChild(rank, env_size, port, fd, fn, make, timeout);
  }
  TcpStoreServerOptions server_options;
  server_options.host = "127.0.0.1";
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start(server_options);
  if (!server.ok()) return std::vector<absl::Status>(size, server.status());
  const int port = (*server)->port();
  const std::string filter = absl::StrCat("--gtest_filter=", test_name);
  // Per rank: the child (killed and reaped on any early return) and the read
  // end of the pipe its status comes back on. Pipes are close-on-exec, so a
  // child inherits only its own write end.
  std::vector<Subprocess> children;
  std::vector<Fd> pipes;
  for (int rank = 0; rank < size; ++rank) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      return std::vector<absl::Status>(size, absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno))));
    }
    Fd read_end(fds[0]);
    const Fd write_end(fds[1]);  // Ours closes at the end of this iteration.
    SubprocessOptions child;
    child.argv = {"/proc/self/exe", filter};
    child.env = {{kChildEnv, absl::StrCat(call, ",", rank, ",", size, ",", port, ",", fds[1])}};
    child.inherit_fds = {fds[1]};
    child.alarm_seconds = static_cast<unsigned>(deadline_seconds);  // Survives exec: a hung rank dies.
    absl::StatusOr<Subprocess> spawned = Subprocess::Spawn(child);
    if (!spawned.ok()) return std::vector<absl::Status>(size, spawned.status());
    children.push_back(std::move(*spawned));
    pipes.push_back(std::move(read_end));
  }
  std::vector<absl::Status> results(size);
  for (int rank = 0; rank < size; ++rank) {
    // EOF comes when the child exits (or dies of its alarm).
    std::string message;
    char buffer[4096];
    ssize_t n;
    while ((n = read(pipes[rank].get(), buffer, sizeof(buffer))) > 0 || (n < 0 && errno == EINTR)) {
      if (n > 0) message.append(buffer, static_cast<size_t>(n));
    }
    pipes[rank].Reset();
    // Bounded too, in case a child closes the pipe and then hangs.
    absl::StatusOr<ExitStatus> status =
        children[rank].Wait(Subprocess::Clock::now() + std::chrono::seconds(deadline_seconds));
    if (!status.ok()) {
      results[rank] = absl::InternalError(absl::StrCat("rank ", rank, ": ", status.status().message()));
    } else if (status->success() && message.empty()) {
      // Every rank that ran reports its status, "OK" included: a child that
      // exits 0 without one never reached this call, and proved nothing.
      results[rank] = absl::InternalError(
          absl::StrCat("rank ", rank, " exited without running: the test did not reach RunProcesses call #", call,
                       " in the child (calls must not depend on anything but the test's own code)"));
    } else if (status->success()) {
      results[rank] = absl::OkStatus();
    } else if (status->signaled()) {
      results[rank] = absl::InternalError(absl::StrCat("rank ", rank, " killed by signal ", status->signal(),
                                                       status->signal() == SIGALRM ? " (test deadline)" : "",
                                                       message.empty() ? "" : ": " + message));
    } else {
      results[rank] = absl::InternalError(
          absl::StrCat("rank ", rank, " failed (", status->ToString(), ")", message.empty() ? "" : ": " + message));
    }
  }
  return results;
}

ShmCommunicatorOptions ShmTestOptions() {
  ShmCommunicatorOptions o;
  o.communicator.timeout = Milliseconds(60000);
  o.transport.timeout = Milliseconds(60000);
  return o;
}

std::vector<absl::Status> RunShmThreads(int size, const RankFn& fn, ShmCommunicatorOptions options) {
  return RunThreadsWith(
      size, fn,
      [&options](std::shared_ptr<Store> store, int rank, int n) {
        return CreateShmCommunicator(store, rank, n, options);
      },
      options.communicator.timeout);
}

std::vector<absl::Status> RunShmProcesses(int size, const RankFn& fn, ShmCommunicatorOptions options,
                                          int deadline_seconds) {
  return RunProcessesWith(
      size, fn,
      [options](std::shared_ptr<Store> store, int rank, int n) {
        return CreateShmCommunicator(store, rank, n, options);
      },
      options.communicator.timeout, deadline_seconds);
}

void ExpectAllOk(const std::vector<absl::Status>& results) {
  for (size_t r = 0; r < results.size(); ++r) EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
}

}  // namespace testing
}  // namespace lockstep
