#include "collectives/testing/group.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "collectives/hash_store.h"
#include "collectives/tcp_store.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace testing {

CommunicatorOptions TestOptions() {
  CommunicatorOptions o;
  o.timeout = Milliseconds(60000);
  return o;
}

std::vector<absl::Status> RunThreads(int size, const RankFn& fn, CommunicatorOptions options) {
  auto store = std::make_shared<HashStore>();
  store->set_timeout(options.timeout);
  std::vector<absl::Status> results(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(store, rank, size, options);
      results[rank] = comm.ok() ? fn(**comm) : comm.status();
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

namespace {

constexpr char kChildEnv[] = "LOCKSTEP_TEST_GROUP_CHILD";

// In a child: runs `fn` as the rank described by the environment and exits.
[[noreturn]] void RunChild(int rank, int size, int port, int fd, const RankFn& fn,
                           const CommunicatorOptions& options) {
  TcpStoreOptions store_options;
  store_options.port = port;
  store_options.timeout = options.timeout;
  absl::Status status;
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Create(store_options);
  if (!store.ok()) {
    status = store.status();
  } else {
    std::shared_ptr<Store> shared = std::move(*store);
    absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(shared, rank, size, options);
    status = comm.ok() ? fn(**comm) : comm.status();
  }
  const std::string message = status.ToString();
  if (write(fd, message.data(), message.size()) < 0) _exit(3);
  close(fd);
  std::fflush(nullptr);
  _exit(status.ok() ? 0 : 1);  // Never back into gtest.
}

}  // namespace

std::vector<absl::Status> RunProcesses(int size, const RankFn& fn, CommunicatorOptions options,
                                       int deadline_seconds) {
  // Children are this test binary, re-executed with a filter for the current
  // test (fork+exec: fresh processes, and ThreadSanitizer-friendly). The test
  // body runs again in the child up to the same RunProcesses call, which
  // then runs one rank and exits. Calls are numbered to find that call.
  static int calls = 0;  // Test-only: counts RunProcesses calls in this process.
  const int call = calls++;
  if (const char* env = std::getenv(kChildEnv)) {
    int env_call, rank, env_size, port, fd;
    if (std::sscanf(env, "%d,%d,%d,%d,%d", &env_call, &rank, &env_size, &port, &fd) != 5) _exit(4);
    if (env_call != call) return std::vector<absl::Status>(size);  // Another call: skip it.
    RunChild(rank, env_size, port, fd, fn, options);
  }
  TcpStoreServerOptions server_options;
  server_options.host = "127.0.0.1";
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start(server_options);
  if (!server.ok()) return std::vector<absl::Status>(size, server.status());
  const int port = (*server)->port();
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string filter = absl::StrCat("--gtest_filter=", test->test_suite_name(), ".", test->name());
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int rank = 0; rank < size; ++rank) {
    int fds[2];
    if (pipe(fds) != 0) return std::vector<absl::Status>(size, absl::InternalError("pipe failed"));
    const std::string env = absl::StrCat(call, ",", rank, ",", size, ",", port, ",", fds[1]);
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      setenv(kChildEnv, env.c_str(), 1);
      alarm(static_cast<unsigned>(deadline_seconds));  // Survives exec: a hung rank dies.
      char self[] = "/proc/self/exe";
      std::string filter_arg = filter;
      char* argv[] = {self, filter_arg.data(), nullptr};
      execv(self, argv);
      _exit(5);
    }
    close(fds[1]);
    pids.push_back(pid);
    pipes.push_back(fds[0]);
  }
  std::vector<absl::Status> results(size);
  for (int rank = 0; rank < size; ++rank) {
    std::string message;
    char buffer[4096];
    ssize_t n;
    while ((n = read(pipes[rank], buffer, sizeof(buffer))) > 0) message.append(buffer, static_cast<size_t>(n));
    close(pipes[rank]);
    int wstatus = 0;
    waitpid(pids[rank], &wstatus, 0);
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) {
      results[rank] = absl::OkStatus();
    } else if (WIFSIGNALED(wstatus)) {
      results[rank] = absl::InternalError(absl::StrCat("rank ", rank, " killed by signal ", WTERMSIG(wstatus),
                                                       WTERMSIG(wstatus) == SIGALRM ? " (test deadline)" : "",
                                                       message.empty() ? "" : ": " + message));
    } else {
      results[rank] = absl::InternalError(absl::StrCat("rank ", rank, " failed: ", message));
    }
  }
  return results;
}

}  // namespace testing
}  // namespace lockstep
