// InitProcessGroup with torch's init methods: tcp://HOST:PORT (rank 0 serves
// the store) and file:///PATH (a FileStore on a shared file system), rank
// and world size as arguments or in the URL, threads and processes as
// ranks; malformed URLs and disagreeing ranks fail naming what is wrong.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/bootstrap/init_from_env.h"
#include "collectives/store/tcp_store.h"
#include "collectives/testing/group.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

const char* NoEnv(const char*) { return nullptr; }

// Runs InitProcessGroup(url(rank)) on `n` threads and an all-reduce of
// rank + 1 on the group; checks the sum.
std::vector<absl::Status> RunGroup(int n, const std::function<std::string(int rank)>& url, bool pass_ranks) {
  std::vector<absl::Status> results(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      results[r] = [&]() -> absl::Status {
        InitOptions options;
        options.store_timeout = Milliseconds(30000);
        LOCKSTEP_ASSIGN_OR_RETURN(ProcessGroup group,
                                  InitProcessGroup(url(r), pass_ranks ? r : -1, pass_ranks ? n : -1, NoEnv, options));
        if (group.env.rank != r || group.env.world_size != n || group.env.local_world_size != n) {
          return absl::InternalError(absl::StrCat("rank ", group.env.rank, " of ", group.env.world_size, ", ",
                                                  group.env.local_world_size, " local"));
        }
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::FromVector<float>({static_cast<float>(r + 1)}));
        LOCKSTEP_RETURN_IF_ERROR(group.comm->AllReduce(t, ReduceOp::kSum)->Wait());
        if (t.data<float>()[0] != n * (n + 1) / 2.0f) return absl::InternalError("wrong sum");
        return group.comm->Barrier()->Wait();
      }();
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

int FreePort() {
  TcpStoreServerOptions probe;
  probe.host = "127.0.0.1";
  auto server = TcpStoreServer::Start(probe);
  return server.ok() ? (*server)->port() : 1;
}

std::string TempPath() {
  char tmpl[] = "/tmp/init_method_test.XXXXXX";
  const int fd = ::mkstemp(tmpl);
  ::close(fd);
  ::unlink(tmpl);
  return tmpl;
}

using testing::ExpectAllOk;

TEST(InitMethodTest, TcpWithRanksAsArgumentsOrInTheUrl) {
  const int port = FreePort();
  ExpectAllOk(RunGroup(
      3, [port](int) { return absl::StrCat("tcp://127.0.0.1:", port); }, true));
  const int port2 = FreePort();
  ExpectAllOk(RunGroup(
      2, [port2](int r) { return absl::StrCat("tcp://127.0.0.1:", port2, "?rank=", r, "&world_size=2"); }, false));
}

TEST(InitMethodTest, FileOnASharedFileSystemIsRemovedByTheLastRank) {
  const std::string path = TempPath();
  ExpectAllOk(RunGroup(
      3, [&](int) { return "file://" + path; }, true));
  struct stat st {};
  EXPECT_NE(::stat(path.c_str(), &st), 0) << path << " was left behind";
}

TEST(InitMethodTest, FileAcrossProcesses) {
  // Every rank runs this body again up to the runner (re-executed): the
  // path must be the same in all, so no random name; Bazel's per-test
  // directory is fresh for each run.
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/init_method_file_store";
  ExpectAllOk(testing::RunProcessesWith(
      3, [](Communicator& comm) { return comm.Barrier()->Wait(); },
      [path](std::shared_ptr<Store>, int rank, int size) -> absl::StatusOr<std::unique_ptr<Communicator>> {
        InitOptions options;
        options.store_timeout = Milliseconds(30000);
        LOCKSTEP_ASSIGN_OR_RETURN(ProcessGroup group, InitProcessGroup("file://" + path, rank, size, NoEnv, options));
        return std::move(group.comm);
      },
      Milliseconds(30000)));
}

TEST(InitMethodTest, BadUrlsAndDisagreeingRanksAreNamed) {
  const struct {
    std::string url;
    int rank, world_size;
    const char* needle;
  } cases[] = {
      {"tcp://127.0.0.1", 0, 1, "tcp:// needs HOST:PORT"},
      {"tcp://127.0.0.1:70000", 0, 1, "port '70000' is not in [1, 65535]"},
      {"file://relative", 0, 1, "needs an absolute path"},
      {"http://x:1", 0, 1, "unknown scheme 'http'"},
      {"nothing", 0, 1, "no scheme"},
      {"tcp://127.0.0.1:1?rank=2", 1, 4, "says rank=2 but the call says 1"},
      {"tcp://127.0.0.1:1?size=4", 0, 4, "unknown parameter 'size'"},
      {"tcp://127.0.0.1:1", -1, 4, "needs the rank"},
      {"file:///tmp/x?world_size=2", 3, -1, "rank 3 is not in [0, 2)"},
      {"env://", 0, 1, "MASTER_ADDR"},
  };
  for (const auto& c : cases) {
    const absl::StatusOr<ProcessGroup> group = InitProcessGroup(c.url, c.rank, c.world_size, NoEnv, InitOptions());
    ASSERT_FALSE(group.ok()) << c.url;
    EXPECT_NE(group.status().message().find(c.needle), std::string::npos) << c.url << ": " << group.status();
  }
}

}  // namespace
}  // namespace lockstep
