// test_worker: a worker for the launcher's tests. It checks the environment
// lockstep-run gives it, records it, and then ends as told.
//
//   test_worker [--out=DIR] [--print=TEXT] [--fail_rank=R] [--fail_attempt=A]
//               [--exit=CODE] [--signal=SIG] [--wait_file=PATH] [--others_wait=PATH]
//               [--grow_to=N] [--ignore_term] [--spawn_child] [--print_line_bytes=N]
//               [--agent_store]
//
// - Always: the torchrun variables must be present and consistent (RANK =
//   the node's offset + LOCAL_RANK, ranks below WORLD_SIZE, ROLE_RANK =
//   RANK, a 32-hex LOCKSTEP_STORE_TOKEN, no TORCHELASTIC_USE_AGENT_STORE, no
//   LOCKSTEP_RDZV_TOKEN),
//   else it prints what is wrong and exits 42. Rank 0 binds MASTER_PORT on
//   MASTER_ADDR (as its store would), else exits 43.
// - --agent_store (lockstep-run --fault_tolerant): instead,
//   TORCHELASTIC_USE_AGENT_STORE must be True (the agent holds the
//   workers' store at MASTER_PORT, so rank 0 binds nothing).
// - --out: writes DIR/env.<RANK>.<TORCHELASTIC_RESTART_COUNT> (NAME=value
//   lines, and PID=) and nothing else there; written to a temporary and
//   renamed, so a file that exists is complete.
// - --print: one line "TEXT from rank R" on stdout and one on stderr.
// - --print_line_bytes: then N bytes of 'x' on stdout, in 64 KiB writes,
//   with no newline (one endless line: the output pump's worst case);
//   exit 46 if a write fails.
// - The ranks chosen by --fail_rank (default all) on the attempts chosen by
//   --fail_attempt (default all) then --wait_file (wait until PATH exists,
//   at most 60 s, else exit 44), then exit with --exit or kill themselves
//   with --signal. The others on those attempts wait for --others_wait's PATH the same way
//   (a path never made keeps them running until the agent stops them),
//   then exit 0.
// - --ignore_term: SIGTERM is ignored (only the agent's SIGKILL after its
//   grace period ends the worker).
// - --spawn_child: first starts a child of its own (in the worker's
//   process group, with no parent-death signal: as a data loader's worker
//   or a shell's command would be) that sleeps for at most 60 s; --out
//   records its pid as CHILD_PID=.
// - --grow_to: while WORLD_SIZE < N, every rank just runs (until the agent
//   stops it, at most 60 s); once the group has grown to N it goes on.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

int EnvInt(const char* name) { return std::atoi(Env(name).c_str()); }

bool Flag(const std::string& arg, const std::string& name, std::string* value) {
  const std::string prefix = "--" + name + "=";
  if (arg.compare(0, prefix.size(), prefix) != 0) return false;
  *value = arg.substr(prefix.size());
  return true;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

int Fail(int code, const std::string& why) {
  std::cerr << "test_worker (RANK=" << Env("RANK") << "): " << why << std::endl;
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out, print, wait_file, others_wait, value;
  int fail_rank = -1, fail_attempt = -1, exit_code = 0, sig = 0, grow_to = 0;
  long long line_bytes = 0;
  bool spawn_child = false, agent_store = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (Flag(arg, "out", &out) || Flag(arg, "print", &print) || Flag(arg, "wait_file", &wait_file) ||
        Flag(arg, "others_wait", &others_wait)) {
      continue;
    }
    if (Flag(arg, "fail_rank", &value)) {
      fail_rank = std::atoi(value.c_str());
    } else if (Flag(arg, "fail_attempt", &value)) {
      fail_attempt = std::atoi(value.c_str());
    } else if (Flag(arg, "exit", &value)) {
      exit_code = std::atoi(value.c_str());
    } else if (arg == "--ignore_term") {
      std::signal(SIGTERM, SIG_IGN);
    } else if (arg == "--spawn_child") {
      spawn_child = true;
    } else if (arg == "--agent_store") {
      agent_store = true;
    } else if (Flag(arg, "grow_to", &value)) {
      grow_to = std::atoi(value.c_str());
    } else if (Flag(arg, "print_line_bytes", &value)) {
      line_bytes = std::atoll(value.c_str());
    } else if (Flag(arg, "signal", &value)) {
      sig = std::atoi(value.c_str());
    } else {
      return Fail(2, "unknown argument " + arg);
    }
  }
  static const char* const kRequired[] = {"RANK",
                                          "LOCAL_RANK",
                                          "WORLD_SIZE",
                                          "LOCAL_WORLD_SIZE",
                                          "GROUP_RANK",
                                          "GROUP_WORLD_SIZE",
                                          "ROLE_RANK",
                                          "ROLE_NAME",
                                          "ROLE_WORLD_SIZE",
                                          "MASTER_ADDR",
                                          "MASTER_PORT",
                                          "TORCHELASTIC_RESTART_COUNT",
                                          "TORCHELASTIC_MAX_RESTARTS",
                                          "TORCHELASTIC_RUN_ID",
                                          "LOCKSTEP_STORE_TOKEN"};
  for (const char* name : kRequired) {
    if (std::getenv(name) == nullptr) return Fail(42, std::string(name) + " is not set");
  }
  if (agent_store ? Env("TORCHELASTIC_USE_AGENT_STORE") != "True"
                  : std::getenv("TORCHELASTIC_USE_AGENT_STORE") != nullptr) {
    return Fail(42, agent_store ? "TORCHELASTIC_USE_AGENT_STORE is not True" : "TORCHELASTIC_USE_AGENT_STORE is set");
  }
  if (std::getenv("LOCKSTEP_RDZV_TOKEN") != nullptr) {
    return Fail(42, "LOCKSTEP_RDZV_TOKEN (the agents' join token) reached the worker");
  }
  const int rank = EnvInt("RANK"), local_rank = EnvInt("LOCAL_RANK"), world = EnvInt("WORLD_SIZE");
  const int local_world = EnvInt("LOCAL_WORLD_SIZE"), attempt = EnvInt("TORCHELASTIC_RESTART_COUNT");
  if (rank < 0 || rank >= world || local_rank < 0 || local_rank >= local_world) return Fail(42, "rank out of range");
  if (EnvInt("GROUP_RANK") >= EnvInt("GROUP_WORLD_SIZE")) return Fail(42, "GROUP_RANK >= GROUP_WORLD_SIZE");
  if (Env("ROLE_RANK") != Env("RANK") || Env("ROLE_WORLD_SIZE") != Env("WORLD_SIZE")) {
    return Fail(42, "ROLE_RANK/ROLE_WORLD_SIZE differ from RANK/WORLD_SIZE");
  }
  const std::string token = Env("LOCKSTEP_STORE_TOKEN");
  if (token.size() != 32 || token.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return Fail(42, "LOCKSTEP_STORE_TOKEN is not 32 hex digits");
  }
  if (rank == 0 && !agent_store) {
    // The port must be free for rank 0's store (IPv4 MASTER_ADDR in tests).
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(EnvInt("MASTER_PORT")));
    if (inet_pton(AF_INET, Env("MASTER_ADDR").c_str(), &addr.sin_addr) != 1 ||
        ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return Fail(43, "cannot bind MASTER_ADDR:MASTER_PORT " + Env("MASTER_ADDR") + ":" + Env("MASTER_PORT"));
    }
    ::close(fd);
  }
  pid_t child = 0;
  if (spawn_child) {
    child = ::fork();
    if (child < 0) return Fail(45, "fork failed");
    if (child == 0) {
      ::sleep(60);
      ::_exit(0);
    }
  }
  if (!out.empty()) {
    const std::string path = out + "/env." + Env("RANK") + "." + Env("TORCHELASTIC_RESTART_COUNT");
    {
      std::ofstream f(path + ".tmp");
      for (const char* name : kRequired) f << name << "=" << Env(name) << "\n";
      f << "OMP_NUM_THREADS=" << Env("OMP_NUM_THREADS") << "\n";
      f << "TORCHELASTIC_USE_AGENT_STORE=" << Env("TORCHELASTIC_USE_AGENT_STORE") << "\n";
      f << "PID=" << ::getpid() << "\n";
      if (child > 0) f << "CHILD_PID=" << child << "\n";
    }
    std::rename((path + ".tmp").c_str(), path.c_str());
  }
  if (!print.empty()) {
    std::cout << print << " from rank " << rank << std::endl;
    std::cerr << print << " from rank " << rank << std::endl;
  }
  if (line_bytes > 0) {
    const std::string chunk(65536, 'x');
    for (long long left = line_bytes; left > 0;) {
      const size_t want = static_cast<size_t>(std::min<long long>(left, static_cast<long long>(chunk.size())));
      const ssize_t n = ::write(1, chunk.data(), want);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Fail(46, "writing the long line failed");
      left -= n;
    }
  }
  if (world < grow_to) {
    std::this_thread::sleep_for(std::chrono::seconds(60));  // Stopped by the agent long before.
    return Fail(44, "the group never grew to " + std::to_string(grow_to));
  }
  const bool failing_attempt = fail_attempt < 0 || fail_attempt == attempt;
  const bool chosen = (fail_rank < 0 || fail_rank == rank) && failing_attempt;
  const std::string none;
  const std::string& wait_for = chosen ? wait_file : (failing_attempt ? others_wait : none);
  if (!wait_for.empty()) {
    // The worker's own work in the tests: wait for the test to say go.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!Exists(wait_for)) {
      if (std::chrono::steady_clock::now() > deadline) return Fail(44, "waited 60 s for " + wait_for);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (!chosen) return 0;
  if (sig != 0) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
  return exit_code;
}
