// The host identity: stable, shared by processes of one namespace, distinct
// across network namespaces (as root: a child in a new one), and replaced
// by LOCKSTEP_HOST_ID.
#include "collectives/transport/host_identity.h"

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "core/testing/require_root.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

EnvLookup NoEnv() {
  return [](const char*) -> const char* { return nullptr; };
}

// The identity a forked child computes, after `setup` (which returns false
// to make the child fail); empty on any failure, with `error` set.
std::string ChildIdentity(bool (*setup)(), std::string* error) {
  int fds[2];
  if (pipe(fds) != 0) {
    *error = "pipe failed";
    return "";
  }
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(20);  // Never outlive the test.
    close(fds[0]);
    if (!setup()) _exit(2);
    absl::StatusOr<std::string> id = LocalHostIdentity(NoEnv());
    if (!id.ok()) _exit(3);
    const ssize_t n = write(fds[1], id->data(), id->size());
    _exit(n == static_cast<ssize_t>(id->size()) ? 0 : 4);
  }
  close(fds[1]);
  std::string out;
  char buffer[512];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof(buffer))) > 0) out.append(buffer, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    *error = "child failed with status " + std::to_string(status);
    return "";
  }
  return out;
}

TEST(HostIdentityTest, StableAndNamesHostBootAndNetworkNamespace) {
  absl::StatusOr<std::string> a = LocalHostIdentity(NoEnv());
  absl::StatusOr<std::string> b = LocalHostIdentity(NoEnv());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*a, *b);
  char hostname[256] = {};
  ASSERT_EQ(gethostname(hostname, sizeof(hostname) - 1), 0);
  EXPECT_EQ(a->rfind(std::string(hostname) + "/", 0), 0u) << *a;
  EXPECT_NE(a->find("/net:"), std::string::npos) << *a;
}

TEST(HostIdentityTest, AProcessInTheSameNamespaceSharesIt) {
  std::string error;
  const std::string child = ChildIdentity([] { return true; }, &error);
  ASSERT_FALSE(child.empty()) << error;
  EXPECT_EQ(child, *LocalHostIdentity(NoEnv()));
}

TEST(HostIdentityTest, AnotherNetworkNamespaceIsAnotherHost) {
  LOCKSTEP_REQUIRE_ROOT("unsharing a network namespace");
  std::string error;
  const std::string child = ChildIdentity([] { return unshare(CLONE_NEWNET) == 0; }, &error);
  ASSERT_FALSE(child.empty()) << error << " (unshare(CLONE_NEWNET) as root)";
  const std::string mine = *LocalHostIdentity(NoEnv());
  EXPECT_NE(child, mine);
  // Same machine and boot: only the namespace part differs.
  EXPECT_EQ(child.substr(0, child.find("/net:")), mine.substr(0, mine.find("/net:")));
}

TEST(HostIdentityTest, TheEnvironmentOverridesIt) {
  auto env = [](const char* name) -> const char* {
    return std::string(name) == "LOCKSTEP_HOST_ID" ? "fake-host-b" : nullptr;
  };
  absl::StatusOr<std::string> id = LocalHostIdentity(env);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "fake-host-b");
  // An empty override is no override.
  auto empty = [](const char* name) -> const char* { return std::string(name) == "LOCKSTEP_HOST_ID" ? "" : nullptr; };
  EXPECT_EQ(*LocalHostIdentity(empty), *LocalHostIdentity(NoEnv()));
}

}  // namespace
}  // namespace lockstep
