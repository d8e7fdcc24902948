// A fault-tolerant run of real processes (ddp:elastic_worker, over TCP and
// over shared memory, met through a TcpStore this test serves): three
// members train; once all have committed step 10 (they wait there, so that
// the test's timing never races the run) member 2 is SIGKILLed; the
// survivors shrink the group, heal to the newest committed step and go on;
// a replacement (member 3) joins, is healed from a live peer (no checkpoint
// exists) and trains to the end. Every member that finishes ends with the
// same parameters, bit for bit (one checksum), after all the steps, and the
// survivors name the lost member. Another user (uid 65534) without the
// job's token cannot join: the store refuses it.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/store/tcp_store.h"
#include "core/subprocess.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using Clock = std::chrono::steady_clock;

std::string Tmp(const std::string& name) { return std::string(std::getenv("TEST_TMPDIR")) + "/" + name; }

constexpr char kToken[] = "elastic-kill-test-secret";

// A member (with the job's token), or with `stranger` another user (uid
// 65534, through setpriv) without it. Its stdout and stderr go to `out`.
absl::StatusOr<Subprocess> Worker(int port, int member, bool join, const std::string& out, const std::string& transport,
                                  bool stranger = false) {
  const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError("cannot open " + out);
  SubprocessOptions options;
  if (stranger) options.argv = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"};
  options.argv.push_back(std::filesystem::absolute("ddp/elastic_worker").string());
  options.argv.push_back(absl::StrCat("--store_port=", port));
  options.argv.push_back(absl::StrCat("--member=", member));
  options.argv.push_back("--size=3");
  options.argv.push_back("--steps=40");
  options.argv.push_back(join ? "--join" : "--nojoin");
  options.argv.push_back("--transport=" + transport);
  options.argv.push_back("--pause_at=10");
  options.argv.push_back("--admit_at=20");
  if (!stranger) options.env = {{"LOCKSTEP_STORE_TOKEN", kToken}};
  options.stdout_fd = fd;
  options.stderr_fd = fd;
  options.alarm_seconds = 120;
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
  close(fd);
  return child;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ElasticKillTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ElasticKillTest, SurvivorsGoOnAndAReplacementHealsFromAPeer) {
  const std::string transport = GetParam();
  TcpStoreOptions server_options;
  server_options.is_server = true;
  server_options.wait_for_workers = false;
  server_options.timeout = Milliseconds(60000);
  server_options.token = kToken;
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Create(server_options);
  ASSERT_TRUE(store.ok()) << store.status();
  const int port = (*store)->port();
  std::vector<Subprocess> workers;
  for (int m = 0; m < 3; ++m) {
    absl::StatusOr<Subprocess> w = Worker(port, m, false, Tmp(absl::StrCat("member", m)), transport);
    ASSERT_TRUE(w.ok()) << w.status();
    workers.push_back(*std::move(w));
  }
  // Another user without the token tries to join: the store refuses it, and
  // nobody is admitted in its name.
  absl::StatusOr<Subprocess> stranger = Worker(port, 7, true, Tmp("stranger"), transport, /*stranger=*/true);
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  absl::StatusOr<ExitStatus> refused = stranger->Wait(Clock::now() + std::chrono::seconds(60));
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->ToString(), "exited with code 1") << Read(Tmp("stranger"));
  EXPECT_NE(Read(Tmp("stranger")).find("token"), std::string::npos) << Read(Tmp("stranger"));
  std::printf("the stranger: %s", Read(Tmp("stranger")).c_str());
  // Member 2 dies once it has committed step 10 (the others may be a
  // collective further: inside the next step). The test's own client holds
  // the token.
  TcpStoreOptions client_options;
  client_options.port = port;
  client_options.token = kToken;
  client_options.timeout = Milliseconds(60000);
  absl::StatusOr<std::unique_ptr<TcpStore>> client = TcpStore::Create(client_options);
  ASSERT_TRUE(client.ok()) << client.status();
  // Every member has committed step 10 and waits: member 2 dies there, and
  // the others go on into step 11's collectives without it.
  ASSERT_TRUE((*client)->Wait({"progress/0/10", "progress/1/10", "progress/2/10"}, Milliseconds(60000)).ok());
  ASSERT_TRUE(workers[2].Kill().ok());
  absl::StatusOr<ExitStatus> killed = workers[2].Wait(Clock::now() + std::chrono::seconds(30));
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_NE(killed->ToString().find("killed by signal 9"), std::string::npos) << killed->ToString();
  ASSERT_TRUE((*client)->Set("test/resume", "1").ok());
  // The survivors wait before step 20 until the replacement has registered.
  absl::StatusOr<Subprocess> replacement = Worker(port, 3, true, Tmp("member3"), transport);
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  workers.push_back(*std::move(replacement));
  std::vector<std::string> checksums;
  for (int m : {0, 1, 3}) {
    absl::StatusOr<ExitStatus> status = workers[m].Wait(Clock::now() + std::chrono::seconds(100));
    const std::string out = Read(Tmp(absl::StrCat("member", m)));
    std::printf("%s", out.c_str());  // For the log: the re-formation's time.
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_TRUE(status->success()) << "member " << m << ": " << status->ToString() << "\n" << out;
    std::smatch match;
    ASSERT_TRUE(std::regex_search(out, match, std::regex("parameter checksum ([0-9a-f]+) after 40 steps")))
        << "member " << m << ":\n"
        << out;
    checksums.push_back(match[1]);
    if (m != 3) {
      EXPECT_NE(out.find("lost 2; group re-formed with 2 members"), std::string::npos) << out;
    } else {
      EXPECT_NE(out.find("joined epoch"), std::string::npos) << out;
    }
    EXPECT_NE(out.find("members 0,1,3"), std::string::npos) << out;
  }
  EXPECT_EQ(checksums[0], checksums[1]);
  EXPECT_EQ(checksums[0], checksums[2]);
}

INSTANTIATE_TEST_SUITE_P(Transports, ElasticKillTest, ::testing::Values("tcp", "shm"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace lockstep
